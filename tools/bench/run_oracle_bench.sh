#!/usr/bin/env bash
# Runs the CPU oracle benchmark and stores its JSON with the commit, the hardware and the command in
# tools/bench/results/. Usage: bash tools/bench/run_oracle_bench.sh [extra benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target attention_oracle_bench >/dev/null
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- reference model tools/bench || echo "-dirty")
raw=$(mktemp)
cmd="build/bin/attention_oracle_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true $*"
$cmd --benchmark_out="$raw" --benchmark_out_format=json
out="tools/bench/results/oracle_cpu_$(date -u +%Y%m%d)_${commit}.json"
/usr/bin/python3 - "$raw" "$out" "$commit" "$cmd" <<'PY'
import json, platform, subprocess, sys
raw, out, commit, cmd = sys.argv[1:]
data = json.load(open(raw))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = {}
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    kind = "forward" if "Forward" in b["name"] else "backward"
    rows[(b["label"], kind, int(b["threads"]))] = b["GFLOP/s"]
summary = []
for (label, kind, threads), g in sorted(rows.items()):
    if threads != 1:
        continue
    two = rows.get((label, kind, 2))
    summary.append({"shape": label, "pass": kind, "gflops_1_thread": round(g, 3),
                    "gflops_2_threads": round(two, 3) if two else None,
                    "speedup_2_vs_1": round(two / g, 3) if two else None})
result = {"what": "CPU attention oracle (fp64 oracle mode), effective GFLOP/s over valid pairs; median of 3",
          "commit": commit, "command": cmd,
          "hardware": {"cpu": cpu, "cores": data["context"].get("num_cpus"), "machine": platform.machine()},
          "summary": summary, "google_benchmark": data}
json.dump(result, open(out, "w"), indent=2)
for s in summary:
    print(f"{s['shape']:14s} {s['pass']:8s} 1 thread {s['gflops_1_thread']:7.3f} GFLOP/s   2 threads {s['gflops_2_threads']:7.3f}   x{s['speedup_2_vs_1']}")
print("wrote", out)
PY
rm -f "$raw"
