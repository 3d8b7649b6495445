#!/usr/bin/env python3
"""gemtb whatif calibrate end to end: the committed 2- and 4-GPU H200 results,
given as two --in flags or one comma-separated --in, reproduce the committed sim/calibration/h200.json
byte for byte (the calibration sim/ uses is the tool's output on the committed measurements; the
committed one-GPU GEMM-interference records, gemm_interference_h200x*_*.json, are then applied with
`gemtb bench comm --fit`, as the calibration's kappa_measured notes name them); files
that cannot be merged, and bad flags, exit 2 with one stderr line naming the flag, field, file and value,
and write nothing."""
import argparse
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RESULTS = os.path.join(ROOT, "tools", "bench", "results")
COMMITTED = os.path.join(ROOT, "sim", "calibration", "h200.json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemtb", required=True)
    gemtb = parser.parse_args().gemtb
    failures = []

    def calibrate(args):
        return subprocess.run([gemtb, "whatif", "calibrate"] + args, capture_output=True, text=True, timeout=300)

    with open(COMMITTED) as f:
        committed_json = json.load(f)
    sources = committed_json["source"]
    if not isinstance(sources, list) or len(sources) < 2:
        failures.append(f"h200.json: source {sources!r} should list the 2- and 4-GPU files")
    inputs = [os.path.join(RESULTS, s) for s in sources]
    committed_results = sorted(os.path.basename(p) for p in glob.glob(os.path.join(RESULTS, "comm_h200x*_*.json")))
    if sorted(sources) != committed_results:
        failures.append(f"h200.json was fitted from {sources}, the committed results are {committed_results}")
    gemm_records = sorted(glob.glob(os.path.join(RESULTS, "gemm_interference_h200x*_*.json")))
    measured_notes = json.dumps(committed_json.get("kappa_measured", {}))
    for record in gemm_records:
        if os.path.basename(record) not in measured_notes:
            failures.append(f"h200.json's kappa_measured does not name {os.path.basename(record)}")

    def apply_gemm_records(path):
        for record in gemm_records:
            r = subprocess.run([gemtb, "bench", "comm", "--fit", record, "--base", path, "--out", path],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                return f"bench comm --fit {os.path.basename(record)}: exit {r.returncode} ({r.stderr.strip()})"
        return None

    with tempfile.TemporaryDirectory() as tmp:
        with open(COMMITTED) as f:
            committed = f.read()
        for name, args in [("repeated --in", sum((["--in", p] for p in inputs), [])),
                           ("comma-separated --in", ["--in", ",".join(inputs)])]:
            out = os.path.join(tmp, "cal.json")
            r = calibrate(args + ["--out", out])
            if r.returncode != 0:
                failures.append(f"{name}: exit {r.returncode} ({r.stderr.strip()})")
                continue
            fit_error = apply_gemm_records(out)
            if fit_error:
                failures.append(f"{name}: {fit_error}")
                continue
            with open(out) as f:
                written = f.read()
            if written != committed:
                failures.append(f"{name}: the output differs from sim/calibration/h200.json (refit and commit it)")
            if "4 " not in r.stdout or "all_to_all" not in r.stdout:
                failures.append(f"{name}: no held-out MAPE table on stdout: {r.stdout!r}")
            os.remove(out)

        # Inputs that cannot be merged, written beside the originals' names.
        with open(inputs[-1]) as f:
            four = json.load(f)

        def variant(name, edit):
            d = copy.deepcopy(four)
            edit(d)
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                json.dump(d, f)
            return path

        def other_ring(d):
            d["nccl_tuning_log"] = [l.replace("Pattern 4, crossNic 0, nChannels 12", "Pattern 4, crossNic 0, nChannels 16")
                                    for l in d["nccl_tuning_log"]]

        def other_version(d):
            for run in d["runs"].values():
                run["nccl_version"] = "2.27.1"

        def bad_kappa(d):
            d["runs"]["auto"]["gemm"]["kappa"] = "fast"

        cases = [
            ("ring graphs differ", ["--in", inputs[0], "--in", variant("ring16.json", other_ring)],
             ["--in: nccl_tuning_log: the ring graph (Pattern 4) of ring16.json (nChannels 16, bw 30)",
              os.path.basename(inputs[0])]),
            ("NCCL versions differ", ["--in", inputs[0], "--in", variant("nccl227.json", other_version)],
             ["--in: nccl_version: nccl227.json has \"2.27.1\"", os.path.basename(inputs[0])]),
            ("the same measurements twice", ["--in", inputs[-1], "--in", variant("copy.json", lambda d: None)],
             ["--in: results: all_reduce (auto) on 4 GPUs at 1024 bytes is in both", "copy.json"]),
            ("one file twice", ["--in", inputs[0], "--in", inputs[0]],
             ["--in: " + os.path.basename(inputs[0]) + " given twice"]),
            ("kappa not a number", ["--in", variant("kappa.json", bad_kappa)],
             ["--in " + os.path.join(tmp, "kappa.json") + ": runs.auto.gemm.kappa: \"fast\" is not a number"]),
            ("empty entry", ["--in", inputs[0] + ","], ["--in=" + inputs[0] + ",: an empty entry"]),
            ("missing file", ["--in", inputs[0], "--in", os.path.join(tmp, "none.json")], ["--in: ", "none.json"]),
            ("no --in", [], ["--in: missing"]),
        ]
        for name, args, expected in cases:
            out = os.path.join(tmp, "bad_out.json")
            r = calibrate(args + ["--out", out])
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            if r.returncode != 2:
                failures.append(f"{name}: exit {r.returncode}, want 2 ({r.stderr.strip()})")
            elif len(lines) != 1 or not all(e in lines[0] for e in expected):
                failures.append(f"{name}: stderr {r.stderr!r} lacks {expected!r}")
            if os.path.exists(out):
                failures.append(f"{name}: wrote {out}")

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
