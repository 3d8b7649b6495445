"""gemtb data generate end to end: the same bytes for any thread count and any split of the sample
range, the oracle NE in meta.json equals an independent NumPy evaluation of probs/labels/masks, and
bad input exits 2 without writing anything. Exit code 77 = skipped (no numpy)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit(77)


def run(gemtb, *args):
    return subprocess.run([gemtb, "data", "generate", *args], capture_output=True, text=True)


def load(d):
    out = {n[:-4]: np.load(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".npy")}
    with open(os.path.join(d, "meta.json")) as f:
        out["meta"] = json.load(f)
    return out


def numpy_ne(p, y):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    ce = -(y * np.log2(p) + (1 - y) * np.log2(1 - p)).mean()
    pbar = np.clip(y.mean(), 1e-12, 1 - 1e-12)
    return ce / -(pbar * np.log2(pbar) + (1 - pbar) * np.log2(1 - pbar))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    gemtb = ap.parse_args().gemtb
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for name, args in {"t1": ["--first", "0", "--samples", "3000", "--threads", "1"],
                           "t3": ["--first", "0", "--samples", "3000", "--threads", "3"],
                           "a": ["--first", "0", "--samples", "1000"],
                           "b": ["--first", "1000", "--samples", "2000"]}.items():
            d = os.path.join(tmp, name)
            r = run(gemtb, "--config", "tiny", "--seed", "4", "--out-dir", d, *args)
            if r.returncode != 0:
                print(r.stdout, r.stderr)
                return 1
            dirs[name] = load(d)
        t1, t3, a, b = dirs["t1"], dirs["t3"], dirs["a"], dirs["b"]
        for key in ["lengths", "ids", "seq_lengths", "dense", "surface", "labels", "masks", "probs"]:
            if t1[key].tobytes() != t3[key].tobytes():
                failures.append(f"{key}: threads 1 and 3 differ")
        # The split: sample-major arrays concatenate; key-major lengths per key.
        for key in ["dense", "surface", "labels", "masks", "probs"]:
            if np.concatenate([a[key], b[key]]).tobytes() != t1[key].tobytes():
                failures.append(f"{key}: samples [0, 1000) + [1000, 3000) != [0, 3000)")
        keys = len(t1["meta"]["keys"])
        la, lb, lt = (x["lengths"].reshape(keys, -1) for x in (a, b, t1))
        if not np.array_equal(np.concatenate([la, lb], axis=1), lt):
            failures.append("lengths: split differs")
        if not np.array_equal(np.concatenate([a["seq_lengths"], b["seq_lengths"]], axis=1), t1["seq_lengths"]):
            failures.append("seq_lengths: split differs")
        # Values per key and sample, rebuilt from both runs.
        def bags(x, n):
            L = x["lengths"].reshape(keys, n)
            off = np.concatenate([[0], np.cumsum(x["lengths"])])
            return [[x["ids"][off[k * n + s]:off[k * n + s + 1]].tolist() for s in range(n)] for k in range(keys)]
        ba, bb, bt = bags(a, 1000), bags(b, 2000), bags(t1, 3000)
        if any(ba[k] + bb[k] != bt[k] for k in range(keys)):
            failures.append("ids: split differs")
        # Oracle NE: meta.json against NumPy.
        for t, task in enumerate(t1["meta"]["tasks"]):
            m = t1["masks"][:, t] == 1
            want = numpy_ne(t1["probs"][m, t], t1["labels"][m, t].astype(np.float64))
            if abs(task["oracle_ne"] - want) > 1e-9:
                failures.append(f"task {task['name']}: oracle NE {task['oracle_ne']} vs numpy {want}")
            if task["masked"] != int(m.sum()):
                failures.append(f"task {task['name']}: masked count")
        if not t1["meta"]["tasks"][0]["oracle_ne"] <= 0.85:
            failures.append(f"tiny ctr oracle NE {t1['meta']['tasks'][0]['oracle_ne']} > 0.85")
        # Bad input: exit 2, one stderr line, nothing written.
        for args in (["--samples", "0"], ["--config", "no-such-config"], ["--first", "-1"], ["--bogus", "1"],
                     ["--seed", "x"]):
            d = os.path.join(tmp, "bad")
            r = run(gemtb, "--out-dir", d, *args)
            if r.returncode != 2 or os.path.exists(d) or len(r.stderr.strip().splitlines()) != 1:
                failures.append(f"{args}: exit {r.returncode}, stderr {r.stderr!r}, wrote {os.path.exists(d)}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
