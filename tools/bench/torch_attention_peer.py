#!/usr/bin/env python3
"""The attention oracle against PyTorch fp64 on the same machine, in the same run.

The case is attention_oracle_bench's self_softmax (B=32, lengths 1-512 from the benchmark length rule,
H=4, D=128), written by `attention_oracle_bench --write_case=DIR`. Timed, median of --reps runs each
after one warm-up, all with --threads threads:
  - oracle compute: attention_oracle_bench's BM_OracleForward / BM_OracleBackward (Google Benchmark);
  - oracle per call, in process: np.load the inputs, gemtb.ref.attention (or attention_backward),
    np.save o/lse (and dq/dk/dv), as the PyTorch call below does (needs `pip install .` of gemtb in
    the same environment; the ratios per call compare these two);
  - oracle per call, as a command: `gemtb ref attention` (read the .npy inputs, compute, write
    o/lse, and with the backward dq/dk/dv) as a subprocess, its process start and library loading
    included (reported, not compared: the PyTorch call pays no interpreter start);
  - PyTorch compute: per sequence, S = QK^T * scale, LSE = logsumexp(S), O = exp(S - LSE) V in fp64
    (the outputs the oracle writes), its backward by autograd given dO; and SDPA's forward and
    backward (the ratios compare with the faster of the two);
  - PyTorch per call: np.load the inputs, the same computation, np.save the same outputs.
Rates are GFLOP/s over valid pairs (forward 4*H*D*pairs, backward 2.5x that), as the benchmark counts,
per wall second and per CPU second (user + system of all threads: the fairer basis on a shared machine).

Usage (PyTorch and gemtb in a git-ignored venv, e.g. python3 -m venv .venv && .venv/bin/pip install torch
numpy . ):
  .venv/bin/python tools/bench/torch_attention_peer.py --build build --out tools/bench/results/X.json
"""
import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from gemtb import ref as gemtb_ref
import numpy as np
import torch
import torch.nn.functional as F


def cpu_now():
    """CPU seconds of this process and its waited-for children (user + system), all threads."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def median_time(fn, reps):
    """Median wall and CPU seconds of fn() over reps runs, after a warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = cpu_now(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(cpu_now() - c0)
    return statistics.median(wall), statistics.median(cpu)


def forward(q, k, v, offsets, scale):
    outs, lses = [], []
    for b in range(len(offsets) - 1):
        s0, s1 = int(offsets[b]), int(offsets[b + 1])
        qb, kb, vb = (x[s0:s1].transpose(0, 1) for x in (q, k, v))  # [H, L, D]
        s = torch.matmul(qb, kb.transpose(1, 2)) * scale
        lse = torch.logsumexp(s, dim=-1)
        outs.append(torch.matmul(torch.exp(s - lse.unsqueeze(-1)), vb).transpose(0, 1))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, dim=1)


