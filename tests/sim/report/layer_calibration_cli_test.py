#!/usr/bin/env python3
"""gemtb whatif --layer-calibration end to end on gem-default at one GPU, noise off: a calibration at the
kind defaults leaves every result as it was (ranks.csv, collectives.csv, sweep.csv and trace.json
byte-identical; summary.json identical but for its layer_calibration section, which counts the sources);
halving one op's forward efficiency raises the step; without the flag the report has no such section;
bad files exit 2 with one stderr line naming the field and write nothing."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

COMMON = ["--gpus", "1", "--set", "model.tables[*].rows=1e6", "--set", "noise.step_sigma=0",
          "--set", "noise.collective_jitter_sigma=0", "--steps", "0,1", "--no-sensitivity", "--no-attribution",
          "--no-checks", "--no-levers", "--quiet", "--threads", "2"]
# gem-default's per-kind efficiencies (sim/scenarios/gem-default.json's overrides).
DEFAULTS = {"linear": 0.45, "interaction": 0.45, "attention": 0.40,
            "norm": 0.6, "pointwise": 0.6, "embedding": 0.6, "loss": 0.6}
HALVED_OP = "L1.cross.seq0.pma_q"
COMPARED = ["ranks.csv", "collectives.csv", "sweep.csv", "trace.json"]


def calibration(kinds=None, ops=None, **fields):
    c = {"format": "gemtb-layer-calibration", "version": 1, "hardware": "NVIDIA H200", "commit": "test",
         "command": "by hand", "config": "gem-scale"}
    if kinds is not None:
        c["kinds"] = kinds
    if ops is not None:
        c["ops"] = ops
    c.update(fields)
    return c


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemtb", required=True)
    gemtb = parser.parse_args().gemtb
    failures = []

    with tempfile.TemporaryDirectory() as tmp:
        def whatif(name, cal):
            out = os.path.join(tmp, name)
            args = [gemtb, "whatif"] + COMMON + ["--out-dir", out]
            if cal is not None:
                path = os.path.join(tmp, name + ".json")
                with open(path, "w") as f:
                    f.write(cal if isinstance(cal, str) else json.dumps(cal))
                args += ["--layer-calibration", path]
            r = subprocess.run(args, capture_output=True, text=True, timeout=300)
            return r, out

        def summary(out):
            with open(os.path.join(out, "summary.json")) as f:
                return json.load(f)

        r, plain = whatif("plain", None)
        if r.returncode != 0:
            print("FAIL: plain run:", r.stderr)
            return 1
        if "layer_calibration" in summary(plain) or "layer calibration" in r.stdout:
            failures.append("a run without --layer-calibration reports one")

        same = {k: {"fwd": e, "bwd": e} for k, e in DEFAULTS.items()}
        r, equal = whatif("equal", calibration(kinds=same))
        if r.returncode != 0:
            failures.append(f"kind defaults: exit {r.returncode}: {r.stderr}")
        else:
            for name in COMPARED:
                with open(os.path.join(plain, name), "rb") as a, open(os.path.join(equal, name), "rb") as b:
                    if a.read() != b.read():
                        failures.append(f"kind defaults: {name} differs from the run without a calibration")
            got = summary(equal)
            layers = got.pop("layer_calibration", None)
            if got != summary(plain):
                failures.append("kind defaults: summary.json differs beyond its layer_calibration section")
            if layers is None:
                failures.append("kind defaults: summary.json has no layer_calibration section")
            else:
                s = layers["efficiency_sources"]
                if s["measured_op"] != 0 or s["kind_default"] != 0 or s["measured_kind"] <= 0:
                    failures.append(f"kind defaults: sources {s}, want every pass measured by kind")
                if layers["hardware"] != "NVIDIA H200" or layers["config"] != "gem-scale":
                    failures.append(f"kind defaults: provenance {layers}")
            if "layer calibration: gem-scale on NVIDIA H200 (by hand) prices 0 op passes by op name" not in r.stdout:
                failures.append(f"kind defaults: console has no source line: {r.stdout!r}")

        r, halved = whatif("halved", calibration(ops={HALVED_OP: {"fwd": DEFAULTS["linear"] / 2}}))
        if r.returncode != 0:
            failures.append(f"halved: exit {r.returncode}: {r.stderr}")
        else:
            a, b = summary(plain)["sweep"][0], summary(halved)["sweep"][0]
            if not b["step_mean_s"] > a["step_mean_s"]:
                failures.append(f"halved: step {b['step_mean_s']} not above {a['step_mean_s']}")
            if not b["local_mfu"] < a["local_mfu"]:
                failures.append(f"halved: Local MFU {b['local_mfu']} not below {a['local_mfu']}")
            s = summary(halved)["layer_calibration"]["efficiency_sources"]
            if s["measured_op"] != 1 or s["measured_kind"] != 0:
                failures.append(f"halved: sources {s}, want one pass by op name")

        for name, cal, expected in [
            ("efficiency above 1", calibration(kinds={"linear": {"fwd": 1.5}}),
             "cluster.calibration.layers.kinds.linear.fwd: 1.5"),
            ("efficiency 0", calibration(ops={HALVED_OP: {"bwd": 0}}),
             f"cluster.calibration.layers.ops.{HALVED_OP}.bwd: 0"),
            ("unknown op", calibration(ops={"L99.mlp": {"fwd": 0.5}}),
             "cluster.calibration.layers.ops.L99.mlp: is not an op of the model"),
            ("other config", calibration(kinds={"linear": {"fwd": 0.5}}, config="small"),
             "cluster.calibration.layers.config: \"small\" is not the scenario's model config \"gem-scale\""),
            ("unknown kind", calibration(kinds={"gemm": {"fwd": 0.5}}), "cluster.calibration.layers.kinds.gemm"),
            ("no provenance", {"format": "gemtb-layer-calibration", "version": 1, "kinds": {"linear": {"fwd": 0.5}}},
             "cluster.calibration.layers.hardware: missing"),
            ("not JSON", "{\"version\": 1,", "--layer-calibration"),
        ]:
            r, out = whatif("bad", cal)
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            if r.returncode != 2 or len(lines) != 1 or expected not in lines[0] or os.path.exists(out):
                failures.append(f"{name}: exit {r.returncode}, stderr {r.stderr!r}")
        r = subprocess.run([gemtb, "whatif"] + COMMON + ["--out-dir", os.path.join(tmp, "bad"), "--layer-calibration",
                                                         os.path.join(tmp, "nope.json")],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 2 or "--layer-calibration" not in r.stderr:
            failures.append(f"missing file: exit {r.returncode}, stderr {r.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
