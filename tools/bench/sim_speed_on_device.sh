#!/usr/bin/env bash
# One device call: the simulator's speed bench (sim_step_bench: gem-default, CPU seconds per simulated
# step at 4,096 and 16,384 ranks against the 0.25 s and 1 s bounds) on one pinned core of the lent
# GPU machine's host CPU, which is faster and steadier than the 2-core VM. Builds from .deb/src.tgz
# (a `git archive` of the commit in .deb/SOURCE) without CUDA and writes $OUT/sim_step_bench_*.json
# (run_cpu_bench.sh's format) and $OUT/summary.txt.
#
# Here, before the call: git archive --format=tar.gz -o .deb/src.tgz HEAD && git rev-parse HEAD > .deb/SOURCE
# Then run(command: "bash tools/bench/sim_speed_on_device.sh", carry: [".deb"]).
# Exit status: 0 the bench ran (whatever it measured), 2 the build or the bench failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
source tools/lib/device_build.sh
unpack_device_deps sim_speed_on_device require-src
commit=$(cut -c1-7 .deb/SOURCE)
{
  echo "sim_speed_on_device: $commit on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  GEMTB_BUILD_DIR=$scratch/gemtb-simbench-build GEMTB_COMMIT=$commit GEMTB_RESULTS_DIR=$out \
    GEMTB_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$prefix/usr -DGEMTB_WITH_CUDA=OFF -DGEMTB_BUILD_TESTS=OFF" \
    GEMTB_BENCH_PREFIX="taskset -c 3" \
    bash "$srcdir/tools/bench/run_cpu_bench.sh" sim_step_bench --benchmark_filter='SimStep/(4096|16384)/'
} 2>&1 | tee -a "$out/summary.txt"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit 2
