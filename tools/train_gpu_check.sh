#!/usr/bin/env bash
# One device call on the lent H200 for the GPU trainer's layers (gpu/train/) and the embedding
# modules it runs (gpu/embedding/: the TBE, the sharded modules): builds their GPU tests from
# .deb/src.tgz (a `git archive` of the commit in .deb/SOURCE), runs them, then runs them again under
# compute-sanitizer memcheck. Writes $OUT/summary.txt, test.log, memcheck.log.
#
# Here, before the call: git archive --format=tar.gz -o .deb/src.tgz HEAD && git rev-parse HEAD > .deb/SOURCE
# Then run(command: "bash tools/train_gpu_check.sh", carry: [".deb"]).
# With `--check-train STEPS`, it also builds gemtb and runs `gemtb check train --config tiny --steps
# STEPS --matmul M --attention A` (the GPU trainer against the oracle's) for each M/A of
# `--check-numerics "fp32/fp32 tf32/bf16"` (default fp32/fp32) and pipeline of `--check-pipelines
# "sync semi-sync"` (default sync), writing check_train_<pipeline>_<M>_<A>.log and .json, and
# `gemtb train`'s kill-and-resume test (tests/training/gpu_train_cli_test.py --part gpu, train_kills.log);
# `--check-experts` adds the same check, synchronous and in the first numerics, on tiny with two
# Wukong experts (check_train_experts.log and .json);
# `--no-memcheck` leaves out the sanitizer pass (when the device time is short). Environment:
# TEST_TIMEOUT, seconds each test binary may run (default 150; four times that under memcheck);
# TESTS, the test binaries to build and run (default: all of the above).
# Exit status: 0 all passed, 1 a test, the sanitizer or the check failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
source tools/lib/device_build.sh
unpack_device_deps train_gpu_check require-src
build=$scratch/gemtb-train-build
check_steps=0
check_numerics="fp32/fp32"
check_pipelines="sync"
check_experts=0
memcheck=1
while [ $# -gt 0 ]; do
  case "$1" in
    --check-train) check_steps=${2:?--check-train needs a step count}; shift 2 ;;
    --check-numerics) check_numerics=${2:?--check-numerics needs a list}; shift 2 ;;
    --check-pipelines) check_pipelines=${2:?--check-pipelines needs a list}; shift 2 ;;
    --check-experts) check_experts=1; shift ;;
    --no-memcheck) memcheck=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
default_tests=(gpu_train_linear_test gpu_train_gemm_test gpu_train_gate_test gpu_train_layer_norm_test gpu_train_head_rms_norm_test
       gpu_train_qk_norm_rope_test gpu_train_loss_test gpu_train_dense_adam_test gpu_train_gdpa_test
       gpu_train_gdpa_tensor_core_test gpu_train_gem_model_test gpu_train_trainer_test gpu_train_model_kernels_test
       gpu_train_job_test gpu_comm_collectives_test gpu_embedding_test gpu_embedding_sharded_test)
read -r -a tests <<<"${TESTS:-${default_tests[*]}}"
targets=("${tests[@]}")
if [ "$check_steps" -gt 0 ]; then targets+=(gemtb); fi
start=$SECONDS
build_device_targets train_gpu_check "$build" "${tests[0]}" "${targets[@]}"
rc=0
# A test binary that hangs (e.g. virtual ranks waiting for one that failed) is killed after
# TEST_TIMEOUT seconds (default 150) so that the binaries after it still run.
test_timeout=${TEST_TIMEOUT:-150}
for t in "${tests[@]}"; do
  t_start=$SECONDS
  timeout --signal=KILL "$test_timeout" "$build/bin/$t" >>"$out/test.log" 2>&1
  t_rc=$?
  echo "$t: exit $t_rc after $((SECONDS - t_start)) s" | tee -a "$out/summary.txt"
  [ "$t_rc" = 0 ] || rc=1
  if [ "$memcheck" = 1 ]; then
    timeout --signal=KILL "$((4 * test_timeout))" compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$build/bin/$t" >>"$out/memcheck.log" 2>&1 || rc=1
  fi
done
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$out/test.log" | tee -a "$out/summary.txt"
if [ "$memcheck" = 1 ]; then grep -E "ERROR SUMMARY" "$out/memcheck.log" | tee -a "$out/summary.txt"; fi
if [ "$check_steps" -gt 0 ]; then
  for pipe in $check_pipelines; do
    for p in $check_numerics; do
      m=${p%/*} a=${p#*/}
      check_start=$SECONDS
      name=check_train_${pipe}_${m}_$a
      "$build/bin/gemtb" check train --config tiny --steps "$check_steps" --matmul "$m" --attention "$a" \
        --pipeline "$pipe" --json "$out/$name.json" >"$out/$name.log" 2>&1 || rc=1
      { tail -25 "$out/$name.log"
        echo "check train (pipeline $pipe, matmul $m, attention $a): $((SECONDS - check_start)) s"; } | tee -a "$out/summary.txt"
    done
  done
  if [ "$check_experts" = 1 ]; then
    # Tiny with two Wukong experts (the config's name kept: the data generator is tiny's).
    python3 "$srcdir/tools/lib/config_with_experts.py" "$srcdir/model/configs/tiny.json" "$out/tiny_2_experts.json" 2
    p=${check_numerics%% *} check_start=$SECONDS
    "$build/bin/gemtb" check train --config "$out/tiny_2_experts.json" --steps "$check_steps" --matmul "${p%/*}" \
      --attention "${p#*/}" --json "$out/check_train_experts.json" >"$out/check_train_experts.log" 2>&1 || rc=1
    { tail -25 "$out/check_train_experts.log"
      echo "check train (2 Wukong experts, matmul ${p%/*}, attention ${p#*/}): $((SECONDS - check_start)) s"; } | tee -a "$out/summary.txt"
  fi
  kill_start=$SECONDS
  python3 "$srcdir/tests/training/gpu_train_cli_test.py" "$build/bin/gemtb" --part gpu >"$out/train_kills.log" 2>&1 || rc=1
  { tail -15 "$out/train_kills.log"; echo "gemtb train kills: $((SECONDS - kill_start)) s"; } | tee -a "$out/summary.txt"
fi
echo "exit $rc after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $rc
