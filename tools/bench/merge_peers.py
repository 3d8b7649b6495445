"""Adds the rows of tools/bench/meta_gdpa_peer.py to the peers.json of torch_peers.py (bench_gpu.sh).

    python3 merge_peers.py PEERS_JSON META_JSON META_LOG

If the Meta peer was stopped by its time limit before it wrote META_JSON, the rows it printed to
META_LOG (one JSON object per line; the last one of each case and impl) are taken instead, and the
merged file says so.
"""
import json
import sys


def main(peers_path, meta_path, log_path):
    try:
        peers = json.load(open(peers_path))
    except (OSError, ValueError):
        peers = {"rows": []}
    try:
        meta = json.load(open(meta_path))
    except (OSError, ValueError):
        meta = {"rows": [], "note": "partial: the Meta GDPA peer hit its time limit"}
        latest = {}  # (case, impl) -> the last row printed for it (the fwd+bwd pass completes the forward's)
        for line in open(log_path, errors="replace"):
            if line.startswith("{") and '"case"' in line:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                latest[(row.get("case"), row.get("impl"))] = row
        meta["rows"] = list(latest.values())
    for r in meta["rows"]:
        r["peer_script"] = "tools/bench/meta_gdpa_peer.py"
    peers["rows"] += meta["rows"]
    peers["meta_gdpa"] = {k: v for k, v in meta.items() if k != "rows"}
    json.dump(peers, open(peers_path, "w"), indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
