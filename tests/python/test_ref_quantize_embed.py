"""gemtb.ref.quantize and gemtb.ref.embed: the bytes of `gemtb ref quantize` and `gemtb ref embed`."""

import json

import ml_dtypes
import numpy as np
import pytest

import gemtb
from conftest import same_bytes

QUANTIZE = [
    ("bf16", {}, []),
    ("float16", {}, []),
    ("float8_e4m3fn", {"block": 32}, ["--block", "32"]),
    ("e5m2", {"block": "32x32", "scale_mode": "floor"}, ["--block", "32x32", "--scale-mode", "floor"]),
    ("e4m3", {"rounding": "stochastic", "seed": 3, "stream": 1}, ["--rounding", "stochastic", "--seed", "3", "--stream", "1"]),
    ("bf16", {"rht": 32, "seed": 9}, ["--rht", "32", "--seed", "9"]),
    ("float4_e2m1fn", {"block": 32, "scale_mode": "floor"}, ["--block", "32", "--scale-mode", "floor"]),
    ("float6_e2m3fn", {"block": "32x32"}, ["--block", "32x32"]),
    ("e3m2", {"rounding": "stochastic", "seed": 5}, ["--rounding", "stochastic", "--seed", "5"]),
    ("float6_e3m2fn", {}, []),
]
CLI_FORMAT = {"bf16": "bf16", "float16": "fp16", "float8_e4m3fn": "e4m3", "e5m2": "e5m2", "e4m3": "e4m3",
              "float4_e2m1fn": "e2m1", "float6_e2m3fn": "e2m3", "float6_e3m2fn": "e3m2", "e3m2": "e3m2"}


@pytest.mark.parametrize("fmt,kwargs,flags", QUANTIZE, ids=[str(i) for i in range(len(QUANTIZE))])
def test_quantize_bytes_match_cli(cli, save, tmp_path, fmt, kwargs, flags):
    x = (np.random.default_rng(4).standard_normal((4, 64)) * 3).astype(np.float32)
    want = cli(["ref", "quantize", "--in", save("x", x), "--format", CLI_FORMAT[fmt], *flags], tmp_path / "out")
    got = gemtb.ref.quantize(x, fmt, **kwargs)
    assert sorted(got) == sorted(want)
    for name in want:
        assert same_bytes(want[name], got[name]), name


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_quantize_codes_view_as_ml_dtypes(fmt):
    x = np.array([1.0, -2.5, 1e-3, 448.0], dtype=np.float32)
    r = gemtb.ref.quantize(x, fmt)
    assert r["codes"].dtype == np.uint8
    np.testing.assert_array_equal(r["codes"].view(getattr(ml_dtypes, fmt)).astype(np.float64), r["values"])


SPEC = {
    "seed": 7,
    "batch": 2,
    "tables": [
        {"name": "user", "rows": 100, "dim": 4},
        {"name": "items", "rows": 1000, "dim": 4, "dtype": "bf16",
         "optimizer": {"kind": "rowwise_adagrad", "lr": 0.05}},
        {"name": "ads", "rows": 50, "dim": 8, "dtype": "fp16", "optimizer": {"kind": "adam", "lr": 0.01}},
    ],
    "features": [
        {"key": "user_id", "table": "user", "pooling": "sum"},
        {"key": "clicked", "table": "items", "pooling": "weighted_sum"},
        {"key": "history", "table": "items", "pooling": "none"},
        {"key": "ad", "table": "ads", "pooling": "mean"},
    ],
}


def kjt(rng):
    lengths = np.array([1, 1, 2, 0, 3, 1, 2, 2], dtype=np.int32)  # 4 keys x batch 2, key-major
    rows = [100] * 2 + [1000] * 6 + [50] * 4
    ids = np.array([rng.integers(0, r) for r in rows], dtype=np.int64)
    weights = rng.standard_normal(ids.size).astype(np.float32)
    return lengths, ids, weights


