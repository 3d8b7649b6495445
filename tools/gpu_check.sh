#!/usr/bin/env bash
# Builds gemtb with CUDA on the lent H200 and checks the attention kernels there, in one call:
#   1. unpacks the Debian packages carried in .deb/ into a private prefix (that machine has CUDA,
#      CMake and ninja but none of our packages and no registry);
#   2. configures and builds gemtb and the GPU tests against that prefix;
#   3. runs the ctest tests labelled `gpu`;
#   4. runs `gemtb check attention` on --cases random cases per family (--tier small, the default),
#      or --scale-cases scale-tier batches per family (--tier scale), or both (--tier all);
#   5. runs compute-sanitizer memcheck and racecheck on --sanitize-cases small cases per family
#      (by default only with the small tier), and, with the scale tier, memcheck on
#      --scale-sanitize-cases scale-tier batches per kernel (each forward and backward kernel named
#      through --forward-kernel/--backward-kernel, plus the library's own choice);
#   6. writes under $OUT: summary.txt, build.log, ctest.log, check.log, check.json, memcheck.log,
#      racecheck.log and results.json (the record for tools/bench/results/): 8 files, the most a
#      device call brings back. The sanitizers' first report lines of each family (file:line with
#      the -lineinfo build, kernel, address) are kept in its log, in results.json and, the first
#      two, in summary.txt.
# gpu/README.md explains how to fill .deb/ and make the call. Usage, from the repository root:
#   bash tools/gpu_check.sh [--tier small|scale|all] [--cases N] [--scale-cases N] [--scale-family F]
#                           [--sanitize-cases M] [--scale-sanitize-cases M] [--seed S]
#                           [--max-length L] [--sanitize-max-length L]
#                           [--sanitizers memcheck,racecheck | --sanitizers ""] [--skip-check]
#                           [--racecheck-family F[,F...]] [--skip-ctest] [--build-dir DIR]
# --racecheck-family runs racecheck on those families only (of the 24 act/mask families), with
# --racecheck-report all: every hazard with its threads, block and shared address, besides the
# analysis's access pairs.
# Exit status: 0 when everything ran and passed, 1 when a check failed, 2 when the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib/device_build.sh

tier=small
cases=500
scale_cases=20
scale_family=all
sanitize_cases=20
scale_sanitize_cases=3
seed=1
max_length=300
sanitize_max_length=100
sanitizer_tools=default
run_check=1
run_ctest=1
racecheck_family=""
build=$scratch/gemtb-gpu-build
while [ $# -gt 0 ]; do
  case "$1" in
    --tier) tier=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --scale-cases) scale_cases=$2; shift 2 ;;
    --scale-family) scale_family=$2; shift 2 ;;
    --scale-sanitize-cases) scale_sanitize_cases=$2; shift 2 ;;
    --skip-ctest) run_ctest=0; shift ;;
    --sanitize-cases) sanitize_cases=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --max-length) max_length=$2; shift 2 ;;
    --sanitize-max-length) sanitize_max_length=$2; shift 2 ;;
    --sanitizers) sanitizer_tools=$2; shift 2 ;;
    --skip-check) run_check=0; shift ;;
    --racecheck-family) racecheck_family=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$tier" in
  small) run_small=1; run_scale=0 ;;
  scale) run_small=0; run_scale=1 ;;
  all) run_small=1; run_scale=1 ;;
  *) echo "gpu_check: --tier $tier: want small, scale or all" >&2; exit 2 ;;
esac
families_all=""
for act in softmax silu gelu_tanh gelu relu identity; do
  for mask in none causal window block; do families_all+="${families_all:+ }$act/$mask"; done
done
for fam in ${racecheck_family//,/ }; do
  case " $families_all " in
    *" $fam "*) ;;
    *) echo "gpu_check: --racecheck-family $fam: want one of: $families_all" >&2; exit 2 ;;
  esac
done
# The small tier's sanitizers run by default only when the small tier does (the scale tier has its
# own memcheck stage); --sanitizers names them explicitly.
if [ "$sanitizer_tools" = default ]; then
  if [ $run_small -eq 1 ]; then sanitizer_tools=memcheck,racecheck; else sanitizer_tools=""; fi
