#!/usr/bin/env bash
# One device call on the lent H200: builds gemtb from .deb/src.tgz (a `git archive` of the commit in
# .deb/SOURCE, never the live tree), times the attention kernels with `gemtb bench attention`, times
# the peers (.peers/torch_peers.py, a copy of ../shared/peers/torch_peers.py) on the same lengths in
# the same call, writes the ratio table (ours / best peer, per case, fwd and fwd+bwd), and runs
# `gemtb check attention --tier bench` (each benchmark case on the same shapes, judged by the oracle
# on sampled sequences) and `gemtb check attention` (both right after the bench, so that a short
# budget cuts the peers, not the checks). Every stage is cut to what is left of a total budget, so the script ends and writes its
# results inside one call of 600 s.
#
# Here, before the call (gpu/README.md has the details):
#   git archive --format=tar.gz -o .deb/src.tgz HEAD && git rev-parse HEAD > .deb/SOURCE
#   mkdir -p .peers && cp ../shared/peers/torch_peers.py .peers/
# Then run(command: "bash tools/bench_gpu.sh [options]", carry: [".deb", ".peers"], timeout_s: 600).
#
# Options:
#   --check-cases N     cases per family for gemtb check attention (0 = skip; default 500)
#   --oracle-bench 0|1  check the bench cases (--cases) against the oracle on sampled sequences,
#                       `gemtb check attention --tier bench` (default 1); pass/fail per case joins
#                       check.json under "bench_oracle"
#   --reps N            timed runs per case (default 15); --warmup N (default 3)
#   --cases a,b         bench and peer cases (default: all eight)
#   --tanh-approx-cases a,b  also time these cases with `--tanh-approx` (silu and gelu_tanh through
#                       the hardware tanh); their rows join bench_attention.json as
#                       "<case> (tanh.approx)" and the ratio table compares them with every peer,
#                       Meta's fast_gelu included (exact rows: with the exact-act peers only)
#   --tanh-check-cases N  with --tanh-approx-cases: also `gemtb check attention --tanh-approx` on the
#                       silu and gelu_tanh families, N cases each (default 100; 0 skips); its JSON
#                       joins check.json under "tanh_approx_check"
#   --settle S          seconds the GPU idles before each of our bench's cases (default 0;
#                       gemtb bench attention --settle-s). Either way run.log holds nvidia-smi's
#                       clocks, temperature, power and throttle reasons every 500 ms of our bench
#   --variants K1,K2    also time these forward kernels alone (forward only; mma_sync, hopper_ws,
#                       hopper_tma, hopper_split, hopper_small), for the notes
#   --peer-timeout S    seconds for the peer script at most (default 300)
#   --forward-kernel K  the bench's forward kernel (gpu/attention/kernel_policy.h names; default auto,
#                       the library's choice per case); the check always runs the library's choice
#   --base-src F        also build the `git archive` F (its commit in .deb/BASE; e.g. the commit this
#                       branch started from) and time it in the same call, alternating with ours:
#                       --rounds N rounds of (base, ours), each round's table in summary.txt; the last
#                       round's base results are bench_attention_base.json and ratio_base.json (then
#                       lengths.tgz and build.log are not written: the logs go to run.log)
#   --rounds N          rounds of the base/ours alternation (default 1; with --base-src)
#   --ncu a,b           also profile the forward kernel of these cases once with Nsight Compute
#                       (speed of light, warp stall reasons; clocks left as they are)
#   --peer-timeout 0 skips the torch peers (with --meta-timeout 0 too, there is no ratio table).
#   --meta-cases a,b    the cases Meta's Triton GDPA runs (default: --cases; it has only the GDPA ones)
#   --meta-timeout S    seconds for Meta's Triton GDPA at most (default 240; 0 skips it; it needs
#                       ~200 s for the four GDPA cases, mostly Triton's autotuning compiles). It runs
#                       when .peers/meta_gdpa/gdpa/ holds that library's gdpa/ folder (fetched from
#                       facebookresearch/ads_model_kernel_library, commit in .peers/meta_gdpa/COMMIT;
#                       never committed here): tools/bench/meta_gdpa_peer.py times it on the same
#                       lengths, and its rows join peers.json and the ratio table.
# Writes under $OUT (8 files, the most a call brings back): summary.txt (with the ratio table),
# build.log, run.log, bench_attention.json, peers.json, ratio.json, check.json, lengths.tgz (with
# --base-src: bench_attention_base.json and ratio_base.json instead of build.log and lengths.tgz).
# Exit status: 0 all ran and the check passed, 1 something failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib/device_build.sh
repo=$PWD