def sdpa_forward(q, k, v, offsets):
    outs = []
    for b in range(len(offsets) - 1):
        s0, s1 = int(offsets[b]), int(offsets[b + 1])
        qb, kb, vb = (x[s0:s1].transpose(0, 1).unsqueeze(0) for x in (q, k, v))
        outs.append(F.scaled_dot_product_attention(qb, kb, vb)[0].transpose(0, 1))
    return torch.cat(outs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build folder with bin/gemtb and bin/attention_oracle_bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both (default: all cores)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", required=True, help="result JSON")
    args = ap.parse_args()
    gemtb = os.path.join(args.build, "bin", "gemtb")
    bench = os.path.join(args.build, "bin", "attention_oracle_bench")
    torch.set_num_threads(args.threads)
    work = tempfile.mkdtemp(prefix="gemtb-torch-peer-")
    try:
        subprocess.run([bench, f"--write_case={work}"], check=True)
        load = lambda n: np.load(os.path.join(work, n + ".npy"))
        offsets = load("q_offsets")
        lengths = np.diff(offsets)
        heads, dim = load("q").shape[1:]
        pairs = float(np.sum(lengths.astype(np.float64) ** 2))
        fwd_flops = 4.0 * heads * dim * pairs
        bwd_flops = 2.5 * fwd_flops
        scale = 1.0 / np.sqrt(dim)
        rows = {}

        def rate(name, times, flops):
            wall, cpu = times
            rows[name] = {"seconds": wall, "cpu_seconds": cpu, "GFLOP/s": flops / wall * 1e-9,
                          "GFLOP_per_cpu_s": flops / cpu * 1e-9 if cpu else None}
            per_cpu = f"{flops / cpu * 1e-9:7.2f}" if cpu else "      -"
            print(f"{name:30s} {wall * 1e3:9.1f} ms {flops / wall * 1e-9:7.2f} GFLOP/s   "
                  f"{per_cpu} GFLOP/cpu-s", flush=True)

        # Oracle compute (Google Benchmark, its own repetitions).
        raw = os.path.join(work, "gbench.json")
        gb_cmd = [bench, "--benchmark_filter=BM_Oracle(Forward|Backward)/0/", f"--benchmark_repetitions={args.reps}",
                  "--benchmark_report_aggregates_only=true", f"--benchmark_out={raw}", "--benchmark_out_format=json"]
        subprocess.run(gb_cmd, check=True, stdout=subprocess.DEVNULL)
        for b in json.load(open(raw))["benchmarks"]:
            # run_name: BM_OracleForward/CASE/THREADS/...; Google Benchmark's cpu_time is the main
            # thread's, the work of all threads only at one thread.
            if b.get("aggregate_name") == "median" and int(b["run_name"].split("/")[2]) == args.threads:
                kind = "forward" if "Forward" in b["run_name"] else "backward"
                cpu = b["cpu_time"] * 1e-3 if args.threads == 1 else None
                rate(f"oracle_compute_{kind}", (b["real_time"] * 1e-3, cpu), fwd_flops if kind == "forward" else bwd_flops)

        # Oracle per call, in process: load, compute, save what the command writes.
        py_out = os.path.join(work, "out_gemtb_py")
        os.makedirs(py_out, exist_ok=True)
        def gemtb_py_call(backward):
            arrays = {n: np.load(f"{work}/{n}.npy") for n in ("q", "k", "v", "q_offsets", "kv_offsets")}
            if backward:
                result = gemtb_ref.attention_backward(**arrays, do=np.load(f"{work}/do.npy"), threads=args.threads)
            else:
                result = gemtb_ref.attention(**arrays, threads=args.threads)
            for name, x in result.items():
                np.save(f"{py_out}/{name}.npy", x)
        rate("oracle_call_forward", median_time(lambda: gemtb_py_call(False), args.reps), fwd_flops)
        rate("oracle_call_forward_backward", median_time(lambda: gemtb_py_call(True), args.reps), fwd_flops + bwd_flops)

        # Oracle per call, as a command.
        def gemtb_call(backward):
            cmd = [gemtb, "ref", "attention", "--q", f"{work}/q.npy", "--k", f"{work}/k.npy", "--v", f"{work}/v.npy",
                   "--q-offsets", f"{work}/q_offsets.npy", "--kv-offsets", f"{work}/kv_offsets.npy",
                   "--threads", str(args.threads), "--out-dir", f"{work}/out_gemtb", "--force"]
            if backward:
                cmd += ["--do", f"{work}/do.npy", "--backward"]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rate("oracle_command_forward", median_time(lambda: gemtb_call(False), args.reps), fwd_flops)
        rate("oracle_command_forward_backward", median_time(lambda: gemtb_call(True), args.reps),
             fwd_flops + bwd_flops)
        for name in ("o", "lse", "dq", "dk", "dv"):  # the same bytes both ways
            a, b = np.load(f"{py_out}/{name}.npy"), np.load(f"{work}/out_gemtb/{name}.npy")
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                sys.exit(f"gemtb.ref.attention_backward and `gemtb ref attention` wrote different {name}.npy")

        # PyTorch compute.
        q, k, v, d_o = (torch.from_numpy(load(n)) for n in ("q", "k", "v", "do"))
        with torch.no_grad():
            rate("torch_compute_forward", median_time(lambda: forward(q, k, v, offsets, scale), args.reps), fwd_flops)
            rate("torch_sdpa_forward", median_time(lambda: sdpa_forward(q, k, v, offsets), args.reps), fwd_flops)
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        def backward_only(fwd):
            o = fwd()
            c0, t0 = cpu_now(), time.perf_counter()
            torch.autograd.grad(o, leaves, d_o)
            return time.perf_counter() - t0, cpu_now() - c0
        for name, fwd in (("torch_compute_backward", lambda: forward(*leaves, offsets, scale)[0]),
                          ("torch_sdpa_backward", lambda: sdpa_forward(*leaves, offsets))):
            backward_only(fwd)
            runs = [backward_only(fwd) for _ in range(args.reps)]
            rate(name, (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)), bwd_flops)

        # PyTorch per call: load, compute, save what the oracle writes.
        out = os.path.join(work, "out_torch")
        os.makedirs(out, exist_ok=True)
        def torch_call(backward):
            tq, tk, tv = (torch.from_numpy(np.load(f"{work}/{n}.npy")) for n in ("q", "k", "v"))
            offs = np.load(f"{work}/q_offsets.npy")
            if backward:
                tq, tk, tv = (x.requires_grad_(True) for x in (tq, tk, tv))
                o, lse = forward(tq, tk, tv, offs, scale)
                grads = torch.autograd.grad(o, (tq, tk, tv), torch.from_numpy(np.load(f"{work}/do.npy")))
                for name, g in zip(("dq", "dk", "dv"), grads):
                    np.save(f"{out}/{name}.npy", g.numpy())
                o, lse = o.detach(), lse.detach()
            else:
                with torch.no_grad():
                    o, lse = forward(tq, tk, tv, offs, scale)
            np.save(f"{out}/o.npy", o.numpy())
            np.save(f"{out}/lse.npy", lse.numpy())
        rate("torch_call_forward", median_time(lambda: torch_call(False), args.reps), fwd_flops)
        rate("torch_call_forward_backward", median_time(lambda: torch_call(True), args.reps), fwd_flops + bwd_flops)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    pairs_compared = {
        "compute_forward": ("oracle_compute_forward", ["torch_compute_forward", "torch_sdpa_forward"]),
        "compute_backward": ("oracle_compute_backward", ["torch_compute_backward", "torch_sdpa_backward"]),
        "call_forward": ("oracle_call_forward", ["torch_call_forward"]),
        "command_forward": ("oracle_command_forward", ["torch_call_forward"]),
        "call_forward_backward": ("oracle_call_forward_backward", ["torch_call_forward_backward"]),
        "command_forward_backward": ("oracle_command_forward_backward", ["torch_call_forward_backward"]),
    }
    ratios = {}
    for name, (ours, peers) in pairs_compared.items():
        ratios[name] = {}
        for basis in ("GFLOP/s", "GFLOP_per_cpu_s"):
            values = [rows[ours][basis]] + [rows[p][basis] for p in peers]
            ratios[name][basis] = None if None in values else values[0] / max(values[1:])
        print(f"oracle / PyTorch {name:22s} " +
              "   ".join(f"{b} {r:6.3f}" for b, r in ratios[name].items() if r is not None))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "reference", "model", "tools"]).returncode != 0:
        commit += "-dirty"
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    result = {
        "benchmark": "attention oracle vs PyTorch fp64 (tools/bench/torch_attention_peer.py)",
        "what": f"median of {args.reps} runs after a warm-up, wall (GFLOP/s) and CPU seconds of all threads "
                "(GFLOP_per_cpu_s; for the oracle's compute only at one thread); compute ratios against "
                "the faster PyTorch version (manual or SDPA); threads for both as given",
        "commit": commit, "command": " ".join(["python"] + sys.argv),
        "case": {"batch": int(len(lengths)), "lengths_min_max": [int(lengths.min()), int(lengths.max())],
                 "heads": int(heads), "dim": int(dim), "pairs_per_head": pairs, "forward_flops": fwd_flops},
        "threads": args.threads, "torch": torch.__version__, "numpy": np.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "hardware": {"cpu": cpu, "cores": os.cpu_count(), "machine": platform.machine(),
                     "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
                     "load_avg_at_end": list(os.getloadavg())},  # the machine may be shared
        "rows": rows, "oracle_over_torch": ratios,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
