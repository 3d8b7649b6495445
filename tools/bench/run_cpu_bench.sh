#!/usr/bin/env bash
# Runs a CPU benchmark (Google Benchmark) and stores its JSON with the commit, the hardware and the
# command in tools/bench/results/, plus a summary: for the oracle benchmarks the rate counter for 1
# and 2 threads and their ratio; for sim_step_bench, per world size the CPU and wall seconds per
# simulated step against the speed bounds (<= 0.25 s at 4,096 ranks, <= 1 s at 16,384).
# Usage: bash tools/bench/run_cpu_bench.sh attention_oracle_bench|embedding_oracle_bench|sim_step_bench [flags]
#   e.g. a smoke run: bash tools/bench/run_cpu_bench.sh sim_step_bench --benchmark_filter='SimStep/64/' --benchmark_repetitions=1
# Later flags override the default --benchmark_repetitions=3. GEMTB_BUILD_DIR picks the build folder
# (default build). For a copy of the sources without git (tools/bench/sim_speed_on_device.sh):
# GEMTB_COMMIT names the commit, GEMTB_RESULTS_DIR where the JSON goes (default tools/bench/results),
# GEMTB_CMAKE_ARGS adds configure arguments, GEMTB_BENCH_PREFIX runs the benchmark under a command
# (e.g. "taskset -c 3": one pinned core).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:?usage: run_cpu_bench.sh BENCHMARK [flags]}
shift
build=${GEMTB_BUILD_DIR:-build}
# shellcheck disable=SC2086  # GEMTB_CMAKE_ARGS is a list of arguments
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEMTB_BUILD_BENCHMARKS=ON ${GEMTB_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" --target "$bench" >/dev/null
if [ -n "${GEMTB_COMMIT:-}" ]; then
  commit=$GEMTB_COMMIT
else
  commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- reference model sim tools/bench || echo "-dirty")
fi
raw=$(mktemp)
cmd="${GEMTB_BENCH_PREFIX:+$GEMTB_BENCH_PREFIX }$build/bin/$bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true $*"
$cmd --benchmark_out="$raw" --benchmark_out_format=json
if [ ! -s "$raw" ]; then
  rm -f "$raw"
  echo "run_cpu_bench.sh: no benchmark ran (check --benchmark_filter); nothing written" >&2
  exit 1
fi
results=${GEMTB_RESULTS_DIR:-tools/bench/results}
mkdir -p "$results"
out="$results/${bench}_$(date -u +%Y%m%d)_${commit}.json"
/usr/bin/python3 - "$raw" "$out" "$commit" "$cmd" "$bench" <<'PY'
import json, platform, sys
raw, out, commit, cmd, bench = sys.argv[1:]
data = json.load(open(raw))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
# Medians when there were repetitions, else the single runs.
runs = [b for b in data["benchmarks"] if b.get("aggregate_name") == "median"] or \
       [b for b in data["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
reps = max((b.get("repetitions", 1) for b in data["benchmarks"]), default=1)
summary = []
if bench == "sim_step_bench":
    bound = {4096: 0.25, 16384: 1.0}  # CPU seconds per simulated step, one core
    for b in runs:
        if b.get("error_occurred"):
            summary.append({"case": b["run_name"], "error": b.get("error_message", "?")})
            continue
        world = int(b["run_name"].split("/")[1])
        row = {"case": b["run_name"], "ranks": world}
        for k in ("cpu_s_per_step", "s_per_step", "events_per_s", "events_per_step", "step_ms", "sr", "imbalance"):
            if k in b:
                row[k] = b[k]
        if world in bound:
            row["bound_cpu_s_per_step"] = bound[world]
            row["within_bound"] = b["cpu_s_per_step"] <= bound[world]
        summary.append(row)
else:
    rows = {}
    for b in runs:
        rate = next(k for k in ("GFLOP/s", "GB/s") if k in b)
        case = b["run_name"].split("/")[0] + (" " + b["label"] if b.get("label") else "")
        rows[(case, rate, int(b["threads"]))] = b[rate]
    for (case, rate, threads), v in sorted(rows.items()):
        if threads != 1:
            continue
        two = rows.get((case, rate, 2))
        summary.append({"case": case, "unit": rate, "1_thread": round(v, 3), "2_threads": round(two, 3) if two else None,
                        "speedup_2_vs_1": round(two / v, 3) if two else None})
what = (f"median of {reps} repetitions" if reps > 1 else "one repetition") + \
       "; counters as defined in the benchmark source"
result = {"benchmark": bench, "what": what,
          "commit": commit, "command": cmd,
          "hardware": {"cpu": cpu, "cores": data["context"].get("num_cpus"), "machine": platform.machine(),
                       "caches": data["context"].get("caches"),
                       "load_avg": data["context"].get("load_avg")},  # the machine may be shared
          "summary": summary, "google_benchmark": data}
json.dump(result, open(out, "w"), indent=2)
for s in summary:
    if "error" in s:
        print(f"{s['case']:24s} error: {s['error']}")
    elif bench == "sim_step_bench":
        verdict = "" if "within_bound" not in s else (" (bound %g s: %s)" % (s["bound_cpu_s_per_step"], "ok" if s["within_bound"] else "OVER"))
        print(f"{s['case']:24s} {s['cpu_s_per_step']:.4f} CPU s/step, {s['s_per_step']:.4f} wall s/step{verdict}")
    else:
        print(f"{s['case']:40s} 1 thread {s['1_thread']:8.3f} {s['unit']}   2 threads {s['2_threads']}   x{s['speedup_2_vs_1']}")
print("wrote", out)
PY
rm -f "$raw"
