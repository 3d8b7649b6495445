#!/usr/bin/env python3
"""gemtb whatif end to end: every malformed scenario exits 2 with one stderr line naming the field and
writes nothing (also when the error is in a separate cluster, calibration, plan or model file, and for
gemtb whatif collective --cluster); a small real run (gem-default at 64 GPUs) writes the report files, and sweep.svg and
trace.json parse (well-formed XML, JSON)."""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GEM_DEFAULT = os.path.join(ROOT, "sim", "scenarios", "gem-default.json")


def run(gemtb, args):
    return subprocess.run([gemtb, "whatif"] + args, capture_output=True, text=True, timeout=300)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemtb", required=True)
    gemtb = parser.parse_args().gemtb
    failures = []

    with open(GEM_DEFAULT) as f:
        base = json.load(f)
    base["cluster"] = os.path.join(ROOT, "sim", "network", "default_cluster.json")

    def variant(edit):
        s = copy.deepcopy(base)
        edit(s)
        return s

    def cluster_inline(edit):
        def apply(s):
            with open(s["cluster"]) as f:
                c = json.load(f)
            c["calibration"] = os.path.join(ROOT, "sim", "calibration", "h200.json")
            edit(c)
            s["cluster"] = c
        return apply

    cases = [
        ("group size not dividing the world",
         variant(lambda s: s["plan"]["dense"].update(fsdp_shard_group=96)),
         "plan.dense.fsdp_shard_group: 96 does not divide world_size 4096"),
        ("negative bandwidth",
         variant(lambda s: s["overrides"].update({"cluster.tiers[1].bw_GBps": -3})),
         "cluster.tiers[1].bw_GBps: -3"),
        ("unknown field",
         variant(lambda s: s["plan"]["sparse"].update(mp_groups=256)),
         "plan.sparse.mp_groups: unknown key"),
        ("missing tier",
         variant(cluster_inline(lambda c: c.update(tiers=c["tiers"][:2]))),
         "cluster.tiers"),
        ("min > max",
         variant(lambda s: s["batches"]["features"][0]["lognormal"].update(min=600, max=500)),
         "batches.features[0].lognormal.min: 600 must be <= max 500"),
        ("bad histogram",
         variant(lambda s: s["batches"]["features"].__setitem__(
             0, {"count": 8, "histogram": {"bins": [[1, 0], [64, 0]]}})),
         "batches.features[0].histogram.bins: weights sum to 0"),
        ("hot-id skew out of range",
         variant(lambda s: s["batches"].update(id_zipf=5)),
         "batches.id_zipf: 5 must be in [0, 4]"),
        ("hot-id skew of an unknown table",
         variant(lambda s: s["batches"].update(id_zipf={"default": 0, "tables": {"nope": 1}})),
         "batches.id_zipf.tables.nope: is not a table of the model"),
        ("pooling factor not positive",
         variant(lambda s: s["batches"].update(pooling=0)),
         "batches.pooling: 0 must be in (0, 10000]"),
        ("layout: full-sharding group not dividing the replicas",
         variant(lambda s: s["plan"]["layout"].update(sparse_shard_group=3)),
         "plan.layout.sparse_shard_group: 3 does not divide the 16 replicas"),
        ("layout: unknown dimension",
         variant(lambda s: s["plan"]["layout"].update(sparse_order=["shard", "zone", "dp"])),
         "plan.layout.sparse_order[1]: \"zone\" is not one of shard, mp, dp"),
        ("layout: copies of a V2 plan",
         variant(lambda s: s["plan"]["sparse"].update(fully_sharded=False)),
         "plan.layout.sparse_shard_group: 8 splits the 16 replicas"),
        ("hot-id skew: unknown key",
         variant(lambda s: s["batches"].update(id_zipf={"defualt": 1})),
         "batches.id_zipf.defualt: unknown key"),
    ]
    def expect_named_error(name, path, out, expected):
        """Bad input: exit 2, one stderr line naming the field, nothing written."""
        r = run(gemtb, [path, "--out-dir", out, "--quiet"])
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        if r.returncode != 2:
            failures.append(f"{name}: exit {r.returncode}, want 2 ({r.stderr.strip()})")
        elif len(lines) != 1 or expected not in lines[0]:
            failures.append(f"{name}: stderr {r.stderr!r} lacks {expected!r}")
        if os.path.exists(out):
            failures.append(f"{name}: wrote {out}")

    with tempfile.TemporaryDirectory() as tmp:
        for name, scenario, expected in cases:
            path = os.path.join(tmp, "bad.json")
            with open(path, "w") as f:
                json.dump(scenario, f)
            out = os.path.join(tmp, "out_" + name.replace(" ", "_"))
            expect_named_error(name, path, out, expected)

        # The same kinds of errors in separate cluster, calibration, plan and model files (
        # sections by relative path), each named by its JSON path. Without the scenario's tier
        # overrides, so that the cluster file alone decides.
        with open(base["cluster"]) as f:
            cluster = json.load(f)
        cluster["calibration"] = os.path.join(ROOT, "sim", "calibration", "h200.json")
        with open(cluster["calibration"]) as f:
            calibration = json.load(f)
        with open(os.path.join(ROOT, "model", "configs", "gem-scale.json")) as f:
            model = json.load(f)

        def edited(obj, edit):
            o = copy.deepcopy(obj)
            edit(o)
            return o

        def with_files(extra_files=None, **sections):
            """The scenario with `sections` as files beside it, plus extra files (by name)."""
            s = copy.deepcopy(base)
            s["overrides"] = {k: v for k, v in s["overrides"].items() if not k.startswith("cluster.tiers")}
            s.update({k: k + ".json" for k in sections})
            files = {k + ".json": v for k, v in sections.items()}
            files.update(extra_files or {})
            return s, files

        def drop_key(d, k):
            d.pop(k)

        file_cases = [
            ("cluster file: negative bandwidth",
             with_files(cluster=edited(cluster, lambda c: c["tiers"][0].update(bw_GBps=-450))),
             "cluster.tiers[0].bw_GBps: -450 must be > 0"),
            ("cluster file: negative oversubscription",
             with_files(cluster=edited(cluster, lambda c: c["tiers"][2].update(oversubscription=-7))),
             "cluster.tiers[2].oversubscription: -7 must be >= 1"),
            ("cluster file: unknown field",
             with_files(cluster=edited(cluster, lambda c: c.update(tier_list=[]))),
             "cluster.tier_list: unknown key"),
            ("cluster file: missing cross-zone tier",
             with_files(cluster=edited(cluster, lambda c: c.update(tiers=c["tiers"][:2]))),
             "cluster.tiers has only 2 tiers (a cross-zone tier is needed)"),
            ("cluster file: no tiers",
             with_files(cluster=edited(cluster, lambda c: c.update(tiers=[]))),
             "cluster.tiers: [] must be a non-empty array"),
            ("cluster file: tier without alpha",
             with_files(cluster=edited(cluster, lambda c: drop_key(c["tiers"][1], "alpha_us"))),
             "cluster.tiers[1].alpha_us: missing"),
            ("calibration file: unknown field",
             with_files(cluster=edited(cluster, lambda c: c.update(calibration="calibration.json")),
                        extra_files={"calibration.json": edited(calibration, lambda c: c.update(fited=[]))}),
             "cluster.calibration.fited: unknown key"),
            ("plan file: group size not dividing the world",
             with_files(plan=edited(base["plan"], lambda p: p["dense"].update(fsdp_shard_group=96))),
             "plan.dense.fsdp_shard_group: 96 does not divide world_size 4096"),
            ("plan file: MP group not dividing the world",
             with_files(plan=edited(base["plan"], lambda p: p["sparse"].update(mp_group=96))),
             "plan.sparse.mp_group: 96 does not divide world_size 4096"),
            ("plan file: unknown field",
             with_files(plan=edited(base["plan"], lambda p: p["collectives"].update(libary="sm_free"))),
             "plan.collectives.libary: unknown key"),
            ("model file: unknown field",
             with_files(model=edited(model, lambda m: m.update(heds=4))),
             "heds: unknown key"),
            ("model file: negative width",
             with_files(model=edited(model, lambda m: m.update(d=-256))),
             "d: -256 must be >= 4"),
        ]
        for name, (scenario, files), expected in file_cases:
            folder = os.path.join(tmp, "files_" + "".join(ch if ch.isalnum() else "_" for ch in name))
            os.makedirs(folder, exist_ok=True)
            for file_name, content in files.items():  # relative to the scenario (and the cluster file)
                with open(os.path.join(folder, file_name), "w") as f:
                    json.dump(content, f)
            path = os.path.join(folder, "bad.json")
            with open(path, "w") as f:
                json.dump(scenario, f)
            out = os.path.join(folder, "out")
            expect_named_error(name, path, out, expected)

        # gemtb whatif collective --cluster FILE: the same named errors, exit 2.
        bad_cluster = os.path.join(tmp, "bad_cluster.json")
        with open(bad_cluster, "w") as f:
            json.dump(edited(cluster, lambda c: c["tiers"][0].update(bw_GBps=-1)), f)
        r = subprocess.run([gemtb, "whatif", "collective", "--op", "all_gather", "--gpus", "8", "--size", "64M",
                            "--cluster", bad_cluster], capture_output=True, text=True, timeout=60)
        if r.returncode != 2 or "tiers[0].bw_GBps: -1 must be > 0" not in r.stderr or len(r.stderr.strip().splitlines()) != 1:
            failures.append(f"whatif collective --cluster with negative bandwidth: exit {r.returncode}, {r.stderr!r}")

        # --sharding-plan FILE: a TorchRec plan's named errors, exit 2, nothing written.
        for name, plan, expected in [
            ("sharding plan: unknown table", {"tables": {"nope": {"sharding_type": "table_wise", "ranks": [0]}}},
             "plan.torchrec_plan.tables.nope: is not a table of the model"),
            ("sharding plan: rank outside the group",
             {"tables": {"ad_feat_3": {"sharding_type": "table_wise", "ranks": [4096]}}},
             "plan.torchrec_plan.tables.ad_feat_3.ranks[0]: 4096 is not a rank of the sharding group of 256"),
            ("sharding plan: type name", {"tables": {"ad_feat_3": {"sharding_type": "TW", "ranks": [0]}}},
             "plan.torchrec_plan.tables.ad_feat_3.sharding_type: \"TW\" is not one of data_parallel"),
        ]:
            plan_path = os.path.join(tmp, "plan.json")
            with open(plan_path, "w") as f:
                json.dump(plan, f)
            out = os.path.join(tmp, "out_plan")
            r = run(gemtb, ["--sharding-plan", plan_path, "--gpus", "4096", "--out-dir", out, "--quiet"])
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            if r.returncode != 2 or len(lines) != 1 or expected not in lines[0] or os.path.exists(out):
                failures.append(f"{name}: exit {r.returncode}, stderr {r.stderr!r}")

        # Not JSON, no such file, bad flags.
        with open(os.path.join(tmp, "broken.json"), "w") as f:
            f.write("{\"seed\": 1,")
        for name, args in [("broken JSON", [os.path.join(tmp, "broken.json")]),
                           ("no such file", [os.path.join(tmp, "nope.json")]),
                           ("bad --gpus", ["--gpus", "64,abc"]),
                           ("bad --set", ["--set", "plan.dense.fsdp_shard_group"]),
                           ("unknown flag", ["--gpu", "64"])]:
            r = run(gemtb, args + ["--out-dir", os.path.join(tmp, "never"), "--quiet"])
            if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 1:
                failures.append(f"{name}: exit {r.returncode}, stderr {r.stderr!r}")
        if os.path.exists(os.path.join(tmp, "never")):
            failures.append("a bad invocation wrote its --out-dir")

        # An --out-dir that cannot be written (below a regular file): exit 2 before any run.
        blocker = os.path.join(tmp, "a_file")
        with open(blocker, "w") as f:
            f.write("x")
        r = run(gemtb, ["--gpus", "64", "--steps", "0,1", "--out-dir", os.path.join(blocker, "out"), "--quiet"])
        if r.returncode != 2 or "--out-dir" not in r.stderr or len(r.stderr.strip().splitlines()) != 1:
            failures.append(f"unwritable --out-dir: exit {r.returncode}, stderr {r.stderr!r}")

        # One GPU, nothing to communicate, no noise: the article's SR (E2E MFU / Local MFU, every layer
        # op in Local MFU) is near 1; what is left is the optimizer and the embedding update, reported
        # as their own loss line.
        out = os.path.join(tmp, "one_gpu")
        r = run(gemtb, ["--gpus", "1", "--set", "model.tables[*].rows=1e6", "--set", "noise.step_sigma=0",
                        "--set", "noise.collective_jitter_sigma=0", "--no-sensitivity", "--no-checks", "--no-levers",
                        "--out-dir", out, "--quiet"])
        if r.returncode != 0:
            failures.append(f"one GPU: exit {r.returncode}: {r.stderr}")
        else:
            with open(os.path.join(out, "summary.json")) as f:
                ref = json.load(f)["reference"]
            a = ref["attribution"]
            comm_share = sum(l["delta_s"] for l in a["losses"] if l["key"] in ("comm", "contention")) / a["t_s"]
            if ref["scaling_ratio"] < 0.9:
                failures.append(f"one GPU: SR {ref['scaling_ratio']} < 0.9")
            if comm_share != 0:
                failures.append(f"one GPU: communication loss {comm_share} of T, want 0")
            if not 0 < a["non_layer_s"] < 0.1 * a["t_s"]:
                failures.append(f"one GPU: non-layer line {a['non_layer_s']} s of T = {a['t_s']} s")
            # The lines split T - T_local = (1 - SR) T in full.
            total = sum(l["delta_s"] for l in a["losses"]) + a["non_layer_s"]
            if abs(total - (1 - ref["scaling_ratio"]) * a["t_s"]) > 1e-9 * a["t_s"]:
                failures.append(f"one GPU: losses sum to {total}, want (1 - SR) T")
            if "Local MFU: the GEM article's" not in r.stdout:
                failures.append("the report does not state its Local MFU definition")

        # A small real run.
        out = os.path.join(tmp, "run")
        r = run(gemtb, ["--gpus", "64", "--steps", "0,1", "--no-sensitivity", "--no-checks", "--out-dir", out, "--quiet"])
        if r.returncode != 0:
            failures.append(f"real run: exit {r.returncode}: {r.stderr}")
        else:
            for name in ["summary.json", "ranks.csv", "collectives.csv", "trace.json", "sweep.csv", "sweep.svg",
                         "perf.json"]:
                if not os.path.exists(os.path.join(out, name)):
                    failures.append(f"real run: {name} missing")
            try:
                ET.parse(os.path.join(out, "sweep.svg"))
            except ET.ParseError as e:
                failures.append(f"sweep.svg is not well-formed XML: {e}")
            with open(os.path.join(out, "trace.json")) as f:
                trace = json.load(f)
            if not any(e.get("ph") == "X" for e in trace["traceEvents"]):
                failures.append("trace.json has no X events")
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
            if summary["reference"]["gpus"] != 64 or "scaling_ratio" not in summary["reference"]:
                failures.append("summary.json lacks the reference point")
            if "GPUs" not in r.stdout or "biggest loss" not in r.stdout:
                failures.append(f"no table on stdout: {r.stdout!r}")

    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
