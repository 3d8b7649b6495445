"""gemtb train (the GPU trainer's command) end to end. Run by ctest with the gemtb binary and a part:

  --part cpu  (any machine, CI): bad flags and configs exit 2 naming the flag and write nothing; given
              to --resume, a checkpoint of `gemtb ref train` (the CPU oracle's trainer), one of another
              config, one with other options, a truncated or damaged one and an empty folder each exit 2
              naming the file and field, before the GPU is needed; a valid GPU checkpoint passes those
              checks (then trains on a GPU, or is refused for the missing GPU); `gemtb ref train`
              refuses a GPU checkpoint by its options; as a rank of a job (the launcher's variables
              set), flags that cannot run across ranks exit 2 naming the flag, and two real ranks
              without a GPU both exit 2 promptly, neither waiting for the other.
  --part gpu  (exit 77, skipped, without a usable GPU): tiny for 30 steps with checkpoints every 10
              steps; then ten times a run killed by SIGKILL at a random byte (fixed seed) of the
              checkpoint write at step 20 leaves the step-10 checkpoint loadable, and --resume to 30
              ends with a checkpoint whose bytes equal the uninterrupted run's.

The GPU checkpoints of the CPU part are made from the oracle's (the two trainers keep the same arrays;
only "options" entry 8, the gradient blocks, is 0 for the GPU trainer).

usage: gpu_train_cli_test.py GEMTB --part cpu|gpu
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

GEMTB = None
# The oracle's run whose arrays the CPU part's checkpoints hold; `gemtb train` flags with the same options.
ORACLE = ["--config", "tiny", "--batch", "4", "--steps", "2", "--schedule-steps", "2", "--eval-samples", "8",
          "--threads", "2"]
GPU = ["--config", "tiny", "--local-batch", "4", "--steps", "3", "--schedule-steps", "2", "--eval-samples", "8"]
NO_GPU = re.compile(r"built without CUDA|no usable CUDA device|no CUDA device|compute capability")


def run(args, expect=None, env=None):
    p = subprocess.run([GEMTB] + args, capture_output=True, text=True,
                       env=None if env is None else dict(os.environ, **env))
    if expect is not None:
        assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
    return p


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def with_options_entry(ckpt, index, value):
    """The checkpoint file `ckpt` (bytes) with options[index] = value, its checksum renewed."""
    count = struct.unpack_from("<I", ckpt, 12)[0]
    off = 16
    for _ in range(count):
        (n,) = struct.unpack_from("<I", ckpt, off)
        name = ckpt[off + 4:off + 4 + n].decode()
        off += 4 + n
        (size,) = struct.unpack_from("<Q", ckpt, off)
        off += 8
        if name == "options":
            # A .npy v1 file: magic (6), version (2), u16 header length, header, then the data (<f8 here).
            assert ckpt[off:off + 8] == b"\x93NUMPY\x01\x00" and b"'<f8'" in ckpt[off:off + 128]
            (header,) = struct.unpack_from("<H", ckpt, off + 8)
            body = bytearray(ckpt[:-8])
            struct.pack_into("<d", body, off + 10 + header + 8 * index, value)
            return bytes(body) + struct.pack("<Q", fnv1a64(body))
        off += size
    raise AssertionError("no options array")


def folder(dir, step, shard, config_hash, plan_hash):
    """DIR/step-<step>/rank-0.ckpt and its manifest, as `gemtb train` writes them."""
    step_dir = os.path.join(dir, f"step-{step}")
    os.makedirs(step_dir)
    write(os.path.join(step_dir, "rank-0.ckpt"), shard)
    manifest = {"format": "gemtb sharded checkpoint", "version": 1, "step": step, "world_size": 1,
                "config_hash": config_hash, "plan_hash": plan_hash,
                "shards": [{"rank": 0, "file": "rank-0.ckpt", "bytes": len(shard),
                            "sha256": hashlib.sha256(shard).hexdigest()}]}
    write(os.path.join(step_dir, "manifest.json"), json.dumps(manifest).encode())
    return dir


def refused(args, words):
    """`gemtb train args` exits 2 with one error line holding every one of `words`."""
    p = run(["train"] + args, expect=2)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("gemtb train: error: "), (args, p.stderr)
    for w in words:
        assert w in p.stderr, (args, w, p.stderr)
    assert "step " not in p.stdout, (args, p.stdout)
    return p.stderr


def cpu_part(d):
    ck = os.path.join(d, "ck")
    for bad, words in ((["--steps", "-1"], "--steps: -1"), (["--local-batch", "0"], "--local-batch: 0"),
                       (["--config", "nope"], "--config"), (["--lr", "nan"], "--lr: nan"),
                       (["--table-lr", "-1"], "--table-lr: -1"), (["--log-every-s", "0"], "--log-every-s: 0"),
                       (["--peak-tflops", "0"], "--peak-tflops: 0"),
                       (["--matmul", "fp16"], '--matmul: "fp16"'), (["--attention", "tf32"], '--attention: "tf32"'),
                       (["--block-kernels", "fast"], '--block-kernels: "fast" (want separate or fused)'),
                       (["--eval-samples", "-1"], "--eval-samples: -1"), (["--seed", "-2"], "--seed: -2"),
                       (["--schedule-steps", "0"], "--schedule-steps: 0"), (["--steps", "x"], "--steps"),
                       (["--pipeline", "async"], "--pipeline: 'async' is not sync or semi-sync"),
                       (["--param-prefetch"], "--param-prefetch: a job's option"),
                       (["--nosuch", "1"], "nosuch"), (["--checkpoint-every", "-1"], "--checkpoint-every: -1"),
                       (["--report", os.path.join(d, "missing", "r.json")], "--report"),
                       (["--trace", os.path.join(d, "missing", "t.json")], "--trace"),
                       (["--checkpoint", os.path.join(d, "missing", "ck")], "missing does not exist")):
        refused(bad + ([] if "--checkpoint" in bad else ["--checkpoint", ck]), [words])
        assert not os.path.exists(ck), bad
    refused(["--resume"], ["--resume: needs --checkpoint"])
    refused(["--checkpoint-every", "5"], ["--checkpoint-every: 5 needs --checkpoint"])
    refused(["--resume", "--checkpoint", ck], ["--resume", ck, "no such folder"])
    assert not os.path.exists(ck)
    empty = os.path.join(d, "empty")
    os.mkdir(empty)
    refused(["--resume", "--checkpoint", empty], ["--resume", "no checkpoint"])

    # The oracle's checkpoint: one file, refused as a folder; in the folder layout, refused by its options.
    oracle_file = os.path.join(d, "oracle.bin")
    run(["ref", "train"] + ORACLE + ["--checkpoint", oracle_file], expect=0)
    refused(GPU + ["--resume", "--checkpoint", oracle_file], ["--checkpoint", "is a file, not a folder"])
    data = re.search(r"^data (.+) \(", run(["--version"], expect=0).stdout, re.M).group(1)
    config_hash = hashlib.sha256(read(os.path.join(data, "model", "configs", "tiny.json"))).hexdigest()
    small_hash = hashlib.sha256(read(os.path.join(data, "model", "configs", "small.json"))).hexdigest()
    plan_hash = hashlib.sha256(b"data parallel, tables replicated").hexdigest()
    shard = read(oracle_file)
    oracle = folder(os.path.join(d, "oracle"), 2, shard, config_hash, plan_hash)
    refused(GPU + ["--resume", "--checkpoint", oracle],
            ["step-2/rank-0.ckpt", "state.options: grad_blocks 16", "CPU oracle's trainer"])

    # A GPU checkpoint (grad_blocks 0): other options, another config, damaged files are refused by name.
    gpu_shard = with_options_entry(shard, 8, 0.0)
    gpu = folder(os.path.join(d, "gpu"), 2, gpu_shard, config_hash, plan_hash)
    refused(GPU + ["--lr", "0.002", "--resume", "--checkpoint", gpu],
            ["rank-0.ckpt", "state.options: lr differs: the checkpoint has 0.001, this run 0.002"])
    refused(GPU[:3] + ["8"] + GPU[4:] + ["--resume", "--checkpoint", gpu], ["batch differs: the checkpoint has 4, this run 8"])
    refused(["--config", "small"] + GPU[2:] + ["--resume", "--checkpoint", gpu],
            ["step-2/manifest.json", "config_hash " + config_hash, "a checkpoint of another config"])
    other = folder(os.path.join(d, "other"), 2, gpu_shard, small_hash, plan_hash)
    refused(GPU + ["--resume", "--checkpoint", other], ["manifest.json: config_hash " + small_hash, "another config"])
    cut = gpu_shard[:len(gpu_shard) // 2]
    truncated = folder(os.path.join(d, "truncated"), 2, gpu_shard, config_hash, plan_hash)
    write(os.path.join(truncated, "step-2", "rank-0.ckpt"), cut)
    refused(GPU + ["--resume", "--checkpoint", truncated], ["rank-0.ckpt", f"{len(cut)} bytes", "the manifest says"])
    # Truncated with a manifest that agrees: the checkpoint reader's own checks name the file.
    agreeing = folder(os.path.join(d, "agreeing"), 2, cut, config_hash, plan_hash)
    refused(GPU + ["--resume", "--checkpoint", agreeing], ["--resume", "rank-0.ckpt"])
    damaged = folder(os.path.join(d, "damaged"), 2, gpu_shard, config_hash, plan_hash)
    write(os.path.join(damaged, "step-2", "manifest.json"), b"{\"format\": ")
    refused(GPU + ["--resume", "--checkpoint", damaged], ["manifest.json", "not valid JSON"])

    # The valid GPU checkpoint passes every check: trained on a GPU, else refused for the GPU alone.
    p = run(["train"] + GPU + ["--resume", "--checkpoint", gpu, "--log-every-s", "1000"])
    if p.returncode == 0:
        assert "resumed from " + os.path.join(gpu, "step-2") + " at step 2" in p.stdout, p.stdout
        assert re.search(r"^step 3 loss \S+ samples/s \S+ step_ms \S+$", p.stdout, re.M), p.stdout
    else:
        assert p.returncode == 2 and NO_GPU.search(p.stderr) and p.stderr.count("\n") == 1, (p.returncode, p.stderr)

    # The oracle refuses the GPU trainer's arrays by the same entry.
    gpu_file = os.path.join(d, "gpu.bin")
    write(gpu_file, gpu_shard)
    p = run(["ref", "train"] + ORACLE[:5] + ["4"] + ORACLE[6:] + ["--resume", gpu_file], expect=2)
    assert "grad_blocks differs: the checkpoint has 0, this run 16" in p.stderr, p.stderr
    bench_layers_bad_input(d)
    job_bad_input(d)
    print("cpu part ok")
    return 0


def torchrun_env(rank, world, port):
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def job_bad_input(d):
    """`gemtb train` as rank 0 of 2 (torchrun's variables): flags a job cannot run exit 2 naming the
    flag before any rank waits; launcher variables that contradict each other are named; two ranks
    started together on a machine without a GPU both exit 2 within seconds."""
    env = torchrun_env(0, 2, 29650)
    ck = os.path.join(d, "job_ck")
    for bad, words in ((["--shard-group", "3"], "--shard-group: 3 does not divide the job's 2 ranks"),
                       (["--shard-group", "0"], "--shard-group: 0"),
                       (["--ep-degree", "4"], "--ep-degree: 4 does not divide the job's 2 ranks"),
                       (["--ep-degree", "2"], "--ep-degree: 2 does not divide the model's 1 Wukong expert"),
                       (["--ep-degree", "2", "--expert-shard-group", "2"],
                        "--expert-shard-group: 2 does not divide the 1 ranks that run each expert"),
                       (["--expert-shard-group", "1"], "--expert-shard-group: needs --ep-degree 2 or more"),
                       (["--ep-degree", "2", "--param-gather", "copy_engine"],
                        "--param-gather: copy_engine does not run with --ep-degree"),
                       (["--param-gather", "sm"], "--param-gather: 'sm' is not nccl or copy_engine"),
                       (["--store-timeout", "0"], "--store-timeout: 0"),
                       (["--batch-split", "random"], "--batch-split: 'random' is not contiguous, bbs or balance"),
                       (["--batch-split", "bbs", "--sub-batch", "3"], "--sub-batch: 3 does not divide --local-batch 4"),
                       (["--checkpoint", ck, "--crash-checkpoint-after-bytes", "10"],
                        "--crash-checkpoint-after-bytes: a single process only"),
                       (["--plan", "DP"], "--plan: plan.tables[0] (table 'user'): DP tables are not run by the GPU"),
                       (["--plan", "RW", "--gpus-per-host", "0"], "--gpus-per-host: 0"),
                       (["--pipeline", "semi-sync", "--checkpoint", ck],
                        "--pipeline: semi-sync in a job writes no checkpoint"),
                       (None, "--local-batch: 600000 on 2 ranks")):
        flags = GPU + bad if bad else GPU[:3] + ["600000"] + GPU[4:]
        p = run(["train"] + flags, expect=2, env=env)
        # The plan's routing is checked by the GPU build's code; a build without CUDA stops after the flags.
        if bad and bad[:2] == ["--plan", "DP"] and "built without CUDA" in p.stderr:
            continue
        assert p.stderr.startswith("gemtb train: error: ") and words in p.stderr, (bad, p.stderr)
        assert not os.path.exists(ck), bad
    # A plan shards over a job's ranks; one process keeps its tables whole.
    p = run(["train"] + GPU + ["--plan", "RW"], expect=2)
    assert "--plan: shards the tables over a job's ranks" in p.stderr, p.stderr
    p = run(["train"] + GPU + ["--gpus-per-host", "2"], expect=2)
    assert "--gpus-per-host: needs --plan" in p.stderr, p.stderr
    p = run(["train"] + GPU + ["--ep-degree", "2"], expect=2)
    assert "--ep-degree: 2 does not divide the job's 1 rank" in p.stderr, p.stderr
    p = run(["train"] + GPU, expect=2, env=torchrun_env(2, 2, 29650))
    assert "RANK" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    # Two ranks at once: without a GPU each stops before the rendezvous (no rank waits for the other);
    # with one GPU, rank 1 has none and rank 0's wait for it ends at --store-timeout naming it; with two,
    # they train. No outcome may hang.
    procs = [subprocess.Popen([GEMTB, "train"] + GPU + ["--store-timeout", "20"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ, **torchrun_env(r, 2, 29652)))
             for r in range(2)]
    for r, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {r} of a two-rank job did not end within 120 s")
        if proc.returncode != 0:
            assert (proc.returncode == 2 and (NO_GPU.search(err) or "CUDA devices visible" in err)) or \
                re.search(r"rank.*1.*(not connected|gone|closed|died)|connect", err), (r, proc.returncode, err)


def bench_layers_bad_input(d):
    """`gemtb bench layers`: bad flags exit 2 naming the flag and write no --out-dir; without a GPU, the
    same (before: nothing measured, nothing written)."""
    out = os.path.join(d, "bl")
    for bad, words in ((["--steps", "0"], "--steps: 0"), (["--local-batch", "0"], "--local-batch: 0"),
                       (["--warmup", "-1"], "--warmup: -1"), (["--config", "nope"], "--config"),
                       (["--peak-tflops", "0"], "--peak-tflops: 0"), (["--hbm-tbps", "nan"], "--hbm-tbps: nan"),
                       (["--seed", "-1"], "--seed: -1"), (["--matmul", "x"], '--matmul: "x"'),
                       (["--ffn", "fp16"], '--ffn: "fp16"'),
                       (["--attention-blocks", "fp8"], '--attention-blocks: "fp8"'),
                       (["--block-kernels", "mega"], '--block-kernels: "mega"'),
                       (["--attention", "fp32", "--attention-blocks", "bf16"],
                        "--attention-blocks bf16: needs --attention bf16")):
        p = run(["bench", "layers", "--out-dir", out] + bad, expect=2)
        assert p.stderr.startswith("gemtb bench layers: error: ") and words in p.stderr, (bad, p.stderr)
        assert not os.path.exists(out), bad
    p = run(["bench", "layers"], expect=2)
    assert "--out-dir: required" in p.stderr, p.stderr
    p = run(["bench", "layers", "--out-dir", os.path.join(d, "missing", "bl")], expect=2)
    assert "--out-dir" in p.stderr, p.stderr
    p = run(["bench", "layers", "--out-dir", out, "--config", "tiny", "--local-batch", "4", "--warmup", "0",
             "--steps", "1"])
    if p.returncode != 0:
        assert p.returncode == 2 and NO_GPU.search(p.stderr) and p.stderr.count("\n") == 1, (p.returncode, p.stderr)
        assert not os.path.exists(out)


def gpu_part(d):
    base_flags = ["--config", "tiny", "--schedule-steps", "30", "--checkpoint-every", "10", "--log-every-s", "1000"]
    probe = run(["train", "--config", "tiny", "--steps", "1", "--local-batch", "4", "--eval-samples", "0"])
    if probe.returncode == 2 and NO_GPU.search(probe.stderr):
        print("no usable GPU: skipped (" + probe.stderr.strip() + ")")
        return 77
    assert probe.returncode == 0, (probe.returncode, probe.stdout, probe.stderr)

    straight, report, trace = os.path.join(d, "straight"), os.path.join(d, "report.json"), os.path.join(d, "trace.json")
    p = run(["train"] + base_flags + ["--steps", "30", "--checkpoint", straight, "--eval-samples", "1024",
                                      "--report", report, "--trace", trace], expect=0)
    assert re.search(r"^step 30 loss \S+ samples/s \S+ step_ms \S+ mfu \S+%$", p.stdout, re.M), p.stdout
    assert re.search(r"^eval step 30 held-out samples 1024: ctr ne ", p.stdout, re.M), p.stdout
    assert sorted(os.listdir(straight)) == ["step-30"], os.listdir(straight)
    rep = json.load(open(report))
    for key in ("config", "steps", "local_batch", "wall_s", "samples_per_s", "mean_step_ms", "step_ms_median",
                "final_loss", "held_out_ne"):
        assert key in rep, (key, rep)
    assert rep["steps"] == 30 and rep["local_batch"] == 64 and rep["config"] == "tiny", rep
    assert [t["task"] for t in rep["held_out_ne"]] == ["ctr", "conversion"], rep
    assert rep["model_flops_per_step_mean"] > 0 and 0 < rep["e2e_mfu"] < 1 and rep["peak_flops"] == 989e12, rep
    assert set(rep["phase_ms_mean"]) == {"data", "embedding_fwd", "model", "embedding_bwd", "optimizer"}, rep
    passes = {(r["region"], r["pass"]) for r in rep["last_step_regions_ms"]}
    assert ("L1.cross", "fwd") in passes and ("head", "bwd") in passes and ("E.dense", "bwd") in passes, passes
    # The trace: rank 0, the GPU's work on "compute" under the simulator's task names.
    events = json.load(open(trace))["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "X" and e["tid"] == 0}
    assert {"sparse.lookup", "L1.cross.fwd", "L1.cross.bwd", "head.bwd", "sparse.update", "optimizer"} <= names, names
    assert {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "compute"}} in events, events[:4]
    final = read(os.path.join(straight, "step-30", "rank-0.ckpt"))
    manifest = json.load(open(os.path.join(straight, "step-30", "manifest.json")))
    assert manifest["world_size"] == 1 and manifest["step"] == 30 and manifest["shards"][0]["bytes"] == len(final)

    base = os.path.join(d, "base")
    run(["train"] + base_flags + ["--steps", "10", "--checkpoint", base, "--eval-samples", "0"], expect=0)
    base_shard = read(os.path.join(base, "step-10", "rank-0.ckpt"))
    rng = random.Random(20)
    for trial in range(10):
        at = rng.randrange(len(final))  # the step-20 shard has the step-30 shard's size
        ck = os.path.join(d, f"kill{trial}")
        shutil.copytree(base, ck)
        p = run(["train"] + base_flags + ["--steps", "30", "--checkpoint", ck, "--resume", "--eval-samples", "0",
                                          "--crash-checkpoint-after-bytes", str(at)])
        assert p.returncode == -signal.SIGKILL, (trial, at, p.returncode, p.stdout, p.stderr)
        assert not os.path.exists(os.path.join(ck, "step-20", "manifest.json")), (trial, at)
        assert read(os.path.join(ck, "step-10", "rank-0.ckpt")) == base_shard, (trial, at)
        p = run(["train"] + base_flags + ["--steps", "30", "--checkpoint", ck, "--resume", "--eval-samples", "0"],
                expect=0)
        assert "resumed from " + os.path.join(ck, "step-10") + " at step 10" in p.stdout, p.stdout
        assert sorted(os.listdir(ck)) == ["step-30"], (trial, os.listdir(ck))
        assert read(os.path.join(ck, "step-30", "rank-0.ckpt")) == final, (trial, at, "resumed != uninterrupted")
        print(f"kill {trial} at byte {at} of {len(final)}: step 10 loaded, resumed to the uninterrupted bytes")
        shutil.rmtree(ck)
    bench_layers_predicted(d)
    print("gpu part ok")
    return 0


def bench_layers_predicted(d):
    """`gemtb bench layers` on tiny: every layer of model.json timed in both passes, the report ranked by
    lost time, a calibration `gemtb whatif` accepts with every layer priced by it, and the simulator's
    step on its one-GPU scenario no shorter than the measured layers' sum."""
    out = os.path.join(d, "layers")
    run(["bench", "layers", "--out-dir", out, "--config", "tiny", "--local-batch", "64", "--warmup", "2",
         "--steps", "3"], expect=0)
    rep = json.load(open(os.path.join(out, "bench_layers.json")))
    model = os.path.join(d, "tiny_model.json")
    run(["model", "--config", "tiny", "--emit", model], expect=0)
    ops = json.load(open(model))["ops"]
    regions = {op["region"] for op in ops}
    lookups = {op["region"] for op in ops if op["kind"] == "embedding"} - {op["region"] for op in ops if op["kind"] != "embedding"}
    assert set(rep["untimed_layers"]) == lookups, (rep["untimed_layers"], lookups)  # the TBE's, in its phases
    timed = regions - lookups
    rows = rep["layers"]
    assert {(r["layer"], r["pass"]) for r in rows} == {(g, p) for g in timed for p in ("fwd", "bwd")}, rows
    assert all(r["ms"] > 0 and 0 < r["mfu"] < 1 and r["lost_ms"] == r["ms"] - r["roofline_ms"] for r in rows), rows
    assert [r["lost_ms"] for r in rows] == sorted((r["lost_ms"] for r in rows), reverse=True), rows
    assert abs(rep["layers_ms"] - sum(r["ms"] for r in rows)) < 1e-9 * rep["layers_ms"], rep
    assert 0 < rep["local_mfu"] < 1 and rep["e2e_mfu"] < rep["local_mfu"], rep
    cal = json.load(open(os.path.join(out, "layers.json")))
    assert cal["format"] == "gemtb-layer-calibration" and cal["config"] == "tiny" and set(cal["layers"]) == regions, cal
    # The lookups' regions: priced from the embedding phases, their passes' times summing to the phases'.
    phase = rep["embedding_phase_layers"]
    for p, key in (("fwd", "embedding_fwd"), ("bwd", "embedding_bwd")):
        got = sum(r["ms"] for r in phase if r["pass"] == p)
        assert abs(got - rep["phase_ms_mean"][key]) <= 1e-9 * got, (p, got, rep["phase_ms_mean"])
    assert {r["layer"] for r in phase} == lookups, phase
    assert all(0 < e <= 1 for entry in cal["layers"].values() for e in entry.values()), cal
    w = os.path.join(d, "whatif")
    run(["whatif", os.path.join(out, "scenario.json"), "--layer-calibration", os.path.join(out, "layers.json"),
         "--no-sensitivity", "--no-checks", "--no-levers", "--no-attribution", "--quiet", "--out-dir", w], expect=0)
    summary = json.load(open(os.path.join(w, "summary.json")))
    sources = summary["layer_calibration"]["efficiency_sources"]
    assert sources["measured_layer"] > 0 and sources["measured_kind"] == 0, sources
    # The simulator's step: the layers at their measured rates (on its own draws of the lengths, a few
    # percent either way) plus what it models beside them.
    predicted_ms = 1e3 * summary["reference"]["step_time"]["mean_s"]
    assert 0.9 * rep["layers_ms"] <= predicted_ms <= 1.1 * rep["step_ms_mean"], (predicted_ms, rep)
    print(f"bench layers: layers {rep['layers_ms']:.3f} ms of a {rep['step_ms_mean']:.3f} ms step, local MFU "
          f"{100 * rep['local_mfu']:.3f}%; whatif predicts {predicted_ms:.3f} ms")


def main():
    global GEMTB
    parser = argparse.ArgumentParser()
    parser.add_argument("gemtb")
    parser.add_argument("--part", choices=["cpu", "gpu"], required=True)
    args = parser.parse_args()
    GEMTB = args.gemtb
    with tempfile.TemporaryDirectory() as d:
        return cpu_part(d) if args.part == "cpu" else gpu_part(d)


if __name__ == "__main__":
    sys.exit(main())
