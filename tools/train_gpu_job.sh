#!/usr/bin/env bash
# The device calls for the GPU trainer as a job of several ranks (gemtb train under torchrun), on
# every GPU of the lent host:
#   1. builds gemtb and the job's GPU tests from .deb/src.tgz (a `git archive` of the commit in
#      .deb/SOURCE) and runs them: gpu_comm_collectives_test (the copy-engine all-gather, a one-rank
#      NCCL group), gpu_embedding_sharded_test (sharded tables on virtual ranks against the oracle's
#      sharded executor, 1D and 2D) and gpu_train_job_test (virtual ranks on one GPU, replicated and
#      sharded tables, a one-rank NCCL job); one GPU is enough for these;
#   2. for each N of --gpus (default "1 2 4", those not above the visible count): the tiny config in
#      the check precision (fp32 matmul and attention) at a
#      fixed global batch (--tiny-batch, split over the N ranks) for --tiny-steps steps under
#      `torchrun --standalone --nproc-per-node N --no-python gemtb train`, its report and trace, and
#      its per-step losses against the one-GPU run's (tools/lib/compare_train_logs.py: every logged
#      loss within 1e-4 relative, as a reduction's rounding moves them); on 2 GPUs or more the same
#      with --param-prefetch (the dense collectives unit by unit), and with the tables sharded by
#      tools/bench/plans/tiny_mixed_1d.json (against the same one-GPU run) and, on 4,
#      tiny_fully_sharded_2d.json (M = 2 positions, 2 replicas; not one model), each against
#      `gemtb ref train` with the same plan on N virtual ranks (the oracle's sharded execution, on
#      this host's CPU; every loss within 1e-5 relative), and the 1D plan under --pipeline semi-sync
#      against the oracle's semi-synchronous run of it;
#   2a. for each N: tiny with two Wukong experts, on one GPU both, on N >= 2 with --ep-degree 2 (each
#      pair of ranks splits the experts): every logged loss within 1e-4 relative of the one GPU's;
#   2b. on 2 GPUs: a tiny job's checkpoint and resume (10 steps, resume to 20) against 20 steps
#      straight, with sharded tables and with two experts under --ep-degree 2: the same losses after
#      the resume and the same step-20 checkpoint bytes;
#   3. for each N: the small config at a fixed local batch (--small-batch per GPU, --small-steps
#      steps), samples/s and step times from the reports, and the scaling ratio against N = 1; on 2
#      GPUs or more also with row-wise sharded tables (--plan RW), the job `gemtb whatif` describes,
#      and the same with --param-prefetch (2D FSDP by units, its collectives beside compute);
#   4. `gemtb bench layers` on one GPU at the small batch (the per-layer calibration and a one-GPU
#      scenario), then `gemtb whatif` on that scenario for each N with the tables row-wise sharded and
#      the dense parameters in one FSDP group of N: the predicted step beside the measured
#      job_small_rw_<N> (issue 29's table: within 10% at each size), and with every unit's gather
#      ahead (prefetch depth beyond the unit count) beside job_small_rw_prefetch_<N>;
#   5. on 2 GPUs or more: `gemtb bench comm --copy-engine --gemm` (NCCL's and the copy-engine
#      all-gather's busbw, the GEMM beside each).
# `--parts "tests tiny resume small comm"` (default all) runs only those steps (1, 2, 2b, 3 and 4,
# 5): a device call is at most 10 minutes, and the build stays on a warm machine between calls.
# Writes $OUT/summary.txt, build.log, tests.log, job_<config>_<N>.{log,json}, trace_tiny_<N>.json,
# comm.json and comm.log. --param-gather copy_engine gathers the dense parameters on the copy engines.
#
# Here, before the call: git archive --format=tar.gz -o .deb/src.tgz HEAD && git rev-parse HEAD > .deb/SOURCE
# Then run(command: "bash tools/train_gpu_job.sh", carry: [".deb"]).
# Exit status: 0 all passed, 1 a test, a run or a comparison failed, 2 the build failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/out}
mkdir -p "$out"
source tools/lib/device_build.sh
unpack_device_deps train_gpu_job require-src
build=$scratch/gemtb-job-build
gpus_list="1 2 4"
tiny_batch=64 tiny_steps=50
small_batch=256 small_steps=20
param_gather=nccl
parts="tests tiny resume small comm"
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) gpus_list=${2:?}; shift 2 ;;
    --tiny-batch) tiny_batch=${2:?}; shift 2 ;;
    --tiny-steps) tiny_steps=${2:?}; shift 2 ;;
    --small-batch) small_batch=${2:?}; shift 2 ;;
    --small-steps) small_steps=${2:?}; shift 2 ;;
    --param-gather) param_gather=${2:?}; shift 2 ;;
    --parts) parts=${2:?}; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
