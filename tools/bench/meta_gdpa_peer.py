"""Meta's open Triton GDPA as a same-run peer of `gemtb bench attention` on the GDPA cases.

    python3 meta_gdpa_peer.py --repo DIR --lengths DIR [--json out.json] [--reps N] [case ...]

--repo DIR holds the `gdpa/` folder of facebookresearch/ads_model_kernel_library (its `triton/` and
`utils/` subfolders are enough). tools/bench_gpu.sh runs this from a git-ignored copy under
.peers/meta_gdpa/; nothing of Meta's code is in gemtb. The kernel is called the way that library's
gdpa/scripts/benchmark.py calls it (`generalized_dot_product_attention`, qk_scale=1, its default
autotuned configs, no warp specialisation since that needs Meta's Triton fork; one annotation patch
in a temporary copy, see import_gdpa).

--lengths DIR reads DIR/<case>.npy (int64 [2, B]: q lengths, kv lengths; broadcast_q: row 0 holds the
seed count) written by `gemtb bench attention`, so both run on the same lengths in the same call.

Rows (the format of ../shared/peers/torch_peers.py, which tools/bench_gpu.sh merges with its rows;
every case's forward is timed first, then every fwd+bwd, each printed row replacing the earlier row
of its case and impl, so a run cut by a time limit still has the forwards):
- impl `meta_gdpa_<act>`: one whole call timed by triton.testing.do_bench (median; includes the
  call's ~1 ms of host work, which matters for the short cases);
- impl `meta_gdpa_<act>_kernels`: the summed device time of every kernel and memset one call
  launches (torch.profiler trace), mean over --reps calls: what the GPU spends, without host gaps.
Both count as peers (the ratio table takes the best row). Activations: the cases' own formulas
(silu; gelu_tanh is Meta's `gelu_approx`), plus `fast_gelu` (tanh.approx) for cross_gdpa_gelu,
because ../shared/peers/peers-h200.md names that variant as cross_gdpa_gelu's best peer.
Effective TFLOP/s count valid pairs only: forward 2*H*(Dqk+Dv)*pairs, fwd+bwd 3.5x.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch

DT = torch.bfloat16
H, D = 4, 128
# case -> (activations to time, broadcast_q). Same names as gpu/bench/bench_cases.h.
CASES = {
    "self_gdpa_silu": (["silu"], False),
    "dense_gdpa_silu": (["silu"], False),
    "cross_gdpa_gelu": (["gelu_approx", "fast_gelu"], False),
    "pma_gdpa_silu": (["silu"], True),
}


def import_gdpa(repo):
    """Imports a copy of DIR/gdpa under the package path its modules import themselves by.

    One patch, in the copy: the backward kernels' parameters carry `: object` annotations, which
    stock Triton 3.6 rejects when it compiles the unrolled signature ("at 1:17"); they are dropped.
    """
    root = tempfile.mkdtemp(prefix="meta_gdpa_pkg_")
    pkg = os.path.join(root, "ads_mkl", "ops", "oss", "gdpa")
    for sub in ("triton", "utils"):
        shutil.copytree(os.path.join(repo, "gdpa", sub), os.path.join(pkg, sub),
                        ignore=shutil.ignore_patterns("tests", "__pycache__"))
    path = os.path.join(pkg, "triton", "triton_generalized_dot_product_attention.py")
    text, n = re.subn(r"^(\s+\w+): object(,?)", r"\1\2", open(path).read(), flags=re.M)
    open(path, "w").write(text)
    print(f"meta_gdpa_peer: dropped {n} `: object` annotations", file=sys.stderr, flush=True)
    sys.path.insert(0, root)
    from ads_mkl.ops.oss.gdpa.triton.triton_generalized_dot_product_attention import (  # noqa: E402
        generalized_dot_product_attention)
    return generalized_dot_product_attention


def kernel_ms(fn, reps):
    """Mean summed device time (kernels + memsets) of one call of fn, from a torch.profiler trace."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.load(open(f.name))
    us = sum(e.get("dur", 0) for e in trace.get("traceEvents", [])
             if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset"))
    return us / 1e3 / reps


def emit(rows, row):
    """Adds a row, or replaces the row of the same case and impl (pass 2 completes pass 1's rows)."""
    for i, r in enumerate(rows):
        if r.get("case") == row["case"] and r.get("impl") == row["impl"]:
            rows[i] = row
            break
    else:
        rows.append(row)
    print(json.dumps(row), flush=True)


def run(name, gdpa, lengths_dir, reps, rows, backward):
    """Times one case: the forward (pass 1) or the forward and fwd+bwd (pass 2)."""
    from triton.testing import do_bench
    acts, broadcast_q = CASES[name]
    both = np.load(os.path.join(lengths_dir, f"{name}.npy")).astype(np.int64)
    lq, lk = both[0], both[1]
    B = len(lk)
    pairs = int((lq * lk).sum())
    fwd_flops = 2 * H * (D + D) * pairs
    dev = "cuda"
    kv_off = torch.zeros(B + 1, dtype=torch.int64)
    kv_off[1:] = torch.from_numpy(np.cumsum(lk))
    if broadcast_q:  # one set of seed queries, shared by every sequence; the output is per sequence
        seeds = int(lq[0])
        q_off = torch.tensor([0, seeds], dtype=torch.int64)
        o_off = torch.arange(0, (B + 1) * seeds, seeds, dtype=torch.int64)
        total_q = seeds
    else:
        q_off = torch.zeros(B + 1, dtype=torch.int64)
        q_off[1:] = torch.from_numpy(np.cumsum(lq))
        o_off = q_off
        total_q = int(lq.sum())
    q_off, kv_off, o_off = q_off.to(dev), kv_off.to(dev), o_off.to(dev)
    q = torch.randn(total_q, H, D, device=dev, dtype=DT, requires_grad=True)
    k = torch.randn(int(lk.sum()), H, D, device=dev, dtype=DT, requires_grad=True)
    v = torch.randn(int(lk.sum()), H, D, device=dev, dtype=DT, requires_grad=True)
    max_q, max_kv = int(lq.max()), int(lk.max())
    for act in acts:
        impl = f"meta_gdpa_{act}"

        def fwd():
            return gdpa(query=q, key=k, value=v, query_offset=q_off, key_offset=kv_off,
                        output_offset=o_off, max_seq_len_q=max_q, max_seq_len_kv=max_kv,
                        activation=act, qk_scale=1, broadcast_q=broadcast_q)
        times = {}  # (timing, "fwd" | "fwdbwd") -> ms; pass 2 keeps pass 1's forward times
        for timing, suffix in (("call", ""), ("kernels", "_kernels")):
            for r in rows:
                if r.get("case") == name and r.get("impl") == impl + suffix and "fwd_ms" in r:
                    times[(timing, "fwd")] = r["fwd_ms"]
        try:
            fwd()  # autotunes the forward (pass 1; cached for pass 2)
            if ("call", "fwd") not in times or ("kernels", "fwd") not in times:
                times[("call", "fwd")] = do_bench(fwd, warmup=25, rep=100, return_mode="median")
                times[("kernels", "fwd")] = kernel_ms(fwd, reps)
            if backward:
                dout = torch.randn_like(fwd())

                def fwd_bwd():
                    for t in (q, k, v):
                        t.grad = None
                    fwd().backward(dout)
                fwd_bwd()  # autotunes the backward
                times[("call", "fwdbwd")] = do_bench(fwd_bwd, warmup=25, rep=100, return_mode="median")
                times[("kernels", "fwdbwd")] = kernel_ms(fwd_bwd, reps)
        except Exception as e:  # a peer that fails is reported, not fatal; what it timed is kept
            msg = f"{type(e).__name__}: {e}"
            print(f"meta_gdpa_peer: {name} {act}: {msg}", file=sys.stderr, flush=True)
            rows.append(dict(case=name, impl=impl, error=msg[-400:]))
            print(json.dumps(rows[-1]), flush=True)
        for timing, suffix, how in (("call", "", "triton do_bench median of whole calls"),
                                    ("kernels", "_kernels",
                                     f"summed kernel+memset device time per call, mean of {reps} calls")):
            tf, tfb = times.get((timing, "fwd")), times.get((timing, "fwdbwd"))
            if tf is None:
                continue
            # A row without fwd+bwd (pass 1, or a failed backward) still counts for the forward column.
            emit(rows, dict(case=name, impl=impl + suffix, activation=act, timing=how, pairs=pairs,
                            fwd_ms=tf, fwd_tflops=fwd_flops / tf / 1e9, fwdbwd_ms=tfb,
                            fwdbwd_tflops=3.5 * fwd_flops / tfb / 1e9 if tfb else None))
    del q, k, v
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(CASES))
    ap.add_argument("--repo", required=True)
    ap.add_argument("--lengths", required=True)
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--repo-commit", default=None, help="the library's commit, stored in the JSON")
    ap.add_argument("--forward-only", action="store_true", help="time the forward only (pass 1)")
    a = ap.parse_args()
    # The softmax cases have no GDPA peer: they are skipped, so the bench's case list can be passed.
    skipped = [c for c in a.cases if c not in CASES]
    if skipped:
        print(f"meta_gdpa_peer: no GDPA peer for {skipped}", file=sys.stderr, flush=True)
    a.cases = [c for c in a.cases if c in CASES]
    rows = []
    try:
        gdpa = import_gdpa(a.repo)
    except Exception as e:
        rows.append(dict(case="*", impl="meta_gdpa", error=f"import: {type(e).__name__}: {str(e)[-400:]}"))
        print(json.dumps(rows[-1]), flush=True)
        gdpa = None
    if gdpa is not None:
        # Every forward first, then fwd+bwd: a run its time limit stops still leaves forward rows.
        cases = [c for c in a.cases if os.path.exists(os.path.join(a.lengths, f"{c}.npy"))]
        for backward in (False,) if a.forward_only else (False, True):
            for c in cases:
                run(c, gdpa, a.lengths, a.reps, rows, backward)
    if a.json:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                       triton=__import__("triton").__version__, source="facebookresearch/ads_model_kernel_library", source_commit=a.repo_commit,
                       rows=rows), open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
