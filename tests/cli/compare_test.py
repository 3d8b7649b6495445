"""`gemtb ref compare` passes the oracle's own emulate-mode output, fails an output with one
element changed by 1% and names that element, and fails a set with an output missing.

usage: /usr/bin/python3 compare_test.py --gemtb PATH
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)


def write_case(root, dtype, act, mask, rng):
    case = os.path.join(root, "case")
    os.makedirs(case)
    lengths = [7, 0, 1, 33, 18]
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    t, h, d = int(off[-1]), 4, 16

    def values(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        if dtype == "bfloat16":  # round to bf16 (RNE) and store the raw bits as <u2
            bits = x.view(np.uint32).astype(np.uint64)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            return bits
        return x.astype(dtype)

    for name, shape in [("q", (t, h, d)), ("k", (t, 2, d)), ("v", (t, 2, d)), ("do", (t, h, d))]:
        np.save(os.path.join(case, name + ".npy"), values(shape))
    np.save(os.path.join(case, "off.npy"), off)
    spec = {"q": "q.npy", "k": "k.npy", "v": "v.npy", "do": "do.npy", "q-offsets": "off.npy",
            "kv-offsets": "off.npy", "act": act, "mask": mask}
    if mask == "window":
        spec.update({"window-left": 5, "window-right": 2})
    with open(os.path.join(case, "case.json"), "w") as f:
        json.dump(spec, f)
    return case


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(11)
    failures = 0
    for dtype, act, mask in [("float32", "softmax", "causal"), ("float32", "silu", "window"),
                             ("float16", "gelu_tanh", "none"), ("bfloat16", "softmax", "none")]:
        root = tempfile.mkdtemp(prefix=f"gemtb-compare-{dtype}-")
        case = write_case(root, dtype, act, mask, rng)
        emu = os.path.join(root, "emu")
        p = run([args.gemtb, "ref", "attention", "--case", case, "--mode", "emulate", "--backward",
                 "--do", os.path.join(case, "do.npy"), "--out-dir", emu])
        if p.returncode != 0:
            print(f"FAIL {dtype}/{act}: ref attention exit {p.returncode}: {p.stderr.strip()}")
            failures += 1
            continue
        p = run([args.gemtb, "ref", "compare", "--case", case, "--test", emu])
        if p.returncode != 0:
            print(f"FAIL {dtype}/{act}: own emulate output rejected (exit {p.returncode}):\n{p.stdout}{p.stderr}")
            failures += 1
        else:
            print(f"ok   {dtype}/{act}/{mask}: own emulate output passes")
        if dtype != "float32":
            continue
        # One element changed by 1%: the largest-magnitude one, so that the change is 1% of max|ref|.
        # The rest of the set is the passing emulate output, so only the changed tensor can fail.
        for tensor in ["o.npy", "dq.npy", "dk.npy", "dv.npy"]:
            bad = os.path.join(root, "bad-" + tensor[:-4])
            shutil.copytree(emu, bad)
            x = np.load(os.path.join(emu, tensor))
            i = np.unravel_index(np.argmax(np.abs(x)), x.shape)
            x[i] *= np.float32(1.01)
            np.save(os.path.join(bad, tensor), x)
            p = run([args.gemtb, "ref", "compare", "--case", case, "--test", bad])
            worst = f"{tensor[:-4]}: worst element [{', '.join(str(int(k)) for k in i)}]: got {float(x[i]):.9g}"
            if p.returncode != 1 or "FAIL" not in p.stdout:
                print(f"FAIL {dtype}/{act}: {tensor} with one element +1% not rejected (exit {p.returncode}):\n{p.stdout}{p.stderr}")
                failures += 1
            elif worst not in p.stdout:
                print(f"FAIL {dtype}/{act}: {tensor}: the report does not point at the changed element ({worst}):\n{p.stdout}")
                failures += 1
            else:
                print(f"ok   {dtype}/{act}/{mask}: {tensor} with one element +1% fails, worst element named")
        # A set with an output missing fails (exit 1) on one line naming it, however good the rest is.
        for tensor in ["dv.npy"] + (["lse.npy"] if act == "softmax" else []):
            partial = os.path.join(root, "partial-" + tensor[:-4])
            shutil.copytree(emu, partial)
            os.remove(os.path.join(partial, tensor))
            p = run([args.gemtb, "ref", "compare", "--case", case, "--test", partial])
            lines = p.stdout.strip().splitlines()
            if p.returncode != 1 or len(lines) != 1 or tensor not in lines[0] or "FAIL" not in lines[0]:
                print(f"FAIL {dtype}/{act}: a set without {tensor} not rejected on one line (exit {p.returncode}):\n{p.stdout}{p.stderr}")
                failures += 1
            else:
                print(f"ok   {dtype}/{act}/{mask}: a set without {tensor} fails: {lines[0]}")
    print("PASS" if failures == 0 else f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