fi
# Every stage's timeout is also cut to what is left of a total budget, so that the script ends (and
# writes results.json) inside one device call of 600 s.
budget=${GPU_CHECK_BUDGET:-570}
limit() { local left=$((budget - SECONDS)); echo $(( $1 < left ? $1 : (left > 5 ? left : 5) )); }
out=${OUT:-$scratch/gemtb-gpu-check}  # $OUT on the device machine
mkdir -p "$out"
t0=$SECONDS
stage() { printf '== %-40s [%4d s]\n' "$1" $((SECONDS - t0)) | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

# --- 1. dependencies ------------------------------------------------------------------------------
stage "unpack .deb/ (and .deb/src.tgz) into the temporary folder"
unpack_device_deps gpu_check
if [ "$srcdir" != . ]; then
  echo "   building from .deb/src.tgz ($(cat .deb/SOURCE 2>/dev/null || echo 'commit unknown'))" | tee -a "$out/summary.txt"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -2
  c++ --version | head -1
  cmake --version | head -1
  compute-sanitizer --version 2>/dev/null | head -2
  uname -r
  nproc
} 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"

# --- 2. build -------------------------------------------------------------------------------------
stage "configure"
# -lineinfo: line tables only (the same machine code), so that the sanitizers' reports name file:line.
if ! configure_device_build "$srcdir" "$build" -DCMAKE_CUDA_FLAGS=-lineinfo > "$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  stage "configure FAILED (build.log)"
  exit 2
fi
grep -q "gemtb: CUDA ON" "$out/build.log" || { stage "configure found no nvcc"; exit 2; }
stage "build gemtb and the GPU tests"
# Other areas' tests labelled gpu (data/) need their executables too, or ctest reports them "Not Run".
gpu_test_targets="gemtb gpu_attention_test gpu_numerics_test"
for t in data_device_test; do
  ninja -C "$build" -t query "$t" > /dev/null 2>&1 && gpu_test_targets+=" $t"
done
if ! cmake --build "$build" -j "$(nproc)" --target $gpu_test_targets >> "$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -30
  stage "build FAILED (build.log)"
  exit 2
fi
gemtb=$build/bin/gemtb
status=0

# --- 3. ctest -L gpu ------------------------------------------------------------------------------
ctest_result=skipped
if [ $run_ctest -eq 1 ]; then
  stage "ctest -L gpu"
  if timeout "$(limit 120)" ctest --test-dir "$build" -L '^gpu$' --output-on-failure -j 4 > "$out/ctest.log" 2>&1; then
    ctest_result=pass
  else
    ctest_result=fail
    status=1
  fi
  grep -E "tests passed|tests failed|Skipped|\*\*\*" "$out/ctest.log" | tail -15 | tee -a "$out/summary.txt"
fi

# --- 4. gemtb check attention --------------------------------------------------------------------
check_cmd="gemtb check attention --cases $cases --seed $seed --max-length $max_length"
scale_cmd="gemtb check attention --tier scale --cases $scale_cases --seed $seed --family $scale_family"
check_rc=skipped
scale_rc=skipped
extra_rc=skipped
extra_cases=$(( cases / 5 > 0 ? cases / 5 : 1 ))
extra_families=""
for act in relu_square leaky_relu hardswish; do
  for mask in none causal window block; do extra_families+="${extra_families:+,}$act/$mask"; done
done
: > "$out/check.log"
rm -f "$out/check.json" $scratch/gemtb-check-scale.json
if [ $run_check -eq 1 ] && [ $run_scale -eq 1 ]; then
  # Scale tier first: with --tier all, a short budget cuts the small tier, which runs elsewhere too.
  stage "$scale_cmd"
  # After --time-limit no case starts on the GPU and no judgement starts; those under way finish
  # (seconds each) well inside the timeout, and the summary and JSON are written.
  scale_limit=$(limit 330)
  timeout "$scale_limit" "$gemtb" check attention --tier scale --cases "$scale_cases" --seed "$seed" \
    --family "$scale_family" \
    --time-limit $(( scale_limit > 90 ? scale_limit - 60 : scale_limit * 2 / 3 )) \
    --json $scratch/gemtb-check-scale.json >> "$out/check.log" 2>&1
  scale_rc=$?
  [ $scale_rc -eq 0 ] || status=1
  grep -A 30 "^scale tier" "$out/check.log" | tee -a "$out/summary.txt"
  echo "   scale tier exit code $scale_rc" | tee -a "$out/summary.txt"
  # Without the small tier, check.json is the scale tier's (with its failures).
  [ $run_small -eq 1 ] || cp $scratch/gemtb-check-scale.json "$out/check.json" 2>/dev/null