check_cases=500
oracle_bench=1
reps=15
warmup=3
cases=""
variants=""
peer_timeout=300
meta_timeout=240
meta_cases=""
forward_kernel=auto
ncu_cases=""
tanh_cases=""
tanh_check_cases=100
settle=0
base_src=""
rounds=1
while [ $# -gt 0 ]; do
  case "$1" in
    --check-cases) check_cases=$2; shift 2 ;;
    --oracle-bench) oracle_bench=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --peer-timeout) peer_timeout=$2; shift 2 ;;
    --meta-timeout) meta_timeout=$2; shift 2 ;;
    --meta-cases) meta_cases=$2; shift 2 ;;
    --forward-kernel) forward_kernel=$2; shift 2 ;;
    --ncu) ncu_cases=$2; shift 2 ;;
    --tanh-approx-cases) tanh_cases=$2; shift 2 ;;
    --tanh-check-cases) tanh_check_cases=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --base-src) base_src=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "bench_gpu: unknown argument $1" >&2; exit 2 ;;
  esac
done
budget=${BENCH_GPU_BUDGET:-575}
limit() { local left=$((budget - SECONDS)); echo $(( $1 < left ? $1 : (left > 5 ? left : 5) )); }
out=${OUT:-$scratch/gemtb-bench-gpu}
mkdir -p "$out"
: > "$out/summary.txt"
: > "$out/run.log"
stage() { printf '== %-50s [%4d s]\n' "$1" "$SECONDS" | tee -a "$out/summary.txt" "$out/run.log"; }
status=0

# --- 1. sources and dependencies ------------------------------------------------------------------
stage "unpack .deb/ and .deb/src.tgz"
[ -f .deb/src.tgz ] || { echo "bench_gpu: .deb/src.tgz missing (see the header)" | tee -a "$out/summary.txt"; exit 2; }
commit=$(cat .deb/SOURCE 2>/dev/null || echo unknown)
build=$scratch/gemtb-build
unpack_device_deps bench_gpu require-src
src=$srcdir
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
{
  echo "commit: $commit"
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
  nvcc --version | tail -1
} 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"

# --- 2. build (the machine's g++ warns where CI's does not: drop -Werror here, CI keeps it) -------
build_log=$out/build.log
[ -n "$base_src" ] && build_log=$out/run.log
build_gemtb() {  # source dir, build dir
  configure_device_build "$1" "$2" && cmake --build "$2" -j "$(nproc)" --target gemtb
}
stage "configure and build gemtb"
if ! build_gemtb "$src" "$build" >> "$build_log" 2>&1; then
  grep -E "error|FAILED" "$build_log" | head -30 | tee -a "$out/summary.txt"
  stage "build FAILED (build log)"
  exit 2
fi
gemtb=$build/bin/gemtb
base_gemtb=""
if [ -n "$base_src" ]; then
  base_commit=$(cat .deb/BASE 2>/dev/null || echo unknown)
  stage "configure and build the base ($base_commit) from $base_src"
  mkdir -p $scratch/gemtb-base-src
  tar -xzf "$base_src" -C $scratch/gemtb-base-src
  if ! build_gemtb $scratch/gemtb-base-src $scratch/gemtb-base-build >> "$build_log" 2>&1; then
    grep -E "error|FAILED" "$build_log" | head -30 | tee -a "$out/summary.txt"
    stage "base build FAILED (build log)"
    exit 2
  fi
  base_gemtb=$scratch/gemtb-base-build/bin/gemtb
