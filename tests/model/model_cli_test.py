"""`gemtb model`: prints the per-region table and totals, --emit writes a model.json whose parameter
sum equals the counting rules applied independently here to the config JSON, whose FLOPs
(evaluated here with our own pair counter) equal the printed totals, and bad input exits 2 without
writing anything.

usage: /usr/bin/python3 model_cli_test.py --gemtb PATH --configs DIR
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

failures = 0


def check(cond, what):
    global failures
    if cond:
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}")


def spec_dense_params(c):
    """counting rules, from the config JSON alone."""
    d = c["d"]
    a = c["arch"]
    w = a["wukong"]
    J = sum(s.get("count", 1) for s in c["sequences"])
    F = sum(f.get("count", 1) for f in c["features"])
    n_x, n_s, k_p, K_r, f, L = a["n_x"], a["n_s"], a["k_p"], a["K_r"], a["f"], a["L"]
    n_z = n_x + J * (n_s + k_p + K_r)
    m, n_d = c["dense"]["m"], c["dense"]["n_d"]
    attn = 4 * (d * d + d)
    gate = d * d + d
    embed = (m * n_d * d + n_d * d) + (F + n_d) * n_x
    cross = n_x * n_s + gate + J * (k_p * d + attn + gate)
    k, H, n_F, n_L = w["k"], w["H"], w["n_F"], w["n_L"]
    wukong = 3 * n_z * k + (n_z * k * H + H) + (H * n_F * d + n_F * d) + n_L * n_z + n_x * n_z + 2 * d
    seq = 2 * (attn + 2 * d) + (2 * f * d * d + f * d + d) + 2 * d
    widths = c["head"]["widths"]
    head = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
    return embed + L * (cross + wukong + J * seq) + cross + head


def pairs(mask, L):
    if mask == "none":
        return L * L
    if "block" in mask:
        n = mask["block"]
        return (L // n) * n * n + (L % n) ** 2
    lo, hi = mask["window"]
    total = 0
    for i in range(L):
        a = 0 if lo < 0 else max(0, i - lo)
        b = L - 1 if hi < 0 else min(L - 1, i + hi)
        total += max(0, b - a + 1)
    return total


def evaluate(model, batch, sparsity, key):
    lengths = [int(round(sparsity * s["Lmax"])) + s["n_s"] for s in model["sequences"]]
    total = 0.0
    for op in model["ops"]:
        if not op["local_mfu"]:
            continue
        aff = op["flops"][key]
        n = p = 0
        if op["seq"] is not None:
            t = lengths[op["seq"]]
            n = batch * t
            at = op.get("attn")
            if at and at["q_tokens"] == 0 and at["kv_tokens"] == 0:
                p = batch * pairs(at["mask"], t)
        total += aff.get("c", 0) + aff.get("B", 0) * batch + aff.get("N", 0) * n + aff.get("P", 0) * p
    return total / batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    ap.add_argument("--configs", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gemtb-model-")

    for name in ["tiny", "small"]:
        out = os.path.join(tmp, f"{name}.json")
        r = subprocess.run([args.gemtb, "model", "--config", name, "--emit", out, "--batch", "64"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"{name}: exit 0 ({r.stderr.strip()})")
        check(os.path.exists(out), f"{name}: model.json written")
        if r.returncode != 0 or not os.path.exists(out):
            continue
        model = json.load(open(out))
        config = json.load(open(os.path.join(args.configs, f"{name}.json")))
        dense = sum(op["params"] for op in model["ops"])
        check(dense == spec_dense_params(config),
              f"{name}: model.json dense params {dense} == counting rules {spec_dense_params(config)}")
        printed = re.search(r"dense params\s+(\d+)", r.stdout)
        check(printed is not None and int(printed.group(1)) == dense, f"{name}: printed dense params")
        sparse = sum(t["rows"] * t["dim"] for t in model["tables"])
        printed = re.search(r"sparse params\s+(\d+)", r.stdout)
        check(printed is not None and int(printed.group(1)) == sparse, f"{name}: printed sparse params")
        fwd = evaluate(model, 64, 0.5, "fwd")
        printed = re.search(r"model FLOP/sample\s+fwd (\S+)\s+bwd (\S+)", r.stdout)
        check(printed is not None and abs(float(printed.group(1)) / fwd - 1) < 1e-3,
              f"{name}: printed model fwd FLOPs {printed and printed.group(1)} == {fwd:.4g} from model.json")
        check(printed is not None and abs(float(printed.group(2)) / evaluate(model, 64, 0.5, "bwd") - 1) < 1e-3,
              f"{name}: printed model bwd FLOPs")
        check(len(re.findall(r"^L1\.seq\d ", r.stdout, re.M)) == len(model["sequences"]),
              f"{name}: one table row per L1 sequence region")
        # Same bytes on a second run.
        out2 = os.path.join(tmp, f"{name}_2.json")
        subprocess.run([args.gemtb, "model", "--config", name, "--emit", out2], capture_output=True)
        check(open(out, "rb").read() == open(out2, "rb").read(), f"{name}: emission is deterministic")

    bad_config = os.path.join(tmp, "bad.json")
    cfg = json.load(open(os.path.join(args.configs, "tiny.json")))
    cfg["arch"]["wukong"]["n_F"] = 3
    json.dump(cfg, open(bad_config, "w"))
    for flags, what in [(["--config", "nope"], "unknown config"),
                        (["--config", bad_config], "invalid config"),
                        (["--config", "tiny", "--sparsity", "1.5"], "sparsity > 1"),
                        (["--config", "tiny", "--batch", "0"], "batch 0"),
                        (["--config", "tiny", "--frobnicate"], "unknown flag"),
                        ([], "missing --config")]:
        out = os.path.join(tmp, "never.json")
        r = subprocess.run([args.gemtb, "model", *flags, "--emit", out], capture_output=True, text=True)
        one_line = len(r.stderr.strip().splitlines()) == 1
        check(r.returncode == 2 and one_line and not os.path.exists(out),
              f"{what}: exit 2, one stderr line, nothing written ({r.stderr.strip()})")
    r = subprocess.run([args.gemtb, "model", "--config", bad_config], capture_output=True, text=True)
    check("arch.wukong.n_F: 3 + n_L 4 != n_x 8" in r.stderr, "invalid config error names the path")
    r = subprocess.run([args.gemtb, "model", "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "--emit" in r.stdout, "--help")

    print("failures:", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
