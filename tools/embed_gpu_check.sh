#!/usr/bin/env bash
# Builds gemtb with CUDA on the lent H200 and checks and times the embedding kernels there, in one
# device call (the same dependency carrying as tools/gpu_check.sh; gpu/README.md has the steps):
#   1. unpacks the Debian packages in .deb/ into a private prefix; builds from .deb/src.tgz (a
#      `git archive` of the commit in .deb/SOURCE) where it exists, else from the working tree;
#   2. builds gemtb and gpu_embedding_test; runs it (ctest label gpu, the embedding tests only);
#   3. gemtb check embed --cases N (every family, byte-for-byte against the oracle, plus malformed
#      KJTs);
#   4. gemtb bench embed (effective TB/s forward and backward + rowwise Adagrad, the copy ceiling,
#      the determinism run) and tools/bench/embed_peers.py on the same ids (the ratio table);
#   5. compute-sanitizer memcheck and racecheck on one small case per family;
#   with --probe, first gpu/bench/embed_forward_probe (the forward kernel at several launch
#   parameters; its lines go to summary.txt);
# everything inside --budget seconds (default 570). Writes under $OUT (8 files, the most a call
# brings back): summary.txt, build.log, run.log, check.json, bench_embed.json, peers.json,
# ratio.json, results.json.
# Usage: bash tools/embed_gpu_check.sh [--cases N] [--sanitize-cases M] [--seed S] [--reps R]
#                                      [--skip-peers] [--probe] [--budget S]
# Exit status: 0 everything ran and passed, 1 a check failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib/device_build.sh

cases=500
sanitize_cases=1
seed=1
reps=20
peers=1
budget=570
probe=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) cases=$2; shift 2 ;;
    --sanitize-cases) sanitize_cases=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --skip-peers) peers=0; shift ;;
    --probe) probe=1; shift ;;
    --budget) budget=$2; shift 2 ;;
    *) echo "embed_gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
limit() { local left=$((budget - SECONDS)); echo $(( $1 < left ? $1 : (left > 5 ? left : 5) )); }
out=${OUT:-$scratch/gemtb-embed-check}
mkdir -p "$out"
: > "$out/summary.txt"
: > "$out/run.log"
stage() { printf '== %-50s [%4d s]\n' "$1" "$SECONDS" | tee -a "$out/summary.txt" "$out/run.log"; }
status=0

# --- 1. dependencies and sources (as tools/gpu_check.sh) ------------------------------------------
stage "unpack .deb/ (and .deb/src.tgz) into the temporary folder"
unpack_device_deps embed_gpu_check
commit=$(cat .deb/SOURCE 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
{
  echo "commit: $commit (source: $([ "$srcdir" = . ] && echo "the working tree" || echo ".deb/src.tgz"))"
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__)" 2>&1 | tail -1
} 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"

# --- 2. build and the GPU tests ------------------------------------------------------------------
build=$scratch/gemtb-embed-build
stage "configure and build gemtb, gpu_embedding_test"
if ! { configure_device_build "$srcdir" "$build" &&
       cmake --build "$build" -j "$(nproc)" --target gemtb gpu_embedding_test \
         $([ $probe -eq 1 ] && echo embed_forward_probe); } > "$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -30 | tee -a "$out/summary.txt"
  stage "build FAILED (build.log)"
  exit 2
fi
gemtb=$build/bin/gemtb
if [ $probe -eq 1 ]; then
  stage "embed_forward_probe --reps $reps"
  probe_bin=$(find "$build" -name embed_forward_probe -type f -perm -u+x | head -1)
  timeout "$(limit 120)" "$probe_bin" --reps "$reps" 2>&1 | tee -a "$out/run.log" | sed 's/^/   /' | tee -a "$out/summary.txt"
fi
stage "ctest -L gpu -R gpu_embedding"
timeout "$(limit 90)" ctest --test-dir "$build" -L '^gpu$' -R 'Embedding|embedding' --output-on-failure >> "$out/run.log" 2>&1
ctest_rc=$?
[ $ctest_rc -eq 0 ] || status=1
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed" "$out/run.log" | tail -6 | tee -a "$out/summary.txt"

# --- 3. check embed ------------------------------------------------------------------------------
stage "gemtb check embed --cases $cases --seed $seed"
# What is left after the check must hold the bench, the peers and the sanitizers (83 s in all on
# the H200 with 500 cases; their limits allow more).
check_seconds=$(( budget - SECONDS - 200 )); [ $check_seconds -gt 200 ] && check_seconds=200
[ $check_seconds -lt 30 ] && check_seconds=30
timeout $((check_seconds + 40)) "$gemtb" check embed --cases "$cases" --seed "$seed" --max-seconds "$check_seconds" --json "$out/check.json" \
  > $scratch/gemtb-embed-check.log 2>&1
check_rc=$?
[ $check_rc -eq 0 ] || status=1
echo "   check embed: exit $check_rc$([ $check_rc -eq 124 ] && echo ' (killed at its time limit)')" | tee -a "$out/summary.txt"
grep -E "error:|^STOPPED" $scratch/gemtb-embed-check.log | head -3 | sed 's/^/   /' | tee -a "$out/summary.txt"
cat $scratch/gemtb-embed-check.log >> "$out/run.log"
# Families with a failure only (and the malformed-KJT family); check.json has every family.
grep -A 400 "^family" $scratch/gemtb-embed-check.log | awk '$4 != 0 || /^family|^total|malformed/' | tee -a "$out/summary.txt"
grep -A 400 "^family" $scratch/gemtb-embed-check.log | awk '/\// && $4 == 0 { n++ } END { printf "   %d families with no failing case (not listed)\n", n }' \
  | tee -a "$out/summary.txt"

