"""gemtb.whatif, gemtb.model and gemtb.data.generate: what `gemtb whatif|model|data generate` give."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import gemtb
from conftest import same_bytes


def test_whatif_report_matches_cli_files(cli, tmp_path, request):
    binary = request.config.getoption("--gemtb-cli")
    out = tmp_path / "whatif"
    args = ["--gpus", "8,16", "--no-sensitivity", "--no-checks", "--quiet", "--out-dir", out]
    r = subprocess.run([binary, "whatif", *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = []
    got = gemtb.whatif(gpus=[8, 16], sensitivity=False, checks=False, progress=lines.append)
    assert lines, "progress saw no run"
    assert got["summary"] == json.loads((out / "summary.json").read_text())
    # The reports hold no wall times except perf.json.
    for name, text in got["files"].items():
        if name != "perf.json":
            assert text == (out / name).read_text(), name
    sweep = got["sweep"]
    gpus = list(sweep["gpus"]) if hasattr(sweep, "columns") else [int(row["gpus"]) for row in sweep]
    assert gpus == [8, 16]


def test_whatif_set_sweeps_a_field():
    got = gemtb.whatif(gpus=[8], set={"noise.step_sigma": [0, 0.06]}, sensitivity=False, checks=False,
                       attribution=False, levers=False)
    sweep = got["sweep"]
    assert len(sweep) == 2


def test_whatif_tables_without_pandas_are_lists_of_dicts(monkeypatch):
    kwargs = dict(gpus=[8], sensitivity=False, checks=False, attribution=False, levers=False)
    with_pandas = gemtb.whatif(**kwargs)["sweep"]
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    rows = gemtb.whatif(**kwargs)["sweep"]
    assert isinstance(rows, list) and rows[0]["gpus"] == "8"
    if hasattr(with_pandas, "columns"):
        assert list(with_pandas.columns) == list(rows[0])


def test_whatif_scenario_as_dict_equals_its_file(monkeypatch):
    path = pathlib.Path(gemtb.__file__).parent / "data" / "sim" / "scenarios" / "gem-default.json"
    monkeypatch.chdir(path.parent)  # the dict's relative paths resolve against the working folder
    kwargs = dict(gpus=[8], sensitivity=False, checks=False, attribution=False, levers=False)
    from_file = gemtb.whatif(str(path), **kwargs)
    from_dict = gemtb.whatif(json.loads(path.read_text()), **kwargs)
    assert from_file["files"]["sweep.csv"] == from_dict["files"]["sweep.csv"]


PLAN = {"tables": {"ad_feat_3": {"sharding_type": "table_wise", "ranks": [1]},
                   "user_feat_1": {"sharding_type": "column_wise", "ranks": [2, 5]}}}


def test_whatif_sharding_plan_matches_cli(tmp_path, request):
    binary = request.config.getoption("--gemtb-cli")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(PLAN))
    want = {}
    for name, extra in (("plan", ["--sharding-plan", plan_path]), ("none", [])):
        out = tmp_path / name
        args = ["--gpus", "8,16", "--no-sensitivity", "--no-checks", "--quiet", "--out-dir", out, *extra]
        r = subprocess.run([binary, "whatif", *map(str, args)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        want[name] = (out / "summary.json").read_bytes()
    assert want["plan"] != want["none"], "the plan changed nothing: the comparison below would prove nothing"
    kwargs = dict(gpus=[8, 16], sensitivity=False, checks=False)
    for plan in (PLAN, str(plan_path), plan_path):
        got = gemtb.whatif(sharding_plan=plan, **kwargs)
        assert got["files"]["summary.json"].encode() == want["plan"], type(plan).__name__


@pytest.mark.parametrize("plan,message", [
    ({"tables": {"nope": {"sharding_type": "table_wise", "ranks": [0]}}},
     "plan.torchrec_plan.tables.nope: is not a table of the model"),
    ({"tables": {"ad_feat_3": {"sharding_type": "TW", "ranks": [0]}}},
     "plan.torchrec_plan.tables.ad_feat_3.sharding_type: \"TW\" is not one of"),
    ({"tables": {"ad_feat_3": {"sharding_type": "table_wise", "ranks": [8]}}},
     r"ranks\[0\]: 8 is not a rank of the sharding group of 8"),
    ({"tablez": {}}, "plan.torchrec_plan.tablez: unknown key"),
    ("no-such-plan.json", "no-such-plan.json: cannot open"),
])
def test_whatif_bad_sharding_plan_names_it(plan, message):
    with pytest.raises(ValueError, match="^sharding_plan: .*" + message):
        gemtb.whatif(gpus=[8], sharding_plan=plan, sensitivity=False, checks=False, attribution=False, levers=False)


def test_whatif_sharding_plan_not_json(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{\"tables\": ")
    with pytest.raises(ValueError, match="^sharding_plan: .*plan.json is not valid JSON"):
        gemtb.whatif(gpus=[8], sharding_plan=path, sensitivity=False, checks=False, attribution=False, levers=False)


def test_model_totals_match_cli(request):
    binary = request.config.getoption("--gemtb-cli")
    r = subprocess.run([binary, "model", "--config", "tiny", "--batch", "8"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = gemtb.model("tiny", batch=8)
    dense = next(line for line in r.stdout.splitlines() if line.startswith("dense params"))
    assert int(dense.split()[2]) == m["dense_params"]
    assert len(m["ops"]) == len(m["graph"]["ops"]) and m["config"] == "tiny"
    assert m["model"]["flops_fwd"] > 0 and m["all"]["flops_fwd"] >= m["model"]["flops_fwd"]


def test_data_generate_bytes_match_cli(cli, tmp_path):
    want = cli(["data", "generate", "--config", "tiny", "--samples", "16", "--first", "5", "--seed", "3"],
               tmp_path / "out")
    got = gemtb.data.generate("tiny", samples=16, first=5, seed=3)
    assert sorted(n for n in got if n != "meta") == sorted(want)
    for name in want:
        assert same_bytes(want[name], got[name]), name
    assert got["meta"] == json.loads((tmp_path / "out" / "meta.json").read_text())


def test_data_generate_splits_give_the_same_samples():
    whole = gemtb.data.generate("tiny", samples=8, seed=2)
    tail = gemtb.data.generate("tiny", samples=4, first=4, seed=2, threads=1)
    assert np.array_equal(whole["dense"][4:], tail["dense"])
    assert np.array_equal(whole["probs"][4:], tail["probs"])


@pytest.mark.parametrize("call,name", [
    (lambda: gemtb.model("no-such-config"), "no-such-config"),
    (lambda: gemtb.model("tiny", batch=0), "batch"),
    (lambda: gemtb.data.generate("tiny", samples=0), "samples"),
    (lambda: gemtb.whatif(gpus=[0]), "gpus"),
    (lambda: gemtb.whatif(gpus=[8], steps=(0, 0)), "steps"),
    (lambda: gemtb.whatif(gpus=[8], set={"nosuch.field": 1}, sensitivity=False, checks=False), "nosuch: unknown key"),
])
def test_bad_values_raise_value_error_naming_them(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError, match="scenario"):
        gemtb.whatif(scenario=3)
    with pytest.raises(TypeError, match="set"):
        gemtb.whatif(set=["a=1"])
    with pytest.raises(TypeError, match="sharding_plan"):
        gemtb.whatif(sharding_plan=[PLAN])
    with pytest.raises(TypeError, match="config"):
        gemtb.model(None)
