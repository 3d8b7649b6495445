"""Bad arguments raise ValueError (bad values, layouts, offsets) or TypeError (wrong types and
dtypes) naming the argument; none crashes the interpreter."""

import numpy as np
import pytest

import gemtb


def good(rng=np.random.default_rng(0)):
    return dict(q=rng.standard_normal((5, 2, 8)), k=rng.standard_normal((6, 1, 8)), v=rng.standard_normal((6, 1, 8)),
                q_offsets=np.array([0, 2, 5], dtype=np.int64), kv_offsets=np.array([0, 3, 6], dtype=np.int64))


def with_(**changes):
    a = good()
    a.update(changes)
    return a


@pytest.mark.parametrize("arrays,error,name", [
    (with_(q=good()["q"].astype(np.int32)), TypeError, "q: dtype int32"),
    (with_(k=good()["k"].astype(np.float32)), ValueError, "k: dtype float32 differs from q's float64"),
    (with_(q_offsets=np.array([0, 2, 5], dtype=np.int32)), TypeError, "q_offsets: dtype int32"),
    (with_(q=[[1.0]]), TypeError, "q: expected a NumPy array"),
    (with_(q=np.asfortranarray(np.zeros((5, 2, 8)))), ValueError, "q: not C-contiguous"),
    (with_(v=np.zeros((6, 1, 16))[:, :, ::2]), ValueError, "v: not C-contiguous"),
    (with_(q=np.zeros((5, 2, 8), dtype=">f8")), TypeError, "q: dtype >f8"),
    (with_(q_offsets=np.array([0, 3, 4], dtype=np.int64)), ValueError, "q_offsets"),
    (with_(kv_offsets=np.array([0, 7, 6], dtype=np.int64)), ValueError, "kv_offsets"),
    (with_(q_offsets=np.array([0, 2, 4], dtype=np.int64)), ValueError, "q_offsets"),
    (with_(k=np.zeros((6, 1, 4))), ValueError, "k"),
])
def test_attention_bad_arrays(arrays, error, name):
    with pytest.raises(error, match=name):
        gemtb.ref.attention(**arrays)


