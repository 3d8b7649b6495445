#!/usr/bin/env bash
# Runs one libFuzzer target of fuzz/ for SECONDS, failing on a crash, hang, leak or broken promise.
#
#   bash tools/fuzz.sh TARGET SECONDS [libFuzzer flags...]    e.g. tools/fuzz.sh npy 600 -jobs=2
#   bash tools/fuzz.sh all SECONDS                            every target, one after another
#   bash tools/fuzz.sh list                                   the target names
#   bash tools/fuzz.sh report                                 runs so far -> tools/bench/results
#
# Builds the fuzzers (clang, ASan + UBSan + libFuzzer) in build-fuzz/ if needed, replays the
# committed regressions (fuzz/regressions/TARGET) and seeds first, then fuzzes with the seeds
# (fuzz/corpus/TARGET) and the dictionary (fuzz/dict/TARGET.dict) when there is one. Inputs the
# fuzzer finds go to build-fuzz/corpus/TARGET (kept between runs, never committed); a crashing input
# is saved under build-fuzz/artifacts/TARGET/. One line per run is appended to
# build-fuzz/fuzz_runs.jsonl (target, seconds, executions, result) for tools/bench/results.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/ccache_env.sh

targets() { (cd fuzz/corpus && ls -d */ | tr -d /); }

if [ "${1:-}" = list ]; then targets; exit 0; fi
if [ "${1:-}" = report ]; then  # sums build-fuzz/fuzz_runs.jsonl per target into one JSON
  commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- reference model tools fuzz || echo "-dirty")
  out="tools/bench/results/fuzz_$(date -u +%Y%m%d).json"
  /usr/bin/python3 - build-fuzz/fuzz_runs.jsonl "$out" "$commit" "$(clang++ --version | head -n 1)" <<'PY'
import json, os, platform, sys
runs_path, out, commit, compiler = sys.argv[1:]
runs = [json.loads(line) for line in open(runs_path) if line.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
targets = {}
for r in runs:
    t = targets.setdefault(r["target"], {"target": r["target"], "seconds": 0, "executions": 0, "runs": 0, "crashes": 0})
    t["seconds"] += r["seconds"]
    t["executions"] += r["executions"]
    t["runs"] += 1
    t["crashes"] += r["result"] != "ok"
for t in targets.values():
    t["executions_per_second"] = round(t["executions"] / max(t["seconds"], 1))
result = {"what": "libFuzzer runs of fuzz/ targets (ASan + UBSan); crashes = runs that ended in a crash, "
                  "hang or broken promise",
          "commit": commit, "command": "bash tools/fuzz.sh TARGET SECONDS (each run below)",
          "compiler": compiler + ", -fsanitize=fuzzer,address,undefined",
          "machine": {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform()},
          "targets": sorted(targets.values(), key=lambda t: t["target"]), "runs": runs}
json.dump(result, open(out, "w"), indent=2)
for t in result["targets"]:
    print(f"{t['target']:16s} {t['seconds']:6d} s {t['executions']:12d} executions {t['crashes']} crashes")
print("wrote", out)
PY
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: bash tools/fuzz.sh TARGET|all SECONDS [libFuzzer flags...]   (targets: $(targets | xargs))" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
if [ "$target" = all ]; then  # every target even after a failure; fails if any failed
  rc=0
  for t in $(targets); do bash "$0" "$t" "$seconds" "$@" || rc=1; done
  exit "$rc"
fi
if [ ! -d "fuzz/corpus/$target" ]; then
  echo "fuzz.sh: unknown target '$target' (targets: $(targets | xargs))" >&2
  exit 2
fi

build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
    -DGEMTB_BUILD_FUZZERS=ON -DGEMTB_WITH_CUDA=OFF -DGEMTB_BUILD_BENCHMARKS=OFF >/dev/null
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake --build "$build" --target "fuzz_$target" -j "$(nproc)" >"$log" 2>&1; then
  cat "$log" >&2
  echo "fuzz.sh: building fuzz_$target failed" >&2
  exit 1
fi
bin="$build/bin/fuzz_$target"

# Known inputs first: a regression that crashes again fails here, before any fuzzing.
replay=("fuzz/corpus/$target")
if [ -d "fuzz/regressions/$target" ]; then replay+=("fuzz/regressions/$target"); fi
if ! "$bin" -runs=0 "${replay[@]}" >"$log" 2>&1; then
  grep -E 'Running:|ERROR|SUMMARY|gemtb fuzz|runtime error' "$log" | head -n 20 >&2 || true
  echo "fuzz $target: FAILED replaying ${replay[*]}" >&2
  exit 1
fi
echo "fuzz $target: replayed $(find "${replay[@]}" -type f | wc -l) known inputs"

work="$build/corpus/$target"
artifacts="$build/artifacts/$target"
mkdir -p "$work" "$artifacts"
flags=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
       -artifact_prefix="$artifacts/")
if [ -f "fuzz/dict/$target.dict" ]; then flags+=(-dict="fuzz/dict/$target.dict"); fi
start=$SECONDS
rc=0
"$bin" "${flags[@]}" "$@" "$work" "fuzz/corpus/$target" >"$log" 2>&1 || rc=$?
elapsed=$((SECONDS - start))
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
if [ "$rc" -eq 0 ]; then
  result=ok
  echo "fuzz $target: $execs executions in $elapsed s, no crash"
else
  result=crash
  grep -E 'ERROR|SUMMARY|gemtb fuzz|runtime error|Test unit written' "$log" | head -n 20 || true
  echo "fuzz $target: FAILED (exit $rc) after $execs executions in $elapsed s; input in $artifacts/" >&2
fi
printf '{"target": "%s", "seconds": %d, "executions": %d, "result": "%s", "command": "%s"}\n' \
  "$target" "$elapsed" "$execs" "$result" "bash tools/fuzz.sh $target $seconds $*" >>"$build/fuzz_runs.jsonl"
exit "$rc"
