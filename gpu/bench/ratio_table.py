"""Ratio table of `gemtb bench attention` against the peers of ../shared/peers/torch_peers.py, both
run in the same device call on the same GPU and lengths (tools/bench_gpu.sh runs this).

    python3 ratio_table.py BENCH_JSON PEERS_JSON OUT_JSON OUT_MD [KEY VALUE ...]

(KEY VALUE pairs, e.g. the commit and the commands, are stored in OUT_JSON.)

ratio = ours / the peer of the same run we beat by the least (the lowest ratio over the case's peer
rows, each on its basis below), in effective TFLOP/s over the same valid pairs, forward
and forward+backward, per case. A peer row with an error does not count; a case without any peer
number has no ratio.

Like against like, in time: peer rows whose impl ends in `_kernels` (tools/bench/meta_gdpa_peer.py)
report summed kernel time from a profiler trace, so they compete with our CUPTI kernel time of the
same runs ("kernel" in bench_attention.json); every other peer row is timed around whole calls and
competes with our CUDA-event time. Each case's ratio is the lowest over all its peer rows, each on its
own basis (a bench run without kernel times compares its event times with every row, the stricter).

Like against like, in arithmetic: a bench row run with `--tanh-approx` (silu and gelu_tanh through the hardware
tanh, "tanh_approx": true in its JSON) is shown as "case (tanh.approx)" and competes with every peer
row of its case; an exact row competes only with the peers that evaluate the exact act, i.e. not
with peer rows whose impl names a tanh.approx variant (Meta's `fast_gelu`, `fast_silu`).
"""
import json
import sys

TANH_APPROX_PEERS = ("fast_gelu", "fast_silu")  # peer impls that evaluate the act through tanh.approx


def is_tanh_approx_peer(row):
    return any(tag in row.get("impl", "") for tag in TANH_APPROX_PEERS)


def is_kernel_time_peer(row):
    return row.get("impl", "").endswith("_kernels")


def kernel_time(case, key):
    """Our CUPTI kernel time of `key` ("fwd" / "fwdbwd"): {} when the bench did not measure it."""
    k = case.get(key, {}).get("kernel", {})
    return {} if "error" in k else k


def main(argv):
    bench_path, peers_path, out_json, out_md = argv[:4]
    extra = dict(zip(argv[4::2], argv[5::2]))
    bench = json.load(open(bench_path))
    try:
        peers = json.load(open(peers_path))
    except (OSError, ValueError):
        peers = {"device": None, "rows": []}
    rows = []
    for c in bench["cases"]:
        name = c["case"]
        approx = bool(c.get("tanh_approx"))
        mine = [r for r in peers["rows"] if r.get("case") == name and "error" not in r
                and (approx or not is_tanh_approx_peer(r))]
        errors = [r for r in peers["rows"] if r.get("case") == name and "error" in r]
        row = {"case": name + (" (tanh.approx)" if approx else ""), "tanh_approx": approx,
               "tanh_approx_peer_ran": any(is_tanh_approx_peer(r) for r in mine),
               "forward_kernel": c.get("forward_kernel"),
               "backward_kernel": c.get("backward_kernel"),
               "ours_fwd_tflops": c["fwd"]["tflops"], "ours_fwd_ms": c["fwd"]["median_ms"],
               "ours_fwdbwd_tflops": c.get("fwdbwd", {}).get("tflops"),
               "ours_fwdbwd_ms": c.get("fwdbwd", {}).get("median_ms"),
               "pairs_per_head": c["pairs_per_head"],
               "peers": mine, "peer_errors": errors}
        for key, peer_key in (("fwd", "fwd_tflops"), ("fwdbwd", "fwdbwd_tflops")):
            ours_events = row[f"ours_{key}_tflops"]
            ktime = kernel_time(c, key)
            ours_kernels = ktime.get("tflops")
            row[f"ours_{key}_kernel_tflops"] = ours_kernels
            row[f"ours_{key}_kernel_ms"] = ktime.get("median_ms")
            # A peer row may lack one column (e.g. a forward-only row): it competes in the other.
            worst = None  # (ratio, peer row, basis): the peer we beat by the least
            for r in mine:
                if not r.get(peer_key):
                    continue
                kernels = is_kernel_time_peer(r) and ours_kernels
                ours = ours_kernels if kernels else ours_events
                if not ours:
                    continue
                ratio = ours / r[peer_key]
                if worst is None or ratio < worst[0]:
                    worst = (ratio, r, "kernels" if kernels else "events")
            row[f"best_peer_{key}"] = worst[1]["impl"] if worst else None
            row[f"best_peer_{key}_tflops"] = worst[1][peer_key] if worst else None
            row[f"ratio_{key}"] = worst[0] if worst else None
            row[f"ratio_{key}_basis"] = worst[2] if worst else None
        # Both count valid pairs per query head: they must agree, or the rates are not comparable.
        peer_pairs = {r.get("pairs") for r in mine}
        row["pairs_agree"] = peer_pairs == {c["pairs_per_head"]} if peer_pairs else None
        rows.append(row)
    doc = {"what": "gemtb bench attention vs torch_peers.py, same device call, same lengths",
           "gpu": bench.get("gpu_name"), "device": bench.get("device"), "peers_device": peers.get("device"),
           "torch": peers.get("torch"), "bench_command": bench.get("command"), **extra, "cases": rows}
    json.dump(doc, open(out_json, "w"), indent=1)

    f = lambda x, p=0: "-" if x is None else f"{x:.{p}f}"
    lines = [f"# gemtb attention vs peers on {bench.get('gpu_name')} ({extra.get('commit', '?')})", "",
             "Effective TFLOP/s (valid pairs only; fwd+bwd = 3.5x fwd FLOPs). Ours: CUDA events around each "
             "call / CUPTI kernel time of the same runs. Ratio = ours / the peer of the same run we beat by the "
             "least, each peer on its own basis: `_kernels` rows (profiler kernel sums) against our kernel time "
             "[k], the others against our event time [e]. Exact rows compete with the peers of the exact act; \"(tanh.approx)\" rows (silu and "
             "gelu_tanh through the hardware tanh) with every peer, tanh.approx ones (Meta's fast_gelu) included.",
             "",
             "| case | kernel | ours fwd (events / kernels) | peer fwd | ratio fwd | ours fwd+bwd (events / kernels) | "
             "peer fwd+bwd | ratio fwd+bwd |",
             "|---|---|---|---|---|---|---|---|"]
    ours = lambda r, key: f"{f(r[f'ours_{key}_tflops'])} / {f(r[f'ours_{key}_kernel_tflops'])}"
    ratio = lambda r, key: (f"{f(r[f'ratio_{key}'], 2)} [{r[f'ratio_{key}_basis'][0]}]"
                            if r[f"ratio_{key}"] is not None else "-")
    for r in rows:
        kernel = r['forward_kernel'] + (f" / {r['backward_kernel']}" if r.get('backward_kernel') else "")
        lines.append(f"| {r['case']} | {kernel} | {ours(r, 'fwd')} | "
                     f"{f(r['best_peer_fwd_tflops'])} ({r['best_peer_fwd'] or '-'}) | {ratio(r, 'fwd')} | "
                     f"{ours(r, 'fwdbwd')} | {f(r['best_peer_fwdbwd_tflops'])} ({r['best_peer_fwdbwd'] or '-'}) | "
                     f"{ratio(r, 'fwdbwd')} |")
    open(out_md, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
