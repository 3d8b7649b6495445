#!/usr/bin/env bash
# Runs a CPU benchmark (Google Benchmark) and stores its JSON with the commit, the hardware and the
# command in tools/bench/results/, plus a summary: the rate counter for 1 and 2 threads and their ratio.
# Usage: bash tools/bench/run_cpu_bench.sh attention_oracle_bench|embedding_oracle_bench [benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:?usage: run_cpu_bench.sh BENCHMARK [flags]}
shift
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target "$bench" >/dev/null
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- reference model tools/bench || echo "-dirty")
raw=$(mktemp)
cmd="build/bin/$bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true $*"
$cmd --benchmark_out="$raw" --benchmark_out_format=json
mkdir -p tools/bench/results
out="tools/bench/results/${bench}_$(date -u +%Y%m%d)_${commit}.json"
/usr/bin/python3 - "$raw" "$out" "$commit" "$cmd" "$bench" <<'PY'
import json, platform, sys
raw, out, commit, cmd, bench = sys.argv[1:]
data = json.load(open(raw))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = {}
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    rate = next(k for k in ("GFLOP/s", "GB/s") if k in b)
    case = b["run_name"].split("/")[0] + (" " + b["label"] if b.get("label") else "")
    rows[(case, rate, int(b["threads"]))] = b[rate]
summary = []
for (case, rate, threads), v in sorted(rows.items()):
    if threads != 1:
        continue
    two = rows.get((case, rate, 2))
    summary.append({"case": case, "unit": rate, "1_thread": round(v, 3), "2_threads": round(two, 3) if two else None,
                    "speedup_2_vs_1": round(two / v, 3) if two else None})
result = {"benchmark": bench, "what": "median of 3 repetitions; rate counters as defined in the benchmark source",
          "commit": commit, "command": cmd,
          "hardware": {"cpu": cpu, "cores": data["context"].get("num_cpus"), "machine": platform.machine()},
          "summary": summary, "google_benchmark": data}
json.dump(result, open(out, "w"), indent=2)
for s in summary:
    print(f"{s['case']:40s} 1 thread {s['1_thread']:8.3f} {s['unit']}   2 threads {s['2_threads']}   x{s['speedup_2_vs_1']}")
print("wrote", out)
PY
rm -f "$raw"
