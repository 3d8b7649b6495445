"""gemtb ref train across processes (run by ctest with the gemtb binary as its argument), each rank a
real process given the launcher's variables as torchrun, mpirun or srun set them: 4 ranks end with
the single process's state byte for byte, and so do 2 ranks under Open MPI's and SLURM's variables;
2 steps + a resume from the sharded checkpoint folder == 4 straight; SIGTERM to one rank stops
every rank after the same step with a checkpoint that resumes to a straight run's bytes; a rank
killed with SIGKILL, ranks that disagree on the world size, a world size that does not divide
--grad-blocks, a resume with another world size and a stale copy of the checkpoint folder on one
rank each end every rank with a named error, well inside --store-timeout; a malformed launcher
variable exits 2.

With --mpirun: only `mpirun -np 4 gemtb ref train` against the single process, byte for byte
(exit 77, skipped, without Open MPI's mpirun)."""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

GEMTB = sys.argv[1]
BASE = ["ref", "train", "--config", "tiny", "--batch", "16", "--eval-samples", "64",
        "--log-every", "1", "--threads", "1", "--store-timeout", "60"]
FOUR = ["--grad-blocks", "4", "--schedule-steps", "4"]  # the runs compared with the single process
TIMEOUT = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_env(kind, rank, world, port, world_seen=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    w = str(world_seen if world_seen is not None else world)
    if kind == "torchrun":
        env.update(RANK=str(rank), WORLD_SIZE=w, LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=w)
    elif kind == "mpi":
        env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=w, OMPI_COMM_WORLD_LOCAL_RANK=str(rank))
    else:
        env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=w, SLURM_LOCALID=str(rank))
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


AGENT_STORES = []  # listening sockets standing in for torchrun's agent store on MASTER_PORT