fi
if [ $run_check -eq 1 ] && [ $run_small -eq 1 ]; then
  stage "$check_cmd"
  timeout "$(limit 300)" "$gemtb" check attention --cases "$cases" --seed "$seed" \
    --max-length "$max_length" --json "$out/check.json" > $scratch/gemtb-check-small.log 2>&1
  check_rc=$?
  [ $check_rc -eq 0 ] || status=1
  cat $scratch/gemtb-check-small.log >> "$out/check.log"
  grep -A 40 "^small tier" $scratch/gemtb-check-small.log | tee -a "$out/summary.txt"

  # The three activations beyond the issue's six run the same code paths; a smaller check covers
  # them.
  stage "gemtb check attention (other acts, $extra_cases cases per family)"
  timeout "$(limit 100)" "$gemtb" check attention --cases "$extra_cases" --seed "$seed" \
    --max-length "$max_length" --family "$extra_families" --json $scratch/gemtb-check-extra.json \
    >> "$out/check.log" 2>&1
  extra_rc=$?
  [ $extra_rc -eq 0 ] || status=1
  tail -14 "$out/check.log" | tee -a "$out/summary.txt"
fi

# --- 5. compute-sanitizer -------------------------------------------------------------------------
# One process per family, 8 at a time, each with --verbose so that its log lists every case it
# finished even when the time limit stops it (racecheck checks every shared-memory access and is
# far slower than memcheck: on the first H200 run, memcheck took 8 s for 480 cases and racecheck did
# not finish them in 150 s as one process).
racecheck_report=""  # compute-sanitizer's default (analysis: one report per pair of accesses)
[ -n "$racecheck_family" ] && racecheck_report=all
sanitize() {  # tool family cases seconds
  local f=$scratch/gemtb-san/$1/${2//\//+}
  local report=()
  [ "$1" = racecheck ] && [ -n "$racecheck_report" ] && report=(--racecheck-report "$racecheck_report")
  timeout "$4" compute-sanitizer --tool "$1" "${report[@]}" --error-exitcode 99 "$gemtb" check attention \
    --family "$2" --cases "$3" --seed $((seed + 1000)) --max-length "$sanitize_max_length" \
    --verbose > "$f.log" 2>&1
  echo "exit code $?" >> "$f.log"
}
# compute-sanitizer's report lines: "=========" lines other than its banner, its summary and the
# empty separators (racecheck: "Race reported between ... access at ADDR in FILE:LINE", or with
# --racecheck-report all also the hazard's kernel, block, threads and shared address).
report_lines() { grep -E '^=========' "$1" | grep -vE 'COMPUTE-SANITIZER|SUMMARY|^=========[[:space:]]*$'; }
# A family's log with its report lines cut to the first 40 (racecheck's can run to hundreds).
cut_reports() {
  awk '/^=========/ && !/COMPUTE-SANITIZER|SUMMARY/ {
         if ($0 ~ /^=========[[:space:]]*$/) { if (n < 40) print; next }
         if (++n <= 40) print
         next
       }
       { print }
       END { if (n > 40) printf "[%d more report lines not kept]\n", n - 40 }' "$1"
}
export -f sanitize
export gemtb seed sanitize_max_length racecheck_report
for tool in ${sanitizer_tools//,/ }; do
  [ $((budget - SECONDS)) -gt 30 ] || { stage "no time left for $tool"; continue; }
  # Three waves of 8 families share what is left (the last tool gets the rest).
  share=$(( (budget - SECONDS - 10) / 6 ))
  [ "$tool" = "${sanitizer_tools##*,}" ] && share=$(( (budget - SECONDS - 10) / 3 ))
  fams=$families_all
  title="$tool"
  if [ "$tool" = racecheck ] && [ -n "$racecheck_family" ]; then
    fams=${racecheck_family//,/ }
    title="$tool --racecheck-report all"
  fi
  stage "compute-sanitizer --tool $title ($sanitize_cases cases per family, $share s per family)"
  rm -rf "$scratch/gemtb-san/$tool" && mkdir -p "$scratch/gemtb-san/$tool"
  printf '%s\n' $fams | xargs -P 8 -I{} bash -c "sanitize $tool {} $sanitize_cases $share"
  : > "$out/$tool.log"
  for fam in $fams; do
    f=$scratch/gemtb-san/$tool/${fam//\//+}.log
    { echo "### $fam"; cut_reports "$f"; } >> "$out/$tool.log"
    done_cases=$(grep -cE "^(pass|FAIL|EXCUSED) " "$f")
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$f" | tr '\n' ' ')
    rc=$(tail -1 "$f")
    printf '   %-18s %3s cases  %s (%s)\n' "$fam" "$done_cases" "${summary:-no summary}" "$rc" | tee -a "$out/summary.txt"
    report_lines "$f" | head -2 | sed 's/^=========/     /' | tee -a "$out/summary.txt"
    [ "$rc" = "exit code 0" ] || status=1
  done
done

# --- 5b. memcheck on scale-tier batches, per kernel ------------------------------------------------
# Each job names one kernel (cases it cannot run are counted as skipped, e.g. D = 64 for the Hopper
# kernels) on a family and lengths where that kernel applies; the last job leaves the choice to the
# library. One process per job, all at once, each with --verbose so its log lists the cases done.
scale_jobs=(
  "fwd-mma_sync|--family silu/causal --forward-kernel mma_sync"
  "fwd-hopper_ws|--family softmax/window --forward-kernel hopper_ws"
  "fwd-hopper_tma|--family softmax/none --forward-kernel hopper_tma"
  "fwd-hopper_split|--family silu/none --forward-kernel hopper_split --max-length 64"
  "fwd-hopper_small|--family gelu_tanh/block --forward-kernel hopper_small --max-length 32"
  "bwd-hopper_recompute|--family softmax/causal --backward-kernel hopper_recompute"
  "bwd-hopper_stored_ds|--family relu/window --backward-kernel hopper_stored_ds --pairing self"
  "bwd-hopper_fused_dq|--family identity/none --backward-kernel hopper_fused_dq --pairing broadcast_q --max-length 32"
  "auto|--family gelu/block,softmax/causal"
)
scale_memcheck() {  # "name|args" seconds
  local name=${1%%|*} args=${1#*|}
  local f=$scratch/gemtb-san/scale-memcheck/$name
  # shellcheck disable=SC2086  # args are words
  timeout "$2" compute-sanitizer --tool memcheck --error-exitcode 99 "$gemtb" check attention --tier scale \
    --cases "$scale_sanitize_cases" --seed $((seed + 1000)) --verbose $args > "$f.log" 2>&1
  echo "exit code $?" >> "$f.log"
}
export -f scale_memcheck
export scale_sanitize_cases
if [ $run_scale -eq 1 ] && [ "$scale_sanitize_cases" -gt 0 ]; then
  share=$(( budget - SECONDS - 15 ))
  if [ $share -gt 20 ]; then
    stage "compute-sanitizer memcheck, scale tier ($scale_sanitize_cases cases per kernel, $share s)"
    rm -rf $scratch/gemtb-san/scale-memcheck && mkdir -p $scratch/gemtb-san/scale-memcheck
    printf '%s\n' "${scale_jobs[@]}" | xargs -P ${#scale_jobs[@]} -I{} bash -c "scale_memcheck '{}' $share"
    for job in "${scale_jobs[@]}"; do
      name=${job%%|*}
      f=$scratch/gemtb-san/scale-memcheck/$name.log
      { echo "### scale tier memcheck $name: ${job#*|}"; cat "$f"; } >> "$out/memcheck.log"
      done_cases=$(grep -cE "^(pass|FAIL|EXCUSED) " "$f")
      skipped=$(grep -cE "^skipped " "$f")
      summary=$(grep -E "ERROR SUMMARY" "$f" | tr '\n' ' ')
      rc=$(tail -1 "$f")
      printf '   %-22s %2s cases %2s skipped  %s (%s)\n' "$name" "$done_cases" "$skipped" "${summary:-no summary}" "$rc" | tee -a "$out/summary.txt"
      [ "$rc" = "exit code 0" ] || status=1
    done
  else
    stage "no time left for the scale tier's memcheck"
  fi
fi

# --- 6. results -----------------------------------------------------------------------------------
commit=$(cat .deb/SOURCE 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)
hardware=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
export tier scale_cmd scale_rc scale_sanitize_cases racecheck_report
python3 - "$out" "$commit" "$hardware" "$check_cmd" "$check_rc" "$ctest_result" \
  "$sanitizer_tools" "$sanitize_cases" \
  "$sanitize_max_length" "$seed" "$extra_rc" "$extra_cases" "$extra_families" "$max_length" <<'EOF'
import json, os, sys
(out, commit, hardware, cmd, check_rc, ctest, tools, san_cases, san_len, seed, extra_rc,
 extra_cases, extra_families, max_length) = sys.argv[1:]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def sanitizer(tool):
    fams = {}
    folder = os.path.join("$scratch/gemtb-san", tool)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        lines = open(os.path.join(folder, name), errors="replace").read().splitlines()
        fam = name[:-4].replace("+", "/")
        # The first 40 report lines (report_lines in the script: where each hazard or error is).
        reports = [l.strip("= ").strip() for l in lines
                   if l.startswith("=========") and "COMPUTE-SANITIZER" not in l and "SUMMARY" not in l
                   and l.strip("= ")][:40]
        fams[fam] = {"cases_done": sum(1 for l in lines if l.startswith(("pass ", "FAIL ", "EXCUSED "))),
                     "failed_cases": sum(1 for l in lines if l.startswith("FAIL ")),
                     "summary": [l.strip("= ").strip() for l in lines if "SUMMARY" in l],
                     "first_reports": reports,
                     "exit": lines[-1] if lines else "no log"}
    report = os.environ["racecheck_report"] if tool == "racecheck" else ""
    report = f"--racecheck-report {report} " if report else ""
    return {"command": f"compute-sanitizer --tool {tool} {report}--error-exitcode 99 gemtb check attention "
                       f"--family F --cases {san_cases} --seed {int(seed) + 1000} --max-length {san_len} "
                       f"--verbose (one process per family F, 8 at a time)",
            "families": fams}
check = load("check.json")
def scale_memcheck():
    jobs = {}
    folder = "$scratch/gemtb-san/scale-memcheck"
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        lines = open(os.path.join(folder, name), errors="replace").read().splitlines()
        jobs[name[:-4]] = {"cases_done": sum(1 for l in lines if l.startswith(("pass ", "FAIL ", "EXCUSED "))),
                           "skipped_kernel_cannot_run": sum(1 for l in lines if l.startswith("skipped ")),
                           "failed_cases": sum(1 for l in lines if l.startswith("FAIL ")),
                           "summary": [l.strip("= ").strip() for l in lines if "SUMMARY" in l],
                           "exit": lines[-1] if lines else "no log"}
    return jobs
try:
    scale = json.load(open("$scratch/gemtb-check-scale.json"))
except (OSError, ValueError):
    scale = None
result = {
    "what": "gemtb check attention on the CUDA attention kernels (issue 6: correct first)",
    "commit": commit, "hardware": hardware, "command": cmd, "exit_code": check_rc,
    "ctest_gpu": ctest, "check": check,
    "sanitizers": {t: sanitizer(t) for t in tools.split(",") if t},
}
try:
    extra = json.load(open("$scratch/gemtb-check-extra.json"))
except (OSError, ValueError):
    extra = None
result["tier"] = os.environ["tier"]
if scale is not None or os.environ["scale_rc"] != "skipped":
    slim = {k: v for k, v in scale.items() if k != "failures"} if scale else None
    if slim:
        slim["failures_listed"] = len(scale.get("failures", []))
    result["scale_check"] = {"command": os.environ["scale_cmd"], "exit_code": os.environ["scale_rc"],
                             "result": slim}
    result["scale_memcheck"] = {
        "command": "compute-sanitizer --tool memcheck --error-exitcode 99 gemtb check attention --tier scale "
                   f"--cases {os.environ['scale_sanitize_cases']} --seed {int(seed) + 1000} --verbose "
                   "ARGS (one process per kernel job, memcheck.log lists each job's ARGS)",
        "jobs": scale_memcheck()}
result["check_other_acts"] = {
    "command": f"gemtb check attention --cases {extra_cases} --seed {seed} --max-length {max_length} "
               f"--family {extra_families}",
    "exit_code": extra_rc, "result": extra}
for key, run in (("check", check), ("check_other_acts", extra)):
    if not run:
        continue
    # The failure list can be long; check.json and check.log keep it.
    slim = {k: v for k, v in run.items() if k != "failures"}
    slim["failures_listed"] = len(run.get("failures", []))
    if key == "check":
        result["check"] = slim
    else:
        result["check_other_acts"]["result"] = slim
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(result, f, indent=2)
EOF
stage "done: status $status (results.json)"
exit $status
