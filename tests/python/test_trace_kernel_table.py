"""tools/lib/trace_kernel_table.py: kernel names shortened so one kernel's instances add up, launches
and milliseconds per name from a trace's device events only (microsecond times), and each later
trace's difference from the first."""

import importlib.util
import json

import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location("trace_kernel_table", ROOT / "tools" / "lib" / "trace_kernel_table.py")
ktable = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ktable)


def write_trace(path, kernels):
    events = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
              {"name": "seq2", "cat": "model", "ph": "X", "ts": 0, "dur": 9000.0, "pid": 0, "tid": 0}]
    events += [{"name": n, "cat": "device", "ph": "X", "ts": 0, "dur": us, "pid": 0, "tid": 1} for n, us in kernels]
    path.write_text(json.dumps({"displayTimeUnit": "ms", "traceEvents": events}))
    return str(path)


def test_short_names_drop_templates_parameters_and_namespaces():
    assert ktable.short_name("void gemtb::gpu::train::ln::BackwardFusedKernel<4, float, false>(float const*, int)") == \
        "BackwardFusedKernel"
    assert ktable.short_name("void a::K<b::C<1>, (x::E)2>(int)") == "K"
    assert ktable.short_name("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NNT") == "nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NNT"


def test_totals_and_differences(tmp_path):
    a = write_trace(tmp_path / "trace_a.json", [("void n::K<1>(int)", 600.0), ("void n::K<2>(int)", 300.0),
                                                ("nvjet_x", 1000.0)])
    b = write_trace(tmp_path / "trace_b.json", [("nvjet_x", 900.0), ("nvjet_x", 100.0), ("void n::S(float)", 250.0)])
    totals = ktable.kernel_totals(a)
    assert sorted(totals) == ["K", "nvjet_x"]  # the model region is not a kernel
    assert totals["K"][0] == 2 and totals["K"][1] == pytest.approx(0.9)
    assert totals["nvjet_x"] == [1, pytest.approx(1.0)]
    lines = ktable.table([a, b], top=10, prefix="p: ")
    assert lines[0] == "p: trace_a: 1.900 ms in 3 launches  trace_b: 1.250 ms in 3 launches"
    rows = {line.split()[-1]: line for line in lines[2:]}
    assert list(rows) == ["nvjet_x", "K", "S"]  # by the largest time in either trace
    assert "-0.900 ms" in rows["K"] and "+0.250 ms" in rows["S"] and "+0.000 ms" in rows["nvjet_x"]
    assert len(ktable.table([a, b], top=1)) == 3
