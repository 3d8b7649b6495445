"""`gemtb ref embed` with a sharding plan: a plan whose groups do not divide the world is a named
error (exit 2, nothing written); a valid plan runs sharded, writes comm_report.json in the
schema, and (row-wise sharding, forward) gives the pooled output of the unsharded oracle up to the
order of the split sum.

usage: /usr/bin/python3 embed_plan_test.py --gemtb PATH
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gemtb-embed-plan-")
    spec = {"seed": 3, "batch": 8, "world_size": 4,
            "tables": [{"name": "t0", "rows": 13, "dim": 8, "optimizer": {"kind": "sgd", "lr": 0.5}}],
            "features": [{"key": "a", "table": "t0", "pooling": "sum"}]}
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 4, size=8).astype(np.int32)
    np.save(os.path.join(tmp, "lengths.npy"), lengths)
    np.save(os.path.join(tmp, "ids.npy"), rng.integers(0, 13, size=int(lengths.sum())).astype(np.int64))
    failures = 0

    def run(plan, out, world=4):
        s = dict(spec, plan=plan, world_size=world) if plan is not None else dict(spec)
        path = os.path.join(tmp, f"spec-{out}.json")
        with open(path, "w") as f:
            json.dump(s, f)
        return subprocess.run([args.gemtb, "ref", "embed", "--spec", path, "--lengths", os.path.join(tmp, "lengths.npy"),
                               "--ids", os.path.join(tmp, "ids.npy"), "--out-dir", os.path.join(tmp, out)],
                              capture_output=True, text=True)

    for name, plan, needle in [("mp_group not dividing the world", {"default": {"type": "RW"}, "mp_group": 3}, "mp_group"),
                               ("unknown sharding type", {"default": {"type": "XYZ"}}, "XYZ"),
                               ("TW owner out of range", {"tables": {"t0": {"type": "TW", "owner": 9}}}, "owner")]:
        p = run(plan, "bad")
        ok = p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1 \
            and not os.path.exists(os.path.join(tmp, "bad"))
        print(("ok   " if ok else "FAIL ") + f"{name}: exit {p.returncode}: {p.stderr.strip()}")
        failures += not ok
    p1 = run(None, "plain")
    p2 = run({"default": {"type": "RW"}}, "rw")
    ok = p1.returncode == 0 and p2.returncode == 0
    if ok:
        a = np.load(os.path.join(tmp, "plain", "pooled.npy"))
        b = np.load(os.path.join(tmp, "rw", "pooled.npy"))
        report = json.load(open(os.path.join(tmp, "rw", "comm_report.json")))
        ok = (np.allclose(a, b, rtol=1e-6, atol=1e-7) and report["unit"] == "bytes"
              and any(c["op"] == "reduce_scatter" for c in report["collectives"])
              and all(len(c["send_bytes"]) == len(c["group"]) for c in report["collectives"]))
    print(("ok   " if ok else "FAIL ") + "row-wise plan runs sharded, matches the unsharded pooling, writes comm_report.json")
    failures += not ok
    print("PASS" if failures == 0 else f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