fi
# The Hopper kernel's SASS must hold warpgroup MMAs (HGMMA), not only HMMA.
obj=$(find "$build" -name 'forward_hopper_bf16.cu.o' | head -1)
[ -n "$obj" ] && echo "   HGMMA instructions in forward_hopper_bf16: $(cuobjdump --dump-sass "$obj" 2>/dev/null | grep -c HGMMA)" | tee -a "$out/summary.txt"

# --- 3. gemtb bench attention ---------------------------------------------------------------------
lengths=$scratch/gemtb-lengths
mkdir -p "$lengths"
case_args=()
[ -n "$cases" ] && case_args=(--cases "$cases")
for v in ${variants//,/ }; do
  stage "bench: forward kernel $v alone (forward only)"
  timeout "$(limit 120)" "$gemtb" bench attention --force --out-dir "$scratch/gemtb-variant-$v" --forward-kernel "$v" \
    --forward-only --no-compare --reps "$reps" --warmup "$warmup" "${case_args[@]}" --label "$commit $v" \
    2>&1 | tee -a "$out/run.log" | sed 's/^/   /' | tee -a "$out/summary.txt"
done
# The base and ours alternate, (base, ours) per round; ours' last run is the main bench below, and
# the JSON and ratio tables keep each side's last round.
bench_table() {  # JSON -> one line per case: name, kernels, fwd and fwd+bwd median ms
  python3 - "$1" <<'EOF'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    fb = c.get("fwdbwd") or {}
    print("%-24s %-34s fwd %8.4f ms  fwd+bwd %8.4f ms" % (c["case"], "%s / %s" % (c.get("forward_kernel"), c.get("backward_kernel")),
          c["fwd"]["median_ms"], fb.get("median_ms", float("nan"))))
EOF
}
if [ -n "$base_gemtb" ]; then
  for r in $(seq 1 "$rounds"); do
    stage "bench round $r: base $base_commit"
    timeout "$(limit 150)" "$base_gemtb" bench attention --out-dir $scratch/gemtb-base-r$r --forward-kernel auto \
      --reps "$reps" --warmup "$warmup" --settle-s "$settle" "${case_args[@]}" --label "$base_commit" >> "$out/run.log" 2>&1 ||
      { status=1; stage "base bench FAILED"; }
    bench_table $scratch/gemtb-base-r$r/bench_attention.json 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"
    [ "$r" -lt "$rounds" ] || break
    stage "bench round $r: ours $commit"
    timeout "$(limit 150)" "$gemtb" bench attention --force --out-dir $scratch/gemtb-ours-r$r --forward-kernel "$forward_kernel" \
      --reps "$reps" --warmup "$warmup" --settle-s "$settle" "${case_args[@]}" --label "$commit" >> "$out/run.log" 2>&1 ||
      { status=1; stage "bench FAILED"; }
    bench_table $scratch/gemtb-ours-r$r/bench_attention.json 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"
  done
  cp "$scratch/gemtb-base-r$rounds/bench_attention.json" "$out/bench_attention_base.json" 2>/dev/null
fi
stage "bench: gemtb bench attention (--forward-kernel $forward_kernel, --settle-s $settle)"
bench_cmd="gemtb bench attention --out-dir DIR --forward-kernel $forward_kernel --reps $reps --warmup $warmup --settle-s $settle ${cases:+--cases $cases}${tanh_cases:+; the same with --tanh-approx --cases $tanh_cases}"
# The GPU's clocks, temperature, power and throttle reasons every 500 ms while our bench runs (into
# run.log): what a case ran at, and whether the cases before it had heated the GPU.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active \
  --format=csv,noheader -lms 500 > $scratch/gemtb-clocks.csv 2>/dev/null &
clock_pid=$!
timeout "$(limit 300)" "$gemtb" bench attention --force --out-dir "$lengths" --forward-kernel "$forward_kernel" \
  --reps "$reps" --warmup "$warmup" --settle-s "$settle" "${case_args[@]}" --label "$commit" \
  2>&1 | while IFS= read -r line; do echo "$(date -u +%T) $line"; done | tee -a "$out/run.log" | sed 's/^/   /' | tee -a "$out/summary.txt"
bench_rc=${PIPESTATUS[0]}
kill "$clock_pid" 2>/dev/null
{ echo "# nvidia-smi during the bench: timestamp, SM MHz, memory MHz, C, W, clock event reasons"; cat $scratch/gemtb-clocks.csv; } >> "$out/run.log"
python3 - $scratch/gemtb-clocks.csv <<'EOF' | sed 's/^/   /' | tee -a "$out/summary.txt"
import sys
rows = [l.split(', ') for l in open(sys.argv[1]) if l.count(',') >= 5]
sm = [float(r[1].split()[0]) for r in rows if r[1].split()[0].replace('.', '').isdigit()]
temp = [float(r[3]) for r in rows if r[3].strip().isdigit()]
if sm:
    print(f"clocks during the bench ({len(sm)} samples): SM MHz min {min(sm):.0f} median {sorted(sm)[len(sm)//2]:.0f} max {max(sm):.0f}; temperature C {min(temp):.0f}-{max(temp):.0f}")
EOF
[ "$bench_rc" -eq 0 ] || { status=1; stage "bench FAILED (exit $bench_rc)"; }
cp "$lengths/bench_attention.json" "$out/" 2>/dev/null
[ -n "$base_gemtb" ] && bench_table "$out/bench_attention.json" 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"
if [ -n "$tanh_cases" ] && [ -f "$out/bench_attention.json" ]; then
  stage "bench: --tanh-approx on $tanh_cases"
  timeout "$(limit 120)" "$gemtb" bench attention --force --out-dir $scratch/gemtb-tanh --forward-kernel "$forward_kernel" \
    --reps "$reps" --warmup "$warmup" --settle-s "$settle" --cases "$tanh_cases" --tanh-approx --label "$commit tanh_approx" \
    2>&1 | tee -a "$out/run.log" | sed 's/^/   /' | tee -a "$out/summary.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { status=1; stage "tanh.approx bench FAILED"; }
  # Its rows join the main bench's JSON (same lengths: the draw depends on the case alone).
  [ -f $scratch/gemtb-tanh/bench_attention.json ] && python3 - "$out/bench_attention.json" $scratch/gemtb-tanh/bench_attention.json <<'EOF'
import json, sys
main, extra = (json.load(open(p)) for p in sys.argv[1:3])
main["cases"] += extra["cases"]
main["command_tanh_approx"] = extra.get("command")
json.dump(main, open(sys.argv[1], "w"), indent=1)
EOF
fi
for v in ${variants//,/ }; do
  [ -f "$scratch/gemtb-variant-$v/bench_attention.json" ] && cp "$scratch/gemtb-variant-$v/bench_attention.json" "$lengths/variant_$v.json"
done
[ -n "$base_gemtb" ] || tar -czf "$out/lengths.tgz" -C "$lengths" . 2>/dev/null

# --- 4. the bench cases and gemtb check attention (before the peers: a short budget cuts those) ---
# The benchmark's shapes (lengths, heads, act, mask), bf16 inputs from the seed; the kernels the
# library picks, as in the timing; the oracle on a sample of each case's sequences.
bench_oracle_rc=skipped
if [ "$oracle_bench" -gt 0 ]; then
  bench_limit=$(limit 240)
  stage "gemtb check attention --tier bench (timeout $bench_limit s)"
  rm -f $scratch/check_bench.json
  # After --time-limit no case starts on the GPU and no judgement starts (those under way finish),
  # so that the summary and JSON are written; the cases not run or not judged are printed.
  timeout "$bench_limit" "$gemtb" check attention --tier bench --seed 1 ${cases:+--bench-cases "$cases"} \
    --time-limit $(( bench_limit > 90 ? bench_limit - 60 : bench_limit * 2 / 3 )) \
    --json $scratch/check_bench.json > $scratch/check_bench.log 2>&1
  bench_oracle_rc=$?
  [ $bench_oracle_rc -eq 0 ] || status=1
  grep -E "^(pass|FAIL|EXCUSED|skipped|not judged) |^total|^STOPPED" $scratch/check_bench.log | sed 's/^/   /' | tee -a "$out/summary.txt"
  cat $scratch/check_bench.log >> "$out/run.log"
  echo "   bench oracle check exit code $bench_oracle_rc" | tee -a "$out/summary.txt"
fi
if [ "$check_cases" -gt 0 ]; then
  stage "gemtb check attention --cases $check_cases (timeout $(limit 400) s)"
  # The check runs the kernels the library picks (gpu/attention/kernel_policy.h).
  timeout "$(limit 400)" "$gemtb" check attention --cases "$check_cases" --seed 1 --max-length 300 \
    --json "$out/check.json" > $scratch/check.log 2>&1
  check_rc=$?
  [ $check_rc -eq 0 ] || status=1
  { grep -A 40 "^family" $scratch/check.log || tail -20 $scratch/check.log; } | tee -a "$out/summary.txt"
  cat $scratch/check.log >> "$out/run.log"
  echo "   check exit code $check_rc" | tee -a "$out/summary.txt"
fi
if [ -n "$tanh_cases" ] && [ "$tanh_check_cases" -gt 0 ]; then
  stage "gemtb check attention --tanh-approx --cases $tanh_check_cases (silu, gelu_tanh)"
  tanh_families=silu/none,silu/causal,silu/window,silu/block,gelu_tanh/none,gelu_tanh/causal,gelu_tanh/window,gelu_tanh/block
  timeout "$(limit 200)" "$gemtb" check attention --tanh-approx --cases "$tanh_check_cases" --seed 2 --max-length 300 \
    --family "$tanh_families" --json $scratch/check_tanh.json > $scratch/check_tanh.log 2>&1
  tanh_rc=$?
  [ $tanh_rc -eq 0 ] || status=1
  { grep -A 12 "^family" $scratch/check_tanh.log || tail -20 $scratch/check_tanh.log; } | tee -a "$out/summary.txt"
  cat $scratch/check_tanh.log >> "$out/run.log"
  echo "   tanh.approx check exit code $tanh_rc" | tee -a "$out/summary.txt"
  [ -f $scratch/check_tanh.json ] && python3 - "$out/check.json" $scratch/check_tanh.json <<'EOF'
import json, sys
try:
    main = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    main = {}
main["tanh_approx_check"] = json.load(open(sys.argv[2]))
json.dump(main, open(sys.argv[1], "w"), indent=1)
EOF
fi
if [ "$oracle_bench" -gt 0 ]; then
  python3 - "$out/check.json" $scratch/check_bench.json "$bench_oracle_rc" <<'EOF'
import json, sys
try:
    main = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    main = {}
try:
    bench = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    bench = None  # stopped by the time limit: run.log has what it printed
main["bench_oracle"] = {
    "command": "gemtb check attention --tier bench --seed 1",
    "exit_code": sys.argv[3],
    "cases": {c["case"]: c["result"] for c in bench["bench"]["cases"]} if bench else None,
    "result": bench,
}
json.dump(main, open(sys.argv[1], "w"), indent=1)
EOF
fi
# --- 5. peers on the same lengths, same call ------------------------------------------------------
meta_applies=0
[ "$meta_timeout" -gt 0 ] && [ -d .peers/meta_gdpa/gdpa ] && meta_applies=1
if { [ "$peer_timeout" -gt 0 ] && [ -f .peers/torch_peers.py ] || [ $meta_applies -eq 1 ]; } &&
   [ -f "$lengths/bench_attention.json" ]; then
  peer_cases=()
  [ -n "$cases" ] && IFS=, read -r -a peer_cases <<< "$cases"
  cat > $scratch/peer_lines.py <<'EOF'
import json, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "error" in r:
        print("   %-16s %-16s error: %s" % (r["case"], r["impl"], r["error"][:80]), flush=True)
    else:
        print("   %-16s %-16s fwd %7.1f  fwd+bwd %7.1f TFLOP/s"
              % (r["case"], r["impl"], r["fwd_tflops"], r["fwdbwd_tflops"] or 0), flush=True)
EOF
  # Each script's rows join peers.json through merge_peers.py: its JSON, or the rows it printed
  # when its time limit stopped it first.
  rm -f "$out/peers.json" $scratch/torch_peers.json $scratch/meta_peers.json
  if [ "$peer_timeout" -gt 0 ] && [ -f .peers/torch_peers.py ]; then
    stage "peers: torch_peers.py --lengths (timeout $(limit "$peer_timeout") s)"
    PYTHONUNBUFFERED=1 timeout "$(limit "$peer_timeout")" python3 .peers/torch_peers.py --json $scratch/torch_peers.json \
      --lengths "$lengths" "${peer_cases[@]}" 2>&1 | tee $scratch/torch_peers.log | tee -a "$out/run.log" | \
      python3 $scratch/peer_lines.py | tee -a "$out/summary.txt"
    [ -f $scratch/torch_peers.json ] || stage "torch peers stopped by the time limit (the rows they printed)"
    python3 "$src/tools/bench/merge_peers.py" "$out/peers.json" torch_peers.py $scratch/torch_peers.json \
      $scratch/torch_peers.log "$gpu_name"
  fi
  if [ $meta_applies -eq 1 ]; then
    meta_case_list=("${peer_cases[@]}")
    [ -n "$meta_cases" ] && IFS=, read -r -a meta_case_list <<< "$meta_cases"
    stage "peers: Meta's Triton GDPA (timeout $(limit "$meta_timeout") s)"
    PYTHONUNBUFFERED=1 timeout "$(limit "$meta_timeout")" python3 "$src/tools/bench/meta_gdpa_peer.py" \
      --repo .peers/meta_gdpa --repo-commit "$(cat .peers/meta_gdpa/COMMIT 2>/dev/null)" --lengths "$lengths" \
      --json $scratch/meta_peers.json --reps 10 "${meta_case_list[@]}" 2>&1 | tee $scratch/meta_peers.log | \
      tee -a "$out/run.log" | python3 $scratch/peer_lines.py | tee -a "$out/summary.txt"
    [ -f $scratch/meta_peers.json ] || stage "Meta's GDPA stopped by the time limit (the rows it printed)"
    python3 "$src/tools/bench/merge_peers.py" "$out/peers.json" tools/bench/meta_gdpa_peer.py $scratch/meta_peers.json \
      $scratch/meta_peers.log "$gpu_name"
  fi
  stage "ratio table"
  python3 "$src/gpu/bench/ratio_table.py" "$out/bench_attention.json" "$out/peers.json" "$out/ratio.json" \
    $scratch/ratio.md commit "$commit" gpu "$gpu_name" bench_command "$bench_cmd" \
    peers_command "python3 torch_peers.py --json peers.json --lengths DIR ${cases//,/ }; python3 tools/bench/meta_gdpa_peer.py --repo .peers/meta_gdpa --lengths DIR --reps 10 ${cases//,/ }" | tee -a "$out/summary.txt"
  if [ -f "$out/bench_attention_base.json" ]; then
    stage "ratio table of the base ($base_commit), same peers"
    python3 "$src/gpu/bench/ratio_table.py" "$out/bench_attention_base.json" "$out/peers.json" "$out/ratio_base.json" \
      $scratch/ratio_base.md commit "$base_commit" gpu "$gpu_name" bench_command "$bench_cmd (base build)" \
      peers_command "python3 torch_peers.py --json peers.json --lengths DIR ${cases//,/ }" | tee -a "$out/summary.txt"
  fi
else
  stage "peers skipped (.peers/torch_peers.py or bench results missing)"
fi

# --- 6. Nsight Compute on the forward kernel ------------------------------------------------------
for c in ${ncu_cases//,/ }; do
  stage "ncu: forward kernel of $c"
  timeout "$(limit 90)" ncu --clock-control none --kernel-name regex:Forward --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats \
    "$gemtb" bench attention --force --out-dir $scratch/gemtb-ncu --cases "$c" --forward-only --no-compare --reps 1 \
    --warmup 0 > $scratch/ncu.log 2>&1
  grep -E "Duration|Throughput|Pipe|Stall|Issue|Warp Cycles|Registers|Achieved|Eligible|Executed Ipc|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth" \
    $scratch/ncu.log | head -60 | sed 's/^/   /' | tee -a "$out/summary.txt"
  cat $scratch/ncu.log >> "$out/run.log"
done

stage "done: status $status"
exit $status
