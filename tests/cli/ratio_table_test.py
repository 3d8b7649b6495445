"""gpu/bench/ratio_table.py, the script that turns one device call's bench and peer rows into the
ratio table issue 7's claims are read from: ours / the peer we beat by the least, per case, forward and
forward+backward, like against like (an exact-act row never against a tanh.approx peer such as Meta's
fast_gelu; a "(tanh.approx)" row against every peer; a profiler kernel-time peer row against our CUPTI
kernel time, every other row against our event time), peer rows with an error left out, no ratio
without a peer.
Synthetic inputs; no GPU and no numpy needed.

    python3 ratio_table_test.py --script gpu/bench/ratio_table.py
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def bench_case(name, fwd, fwdbwd, tanh_approx=False, kernels=None):
    """kernels: (fwd, fwdbwd) TFLOP/s by CUPTI kernel time, or None (a run without kernel times)."""
    c = {"case": name, "forward_kernel": "k", "backward_kernel": "b", "pairs_per_head": 100,
         "tanh_approx": tanh_approx, "fwd": {"tflops": fwd, "median_ms": 1.0},
         "fwdbwd": {"tflops": fwdbwd, "median_ms": 3.0}}
    if kernels:
        c["fwd"]["kernel"] = {"tflops": kernels[0], "median_ms": 0.9}
        c["fwdbwd"]["kernel"] = {"tflops": kernels[1], "median_ms": 2.9}
    return c


def peer(case, impl, fwd, fwdbwd, **extra):
    row = {"case": case, "impl": impl, "fwd_tflops": fwd, "fwdbwd_tflops": fwdbwd, "pairs": 100}
    row.update(extra)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    args = ap.parse_args()
    bench = {"gpu_name": "TEST GPU", "cases": [
        bench_case("cross_gdpa_gelu", 256.0, 224.0),
        bench_case("cross_gdpa_gelu", 300.0, 259.0, tanh_approx=True),
        bench_case("pma_gdpa_silu", 110.0, 80.0),
        bench_case("self_softmax", 366.0, 316.0),
        bench_case("self_gdpa_silu", 340.0, 300.0, kernels=(360.0, 330.0)),
        bench_case("swa_causal_512", 325.0, 280.0, kernels=(340.0, 250.0)),
        bench_case("block64_softmax", 200.0, 150.0),
        bench_case("dense_gdpa_silu", 572.0, 380.0, tanh_approx=True),
    ]}
    peers = {"device": "TEST GPU", "rows": [
        peer("cross_gdpa_gelu", "meta_gdpa_gelu_approx", 246.0, 210.0),
        peer("cross_gdpa_gelu", "meta_gdpa_fast_gelu_kernels", 283.0, 252.0),
        peer("cross_gdpa_gelu", "meta_gdpa_fast_gelu", 309.0, 254.0),
        peer("pma_gdpa_silu", "meta_gdpa_silu_kernels", 131.0, 88.0),
        peer("pma_gdpa_silu", "broken", None, None, error="CUDA error"),
        peer("dense_gdpa_silu", "meta_gdpa_silu", 359.0, 282.0),
        # Kernel-time rows against our kernel time, the others against our event time.
        peer("self_gdpa_silu", "meta_gdpa_silu", 200.0, 150.0),
        peer("self_gdpa_silu", "meta_gdpa_silu_kernels", 350.0, 320.0),
        peer("swa_causal_512", "torch_flex", 330.0, 200.0),
        peer("swa_causal_512", "meta_x_kernels", 300.0, 260.0),
        peer("block64_softmax", "meta_x_kernels", 190.0, 140.0),
    ]}
    failures = []

    def check(what, got, want):
        ok = (abs(got - want) < 1e-9) if isinstance(want, float) and got is not None else got == want
        if not ok:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    with tempfile.TemporaryDirectory() as tmp:
        paths = {k: os.path.join(tmp, k) for k in ("bench.json", "peers.json", "out.json", "out.md")}
        json.dump(bench, open(paths["bench.json"], "w"))
        json.dump(peers, open(paths["peers.json"], "w"))
        subprocess.run([sys.executable, args.script, paths["bench.json"], paths["peers.json"], paths["out.json"],
                        paths["out.md"], "commit", "abc"], check=True, stdout=subprocess.DEVNULL)
        out = json.load(open(paths["out.json"]))
        md = open(paths["out.md"]).read()
    rows = {r["case"]: r for r in out["cases"]}
    check("row names", sorted(rows), sorted(["cross_gdpa_gelu", "cross_gdpa_gelu (tanh.approx)", "pma_gdpa_silu",
                                             "self_softmax", "dense_gdpa_silu (tanh.approx)", "self_gdpa_silu",
                                             "swa_causal_512", "block64_softmax"]))
    exact = rows["cross_gdpa_gelu"]
    # The exact row competes only with the exact-act peer: fast_gelu rows are not its peers.
    check("exact cross best fwd", exact["best_peer_fwd"], "meta_gdpa_gelu_approx")
    check("exact cross ratio fwd", exact["ratio_fwd"], 256.0 / 246.0)
    check("exact cross ratio fwd+bwd", exact["ratio_fwdbwd"], 224.0 / 210.0)
    check("exact cross tanh peer ran", exact["tanh_approx_peer_ran"], False)
    approx = rows["cross_gdpa_gelu (tanh.approx)"]
    # The tanh.approx row competes with every peer and takes the best of whole call and kernels only.
    check("tanh cross best fwd", approx["best_peer_fwd"], "meta_gdpa_fast_gelu")
    check("tanh cross ratio fwd", approx["ratio_fwd"], 300.0 / 309.0)
    check("tanh cross ratio fwd+bwd", approx["ratio_fwdbwd"], 259.0 / 254.0)
    check("tanh cross tanh peer ran", approx["tanh_approx_peer_ran"], True)
    pma = rows["pma_gdpa_silu"]
    check("pma ratio fwd (error row left out)", pma["ratio_fwd"], 110.0 / 131.0)
    check("pma errors kept aside", len(pma["peer_errors"]), 1)
    check("pma pairs agree", pma["pairs_agree"], True)
    softmax = rows["self_softmax"]
    check("no peer: no ratio", softmax["ratio_fwd"], None)
    check("no peer: no best", softmax["best_peer_fwd"], None)
    # A tanh.approx row whose case had no tanh.approx peer says so (its ratio is against exact peers).
    check("dense tanh without a tanh peer", rows["dense_gdpa_silu (tanh.approx)"]["tanh_approx_peer_ran"], False)
    # Each basis against its own: the kernel-time peer is the binding one for self_gdpa_silu.
    silu = rows["self_gdpa_silu"]
    check("silu: kernel peer binds fwd", silu["best_peer_fwd"], "meta_gdpa_silu_kernels")
    check("silu: ratio fwd on kernel time", silu["ratio_fwd"], 360.0 / 350.0)
    check("silu: basis", silu["ratio_fwd_basis"], "kernels")
    check("silu: ratio fwd+bwd on kernel time", silu["ratio_fwdbwd"], 330.0 / 320.0)
    swa = rows["swa_causal_512"]
    check("swa: event peer binds fwd", (swa["best_peer_fwd"], swa["ratio_fwd_basis"]), ("torch_flex", "events"))
    check("swa: ratio fwd on event time", swa["ratio_fwd"], 325.0 / 330.0)
    check("swa: kernel peer binds fwd+bwd", swa["ratio_fwdbwd"], 250.0 / 260.0)
    # Without our kernel time a kernel-time peer is compared with our (slower) event time.
    block = rows["block64_softmax"]
    check("no kernel time: events against a kernel peer", (block["ratio_fwd"], block["ratio_fwd_basis"]),
          (200.0 / 190.0, "events"))
    check("markdown names the GPU and commit", "TEST GPU (abc)" in md, True)
    check("markdown has the tanh row", "| cross_gdpa_gelu (tanh.approx) |" in md, True)
    if failures:
        print("\n".join(failures))
        return 1
    print("ratio_table: 22 checks pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