@pytest.mark.parametrize("kwargs,name", [
    ({"act": "tanh"}, "act=tanh"),
    ({"mask": "diagonal"}, "mask=diagonal"),
    ({"align": "middle"}, "align=middle"),
    ({"mode": "fast"}, "mode=fast"),
    ({"out_dtype": "int8"}, "out_dtype=int8"),
    ({"threads": -1}, "threads=-1"),
    ({"mask": "block", "block": 0}, "block"),
])
def test_attention_bad_options(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gemtb.ref.attention(**good(), **kwargs)


def test_attention_wrong_option_types():
    with pytest.raises(TypeError, match="window"):
        gemtb.ref.attention(**good(), window=3)
    with pytest.raises(TypeError):
        gemtb.ref.attention(**good(), act=5)


def test_backward_do_of_the_wrong_shape():
    with pytest.raises(ValueError, match="d_o: shape"):
        gemtb.ref.attention_backward(**good(), do=np.zeros((4, 2, 8)))


@pytest.mark.parametrize("x,kwargs,error,name", [
    (np.zeros(4, dtype=np.int64), {"format": "bf16"}, TypeError, "x: dtype int64"),
    (np.zeros(4), {"format": "int4"}, ValueError, "format='int4'"),
    (np.zeros(4), {"format": "float4_e2m1"}, ValueError, "format='float4_e2m1'"),
    (np.zeros(4), {"format": "e4m3", "block": 16}, ValueError, "block=16"),
    (np.zeros(64), {"format": "bf16", "block": 32}, ValueError, "^block: MX blocks need format e4m3"),
    (np.zeros(4), {"format": "e4m3", "rht": 32}, ValueError, "^rht=32: axis 0 has length 4"),
    (np.zeros(()), {"format": "e4m3", "block": 32}, ValueError, "^x: a scalar has no axis"),
    (np.zeros(4), {"format": "e4m3", "rounding": "up"}, ValueError, "rounding=up"),
    (np.zeros(4), {"format": "e4m3", "seed": -1}, ValueError, "seed=-1"),
    (np.zeros((4, 4))[:, 0], {"format": "e4m3"}, ValueError, "x: not C-contiguous"),
])
def test_quantize_bad_arguments(x, kwargs, error, name):
    with pytest.raises(error, match=name):
        gemtb.ref.quantize(x, **kwargs)


SPEC = {"seed": 1, "batch": 2, "tables": [{"name": "t", "rows": 10, "dim": 4}],
        "features": [{"key": "f", "table": "t"}]}


@pytest.mark.parametrize("kwargs,error,name", [
    ({"lengths": np.array([1, 1], dtype=np.float32)}, TypeError, "lengths: dtype float32"),
    ({"ids": np.array([1, 2], dtype=np.int32)}, TypeError, "ids: dtype int32"),
    ({"lengths": np.array([1, 2], dtype=np.int32)}, ValueError, "lengths|ids"),
    ({"lengths": np.array([-1, 3], dtype=np.int32)}, ValueError, "length"),
    ({"ids": np.array([1, 10], dtype=np.int64)}, ValueError, r"ids\[1\]=10 is not a valid id"),
    ({"offsets": np.array([0, 2, 2], dtype=np.int64)}, ValueError, "offsets"),
    ({"weights": np.ones(3, dtype=np.float32)}, ValueError, "weights"),
    ({"spec": {"seed": 1}}, ValueError, "spec"),
    ({"spec": 5}, TypeError, "spec"),
    ({"step": True}, ValueError, "grads"),
    # float16 is a storage dtype, but not this table's: a mismatch with the spec, so ValueError.
    ({"tables": {"table_t": np.zeros((10, 4), dtype=np.float16)}}, ValueError, r"tables\['table_t'\]: float16"),
    ({"tables": {"table_t": np.zeros((10, 4), dtype=np.float64)}}, TypeError, r"tables\['table_t'\]: dtype float64"),
    ({"tables": {"table_u": np.zeros((10, 4), dtype=np.float32)}}, ValueError, "table_u|table_t"),
    ({"tables": [1]}, TypeError, "tables"),
    ({"step": True, "grads": {"pooled": np.zeros((2, 5), dtype=np.float32)}}, ValueError, "pooled"),
])
def test_embed_bad_arguments(kwargs, error, name):
    args = dict(spec=SPEC, lengths=np.array([1, 1], dtype=np.int32), ids=np.array([1, 2], dtype=np.int64))
    args.update(kwargs)
    spec, lengths, ids = args.pop("spec"), args.pop("lengths"), args.pop("ids")
    with pytest.raises(error, match=name):
        gemtb.ref.embed(spec, lengths, ids, **args)


def test_random_attention_calls_never_crash():
    """Random shapes, dtypes and offsets: every call returns or raises ValueError/TypeError."""
    rng = np.random.default_rng(123)
    dtypes = [np.float64, np.float32, np.int64, np.int32, np.uint8]
    for _ in range(300):
        arrays = {}
        for name in ("q", "k", "v", "q_offsets", "kv_offsets"):
            shape = tuple(int(s) for s in rng.integers(0, 4, size=rng.integers(0, 4)))
            dtype = dtypes[rng.integers(0, len(dtypes))] if rng.random() < 0.3 else (
                np.int64 if name.endswith("offsets") else np.float64)
            arrays[name] = (rng.integers(-3, 6, size=shape)).astype(dtype)
        try:
            gemtb.ref.attention(**arrays, mask=["none", "causal", "block"][rng.integers(0, 3)])
        except (ValueError, TypeError):
            pass


def test_random_quantize_and_embed_calls_never_crash():
    """Random shapes, dtypes, blocks and KJTs: every call returns or raises ValueError/TypeError."""
    rng = np.random.default_rng(321)
    dtypes = [np.float64, np.float32, np.float16, np.int64, np.int32, np.uint8]

    def arr(ndim_max=4, side=4, dtype=np.float64):
        shape = tuple(int(s) for s in rng.integers(0, side, size=rng.integers(0, ndim_max)))
        return rng.integers(-3, 9, size=shape).astype(dtypes[rng.integers(0, 6)] if rng.random() < 0.3 else dtype)

    for _ in range(200):
        try:
            gemtb.ref.quantize(arr(side=70), ["bf16", "e4m3", "e5m2", "fp16", "e2m1", "e3m2"][rng.integers(0, 6)],
                               block=[None, 32, "32x32"][rng.integers(0, 3)], axis=int(rng.integers(-3, 3)),
                               rounding=["rne", "stochastic"][rng.integers(0, 2)], rht=[0, 32, 64, 7][rng.integers(0, 4)])
        except (ValueError, TypeError):
            pass
        spec = {"seed": 1, "batch": int(rng.integers(0, 3)),
                "tables": [{"name": "t", "rows": int(rng.integers(0, 5)), "dim": int(rng.integers(0, 3)) * 4,
                            "optimizer": {"kind": ["sgd", "rowwise_adagrad", "adam"][rng.integers(0, 3)]}}],
                "features": [{"key": "f", "table": "t",
                              "pooling": ["sum", "mean", "none", "weighted_sum"][rng.integers(0, 4)]}]}
        try:
            gemtb.ref.embed(spec, arr(2, dtype=np.int32), arr(2, dtype=np.int64),
                            weights=None if rng.random() < 0.5 else arr(2, dtype=np.float32),
                            step=bool(rng.random() < 0.5), grads={"pooled": arr(3, dtype=np.float32)})
        except (ValueError, TypeError):
            pass
