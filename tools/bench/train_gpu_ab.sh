#!/usr/bin/env bash
# One device call: `gemtb train --config small` of several source trees side by side on the lent H200,
# in turns (A B A B ...), so that a change to the trainer is timed against its base in the same call.
# Optionally runs test binaries of every variant first and times the kernels of one step of each
# under Nsight Compute.
#
# Here, before the call: one `git archive` per variant in .deb/variants/NAME.tgz, e.g.
#   mkdir -p .deb/variants && git archive --format=tar.gz -o .deb/variants/a_base.tgz HEAD~1 \
#     && git archive --format=tar.gz -o .deb/variants/b_new.tgz HEAD
# (`git stash create` gives a commit of uncommitted work to archive), or one built here per variant,
# .deb/variants/NAME.bin.tar.xz from tools/bench/prebuild_variant.sh (give it the TESTS' targets too),
# which the call unpacks instead of building (no device time for builds; all variants of one A/B of
# one origin). tools/bench/bundle_variants.sh packs those into one .deb/variants/prebuilt.bundle.tar.xz
# (a folder NAME a variant, compressed together: about a third of the bytes of separate packages, since
# the variants' binaries share most of their bytes), so that more variants fit the 64 MiB a call
# carries. A file .deb/variants/NAME.flags holds further `gemtb train` flags of that variant (e.g.
# "--ffn bf16", to time a precision choice of one tree against the same tree's default). A variant of flags alone runs another variant's build:
# .deb/variants/NAME.base names that variant (its tree), NAME.flags its flags, and no tree. Then
# run(command: "bash tools/bench/train_gpu_ab.sh", carry: [".deb"]).
# Environment: BATCHES (local batches, default "256 1024"), TURNS (default 2), STEPS per run (default
# 20), TESTS (test targets built and run for every variant, default none), LIMIT_S (seconds any one test
# binary, timed run or traced run may take before it is stopped, default 180), KERNELS (a local batch:
# ncu times every kernel whose name matches KERNEL_REGEX, default all, in one step of each variant),
# SECTIONS (kernel-name regexes, each as REGEX or REGEX@SKIP, separated by spaces: ncu's speed-of-light,
# warp-state, scheduler, memory, occupancy and source-level sections of one launch of each, the first
# after SKIP (default SECTIONS_SKIP, else 0) matching launches, in a b256 step of each variant:
# sections_NAME_I.txt, and source_NAME_I.csv the launch's SASS with its stall samples per instruction;
# the builds then carry -lineinfo, which leaves the machine code as it is), TRACE (a local batch: each variant's last step of a 5-step run
# under `gemtb train --trace-kernels`, its device time, idle gaps and the host's calls in them:
# timeline_NAME.json, a line each in ab_summary.txt, the Perfetto trace in runs.tgz, and the traced
# steps' kernels by name side by side in ab_summary.txt (tools/lib/trace_kernel_table.py); a tree
# whose gemtb has no --trace-kernels is skipped), CHECK_TRAIN (K:
# the first variant's `gemtb check train --config tiny --steps K`, the trainer against the oracle),
# PEER=1 (after the turns, the PyTorch peer at torch.compile batch 1,024, where a copy of its script
# gem_small_torch.py sits in .peers/gem_torch (carry it) and the GPU has more than 100 GB: its peak
# is 93 GB; peer.log, its RESULT line in ab_summary.txt).
# Writes $OUT/ab_summary.txt: the tests' results and failures, every run's median step and samples/s,
# then per variant and batch the median over the turns; kernels_NAME.csv, the sections; and
# everything else (each run's report and log, the build and test logs) in runs.tgz, so that a call
# brings back a few files. Exit status: 0 the runs happened, 1 a test or a run failed, 2 a build failed. The builds stay in $TMPDIR (else /tmp) as ab-build-NAME for the
# rest of the call; a command after this script that runs them needs the unpacked packages' libraries:
#   export LD_LIBRARY_PATH=${TMPDIR:-/tmp}/gemtb-deps/usr/lib/x86_64-linux-gnu
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
source tools/lib/device_build.sh
unpack_device_deps train_gpu_ab
# Builds made here (prebuild_variant.sh) name this machine's CUDA library folder; the device's may differ.
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64
batches=${BATCHES:-256 1024}
turns=${TURNS:-2}
steps=${STEPS:-20}
tests=${TESTS:-}
# Every test binary, timed run and traced run is stopped after LIMIT_S seconds (default 180), so that a
# variant that hangs (a kernel waiting on a barrier nobody arrives at) costs its own runs, not the
# call's remaining device time.
limit=${LIMIT_S:-180}
Overran() {  # STATUS WHAT: say so in the summary when timeout stopped it
  if [ "$1" -eq 124 ]; then echo "$2: stopped after $limit s" | tee -a "$out/ab_summary.txt"; fi
}
kernels=${KERNELS:-}
kernel_regex=${KERNEL_REGEX:-.}
sections=${SECTIONS:-}
sections_skip=${SECTIONS_SKIP:-0}
trace=${TRACE:-}
check_train=${CHECK_TRAIN:-}
peer=${PEER:-0}
shopt -s nullglob
variants=()  # every variant timed
builds=()    # the variants with a tree of their own (.tgz, or built here: .bin.tar.xz or a bundle's folder)
declare -A tree  # variant -> the variant whose build it runs
bundle=$scratch/ab-bundle  # the bundles' variants, unpacked
rm -rf "$bundle" && mkdir -p "$bundle"
for f in .deb/variants/*.bundle.tar.xz; do
  tar -xJf "$f" -C "$bundle" || { echo "train_gpu_ab: $f does not unpack" | tee -a "$out/ab_summary.txt"; exit 2; }
done
has_tree() { [ -f ".deb/variants/$1.tgz" ] || [ -f ".deb/variants/$1.bin.tar.xz" ] || [ -d "$bundle/$1" ]; }
for f in .deb/variants/*.tgz .deb/variants/*.bin.tar.xz "$bundle"/*/; do
  v=$(basename "$(basename "$f" .tgz)" .bin.tar.xz)
  variants+=("$v") builds+=("$v")
  tree[$v]=$v
