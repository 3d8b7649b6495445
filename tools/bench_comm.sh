#!/usr/bin/env bash
# Measures NCCL collectives on every GPU of the lent H200 host (2 or 4 so far) in one device call, for
# `gemtb whatif calibrate`:
#   1. unpacks the Debian packages carried in .deb/ into $scratch/gemtb-deps (the device has CUDA, CMake
#      and ninja but none of our packages and no registry) and the source snapshot .deb/src.tgz
#      (`git archive --format=tar.gz -o .deb/src.tgz HEAD`, made right before the call) into
#      $scratch/gemtb-src, so that uncommitted work of others in the copied tree cannot break the build;
#   2. builds `gemtb` there (CUDA on);
#   3. runs `gemtb bench comm` on all GPUs: every op, 1 KiB .. 1 GiB x2, with NCCL choosing (auto,
#      plus the copy-engine all-gather's sweep and the interference probe: a GEMM beside an SM-based
#      all-gather and beside the copy-engine one), with
#      NCCL_ALGO=Ring (all_reduce, all_gather, reduce_scatter) and NCCL_ALGO=allreduce:Tree
#      (all_reduce); NCCL_NVLS_ENABLE=0 throughout. --gemm-only runs the interference probe alone
#      (one GPU is enough: it then needs no collective), for `gemtb bench comm --fit`;
#   4. logs NCCL's own tuning table once (NCCL_DEBUG_SUBSYS=TUNING);
#   5. writes 7 files under $OUT (a device call brings back at most 8): comm_results.json (all runs,
#      commit, hardware, NCCL's tuning table), summary.txt, build.log, tuning.log and the per-run JSON.
# Usage (device call, from the repository root; carry [".deb"]):
#   bash tools/bench_comm.sh [--iters N] [--warmup N] [--max-bytes 1G] [--gemtb PATH] [--gemm-only]
# --gemtb PATH skips the build and runs that gemtb (built from the same src.tgz in the same call, e.g.
# by a script that also builds the GPU tests); .deb/ must still hold the packages it links against.
# Exit status: 0 all runs done, 1 a run failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/lib/device_build.sh
iters=50
warmup=10
max_bytes=1G
prebuilt=
gemm_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --max-bytes) max_bytes=$2; shift 2 ;;
    --gemtb) prebuilt=$2; shift 2 ;;
    --gemm-only) gemm_only=1; shift ;;
    *) echo "bench_comm: unknown argument $1" >&2; exit 2 ;;
  esac
done
budget=${BENCH_COMM_BUDGET:-540}
limit() { local left=$((budget - SECONDS)); echo $(( $1 < left ? $1 : (left > 5 ? left : 5) )); }
out=${OUT:-$scratch/gemtb-bench-comm}
mkdir -p "$out"
t0=$SECONDS
stage() { printf '== %-50s [%4d s]\n' "$1" $((SECONDS - t0)) | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"

stage "unpack .deb/ and .deb/src.tgz"
unpack_device_deps bench_comm require-src
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -6
  nvcc --version | tail -1
  nproc
} 2>&1 | sed 's/^/   /' | tee -a "$out/summary.txt"

build=$scratch/gemtb-comm-build
if [ -n "$prebuilt" ]; then
  stage "gemtb given: $prebuilt (no build)"
  [ -x "$prebuilt" ] || { stage "--gemtb $prebuilt is not an executable"; exit 2; }
elif stage "configure + build gemtb (CUDA, NCCL)";
   ! configure_device_build "$srcdir" "$build" -DGEMTB_BUILD_TESTS=OFF > "$out/build.log" 2>&1 ||
   ! timeout "$(limit 300)" cmake --build "$build" -j "$(nproc)" --target gemtb >> "$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -30 | tee -a "$out/summary.txt"
  stage "build FAILED (build.log)"
  exit 2
fi
gemtb=${prebuilt:-$build/bin/gemtb}
export NCCL_NVLS_ENABLE=0
status=0
run() {  # name, then env assignments and gemtb arguments
  local name=$1; shift
  stage "bench $name"
  if ! timeout "$(limit 150)" env "$@" --json "$out/comm_$name.json" --iters "$iters" --warmup "$warmup" \
       --max-bytes "$max_bytes" > "$scratch/comm_$name.txt" 2>&1; then
    status=1
    tail -5 "$scratch/comm_$name.txt" | tee -a "$out/summary.txt"
  fi
}
if [ "$gemm_only" = 1 ]; then
  # The probe, and one small all-gather so that the record is a valid bench comm record.
  max_bytes=1M
  run auto "$gemtb" bench comm --gemm --ops all_gather --min-bytes 1M --label "interference probe"
  grep -E "^(gemm|#)" $scratch/comm_auto.txt | sed 's/^/   /' | tee -a "$out/summary.txt"
  stage "done: status $status"
  exit $status
fi
run auto "$gemtb" bench comm --gemm --copy-engine --label "NCCL auto and the copy-engine all-gather"
run ring NCCL_ALGO=Ring "$gemtb" bench comm --ops all_reduce,all_gather,reduce_scatter --label "NCCL_ALGO=Ring"
run tree NCCL_ALGO=allreduce:Tree "$gemtb" bench comm --ops all_reduce --label "NCCL_ALGO=allreduce:Tree"
stage "NCCL tuning table (NCCL_DEBUG_SUBSYS=TUNING)"
timeout "$(limit 60)" env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,GRAPH "$gemtb" bench comm \
  --ops all_reduce --min-bytes 1M --max-bytes 1M --iters 2 --warmup 1 > "$out/tuning.log" 2>&1
grep -E "Algorithm|Protocol|Max NThreads|Broadcast|Reduce|AllGather|AllReduce|Channel|NCCL version" "$out/tuning.log" \
  | head -40 | sed 's/^/   /' | tee -a "$out/summary.txt" > /dev/null
grep -E "^(all_|reduce|broadcast|gemm|#)" $scratch/comm_auto.txt | sed 's/^/   /' >> "$out/summary.txt"

commit=$(cat .deb/SOURCE 2>/dev/null || echo unknown)
hardware=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 - "$out" "$commit" "$hardware" <<'PY'
import json, os, sys
out, commit, hardware = sys.argv[1:]
runs = {}
for name in ("auto", "ring", "tree"):
    try:
        with open(os.path.join(out, f"comm_{name}.json")) as f:
            runs[name] = json.load(f)
    except (OSError, ValueError) as e:
        runs[name] = {"error": str(e)}
tuning = []
try:
    for line in open(os.path.join(out, "tuning.log"), errors="replace"):
        # The table rows (Algorithm/Protocol/Max NThreads/function lines hold '|'), the graph
        # search results and the version; not the per-channel connection lines.
        if ("|" in line or "Pattern" in line or "NCCL version" in line) and "via P2P" not in line:
            tuning.append(line.rstrip())
except OSError:
    pass
result = {"what": "gemtb bench comm on every GPU of the lent host, NVLS off",
          "commit": commit, "hardware": hardware, "command": "bash tools/bench_comm.sh", "runs": runs,
          "nccl_tuning_log": tuning[:400]}
with open(os.path.join(out, "comm_results.json"), "w") as f:
    json.dump(result, f, indent=1)
PY
stage "done: status $status"
exit $status
