"""Adds one peer script's rows to the peers.json that tools/bench_gpu.sh builds the ratio table from.

    python3 merge_peers.py PEERS_JSON SCRIPT ROWS_JSON ROWS_LOG [DEVICE]

PEERS_JSON: the file to extend (created if missing). SCRIPT: the peer script's name, stored in each
row as `peer_script`. ROWS_JSON: the script's own --json output; if it is missing (the script hit its
time limit), the rows it printed to ROWS_LOG (one JSON object per line with a "case"; the last one
of each case and impl, since a script may print a row again once it completes it) are taken
instead, and the merged file notes that. DEVICE names the GPU where the script's JSON did not.
"""
import json
import sys


def rows_or_printed(rows_path, log_path, script):
    """The script's JSON, or a stand-in made of the rows it printed."""
    try:
        return json.load(open(rows_path))
    except (OSError, ValueError):
        pass
    latest = {}  # (case, impl) -> the last row printed for it
    try:
        for line in open(log_path, errors="replace"):
            line = line.strip()
            if line.startswith("{") and '"case"' in line:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                latest[(row.get("case"), row.get("impl"))] = row
    except OSError:
        pass
    return {"rows": list(latest.values()), "note": f"partial: {script} hit its time limit"}


def main(peers_path, script, rows_path, log_path, device=None):
    try:
        peers = json.load(open(peers_path))
    except (OSError, ValueError):
        peers = {"rows": []}
    src = rows_or_printed(rows_path, log_path, script)
    for r in src["rows"]:
        r["peer_script"] = script
    peers["rows"] += src["rows"]
    meta = {k: v for k, v in src.items() if k != "rows"}
    if device and "device" not in meta:
        meta["device"] = device
    for key in ("device", "torch"):  # the first script's device and torch name the file's
        if key in meta:
            peers.setdefault(key, meta[key])
    peers.setdefault("sources", {})[script] = meta
    json.dump(peers, open(peers_path, "w"), indent=1)


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit("usage: merge_peers.py PEERS_JSON SCRIPT ROWS_JSON ROWS_LOG [DEVICE]")
    main(*sys.argv[1:])
