"""Property tests of the binding layer (hypothesis): gemtb.ref.attention, attention_backward, quantize
and embed on random shapes, dtypes (wrong ones too), non-contiguous and zero-size arrays and mismatched
offsets either return arrays of the documented shapes or raise ValueError/TypeError naming an
argument; valid inputs always return. Derandomized, with few examples: a few seconds in all."""

import faulthandler
import re

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("hypothesis", reason="hypothesis is not installed: the binding property tests skip")
from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gemtb  # noqa: E402

# Deterministic (the same examples every run, no example database) and short.
SETTINGS = dict(derandomize=True, database=None, deadline=None)


@pytest.fixture(autouse=True)
def hang_fails():
    """A call that hangs ends the run with every thread's traceback instead of blocking it."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


FLOATS = [np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
# Dtypes no entry point takes: each must raise TypeError naming its argument.
WRONG = [np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.bool_), np.dtype(np.complex128), np.dtype(">f8"),
         np.dtype(np.uint64)]


def noncontiguous(a):
    """`a`'s values in a strided view (every other element of a buffer twice as long on the last axis)."""
    if a.ndim == 0:
        return a
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def mutate(draw, arrays, names, also_valid=None):
    """At most one argument changed: a wrong dtype, a strided view, or nothing. Returns (arrays, name, how).
    also_valid: {name: dtypes it also takes} (an argument of several dtypes), never drawn as wrong."""
    how = draw(st.sampled_from(["none", "none", "dtype", "strided"]))
    if how == "none":
        return arrays, None, how
    name = draw(st.sampled_from(names))
    a = arrays[name]
    if how == "dtype":
        wrong = [d for d in WRONG if d not in (also_valid or {}).get(name, ())]
        with np.errstate(invalid="ignore"):  # NaN or negative values cast to an integer dtype
            arrays[name] = a.astype(draw(st.sampled_from(wrong)))
    else:
        arrays[name] = noncontiguous(a)
        if arrays[name].flags.c_contiguous:  # size-0 and size-1 axes: still C-contiguous, so still valid
            how = "none"
    return arrays, name, how


def expect_error_naming(error, names, how="any"):
    """The error is ValueError/TypeError and its message names one of `names` (the arguments): a wrong
    dtype is a TypeError, a strided array a ValueError."""
    want = {"dtype": TypeError, "strided": ValueError}.get(how, (ValueError, TypeError))
    assert isinstance(error, want), repr(error)
    event(f"raised {type(error).__name__} ({how}): {str(error)[:40]}")
    pattern = "|".join(re.escape(n) for n in names)
    assert re.search(rf"\b({pattern})\b", str(error)), f"{type(error).__name__} names no argument: {error}"


@st.composite
def attention_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(FLOATS))
    batch = draw(st.integers(0, 3))
    lq = draw(st.lists(st.integers(0, 4), min_size=batch, max_size=batch))
    lk = draw(st.lists(st.integers(0, 4), min_size=batch, max_size=batch))
    hkv = draw(st.sampled_from([1, 2]))
    h = hkv * draw(st.sampled_from([1, 2]))
    dqk, dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    tq, tk = sum(lq), sum(lk)
    arrays = {
        "q": rng.standard_normal((tq, h, dqk)).astype(dtype),
        "k": rng.standard_normal((tk, hkv, dqk)).astype(dtype),
        "v": rng.standard_normal((tk, hkv, dv)).astype(dtype),
        "q_offsets": np.concatenate([[0], np.cumsum(lq, dtype=np.int64)]).astype(np.int64),
        "kv_offsets": np.concatenate([[0], np.cumsum(lk, dtype=np.int64)]).astype(np.int64),
        "do": rng.standard_normal((tq, h, dv)).astype(dtype),
    }
    arrays, name, how = mutate(draw, arrays, list(arrays))
    if how == "none" and draw(st.booleans()):
        # Offsets that cannot be right: a sequence fewer than the other offsets, a start other than 0, an
        # end other than the array's length, a decreasing pair.
        name = draw(st.sampled_from(["q_offsets", "kv_offsets"]))
        off = arrays[name].copy()
        change = draw(st.sampled_from(["drop", "first", "last", "decrease"] if len(off) > 1 else ["first", "last"]))
        if change == "drop":
            off = off[:-1]
        elif change == "first":
            off[0] = draw(st.sampled_from([-1, 1, 7]))
        elif change == "last":
            off[-1] += draw(st.sampled_from([-1, 1, 7]))
        else:
            i = draw(st.integers(1, len(off) - 1))
            off[i] = off[i - 1] - 1
        arrays[name], how = off, "offsets"
    options = dict(act=draw(st.sampled_from(["softmax", "identity", "silu"])),
                   mask=draw(st.sampled_from(["none", "causal", "window", "block"])),
                   window=(draw(st.integers(-1, 3)), draw(st.integers(-1, 3))), block=draw(st.integers(1, 3)),
                   mode=draw(st.sampled_from(["oracle", "emulate"])))
    return arrays, options, how, name, dtype


