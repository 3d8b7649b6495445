#!/usr/bin/env bash
# One device call: sim_step_bench of several source trees side by side on one pinned core of the lent
# GPU machine's host CPU, in turns (A B C A B C ...), so that the host's slow and quiet phases fall on
# every variant alike. A change to the engine that moves its speed by a few percent cannot be told
# from the host's noise (+-20% within an hour) by runs made minutes apart; runs made in turn can.
#
# Here, before the call: one `git archive` per variant in .deb/variants/NAME.tgz, e.g.
#   mkdir -p .deb/variants && git archive --format=tar.gz -o .deb/variants/base.tgz HEAD~1 \
#     && git archive --format=tar.gz -o .deb/variants/new.tgz HEAD
# (`git stash create` gives a commit of uncommitted work to archive). Then
# run(command: "bash tools/bench/sim_speed_ab_on_device.sh", carry: [".deb"]).
# Environment: REPS turns at 4,096 ranks (default 5), REPS16K turns at 16,384 (default 3).
# Writes $OUT/ab_summary.txt: every run's CPU seconds per step, then per variant and size the minimum
# and the median. Exit status: 0 the runs happened, 2 a build failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
source tools/lib/device_build.sh
unpack_device_deps sim_speed_ab_on_device
reps=${REPS:-5}
reps16k=${REPS16K:-3}
shopt -s nullglob
variants=()
for tgz in .deb/variants/*.tgz; do variants+=("$(basename "$tgz" .tgz)"); done
if [ ${#variants[@]} -eq 0 ]; then
  echo "sim_speed_ab_on_device: .deb/variants/ holds no .tgz" | tee -a "$out/summary.txt"
  exit 2
fi
build_one() {  # NAME: unpack and build sim_step_bench (no CUDA, no tests)
  local name=$1 src=$scratch/ab-src-$1 build=$scratch/ab-build-$1
  mkdir -p "$src" && tar -xzf ".deb/variants/$name.tgz" -C "$src"
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DGEMTB_WITH_CUDA=OFF -DGEMTB_BUILD_TESTS=OFF -DGEMTB_BUILD_BENCHMARKS=ON >"$out/build_$name.log" 2>&1 &&
    cmake --build "$build" --target sim_step_bench -j 4 >>"$out/build_$name.log" 2>&1
}
pids=()
for v in "${variants[@]}"; do build_one "$v" & pids+=($!); done
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "sim_speed_ab_on_device: the build of ${variants[$i]} failed (build_${variants[$i]}.log)" | tee -a "$out/summary.txt"
    failed=1
  fi
done
[ "$failed" -eq 0 ] || exit 2
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
echo "sim_speed_ab_on_device: ${variants[*]} on $cpu, taskset -c 3, $reps turns at 4096, $reps16k at 16384" |
  tee -a "$out/ab_summary.txt"
for size in 4096 16384; do
  n=$reps
  [ "$size" = 16384 ] && n=$reps16k
  for turn in $(seq "$n"); do
    for v in "${variants[@]}"; do
      s=$(taskset -c 3 "$scratch/ab-build-$v/bin/sim_step_bench" --benchmark_filter="SimStep/$size/" \
        --benchmark_repetitions=1 2>/dev/null | grep -o 'cpu_s_per_step=[0-9.]*' | head -1 | cut -d= -f2)
      echo "run $size $turn $v ${s:-error}" | tee -a "$out/ab_summary.txt"
    done
  done
done
/usr/bin/python3 - "$out/ab_summary.txt" <<'PY' | tee -a "$out/ab_summary.txt"
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5 and f[0] == "run" and f[4] != "error":
        runs[(int(f[1]), f[3])].append(float(f[4]))
for (size, v), s in sorted(runs.items()):
    print(f"{size} {v}: min {min(s):.4f} median {statistics.median(s):.4f} s/step over {len(s)}")
PY