part() { [[ " $parts " == *" $1 "* ]]; }  # part NAME: whether --parts holds NAME
visible=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
tests=(gpu_comm_collectives_test gpu_embedding_sharded_test gpu_train_job_test)
start=$SECONDS
build_device_targets train_gpu_job "$build" gemtb gemtb "${tests[@]}"
echo "GPUs visible: $visible" | tee -a "$out/summary.txt"
rc=0
if part tests; then
  for t in "${tests[@]}"; do "$build/bin/$t" >>"$out/tests.log" 2>&1 || rc=1; done
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$out/tests.log" | tee -a "$out/summary.txt"
fi

gemtb=$build/bin/gemtb
run_job() {  # run_job N NAME gemtb-train-flags...
  local n=$1 name=$2
  shift 2
  local t0=$SECONDS
  if ! timeout 400 torchrun --standalone --nproc-per-node "$n" --no-python "$gemtb" train --param-gather "$param_gather" \
       --log-every-s 0.001 --report "$out/$name.json" "$@" >"$out/$name.log" 2>&1; then
    rc=1
    echo "$name: FAILED" | tee -a "$out/summary.txt"
    tail -8 "$out/$name.log" | tee -a "$out/summary.txt"
    return 1
  fi
  echo "$name: $(grep '^final:' "$out/$name.log") ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
}
# Tiny with two Wukong experts (the config's name kept: the data generator is tiny's).
python3 tools/lib/config_with_experts.py model/configs/tiny.json "$out/tiny_2_experts.json" 2
for n in $gpus_list; do
  part tiny || break
  [ "$n" -le "$visible" ] || continue
  # Two experts: one GPU runs both; a job with --ep-degree 2, one each on a pair of ranks, the
  # activations all-gathered and the outputs reduce-scattered in the pair: the one GPU's steps.
  ep=()
  [ "$n" -gt 1 ] && ep=(--ep-degree 2)
  run_job "$n" "job_tiny_experts_$n" --config "$out/tiny_2_experts.json" --local-batch $((tiny_batch / n)) \
    --steps "$tiny_steps" --matmul fp32 --attention fp32 --eval-samples 1024 "${ep[@]}" || rc=1
  if [ "$n" -gt 1 ] && [ -f "$out/job_tiny_experts_1.log" ] && [ -f "$out/job_tiny_experts_$n.log" ]; then
    python3 tools/lib/compare_train_logs.py "$out/job_tiny_experts_1.log" "$out/job_tiny_experts_$n.log" --rel 1e-4 \
      | sed 's/^/2 experts, --ep-degree 2: /' | tee -a "$out/summary.txt" || rc=1
  fi
  run_job "$n" "job_tiny_$n" --config tiny --local-batch $((tiny_batch / n)) --steps "$tiny_steps" --matmul fp32 --attention fp32 \
    --eval-samples 1024 --trace "$out/trace_tiny_$n.json"
  if [ "$n" -gt 1 ] && [ -f "$out/job_tiny_1.log" ]; then
    python3 tools/lib/compare_train_logs.py "$out/job_tiny_1.log" "$out/job_tiny_$n.log" --rel 1e-4 \
      | tee -a "$out/summary.txt" || rc=1
    # The dense collectives unit by unit: the same steps within a reduction's rounding.
    run_job "$n" "job_tiny_prefetch_$n" --config tiny --local-batch $((tiny_batch / n)) --steps "$tiny_steps" \
      --matmul fp32 --attention fp32 --eval-samples 1024 --param-prefetch \
      && python3 tools/lib/compare_train_logs.py "$out/job_tiny_1.log" "$out/job_tiny_prefetch_$n.log" --rel 1e-4 \
      | sed 's/^/--param-prefetch: /' | tee -a "$out/summary.txt" || rc=1
    plans=(tiny_mixed_1d)
    [ "$n" -ge 4 ] && plans+=(tiny_fully_sharded_2d)
    for plan in "${plans[@]}"; do
      run_job "$n" "job_tiny_${plan}_$n" --config tiny --local-batch $((tiny_batch / n)) --steps "$tiny_steps" \
        --matmul fp32 --attention fp32 --eval-samples 1024 --plan "tools/bench/plans/$plan.json" \
        --trace "$out/trace_tiny_${plan}_$n.json" || rc=1
      # A 1D plan is one model: the one-GPU run's steps. Fully sharded 2D averages its replica groups'
      # copies: only the oracle's sharded run of the same plan (below) is its reference.
      if [ "$plan" = tiny_mixed_1d ] && [ -f "$out/job_tiny_${plan}_$n.log" ]; then
        python3 tools/lib/compare_train_logs.py "$out/job_tiny_1.log" "$out/job_tiny_${plan}_$n.log" --rel 1e-4 \
          | tee -a "$out/summary.txt" || rc=1
      fi
      # The oracle's sharded execution of the same plan on N virtual ranks (the CPU of this host):
      # every step's loss within the spec's fp32 bound (1e-5 relative) of the GPU job's.
      timeout 300 "$gemtb" ref train --config tiny --batch "$tiny_batch" --steps "$tiny_steps" --plan "tools/bench/plans/$plan.json" \
        --plan-ranks "$n" --log-every 1 --eval-samples 1024 >"$out/ref_tiny_${plan}_$n.log" 2>&1 \
        && python3 tools/lib/compare_train_logs.py "$out/ref_tiny_${plan}_$n.log" "$out/job_tiny_${plan}_$n.log" --rel 1e-5 \
        | sed 's/^/oracle vs GPU job: /' | tee -a "$out/summary.txt" || rc=1
    done
    # The semi-synchronous pipeline with the 1D plan's sharded tables against the oracle's.
    run_job "$n" "job_tiny_semi_$n" --config tiny --local-batch $((tiny_batch / n)) --steps "$tiny_steps" \
      --matmul fp32 --attention fp32 --eval-samples 1024 --plan tools/bench/plans/tiny_mixed_1d.json --pipeline semi-sync \
      && timeout 300 "$gemtb" ref train --config tiny --batch "$tiny_batch" --steps "$tiny_steps" \
        --plan tools/bench/plans/tiny_mixed_1d.json --plan-ranks "$n" --pipeline semi-sync --log-every 1 \
        --eval-samples 1024 >"$out/ref_tiny_semi_$n.log" 2>&1 \
      && python3 tools/lib/compare_train_logs.py "$out/ref_tiny_semi_$n.log" "$out/job_tiny_semi_$n.log" --rel 1e-5 \
      | sed 's/^/semi-sync, oracle vs GPU job: /' | tee -a "$out/summary.txt" || rc=1
  fi