def test_embed_forward_and_step_bytes_match_cli(cli, save, tmp_path):
    rng = np.random.default_rng(8)
    lengths, ids, weights = kjt(rng)
    fwd = gemtb.ref.embed(SPEC, lengths, ids, weights=weights)
    grads = {"pooled": rng.standard_normal(fwd["pooled"].shape).astype(np.float32),
             "seq_history": rng.standard_normal(fwd["seq_history"].shape).astype(np.float32)}
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(SPEC))
    grads_dir = tmp_path / "grads"
    grads_dir.mkdir()
    for name, g in grads.items():
        np.save(grads_dir / f"{name}.npy", g)
    want = cli(["ref", "embed", "--spec", spec_path, "--lengths", save("lengths", lengths), "--ids", save("ids", ids),
                "--weights", save("weights", weights), "--grads", grads_dir, "--step", "--step-index", "3"],
               tmp_path / "out")
    got = gemtb.ref.embed(str(spec_path), lengths, ids, weights=weights, grads=grads, step=True, step_index=3)
    assert sorted(got) == sorted(want)
    for name in want:
        assert same_bytes(want[name], got[name]), name
    for name in ("pooled", "seq_history"):
        assert same_bytes(want[name], fwd[name]), name
    # A second step from the state the first wrote: given tables give the CLI's --tables bytes.
    tables = {n: a for n, a in got.items() if n.startswith(("table_", "adagrad_", "adam_"))}
    tables_dir = tmp_path / "tables"
    tables_dir.mkdir()
    for name, a in want.items():
        if name in tables:
            np.save(tables_dir / f"{name}.npy", a)
    want2 = cli(["ref", "embed", "--spec", spec_path, "--lengths", save("lengths", lengths), "--ids",
                 save("ids", ids), "--weights", save("weights", weights), "--tables", tables_dir, "--grads",
                 grads_dir, "--step"], tmp_path / "out2")
    got2 = gemtb.ref.embed(SPEC, lengths, ids, weights=weights, tables=tables, grads=grads, step=True)
    for name in want2:
        assert same_bytes(want2[name], got2[name]), name
    assert got2["table_items"].tobytes() != got["table_items"].tobytes()


def test_embed_is_deterministic_across_threads():
    lengths, ids, weights = kjt(np.random.default_rng(2))
    a = gemtb.ref.embed(SPEC, lengths, ids, weights=weights, threads=1)
    b = gemtb.ref.embed(SPEC, lengths, ids, weights=weights, threads=3)
    assert all(a[n].tobytes() == b[n].tobytes() for n in a)


def test_sharded_step_and_comm_report_match_cli(cli, save, tmp_path):
    spec = {"seed": 3, "batch": 8, "world_size": 4, "plan": {"default": {"type": "RW"}},
            "tables": [{"name": "t0", "rows": 13, "dim": 8, "optimizer": {"kind": "rowwise_adagrad", "lr": 0.5}}],
            "features": [{"key": "a", "table": "t0", "pooling": "sum"}]}
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 4, size=8).astype(np.int32)
    ids = rng.integers(0, 13, size=int(lengths.sum())).astype(np.int64)
    grads = {"pooled": rng.standard_normal((8, 8)).astype(np.float32)}
    spec_path, grads_dir = tmp_path / "spec.json", tmp_path / "grads"
    spec_path.write_text(json.dumps(spec))
    grads_dir.mkdir()
    np.save(grads_dir / "pooled.npy", grads["pooled"])
    want = cli(["ref", "embed", "--spec", spec_path, "--lengths", save("lengths", lengths), "--ids", save("ids", ids),
                "--grads", grads_dir, "--step"], tmp_path / "out")
    got = gemtb.ref.embed(spec, lengths, ids, grads=grads, step=True)
    assert got["comm_report"] == json.loads((tmp_path / "out" / "comm_report.json").read_text())
    for name in want:
        assert same_bytes(want[name], got[name]), name
