"""Ratio table of `gemtb bench attention` against the peers of ../shared/peers/torch_peers.py, both
run in the same device call on the same GPU and lengths (tools/bench_gpu.sh runs this).

    python3 ratio_table.py BENCH_JSON PEERS_JSON OUT_JSON OUT_MD [KEY VALUE ...]

(KEY VALUE pairs, e.g. the commit and the commands, are stored in OUT_JSON.)

ratio = ours / best peer, in effective TFLOP/s over the same valid pairs (spec §10), forward and
forward+backward, per case. A peer row with an error does not count; a case without any peer
number has no ratio.

Like against like: a bench row run with `--tanh-approx` (silu and gelu_tanh through the hardware
tanh, "tanh_approx": true in its JSON) is shown as "case (tanh.approx)" and competes with every peer
row of its case; an exact row competes only with the peers that evaluate the exact act, i.e. not
with peer rows whose impl names a tanh.approx variant (Meta's `fast_gelu`, `fast_silu`).
"""
import json
import sys

TANH_APPROX_PEERS = ("fast_gelu", "fast_silu")  # peer impls that evaluate the act through tanh.approx


def is_tanh_approx_peer(row):
    return any(tag in row.get("impl", "") for tag in TANH_APPROX_PEERS)


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
            # A peer row may lack one column (e.g. a forward-only row): it competes in the other.
            best = max((r for r in mine if r.get(peer_key)), key=lambda r: r[peer_key], default=None)
            ours = row[f"ours_{key}_tflops"]
            row[f"best_peer_{key}"] = best["impl"] if best else None
            row[f"best_peer_{key}_tflops"] = best[peer_key] if best else None
            row[f"ratio_{key}"] = (ours / best[peer_key]) if (best and ours) else None
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
             "Effective TFLOP/s (valid pairs only; fwd+bwd = 3.5x fwd FLOPs). Ratio = ours / best peer of the "
             "same run. Exact rows compete with the peers of the exact act; \"(tanh.approx)\" rows (silu and "
             "gelu_tanh through the hardware tanh) with every peer, tanh.approx ones (Meta's fast_gelu) included.",
             "",
             "| case | kernel | ours fwd | best peer fwd | ratio fwd | ours fwd+bwd | best peer fwd+bwd | ratio fwd+bwd |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kernel = r['forward_kernel'] + (f" / {r['backward_kernel']}" if r.get('backward_kernel') else "")
        lines.append(f"| {r['case']} | {kernel} | {f(r['ours_fwd_tflops'])} | "
                     f"{f(r['best_peer_fwd_tflops'])} ({r['best_peer_fwd'] or '-'}) | {f(r['ratio_fwd'], 2)} | "
                     f"{f(r['ours_fwdbwd_tflops'])} | {f(r['best_peer_fwdbwd_tflops'])} ({r['best_peer_fwdbwd'] or '-'}) | "
                     f"{f(r['ratio_fwdbwd'], 2)} |")
    open(out_md, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
