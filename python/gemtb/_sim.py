"""gemtb.whatif and gemtb.model: `gemtb whatif` and `gemtb model` as functions returning data."""

import csv
import io
import json
import os

from . import _core


def _table(text):
    """A CSV report as a pandas DataFrame when pandas is importable, else a list of dicts."""
    try:
        import pandas
    except ImportError:
        return list(csv.DictReader(io.StringIO(text)))
    return pandas.read_csv(io.StringIO(text))


def _set_values(path, value):
    if isinstance(value, (list, tuple)):
        values = list(value)
    else:
        values = [value]
    if not values:
        raise ValueError(f"set['{path}']: no values")
    return [v if isinstance(v, str) else json.dumps(v) for v in values]


def _path_or_json(name, value):
    """(path, None) for a path, (None, JSON text) for a dict, (None, None) for None."""
    if isinstance(value, dict):
        return None, json.dumps(value)
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value), None
    if value is not None:
        raise TypeError(f"{name}: want None, a path or a dict, got {type(value).__name__}")
    return None, None


def whatif(scenario=None, *, gpus=None, set=None, sharding_plan=None, steps=None, sensitivity=True, attribution=True,
           shapley=False, checks=True, levers=True, reference_gpus=4096, threads=0, progress=None):
    """Simulates a training job as `gemtb whatif` does and returns its report.

    scenario: None (the default GEM-scale job over 64..16,384 GPUs), a scenario file's path, or the
    scenario as a dict (relative paths in it resolve against the working folder). gpus: GPU counts to
    sweep. set: {field path: value or list of values}, each list a sweep (as --set path=v1,v2; give a
    JSON list or object as a string to set it as one value). sharding_plan: a TorchRec-style sharding
    plan, {"tables": {table: {"sharding_type", "ranks"}}}, as a dict or a JSON file's path, set as
    plan.torchrec_plan (as --sharding-plan). steps: (warmup, measured). progress: a callable taking one
    line per finished run.

    Returns {"summary": summary.json as a dict, "sweep", "ranks", "collectives": the CSV reports (pandas
    DataFrames when pandas is importable, else lists of dicts), "files": every report file's text by
    name, "console": the text the command prints}.
    """
    scenario_path, scenario_json = _path_or_json("scenario", scenario)
    plan_path, plan_json = _path_or_json("sharding_plan", sharding_plan)
    if set is not None and not isinstance(set, dict):
        raise TypeError(f"set: want a dict of field path -> values, got {type(set).__name__}")
    sets = [(path, _set_values(path, value)) for path, value in (set or {}).items()]
    if steps is not None:
        if not (isinstance(steps, (tuple, list)) and len(steps) == 2):
            raise TypeError(f"steps: want (warmup, measured), got {steps!r}")
        steps = (int(steps[0]), int(steps[1]))
    files, console = _core.whatif(scenario_path, scenario_json, os.getcwd(), plan_path, plan_json,
                                  [int(g) for g in (gpus or [])], sets, steps, sensitivity, attribution, shapley,
                                  checks, levers, int(reference_gpus), int(threads), progress)
    files = dict(files)
    report = {"summary": json.loads(files["summary.json"]), "files": files, "console": console}
    for name in ("sweep", "ranks", "collectives"):
        if f"{name}.csv" in files:
            report[name] = _table(files[f"{name}.csv"])
    return report


def model(config, *, batch=64, sparsity=0.5):
    """`gemtb model`: the config (tiny|small|gem-scale or a file) expanded into its op graph.

    Returns {"config", "batch", "sparsity", "lengths", "ops": [per op: name, region, params and its
    FLOPs and bytes for the batch], "dense_params", "sparse_params", "model" and "all" (totals: the
    model FLOPs MFU counts, and every op's), "graph": model.json as a dict}.
    """
    if not isinstance(config, (str, os.PathLike)):
        raise TypeError(f"config: want a name or a path, got {type(config).__name__}")
    result = _core.model(os.fspath(config), int(batch), float(sparsity))
    result["graph"] = json.loads(result.pop("graph_json"))
    return result
