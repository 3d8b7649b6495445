"""PyTorch peers of `gemtb bench embed`, timed on the same ids in the same device call.

    python3 embed_peers.py --ids-dir DIR --ours DIR/bench_embed.json --json peers.json
                           [--ratio ratio.json] [--reps N] [--warmup N] [--no-compile]

For each shape in the bench's JSON (DIR/<shape>_ids.npy: int64 [bags, ids per bag]), on a table
of the same rows, dim and dtype:
  * forward: nn.EmbeddingBag (sum, mean, or sum with per_sample_weights), eager and torch.compile;
  * backward + optimizer: EmbeddingBag(sparse=True) with torch.optim.Adagrad (PyTorch's sparse
    Adagrad: elementwise state, the nearest to rowwise Adagrad) and with SGD, and the dense
    gradient with fused Adagrad. A step is timed as forward + backward + optimizer step, and the
    forward's median is subtracted to give the backward + optimizer time.
CUDA events, median of --reps runs. Effective TB/s use the byte counts of bench_embed.json, so
ours and the peers are divided by the same numbers. Prints one JSON row per measurement as it goes
and a ratio table (best peer time / our time; > 1 means ours is faster); writes --json and --ratio.
"""
import argparse
import json
import os
import statistics
import sys


L2_FLUSH_BYTES = 256 << 20  # as kL2FlushBytes in gpu/embedding/embed_bench.h


