#!/usr/bin/env bash
# One device call on the lent H200: the GPU trainer (`gemtb train`) on the small config beside the
# PyTorch peer (its script and inputs in .peers/gem_torch/), timed in the same call. Writes
# $OUT/summary.txt, build.log, train_small_b<B>.{log,json} and trace_small_b<B>.json (gemtb train's output,
# report and last step's trace) and
# peer.log (the peer's own log, its SUMMARY line last).
#
# Here, before the call:
#   git archive --format=tar.gz -o .deb/src.tgz HEAD && git rev-parse HEAD > .deb/SOURCE
#   mkdir -p .peers/gem_torch && cp <the peer's gem_small_torch.py> .peers/gem_torch/
#   build/bin/gemtb model --config small --emit .peers/gem_torch/small_model.json
#   cp model/configs/small.json .peers/gem_torch/config_small.json
#   cp model/configs/data/small.json .peers/gem_torch/data_small.json
# Then run(command: "bash tools/train_gpu_bench.sh [--batches '256 1024'] [--steps N] [--peer RUNS]",
# carry: [".deb", ".peers"]). --peer "" leaves the peer out.
# Exit status: 0 every run finished, 1 a run failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
batches="256 1024"
steps=30
peer_runs="compile:1024"
while [ $# -gt 0 ]; do
  case "$1" in
    --batches) batches=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --peer) peer_runs=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source tools/lib/device_build.sh
unpack_device_deps train_gpu_bench require-src
build=$scratch/gemtb-train-build
start=$SECONDS
{
  echo "train_gpu_bench: $(cat .deb/SOURCE 2>/dev/null) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  configure_device_build "$srcdir" "$build" >"$out/build.log" 2>&1 && cmake --build "$build" --target gemtb >>"$out/build.log" 2>&1
} | tee "$out/summary.txt"
if [ "${PIPESTATUS[0]}" -ne 0 ] || [ ! -x "$build/bin/gemtb" ]; then
  echo "build failed; see build.log" | tee -a "$out/summary.txt"
  tail -30 "$out/build.log"
  exit 2
fi
echo "build: $((SECONDS - start)) s" | tee -a "$out/summary.txt"
rc=0
for b in $batches; do
  t=$SECONDS
  "$build/bin/gemtb" train --config small --local-batch "$b" --steps "$steps" --eval-samples 0 \
    --report "$out/train_small_b$b.json" --trace "$out/trace_small_b$b.json" >"$out/train_small_b$b.log" 2>&1 || rc=1
  { echo "gemtb train --config small --local-batch $b --steps $steps: $((SECONDS - t)) s"
    tail -4 "$out/train_small_b$b.log"; } | tee -a "$out/summary.txt"
done
if [ -n "$peer_runs" ]; then
  t=$SECONDS
  (cd .peers/gem_torch && python3 gem_small_torch.py --runs "$peer_runs" --steps 20 --warmup 5 --profile "" --flops "" \
     --out "$out/peer.log") >/dev/null 2>&1 || rc=1
  { echo "peer $peer_runs: $((SECONDS - t)) s"; grep -E "SUMMARY|OOM|exceeded" "$out/peer.log" | tail -3; } | tee -a "$out/summary.txt"
fi
echo "exit $rc after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $rc