def start(args, world, kind="torchrun", cwds=None, worlds=None):
    port = free_port()
    if kind == "torchrun":  # torchrun's agent holds MASTER_PORT; gemtb's store takes MASTER_PORT + 1
        while True:
            agent = socket.socket()
            agent.bind(("0.0.0.0", port))
            agent.listen()
            try:
                with socket.socket() as probe:
                    probe.bind(("0.0.0.0", port + 1))
                break
            except OSError:
                agent.close()
                port = free_port()
        AGENT_STORES.append(agent)
    procs = []
    for r in range(world):
        env = launcher_env(kind, r, world, port, worlds[r] if worlds else None)
        procs.append(subprocess.Popen([GEMTB] + args, env=env, cwd=cwds[r] if cwds else None, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def finish(procs):
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=TIMEOUT + 30)
        out.append((p.returncode, stdout, stderr))
    return out


def run_job(args, world, **kw):
    return finish(start(args, world, **kw))


def assert_ok(results):
    for r, (rc, stdout, stderr) in enumerate(results):
        assert rc == 0, (r, rc, stdout, stderr)


def arrays_of_file(path):
    """The named arrays of a checkpoint file (docs/checkpoint.md), as raw .npy bytes."""
    b = open(path, "rb").read()
    assert b[:8] == b"GEMTBCKP", path
    count = struct.unpack_from("<I", b, 12)[0]
    at, out = 16, {}
    for _ in range(count):
        n = struct.unpack_from("<I", b, at)[0]
        name = b[at + 4:at + 4 + n].decode()
        at += 4 + n
        m = struct.unpack_from("<Q", b, at)[0]
        out[name] = b[at + 8:at + 8 + m]
        at += 8 + m
    return out


def arrays_of_folder(folder):
    """Every shard's arrays of the newest sharded checkpoint in `folder`."""
    steps = sorted(int(e[5:]) for e in os.listdir(folder) if e.startswith("step-")
                   and os.path.exists(os.path.join(folder, e, "manifest.json")))
    step_dir = os.path.join(folder, "step-%d" % steps[-1])
    out = {}
    for e in sorted(os.listdir(step_dir)):
        if e.endswith(".ckpt"):
            out.update(arrays_of_file(os.path.join(step_dir, e)))
    return steps[-1], out


def alone_env():
    """This environment without any launcher's variables: a single process."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}


def single_process(d):
    """The 4-step single-process run: its arrays and its output."""
    single = os.path.join(d, "single.bin")
    p = subprocess.run([GEMTB] + BASE + FOUR + ["--steps", "4", "--checkpoint", single], capture_output=True, text=True,
                       env=alone_env())
    assert p.returncode == 0, p.stderr
    expected = arrays_of_file(single)
    assert len(expected) > 10, expected.keys()
    return expected, p


def main_mpirun():
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("skipped: no mpirun (tools/setup.sh installs Open MPI's openmpi-bin)")
        return 77
    with tempfile.TemporaryDirectory() as d:
        expected, _ = single_process(d)
        folder = os.path.join(d, "mpirun")
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        cmd = [mpirun] + root + ["--oversubscribe", "-np", "4", "-x", "MASTER_ADDR=127.0.0.1", "-x",
                                 "MASTER_PORT=%d" % free_port(), GEMTB] + BASE + FOUR + ["--steps", "4", "--checkpoint", folder]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT + 30)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert "4 ranks data-parallel (Open MPI)" in p.stdout, p.stdout
        assert arrays_of_folder(folder) == (4, expected)
    print("ok")
    return 0


def main():
    with tempfile.TemporaryDirectory() as d:
        expected, p = single_process(d)

        # 4 ranks (torchrun's variables): the single process's state, byte for byte; rank 0 prints.
        folder = os.path.join(d, "four")
        results = run_job(BASE + FOUR + ["--steps", "4", "--checkpoint", folder], 4)
        assert_ok(results)
        assert "4 ranks data-parallel (torchrun)" in results[0][1] and "step 4 loss" in results[0][1], results[0][1]
        assert all(r[1] == "" for r in results[1:]), [r[1] for r in results[1:]]
        step, got = arrays_of_folder(folder)
        assert step == 4 and got == expected, (step, sorted(got), sorted(expected))
        # The printed losses are the single process's.
        single_losses = [l.split(" train_ne")[0] for l in p.stdout.splitlines() if l.startswith("step ")]
        multi_losses = [l.split(" train_ne")[0] for l in results[0][1].splitlines() if l.startswith("step ")]
        assert single_losses == multi_losses, (single_losses, multi_losses)

        # Open MPI's and SLURM's variables, 2 ranks.
        for kind in ("mpi", "slurm"):
            folder = os.path.join(d, kind)
            assert_ok(run_job(BASE + FOUR + ["--steps", "4", "--checkpoint", folder], 2, kind=kind))
            assert arrays_of_folder(folder) == (4, expected), kind

        # 2 steps, then a resume from the folder to 4: the straight run's bytes.
        folder = os.path.join(d, "resume")
        assert_ok(run_job(BASE + FOUR + ["--steps", "2", "--checkpoint", folder], 2))
        stale = os.path.join(d, "stale")
        os.makedirs(stale)
        shutil.copytree(folder, os.path.join(stale, "resume"))
        results = run_job(BASE + FOUR + ["--steps", "4", "--checkpoint", folder, "--resume", folder], 2)
        assert_ok(results)
        assert "resumed from" in results[0][1] and "at step 2" in results[0][1], results[0][1]
        assert arrays_of_folder(folder) == (4, expected)

        # A stale copy of the folder on one rank (same relative path, another working folder).
        t0 = time.time()
        results = run_job(BASE + FOUR + ["--steps", "6", "--resume", "resume"], 2, cwds=[d, stale])
        for r, (rc, _, stderr) in enumerate(results):
            assert rc == 2 and "ranks disagree on the checkpoint to resume" in stderr, (r, rc, stderr)
            assert "rank 0 has step 4" in stderr and "rank 1 has step 2" in stderr, stderr
        # Another world size than the checkpoint's.
        results = run_job(BASE + FOUR + ["--steps", "6", "--resume", folder], 4)
        for r, (rc, _, stderr) in enumerate(results):
            assert rc == 2 and "world_size 2, this job's is 4" in stderr, (r, rc, stderr)
        # Ranks that disagree on the world size.
        results = run_job(BASE + FOUR + ["--steps", "2"], 2, worlds=[2, 3])
        for r, (rc, _, stderr) in enumerate(results):
            assert rc != 0 and "world size: rank 1 runs with world size 3, rank 0 (the store) with 2" in stderr, (r, rc, stderr)
        # A world size that does not divide --grad-blocks.
        results = run_job(BASE + FOUR + ["--steps", "2"], 3)
        for r, (rc, _, stderr) in enumerate(results):
            assert rc == 2 and "--grad-blocks: 4 is not a multiple of the world size 3" in stderr, (r, rc, stderr)
        assert time.time() - t0 < TIMEOUT, "named errors come at once, not at the store timeout"

        # A rank killed with SIGKILL mid-run: the others stop naming it, well inside the timeout.
        procs = start(BASE + ["--steps", "100000", "--grad-blocks", "3"], 3)
        line = ""
        while not line.startswith("step 3 "):
            line = procs[0].stdout.readline()
            assert line, ("rank 0 ended before step 3", procs[0].stderr.read())
        t0 = time.time()
        procs[1].send_signal(signal.SIGKILL)
        results = finish(procs)
        assert time.time() - t0 < TIMEOUT / 3, time.time() - t0
        assert results[1][0] == -signal.SIGKILL
        for r in (0, 2):
            rc, _, stderr = results[r]
            assert rc != 0 and "rank 1: its connection to the store closed without a goodbye" in stderr, (r, rc, stderr)

        # SIGTERM to one rank only: every rank stops after the same step and saves; the resume to two
        # steps more equals a straight run of that many steps.
        constant = ["--grad-blocks", "4", "--schedule", "constant", "--schedule-steps", "1000"]
        folder = os.path.join(d, "sigterm")
        procs = start(BASE + constant + ["--steps", "100000", "--checkpoint", folder], 2)
        line = ""
        while not line.startswith("step 3 "):
            line = procs[0].stdout.readline()
            assert line, ("rank 0 ended before step 3", procs[0].stderr.read())
        procs[1].send_signal(signal.SIGTERM)
        results = finish(procs)
        stopped = []
        for r, (rc, _, stderr) in enumerate(results):
            assert rc == 128 + signal.SIGTERM and "stopped by SIGTERM after step " in stderr, (r, rc, stderr)
            stopped.append(int(stderr.split("after step ")[1].split(";")[0]))
        assert stopped[0] == stopped[1], stopped
        total = stopped[0] + 2
        assert_ok(run_job(BASE + constant + ["--steps", str(total), "--checkpoint", folder, "--resume", folder], 2))
        straight = os.path.join(d, "straight.bin")
        assert subprocess.run([GEMTB] + BASE + constant + ["--steps", str(total), "--checkpoint", straight],
                              capture_output=True, env=alone_env()).returncode == 0
        assert arrays_of_folder(folder) == (total, arrays_of_file(straight))

        # A malformed launcher variable: exit 2 naming it, before any work.
        env = launcher_env("torchrun", 0, 2, free_port())
        env["RANK"] = "x"
        p = subprocess.run([GEMTB] + BASE + FOUR + ["--steps", "1"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 2 and 'RANK="x": must be a decimal integer' in p.stderr, (p.returncode, p.stderr)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main_mpirun() if "--mpirun" in sys.argv[2:] else main())