def timed(fn, reps, warmup):
    """Median ms of `reps` runs after `warmup`, each after a memset that evicts L2 and keeps the GPU
    busy while Python enqueues the run (the same method as `gemtb bench embed`)."""
    import torch
    for _ in range(warmup):
        fn()
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        flush.zero_()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids-dir", required=True)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--ratio")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    import numpy as np
    import torch

    ours = json.load(open(args.ours))
    device = torch.cuda.get_device_name(0)
    rows = []

    def emit(row):
        row["device"] = device
        rows.append(row)
        print(json.dumps(row), flush=True)

    best = {shape["shape"]: {"forward": None, "backward": None} for shape in ours["shapes"]}

    def note(name, kind, ms):
        if ms is not None and (best[name][kind] is None or ms < best[name][kind]):
            best[name][kind] = ms

    def finish():
        """Writes what has run so far: a time limit leaves valid, partial files."""
        json.dump({"device": device, "torch": torch.__version__, "rows": rows}, open(args.json, "w"), indent=2)
        ratio = []
        for shape in ours["shapes"]:
            f = shape["forward"]["median_ms"]
            b = shape["backward_optimizer"]["median_ms"]
            pf, pb = best[shape["shape"]]["forward"], best[shape["shape"]]["backward"]
            ratio.append({"shape": shape["shape"], "ours_forward_ms": f, "peer_forward_ms": pf,
                          "forward_speedup": pf / f if (pf and f > 0) else None,
                          "ours_forward_tbps": shape["forward"]["tbps"],
                          "ours_backward_optimizer_ms": b, "peer_backward_adagrad_ms": pb,
                          "backward_speedup": pb / b if (pb and b > 0) else None})
        if args.ratio:
            json.dump({"device": device, "torch": torch.__version__, "label": ours.get("label"),
                       "copy_ceiling_tbps": ours["copy_ceiling"]["tbps"], "determinism": ours.get("determinism"),
                       "rows": ratio}, open(args.ratio, "w"), indent=2)
        return ratio

    def inputs(shape):
        ids = torch.from_numpy(np.load(os.path.join(args.ids_dir, f"{shape['shape']}_ids.npy"))).cuda()
        bags, per_bag = ids.shape
        flat = ids.reshape(-1)
        offsets = torch.arange(0, bags * per_bag, per_bag, device="cuda", dtype=torch.int64)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[shape["dtype"]]
        mode = "mean" if shape["pooling"] == "mean" else "sum"
        weights = torch.rand(flat.numel(), device="cuda", dtype=dtype) if shape["pooling"] == "weighted_sum" else None
        return bags, flat, offsets, dtype, mode, weights

    def bag_of(shape, mode, dtype, sparse):
        return torch.nn.EmbeddingBag(shape["rows"], shape["dim"], mode=mode, sparse=sparse, device="cuda", dtype=dtype)

    # Eager forward and the backward + optimizer paths first, torch.compile (slow to build) last.
    fwd_eager = {}
    for shape in ours["shapes"]:
        name = shape["shape"]
        bags, flat, offsets, dtype, mode, weights = inputs(shape)
        bag = bag_of(shape, mode, dtype, False)
        with torch.no_grad():
            ms = timed(lambda: bag(flat, offsets, per_sample_weights=weights), args.reps, args.warmup)
        fwd_eager[name] = ms
        emit({"case": name, "impl": "torch_embeddingbag_eager", "pass": "forward", "median_ms": ms,
              "tbps": shape["forward"]["bytes"] / (ms * 1e9)})
        note(name, "forward", ms)
        del bag
        torch.cuda.empty_cache()
        grad = torch.rand(bags, shape["dim"], device="cuda", dtype=dtype)
        for impl, sparse, make_opt in (
                ("torch_sparse_adagrad", True, lambda p: torch.optim.Adagrad(p, lr=0.01)),
                ("torch_sparse_sgd", True, lambda p: torch.optim.SGD(p, lr=0.01)),
                ("torch_dense_adagrad_fused", False, lambda p: torch.optim.Adagrad(p, lr=0.01, fused=True))):
            try:
                bag = bag_of(shape, mode, dtype, sparse)
                opt = make_opt(bag.parameters())

                def step():
                    out = bag(flat, offsets, per_sample_weights=weights)
                    out.backward(grad)
                    opt.step()
                    opt.zero_grad(set_to_none=True)

                total = timed(step, args.reps, args.warmup)
                bwd = max(total - fwd_eager[name], 1e-6)
                emit({"case": name, "impl": impl, "pass": "backward_optimizer", "median_ms": bwd,
                      "fwd_bwd_opt_ms": total, "tbps": shape["backward_optimizer"]["bytes"] / (bwd * 1e9)})
                if impl != "torch_sparse_sgd":  # like with like: Adagrad-family updates
                    note(name, "backward", bwd)
                del opt, bag
            except Exception as e:  # noqa: BLE001 - the reason goes into the JSON
                emit({"case": name, "impl": impl, "pass": "backward_optimizer", "error": repr(e)[:300]})
            torch.cuda.empty_cache()
        finish()
    if not args.no_compile:
        for shape in ours["shapes"]:
            name = shape["shape"]
            bags, flat, offsets, dtype, mode, weights = inputs(shape)
            try:
                bag = bag_of(shape, mode, dtype, False)
                compiled = torch.compile(bag)
                with torch.no_grad():
                    ms = timed(lambda: compiled(flat, offsets, per_sample_weights=weights), args.reps, args.warmup)
                emit({"case": name, "impl": "torch_embeddingbag_compiled", "pass": "forward", "median_ms": ms,
                      "tbps": shape["forward"]["bytes"] / (ms * 1e9)})
                note(name, "forward", ms)
                del bag, compiled
            except Exception as e:  # noqa: BLE001
                emit({"case": name, "impl": "torch_embeddingbag_compiled", "pass": "forward", "error": repr(e)[:300]})
            torch.cuda.empty_cache()
            finish()
    ratio = finish()
    print(f"\n{'shape':22s} {'ours fwd':>9s} {'best peer':>9s} {'x':>6s}   {'ours bwd':>9s} {'best peer':>9s} {'x':>6s}")
    for r in ratio:
        print(f"{r['shape']:22s} {r['ours_forward_ms']:9.4f} {r['peer_forward_ms'] or float('nan'):9.4f} "
              f"{r['forward_speedup'] or 0:6.2f}   {r['ours_backward_optimizer_ms']:9.4f} "
              f"{r['peer_backward_adagrad_ms'] or float('nan'):9.4f} {r['backward_speedup'] or 0:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
