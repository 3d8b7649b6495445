"""One profiled forward of Meta's open Triton GDPA on a bench case, for Nsight Compute.

    ncu --profile-from-start off [sections] python3 meta_gdpa_probe.py --repo DIR --lengths DIR [case]

Builds the case's inputs as meta_gdpa_peer.py does (same lengths .npy, same call), runs the forward
twice unprofiled (the first call autotunes), then once between cudaProfilerStart and Stop, so that
ncu profiles only the kernels of that one call, with the config the autotuner chose. What ncu
reports (grid, block, registers, shared memory per block, occupancy, DRAM rate) is what
tools/bench/NOTES.md compares with gemtb's own kernel. Prints the call's kernel time (CUDA events)
outside the profiled range.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from meta_gdpa_peer import CASES, D, DT, H, import_gdpa  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", nargs="?", default="pma_gdpa_silu", choices=sorted(CASES))
    ap.add_argument("--repo", required=True)
    ap.add_argument("--lengths", required=True)
    a = ap.parse_args()
    gdpa = import_gdpa(a.repo)
    acts, broadcast_q = CASES[a.case]
    both = np.load(os.path.join(a.lengths, f"{a.case}.npy")).astype(np.int64)
    lq, lk = both[0], both[1]
    B = len(lk)
    dev = "cuda"
    kv_off = torch.zeros(B + 1, dtype=torch.int64)
    kv_off[1:] = torch.from_numpy(np.cumsum(lk))
    if broadcast_q:
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
    q = torch.randn(total_q, H, D, device=dev, dtype=DT)
    k = torch.randn(int(lk.sum()), H, D, device=dev, dtype=DT)
    v = torch.randn(int(lk.sum()), H, D, device=dev, dtype=DT)

    def fwd():
        return gdpa(query=q, key=k, value=v, query_offset=q_off, key_offset=kv_off, output_offset=o_off,
                    max_seq_len_q=int(lq.max()), max_seq_len_kv=int(lk.max()), activation=acts[0], qk_scale=1,
                    broadcast_q=broadcast_q)

    fwd()
    fwd()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fwd()
    stop.record()
    torch.cuda.synchronize()
    print(f"meta_gdpa_probe: {a.case} {acts[0]} one unprofiled call {start.elapsed_time(stop):.4f} ms", flush=True)
    torch.cuda.cudart().cudaProfilerStart()
    fwd()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