@settings(max_examples=300, **SETTINGS)
@given(attention_case(), st.booleans())
def test_attention_returns_documented_shapes_or_names_the_argument(case, backward):
    arrays, options, how, name, dtype = case
    if not backward:
        if name == "do":
            how = "none"
        arrays.pop("do")
    try:
        out = (gemtb.ref.attention_backward if backward else gemtb.ref.attention)(**arrays, **options)
    except Exception as e:  # noqa: BLE001 -- any other exception fails below
        assert how != "none", f"valid input raised {e!r}"
        expect_error_naming(e, [name], how)
        return
    assert how == "none", f"{how} {name} accepted"
    event("returned")
    tq, h = arrays["q"].shape[:2]
    dv = arrays["v"].shape[2]
    assert out["o"].shape == (tq, h, dv)
    assert out["o"].dtype == (np.float64 if options["mode"] == "oracle" else dtype)
    if options["act"] == "softmax":
        assert out["lse"].shape == (h, tq)
    if backward:
        for grad, arg in (("dq", "q"), ("dk", "k"), ("dv", "v")):
            assert out[grad].shape == arrays[arg].shape, grad


QUANTIZE_ARGS = ["x", "format", "block", "axis", "scale_mode", "rounding", "seed", "stream", "rht"]


@st.composite
def quantize_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = tuple(draw(st.lists(st.sampled_from([32, 64, 0, 1, 3]), min_size=0, max_size=3)))
    # Values exact in fp32 (what stochastic rounding, MX and the RHT work on), scaled by a power of 2.
    x = np.ldexp(np.asarray(rng.standard_normal(shape), dtype=np.float32), draw(st.integers(-12, 12)))
    arrays = {"x": np.asarray(x.astype(draw(st.sampled_from(FLOATS))))}  # 0-d stays an array
    arrays, _, how = mutate(draw, arrays, ["x"])
    options = dict(format=draw(st.sampled_from(["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "e4m3",
                                                "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "e2m1"])),
                   block=draw(st.sampled_from([None, 32, 32, "32x32", 16])), axis=draw(st.integers(-3, 2)),
                   rounding=draw(st.sampled_from(["rne", "stochastic"])),
                   rht=draw(st.sampled_from([0, 0, 0, 32, 64, 128, 7])), seed=draw(st.integers(0, 5)))
    return arrays["x"], options, how


@settings(max_examples=300, **SETTINGS)
@given(quantize_case())
def test_quantize_returns_documented_shapes_or_names_the_argument(case):
    x, options, how = case
    try:
        out = gemtb.ref.quantize(x, **options)
    except Exception as e:  # noqa: BLE001
        expect_error_naming(e, ["x"] if how != "none" else QUANTIZE_ARGS, how)
        return
    event("returned")
    one_byte = options["format"] not in ("bfloat16", "float16")  # fp8, fp6 and fp4: a code per byte
    assert how == "none", "a wrong dtype or a strided x was accepted"
    assert out["codes"].shape == x.shape and out["codes"].dtype == (np.uint8 if one_byte else np.uint16)
    assert out["values"].shape == x.shape and out["values"].dtype == np.float64
    block = options["block"]
    if block is None:
        assert "scales" not in out
    else:
        axes = [options["axis"] % x.ndim] if block == 32 else [x.ndim - 2, x.ndim - 1]
        want = tuple(-(-n // 32) if i in axes else n for i, n in enumerate(x.shape))
        assert out["scales"].shape == want and out["scales"].dtype == np.uint8


@st.composite
def embed_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch, rows, dim = draw(st.integers(0, 3)), draw(st.integers(1, 6)), 4 * draw(st.integers(1, 2))
    pooling = draw(st.sampled_from(["sum", "mean", "weighted_sum", "none"]))
    spec = {"seed": 1, "batch": batch,
            "tables": [{"name": "t", "rows": rows, "dim": dim,
                        "optimizer": {"kind": draw(st.sampled_from(["sgd", "rowwise_adagrad", "adam"]))}}],
            "features": [{"key": "a", "table": "t"}, {"key": "b", "table": "t", "pooling": pooling}]}
    lengths = rng.integers(0, 4, size=2 * batch).astype(draw(st.sampled_from([np.int32, np.int64])))
    n = int(lengths.sum())
    arrays = {"lengths": lengths, "ids": rng.integers(0, rows, size=n).astype(np.int64),
              "weights": rng.standard_normal(n).astype(np.float32)}
    step = draw(st.booleans())
    seq = int(lengths[batch:].sum())
    pooled_w = dim if pooling == "none" else 2 * dim
    grads = {"pooled": rng.standard_normal((batch, pooled_w)).astype(np.float32)}
    if pooling == "none":
        grads["seq_b"] = rng.standard_normal((seq, dim)).astype(np.float32)
    arrays, name, how = mutate(draw, arrays, ["lengths", "ids", "weights"],
                               also_valid={"lengths": [np.dtype(np.int32)]})
    if how == "none" and draw(st.booleans()):
        how = name = draw(st.sampled_from(["ids", "offsets", "grads"] if n else ["offsets", "grads"]))
        if how == "ids":
            arrays["ids"][draw(st.integers(0, n - 1))] = draw(st.sampled_from([-1, rows, 2**40]))
        elif how == "offsets":
            arrays["offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            arrays["offsets"][-1] += draw(st.sampled_from([-1, 1]))
        else:
            grads["pooled"] = grads["pooled"][:, :-1].copy()
            if not step:
                how = "none"  # the forward reads no gradients
    if pooling != "weighted_sum" and name != "weights":
        arrays.pop("weights")
    return spec, arrays, step, grads, how, name, (batch, rows, dim, pooling, seq)


@settings(max_examples=300, **SETTINGS)
@given(embed_case())
def test_embed_returns_documented_shapes_or_names_the_argument(case):
    spec, arrays, step, grads, how, name, (batch, rows, dim, pooling, seq) = case
    try:
        out = gemtb.ref.embed(spec, arrays.pop("lengths"), arrays.pop("ids"), step=step, grads=grads if step else None,
                              **arrays)
    except Exception as e:  # noqa: BLE001
        assert how != "none", f"valid input raised {e!r}"
        expect_error_naming(e, [name], how)
        return
    assert how == "none", f"{how} {name} accepted"
    event("returned")
    pooled_w = dim if pooling == "none" else 2 * dim
    assert out["pooled"].shape == (batch, pooled_w) and out["pooled"].dtype == np.float32
    if pooling == "none":
        assert out["seq_b"].shape == (seq, dim) and out["seq_b"].dtype == np.float32
    if step:
        assert out["table_t"].shape == (rows, dim)