# --- 4. bench and peers ----------------------------------------------------------------------------
stage "gemtb bench embed --reps $reps"
bench_dir=$scratch/gemtb-embed-bench
timeout "$(limit 120)" "$gemtb" bench embed --force --out-dir "$bench_dir" --reps "$reps" --label "$commit" \
  2>&1 | tee -a "$out/run.log" | sed 's/^/   /' | tee -a "$out/summary.txt"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -eq 0 ] || status=1
cp "$bench_dir/bench_embed.json" "$out/" 2>/dev/null
if [ $peers -eq 1 ] && [ -f "$bench_dir/bench_embed.json" ]; then
  stage "tools/bench/embed_peers.py (PyTorch on the same ids)"
  timeout "$(limit 160)" python3 tools/bench/embed_peers.py --ids-dir "$bench_dir" --ours "$bench_dir/bench_embed.json" \
    --json "$out/peers.json" --ratio "$out/ratio.json" --reps "$reps" > $scratch/gemtb-embed-peers.log 2>&1
  peers_rc=$?
  cat $scratch/gemtb-embed-peers.log >> "$out/run.log"
  [ $peers_rc -eq 0 ] || echo "   peers exited $peers_rc (run.log); the table holds what ran" | tee -a "$out/summary.txt"
  # The ratio table (best peer time / ours; > 1: ours faster), from ratio.json, partial or not.
  python3 - "$out/ratio.json" <<'PY' 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"copy ceiling {r['copy_ceiling_tbps']:.3f} TB/s; determinism {r.get('determinism')}")
print(f"{'shape':22s} {'ours fwd ms':>11s} {'TB/s':>6s} {'peer ms':>9s} {'x':>6s}   {'ours bwd ms':>11s} {'peer ms':>9s} {'x':>6s}")
for x in r["rows"]:
    f = lambda v, w, p: format(v, f"{w}.{p}f") if v is not None else "-".rjust(w)
    print(f"{x['shape']:22s} {f(x['ours_forward_ms'], 11, 4)} {f(x['ours_forward_tbps'], 6, 3)} "
          f"{f(x['peer_forward_ms'], 9, 4)} {f(x['forward_speedup'], 6, 2)}   {f(x['ours_backward_optimizer_ms'], 11, 4)} "
          f"{f(x['peer_backward_adagrad_ms'], 9, 4)} {f(x['backward_speedup'], 6, 2)}")
PY
fi

# --- 5. compute-sanitizer on small cases ---------------------------------------------------------
for tool in memcheck racecheck; do
  left=$((budget - SECONDS - 15))
  [ $left -gt 20 ] || { stage "no time left for $tool"; continue; }
  share=$left
  [ "$tool" = memcheck ] && share=$((left / 2))
  stage "compute-sanitizer --tool $tool: check embed --cases $sanitize_cases ($share s)"
  timeout "$share" compute-sanitizer --tool "$tool" --error-exitcode 99 "$gemtb" check embed \
    --cases "$sanitize_cases" --seed $((seed + 1000)) --malformed 0 --max-seconds $((share - 10)) \
    > $scratch/gemtb-embed-$tool.log 2>&1
  rc=$?
  cat $scratch/gemtb-embed-$tool.log >> "$out/run.log"
  echo "   $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $scratch/gemtb-embed-$tool.log | tr '\n' ' ')" \
    "$(grep -E '^total' $scratch/gemtb-embed-$tool.log)" | tee -a "$out/summary.txt"
  # Exit 1 with STOPPED and no FAIL line: the time limit cut the run, nothing failed (reported as such).
  if [ $rc -eq 1 ] && grep -q "^STOPPED" $scratch/gemtb-embed-$tool.log && ! grep -q "^FAIL" $scratch/gemtb-embed-$tool.log; then
    rc="partial (time limit), no failure"
  fi
  eval "${tool}_rc=\"$rc\""
  [ "$rc" = 0 ] || [ "${rc#partial}" != "$rc" ] || status=1
done

# --- 6. results ----------------------------------------------------------------------------------
python3 - "$out" "$commit" "$cases" "$seed" "$check_rc" "$ctest_rc" "${bench_rc:-}" "${memcheck_rc:-skipped}" \
  "${racecheck_rc:-skipped}" "$sanitize_cases" <<'PY'
import json, os, sys
out, commit, cases, seed, check_rc, ctest_rc, bench_rc, mem_rc, race_rc, san_cases = sys.argv[1:]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        return None
check = load("check.json")
if check:
    check = {k: v for k, v in check.items() if k != "failures"} | {"failures_listed": len(check.get("failures", []))}
result = {"what": "GPU table-batched embeddings: check embed, bench embed with PyTorch peers, sanitizers",
          "commit": commit, "check_command": f"gemtb check embed --cases {cases} --seed {seed}",
          "check_exit": check_rc, "ctest_gpu_embedding_exit": ctest_rc, "bench_exit": bench_rc,
          "check": check, "bench": load("bench_embed.json"), "ratio": load("ratio.json"),
          "sanitizers": {"command": f"compute-sanitizer --tool T --error-exitcode 99 gemtb check embed --cases {san_cases} "
                                    f"--seed {int(seed) + 1000} --malformed 0",
                         "memcheck_exit": mem_rc, "racecheck_exit": race_rc}}
json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=2)
PY
stage "done: status $status"
exit $status
