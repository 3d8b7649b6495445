"""gemtb.ref.attention: the bytes of `gemtb ref attention`, for every family of options."""

import ml_dtypes
import numpy as np
import pytest

import gemtb
from conftest import same_bytes

H, HKV, D = 2, 1, 8


def case(rng, dtype=np.float64, lq=(3, 0, 5), lk=(4, 2, 5)):
    q_off = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64)
    kv_off = np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    q = rng.standard_normal((q_off[-1], H, D)).astype(dtype)
    k = rng.standard_normal((kv_off[-1], HKV, D)).astype(dtype)
    v = rng.standard_normal((kv_off[-1], HKV, D)).astype(dtype)
    do = rng.standard_normal((q_off[-1], H, D)).astype(dtype)
    return dict(q=q, k=k, v=v, q_offsets=q_off, kv_offsets=kv_off), do


# (python keyword arguments, the same options as CLI flags)
OPTIONS = [
    ({}, []),
    ({"mask": "causal"}, ["--mask", "causal"]),
    ({"act": "silu", "mask": "window", "window": (2, 0)},
     ["--act", "silu", "--mask", "window", "--window-left", "2", "--window-right", "0"]),
    ({"act": "gelu_tanh", "mask": "block", "block": 2, "align": "top_left", "post_scale": 0.5},
     ["--act", "gelu_tanh", "--mask", "block", "--block", "2", "--align", "top_left", "--post-scale", "0.5"]),
    ({"act": "relu_square", "pre_scale": 0.25}, ["--act", "relu_square", "--pre-scale", "0.25"]),
]


@pytest.mark.parametrize("kwargs,flags", OPTIONS, ids=[str(i) for i in range(len(OPTIONS))])
def test_forward_backward_bytes_match_cli(cli, save, tmp_path, kwargs, flags):
    arrays, do = case(np.random.default_rng(len(flags)))
    paths = [f"--{name.replace('_', '-')}={save(name, a)}" for name, a in arrays.items()]
    want = cli(["ref", "attention", *paths, f"--do={save('do', do)}", "--backward", *flags], tmp_path / "out")
    got = gemtb.ref.attention_backward(**arrays, do=do, **kwargs)
    assert sorted(got) == sorted(want)
    for name in want:
        assert same_bytes(want[name], got[name]), name
    fwd = gemtb.ref.attention(**arrays, **kwargs)
    assert sorted(fwd) == sorted(n for n in want if n in ("o", "lse"))
    for name in fwd:
        assert same_bytes(want[name], fwd[name]), name


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_emulate_mode_bytes_match_cli(cli, save, tmp_path, dtype):
    arrays, do = case(np.random.default_rng(7), dtype=dtype)
    paths = [f"--{name.replace('_', '-')}={save(name, a)}" for name, a in arrays.items()]
    want = cli(["ref", "attention", *paths, f"--do={save('do', do)}", "--backward", "--mode", "emulate"],
               tmp_path / "out")
    got = gemtb.ref.attention_backward(**arrays, do=do, mode="emulate")
    assert got["o"].dtype == np.dtype(dtype)
    for name in want:
        assert same_bytes(want[name], got[name]), name


def test_kv_index_and_broadcast_bytes_match_cli(cli, save, tmp_path):
    rng = np.random.default_rng(3)
    arrays, _ = case(rng, lq=(3,), lk=(4, 2))
    kv_index = np.array([1, 0, 1], dtype=np.int64)
    paths = [f"--{name.replace('_', '-')}={save(name, a)}" for name, a in arrays.items()]
    want = cli(["ref", "attention", *paths, f"--kv-index={save('kv_index', kv_index)}", "--broadcast-q"],
               tmp_path / "out")
    got = gemtb.ref.attention(**arrays, kv_index=kv_index, broadcast_q=True)
    assert got["o"].shape == (9, H, D)
    for name in want:
        assert same_bytes(want[name], got[name]), name


def test_biases_and_their_gradients(cli, save, tmp_path):
    rng = np.random.default_rng(5)
    arrays, do = case(rng, lq=(3, 4), lk=(3, 4))
    bias_dense = rng.standard_normal((2, H, 4, 4))
    bias_rel = rng.standard_normal((H, 7))
    extra = dict(bias_dense=bias_dense, bias_rel=bias_rel)
    paths = [f"--{name.replace('_', '-')}={save(name, a)}" for name, a in {**arrays, **extra}.items()]
    want = cli(["ref", "attention", *paths, f"--do={save('do', do)}", "--backward"], tmp_path / "out")
    got = gemtb.ref.attention_backward(**arrays, **extra, do=do)
    assert {"ddense", "drel"} <= set(got)
    for name in want:
        assert same_bytes(want[name], got[name]), name


def test_deterministic_across_threads():
    arrays, do = case(np.random.default_rng(11), lq=(17, 9), lk=(13, 30))
    one = gemtb.ref.attention_backward(**arrays, do=do, threads=1)
    many = gemtb.ref.attention_backward(**arrays, do=do, threads=4)
    for name in one:
        assert one[name].tobytes() == many[name].tobytes(), name


def test_results_are_writable_numpy_arrays():
    arrays, _ = case(np.random.default_rng(1))
    o = gemtb.ref.attention(**arrays)["o"]
    assert isinstance(o, np.ndarray) and o.dtype == np.float64 and o.flags.writeable
    o[0] = 0.0


def test_dlpack_input_is_accepted():
    torch = pytest.importorskip("torch")
    arrays, _ = case(np.random.default_rng(2))
    want = gemtb.ref.attention(**arrays)["o"]
    got = gemtb.ref.attention(**{n: torch.from_numpy(a) for n, a in arrays.items()})["o"]
    assert want.tobytes() == got.tobytes()


def test_rope_and_time_bias_bytes_match_cli(cli, save, tmp_path):
    rng = np.random.default_rng(6)
    arrays, do = case(rng, lq=(4, 3), lk=(4, 3))  # self-attention: the time bias needs it
    angles = rng.uniform(0, 3, size=(7, D // 2))
    rope = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    extra = dict(rope_q=rope, rope_k=rope, ts=np.sort(rng.integers(0, 10**6, size=7)).astype(np.int64),
                 bias_ts=rng.standard_normal((H, 129)))
    paths = [f"--{name.replace('_', '-')}={save(name, a)}" for name, a in {**arrays, **extra}.items()]
    want = cli(["ref", "attention", *paths, f"--do={save('do', do)}", "--backward", "--mask", "causal"],
               tmp_path / "out")
    got = gemtb.ref.attention_backward(**arrays, **extra, do=do, mask="causal")
    assert "dts" in got
    for name in want:
        assert same_bytes(want[name], got[name]), name