done
# A job's checkpoint and resume on 2 GPUs, with sharded tables and with two experts under
# --ep-degree 2: 20 steps straight, against 10 steps, a checkpoint written rank by rank, and a resume
# to 20: the same losses after the resume, the same checkpoint bytes at step 20.
if part resume && [ "$visible" -ge 2 ]; then
  for kind in sharded experts; do
    common=(--local-batch 16 --schedule-steps 20 --eval-samples 0 --matmul fp32 --attention fp32)
    if [ "$kind" = sharded ]; then
      common+=(--config tiny --plan tools/bench/plans/tiny_mixed_1d.json)
    else
      common+=(--config "$out/tiny_2_experts.json" --ep-degree 2)
    fi
    run_job 2 "job_resume_${kind}_straight" "${common[@]}" --steps 20 --checkpoint "$out/ck_${kind}_straight" \
      && run_job 2 "job_resume_${kind}_first" "${common[@]}" --steps 10 --checkpoint "$out/ck_${kind}_resumed" \
      && run_job 2 "job_resume_${kind}_second" "${common[@]}" --steps 20 --checkpoint "$out/ck_${kind}_resumed" --resume \
      && python3 - "$out" "$kind" <<'PY' | tee -a "$out/summary.txt" || rc=1
import filecmp, os, re, sys
out, kind = sys.argv[1], sys.argv[2]
def losses(name):
    return {int(m.group(1)): m.group(2) for m in (re.match(r"^step (\d+) loss (\S+) ", l) for l in open(os.path.join(out, name)))
            if m}
straight, resumed = losses(f"job_resume_{kind}_straight.log"), losses(f"job_resume_{kind}_second.log")
after = {s: l for s, l in straight.items() if s > 10}
same_losses = after and all(resumed.get(s) == l for s, l in after.items())
a, b = os.path.join(out, f"ck_{kind}_straight", "step-20"), os.path.join(out, f"ck_{kind}_resumed", "step-20")
files = sorted(f for f in os.listdir(a) if f.startswith("rank-"))
same_bytes = files and all(filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False) for f in files)
what = {"sharded": "tiny, tiny_mixed_1d", "experts": "tiny with 2 experts, --ep-degree 2"}[kind]
print(f"job resume (2 GPUs, {what}): losses of steps 11-20 "
      f"{'equal' if same_losses else 'DIFFER'}, step-20 shards {'equal' if same_bytes else 'DIFFER'} ({len(files)} files)")
sys.exit(0 if same_losses and same_bytes else 1)
PY
  done
fi
for n in $gpus_list; do
  part small || break
  [ "$n" -le "$visible" ] || continue
  run_job "$n" "job_small_$n" --config small --local-batch "$small_batch" --steps "$small_steps" --eval-samples 0
  if [ "$n" -gt 1 ]; then
    run_job "$n" "job_small_rw_$n" --config small --local-batch "$small_batch" --steps "$small_steps" --eval-samples 0 \
      --plan RW
    # The same with 2D FSDP by units: gathers and reduce-scatters beside compute.
    run_job "$n" "job_small_rw_prefetch_$n" --config small --local-batch "$small_batch" --steps "$small_steps" \
      --eval-samples 0 --plan RW --param-prefetch
  fi
