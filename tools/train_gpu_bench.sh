#!/usr/bin/env bash
# One device call on the lent H200: the GPU trainer (`gemtb train`) on the small config beside the
# PyTorch peer (its script and inputs in .peers/gem_torch/), timed in the same call. Writes
# $OUT/summary.txt, build.log, train_small_b<B>.{log,json} and trace_small_b<B>.json (gemtb train's output,
# report and last step's trace) and
# peer.log (the peer's own log, its SUMMARY line last). With --layers B, also `gemtb bench layers` at
# local batch B (layers_b<B>/: the per-layer report, the layer calibration and a one-GPU scenario) and
# `gemtb whatif` on that scenario with that calibration (whatif_b<B>/): the simulator's prediction of
# the step set beside the measured one (`gemtb train`'s mean step at the same batch, when --batches has B).
# --matmul P, --attention P, --ffn P and --attention-blocks P go to every gemtb train and bench layers
# (default: theirs).
# With --kernels B, Nsight Compute times every kernel of one `gemtb train` step at local batch B
# (kernels_b<B>.csv) and the summary lists the kernels by total time.
#
# Here, before the call:
#   git archive --format=tar.gz -o .deb/src.tgz HEAD && git rev-parse HEAD > .deb/SOURCE
#   mkdir -p .peers/gem_torch && cp <the peer's gem_small_torch.py> .peers/gem_torch/
#   build/bin/gemtb model --config small --emit .peers/gem_torch/small_model.json  (else the device's build writes it)
#   cp model/configs/small.json .peers/gem_torch/config_small.json
#   cp model/configs/data/small.json .peers/gem_torch/data_small.json
# Then run(command: "bash tools/train_gpu_bench.sh [--batches '256 1024'] [--steps N] [--peer RUNS] [--layers B]",
# carry: [".deb", ".peers"]). --peer "" leaves the peer out.
# Exit status: 0 every run finished, 1 a run failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
batches="256 1024"
steps=30
peer_runs="compile:1024"
layers_batch=""
kernels_batch=""
numerics=()
while [ $# -gt 0 ]; do
  case "$1" in
    --batches) batches=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --peer) peer_runs=$2; shift 2 ;;
    --layers) layers_batch=$2; shift 2 ;;
    --kernels) kernels_batch=$2; shift 2 ;;
    --matmul|--attention|--ffn|--attention-blocks) numerics+=("$1" "$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source tools/lib/device_build.sh
unpack_device_deps train_gpu_bench require-src
build=$scratch/gemtb-train-build
start=$SECONDS
build_device_targets train_gpu_bench "$build" gemtb gemtb
rc=0
for b in $batches; do
  t=$SECONDS
  "$build/bin/gemtb" train --config small --local-batch "$b" --steps "$steps" --eval-samples 0 "${numerics[@]}" \
    --report "$out/train_small_b$b.json" --trace "$out/trace_small_b$b.json" >"$out/train_small_b$b.log" 2>&1 || rc=1
  { echo "gemtb train --config small --local-batch $b --steps $steps: $((SECONDS - t)) s"
    tail -4 "$out/train_small_b$b.log"; } | tee -a "$out/summary.txt"
done
if [ -n "$layers_batch" ]; then
  t=$SECONDS
  b=$layers_batch
  "$build/bin/gemtb" bench layers --config small --local-batch "$b" --steps 10 --out-dir "$out/layers_b$b" --force "${numerics[@]}" \
    --commit "$(cat .deb/SOURCE 2>/dev/null)" >"$out/layers_b$b.log" 2>&1 || rc=1
  "$build/bin/gemtb" whatif "$out/layers_b$b/scenario.json" --layer-calibration "$out/layers_b$b/layers.json" \
    --no-sensitivity --no-checks --no-levers --no-attribution --quiet --out-dir "$out/whatif_b$b" >"$out/whatif_b$b.log" 2>&1 || rc=1
  { echo "gemtb bench layers --local-batch $b and gemtb whatif: $((SECONDS - t)) s"
    head -12 "$out/layers_b$b.log"; grep -A2 "^layers " "$out/layers_b$b.log"; tail -5 "$out/whatif_b$b.log"
    python3 - "$out/layers_b$b/bench_layers.json" "$out/whatif_b$b/summary.json" "$out/train_small_b$b.json" <<'PY'
import json, os, sys
rep = json.load(open(sys.argv[1]))
pred = 1e3 * json.load(open(sys.argv[2]))["reference"]["step_time"]["mean_s"]
print(f"whatif predicts {pred:.3f} ms; bench layers measured {rep['step_ms_mean']:.3f} ms "
      f"({100 * (pred / rep['step_ms_mean'] - 1):+.2f}%)", end="")
if os.path.exists(sys.argv[3]):
    train = json.load(open(sys.argv[3]))["step_ms_median"]
    print(f", gemtb train's median step {train:.3f} ms ({100 * (pred / train - 1):+.2f}%)", end="")
print()
PY
  } | tee -a "$out/summary.txt"
fi
if [ -n "$kernels_batch" ]; then
  t=$SECONDS
  b=$kernels_batch
  ncu --metrics gpu__time_duration.sum --csv --print-units base --clock-control none \
    "$build/bin/gemtb" train --config small --local-batch "$b" --steps 1 --eval-samples 0 --log-every-s 1000 "${numerics[@]}" \
    >"$out/kernels_b$b.csv" 2>"$out/kernels_b$b.log" || rc=1
  { echo "ncu, one step at local batch $b: $((SECONDS - t)) s"
    python3 tools/lib/ncu_kernel_table.py "$out/kernels_b$b.csv" 25
  } | tee -a "$out/summary.txt"
fi
if [ -n "$peer_runs" ]; then
  t=$SECONDS
  # The peer's FLOP-matched model: this build's model.json of small, where the caller did not bring one.
  [ -f .peers/gem_torch/small_model.json ] || "$build/bin/gemtb" model --config small --emit .peers/gem_torch/small_model.json
  (cd .peers/gem_torch && python3 gem_small_torch.py --runs "$peer_runs" --steps 20 --warmup 5 --profile "" --flops "" \
     --out "$out/peer.log") >/dev/null 2>&1 || rc=1
  { echo "peer $peer_runs: $((SECONDS - t)) s"; grep -E "SUMMARY|OOM|exceeded" "$out/peer.log" | tail -3; } | tee -a "$out/summary.txt"
fi
echo "exit $rc after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $rc