done
if [ ${#builds[@]} -eq 0 ]; then
  echo "train_gpu_ab: .deb/variants/ holds no .tgz, .bin.tar.xz or .bundle.tar.xz" | tee -a "$out/ab_summary.txt"
  exit 2
fi
for base in .deb/variants/*.base; do
  v=$(basename "$base" .base)
  has_tree "$v" && continue
  b=$(cat "$base")
  if ! has_tree "$b"; then
    echo "train_gpu_ab: $v.base names $b, which has no tree" | tee -a "$out/ab_summary.txt"
    exit 2
  fi
  variants+=("$v")
  tree[$v]=$b
done
# One order for every call however the variants came: alphabetical (CHECK_TRAIN takes the first).
mapfile -t variants < <(printf '%s\n' "${variants[@]}" | sort -u)
mapfile -t builds < <(printf '%s\n' "${builds[@]}" | sort -u)
start=$SECONDS
build_one() {  # NAME: unpack and build gemtb (and the TESTS), or unpack the build made here
  local name=$1 src=$scratch/ab-src-$1 build=$scratch/ab-build-$1
  if [ -d "$bundle/$name" ]; then
    rm -rf "$build" && mv "$bundle/$name" "$build" && echo "prebuilt $(cat "$build/COMMIT") (bundled)" >"$out/build_$name.log"
    return
  fi
  if [ -f ".deb/variants/$name.bin.tar.xz" ]; then
    mkdir -p "$build" && tar -xJf ".deb/variants/$name.bin.tar.xz" -C "$build" &&
      echo "prebuilt $(cat "$build/COMMIT")" >"$out/build_$name.log"
    return
  fi
  mkdir -p "$src" && tar -xzf ".deb/variants/$name.tgz" -C "$src"
  # shellcheck disable=SC2086
  local extra=()
  [ -n "$sections" ] && extra=(-DCMAKE_CUDA_FLAGS=-lineinfo)
  configure_device_build "$src" "$build" "${extra[@]}" >"$out/build_$name.log" 2>&1 &&
    cmake --build "$build" --target gemtb $tests >>"$out/build_$name.log" 2>&1
}
pids=()
for v in "${builds[@]}"; do build_one "$v" & pids+=($!); done
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "train_gpu_ab: the build of ${builds[$i]} failed (build_${builds[$i]}.log)" | tee -a "$out/ab_summary.txt"
    tail -20 "$out/build_${builds[$i]}.log"
    failed=1
  fi
done
[ "$failed" -eq 0 ] || exit 2
echo "train_gpu_ab: ${variants[*]} on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader);" \
  "builds $((SECONDS - start)) s" | tee -a "$out/ab_summary.txt"
rc=0
# Each variant's further train flags.
declare -A vflags
for v in "${variants[@]}"; do
  vflags[$v]=$(cat ".deb/variants/$v.flags" 2>/dev/null || true)
done
for v in "${builds[@]}"; do
  for t in $tests; do
    if [ ! -x "$scratch/ab-build-$v/bin/$t" ]; then  # a variant built here without it
      echo "$v: $t not in its build" | tee -a "$out/ab_summary.txt"
      continue
    fi
    timeout "$limit" "$scratch/ab-build-$v/bin/$t" >>"$out/tests_$v.log" 2>&1 || { rc=1; Overran $? "$v: $t"; }
  done
  [ -f "$out/tests_$v.log" ] && grep -E "^\[  (PASSED|FAILED) |Failure$|^\[  FAILED  \]" "$out/tests_$v.log" |
    sed "s/^/$v: /" | tee -a "$out/ab_summary.txt"
done
if [ -n "$kernels" ]; then
  for v in "${variants[@]}"; do
    ncu --metrics gpu__time_duration.sum --csv --print-units base --clock-control none -k "regex:$kernel_regex" \
      "$scratch/ab-build-${tree[$v]}/bin/gemtb" train --config small --local-batch "$kernels" --steps 1 --eval-samples 0 \
      --log-every-s 1000 ${vflags[$v]} >"$out/kernels_$v.csv" 2>"$out/kernels_$v.log" || rc=1
    /usr/bin/python3 tools/lib/ncu_kernel_table.py "$out/kernels_$v.csv" 12 "$v: " | tee -a "$out/ab_summary.txt"
  done
fi
if [ -n "$sections" ]; then
  for v in "${variants[@]}"; do
    i=0
    for spec in $sections; do
      i=$((i + 1))
      regex=${spec%@*} skip=$sections_skip
      [ "$spec" != "$regex" ] && skip=${spec##*@}
      ncu --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 --clock-control none \
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section SourceCounters \
        --import-source yes -f -o "$scratch/sections_${v}_$i" \
        "$scratch/ab-build-${tree[$v]}/bin/gemtb" train --config small --local-batch 256 --steps 1 --eval-samples 0 \
        --log-every-s 1000 ${vflags[$v]} >"$out/sections_${v}_$i.log" 2>&1 || rc=1
      ncu -i "$scratch/sections_${v}_$i.ncu-rep" --print-details all >"$out/sections_${v}_$i.txt" 2>&1 || rc=1
      ncu -i "$scratch/sections_${v}_$i.ncu-rep" --page source --csv --print-source sass \
        >"$out/source_${v}_$i.csv" 2>&1 || rc=1
      echo "$v sections $i: $regex after $skip launches" | tee -a "$out/ab_summary.txt"
    done
  done
fi
for turn in $(seq "$turns"); do
  for b in $batches; do
    for v in "${variants[@]}"; do
      report=$out/train_${v}_b${b}_t$turn.json
      timeout "$limit" "$scratch/ab-build-${tree[$v]}/bin/gemtb" train --config small --local-batch "$b" --steps "$steps" \
        --eval-samples 0 --log-every-s 1000 --report "$report" ${vflags[$v]} >"$out/train_${v}_b${b}_t$turn.log" 2>&1 ||
        { rc=1; Overran $? "$v: train b$b turn $turn"; }
      /usr/bin/python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
print(f\"run {sys.argv[2]} {sys.argv[3]} {sys.argv[4]} {r['step_ms_median']:.3f} {r['samples_per_s']:.1f}\")" \
        "$report" "$b" "$turn" "$v" 2>/dev/null | tee -a "$out/ab_summary.txt" || echo "run $b $turn $v error" |
        tee -a "$out/ab_summary.txt"
    done
  done
done
/usr/bin/python3 - "$out/ab_summary.txt" <<'PY' | tee -a "$out/ab_summary.txt"
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6 and f[0] == "run":
        runs[(int(f[1]), f[3])].append((float(f[4]), float(f[5])))
for (b, v), s in sorted(runs.items()):
    print(f"batch {b} {v}: median step {statistics.median(x[0] for x in s):.3f} ms, "
          f"samples/s {statistics.median(x[1] for x in s):.1f} (median of {len(s)} runs)")
PY
if [ -n "$trace" ]; then
  for v in "${variants[@]}"; do
    if ! "$scratch/ab-build-${tree[$v]}/bin/gemtb" train --help 2>&1 | grep -q -- --trace-kernels; then
      echo "$v b$trace: not traced (its gemtb has no --trace-kernels)" | tee -a "$out/ab_summary.txt"
      continue
    fi
    # shellcheck disable=SC2086
    timeout "$limit" "$scratch/ab-build-${tree[$v]}/bin/gemtb" train --config small --local-batch "$trace" --steps 5 \
      --eval-samples 0 --log-every-s 1000 --trace-kernels --trace "$out/trace_$v.json" --report "$out/timeline_$v.json" \
      ${vflags[$v]} >"$out/timeline_$v.log" 2>&1 || { rc=1; Overran $? "$v: trace b$trace"; }
    grep "last step on the device" "$out/timeline_$v.log" | sed "s/^/$v b$trace: /" | tee -a "$out/ab_summary.txt"
  done
  traces=("$out"/trace_*.json)
  if [ ${#traces[@]} -gt 0 ]; then
    /usr/bin/python3 tools/lib/trace_kernel_table.py "${traces[@]}" --top 30 --prefix "kernels b$trace: " |
      tee -a "$out/ab_summary.txt"
  fi
fi
if [ -n "$check_train" ]; then
  "$scratch/ab-build-${tree[${variants[0]}]}/bin/gemtb" check train --config tiny --steps "$check_train" >"$out/check_train.log" 2>&1 ||
    rc=1
  tail -1 "$out/check_train.log" | sed "s/^/check train (${variants[0]}): /" | tee -a "$out/ab_summary.txt"
fi
if [ "$peer" = 1 ]; then
  mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [ "$mem" -gt 100000 ] && [ -f .peers/gem_torch/gem_small_torch.py ]; then
    "$scratch/ab-build-${builds[0]}/bin/gemtb" model --config small --emit .peers/gem_torch/small_model.json >/dev/null &&
      (cd .peers/gem_torch && python3 gem_small_torch.py --runs compile:1024 --steps 20 --warmup 5 --profile "" \
        --flops "" --out "$out/peer.log") >"$out/peer_stdout.txt" 2>&1 || rc=1
    grep RESULT "$out/peer_stdout.txt" | sed 's/^/peer: /' | tee -a "$out/ab_summary.txt"
  else
    echo "peer: not run (needs .peers/gem_torch/gem_small_torch.py and a GPU of more than 100 GB)" |
      tee -a "$out/ab_summary.txt"
  fi
fi
echo "train_gpu_ab: exit $rc after $((SECONDS - start)) s" | tee -a "$out/ab_summary.txt"
(
  cd "$out" || exit
  packed=(train_* build_*.log tests_*.log kernels_*.log timeline_*.log trace_*.json sections_* source_*)  # nullglob: those there
  for f in check_train.log peer_stdout.txt; do [ -f "$f" ] && packed+=("$f"); done
  [ ${#packed[@]} -eq 0 ] || { tar czf runs.tgz -- "${packed[@]}" && rm -f -- "${packed[@]}"; }
)
exit $rc