done
part small && python3 - "$out" $gpus_list <<'EOF' | tee -a "$out/summary.txt"
import json, os, sys
out, ns = sys.argv[1], sys.argv[2:]
base = None
for tables, prefix in (("replicated", "job_small_"), ("sharded RW", "job_small_rw_"),
                       ("sharded RW, --param-prefetch", "job_small_rw_prefetch_")):
    for n in ns:
        p = os.path.join(out, f"{prefix}{n}.json")
        if not os.path.exists(p):
            continue
        r = json.load(open(p))
        if base is None:
            base = (int(n), r["samples_per_s"])
        sr = r["samples_per_s"] / (base[1] * int(n) / base[0])
        print(f"small, tables {tables}, local batch {r['local_batch']}: {n} GPUs {r['samples_per_s']:.1f} samples/s, "
              f"median step {r['step_ms_median']:.2f} ms, slowest rank {r['slowest_rank_step_ms']:.2f} ms, exposed "
              f"comm {max(k['exposed_comm_ms_mean'] for k in r['ranks']):.2f} ms, e2e MFU {100 * r['e2e_mfu']:.2f}%, scaling vs "
              f"{base[0]} GPU: {sr:.3f}")
EOF
# The simulator on the same jobs: one GPU's per-layer calibration, then each N with RW tables.
if ! part small; then
  :
elif timeout 300 "$gemtb" bench layers --config small --local-batch "$small_batch" --steps 5 --out-dir "$out/layers" --force \
     >"$out/layers.log" 2>&1; then
  for n in $gpus_list; do
    [ "$n" -le "$visible" ] || continue
    # The trainer's whole gather keeps the parameters for the backward and gathers before the
    # forward; --param-prefetch issues every unit's gather at the step's start: no reshard, every
    # unit ahead.
    for kind in rw rw_prefetch; do
      python3 - "$out/layers/scenario.json" "$n" "$out/scenario_${kind}_$n.json" "$kind" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
n, kind = int(sys.argv[2]), sys.argv[4]
s["name"] = f"{s['name']}-{kind}-{n}"
s["overrides"]["cluster.world_size"] = n
if n > 1:
    dense = {"fsdp_shard_group": n, "reshard_after_forward": False}
    if kind == "rw_prefetch":
        dense["prefetch_depth"] = 1000
    s["plan"] = {"dense": dense, "sparse": {"default": {"type": "RW"}}}
json.dump(s, open(sys.argv[3], "w"), indent=2)
PY
      timeout 200 "$gemtb" whatif "$out/scenario_${kind}_$n.json" --layer-calibration "$out/layers/layers.json" \
        --no-sensitivity --no-checks --no-levers --no-attribution --quiet --out-dir "$out/whatif_${kind}_$n" \
        >"$out/whatif_${kind}_$n.log" 2>&1 || rc=1
      [ "$n" -gt 1 ] || break
    done
  done
  python3 - "$out" $gpus_list <<'PY' | tee -a "$out/summary.txt"
import json, os, sys
out, ns = sys.argv[1], sys.argv[2:]
for n in ns:
  for kind in ("rw", "rw_prefetch"):
    w = os.path.join(out, f"whatif_{kind}_{n}", "summary.json")
    m = os.path.join(out, f"job_small_{kind}_{n}.json" if int(n) > 1 else "job_small_1.json")
    if not (os.path.exists(w) and os.path.exists(m)):
        continue
    pred = 1e3 * json.load(open(w))["reference"]["step_time"]["mean_s"]
    meas = json.load(open(m))["step_ms_median"]
    what = {"rw": " RW tables", "rw_prefetch": " RW tables, --param-prefetch"}[kind] if int(n) > 1 else ""
    print(f"small, {n} GPUs{what}: whatif {pred:.2f} ms, measured median {meas:.2f} ms, "
          f"error {100 * (pred - meas) / meas:+.1f}%")
PY
else
  rc=1
  echo "bench layers: FAILED" | tee -a "$out/summary.txt"
  tail -5 "$out/layers.log" | tee -a "$out/summary.txt"
fi
if part comm && [ "$visible" -ge 2 ]; then
  timeout 300 "$gemtb" bench comm --copy-engine --gemm --ops all_gather,reduce_scatter,all_reduce --min-bytes 1M \
    --json "$out/comm.json" >"$out/comm.log" 2>&1 || rc=1
  grep -E "^(all_gather|gemm|#)" "$out/comm.log" | tee -a "$out/summary.txt"
fi
echo "exit $rc after $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $rc
