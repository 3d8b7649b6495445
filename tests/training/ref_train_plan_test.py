"""gemtb ref train --plan (run by ctest with the gemtb binary as its argument): the tables sharded by a
plan across real processes, each holding only its shards, end with the bytes of the single process
whose sharded executor runs the same ranks virtually (--plan-ranks): a plan mixing every 1D type on
4 ranks (torchrun's variables, and mpirun -np 4 when Open MPI is there) and 2 ranks (Open MPI's), a
fully sharded 2D plan on 4 ranks; one virtual rank under a 1D plan equals the unsharded trainer;
bad plans and rank counts exit 2 naming the flag; a rank killed mid-run ends the others with an error
naming it, well inside --store-timeout. --report: rank 0's JSON holds every rank's times and
their aggregate (slowest rank by busy time, imbalance = its busy time / the mean - 1)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_train_ranks_test as ranks  # noqa: E402  (the launcher helpers; its GEMTB is sys.argv[1] too)

GEMTB = sys.argv[1]
BASE = ["ref", "train", "--config", "tiny", "--batch", "16", "--eval-samples", "64", "--log-every", "1",
        "--threads", "1", "--store-timeout", "60", "--grad-blocks", "4", "--schedule-steps", "3", "--steps", "3"]
MIXED = """{"default": {"type": "TW"}, "tables": {
  "user": {"type": "RW"}, "ad": {"type": "CW", "shards": 2}, "advertiser": {"type": "TWRW"},
  "page": {"type": "GRID", "shards": 2}, "device": {"type": "DP"}, "category": {"type": "RW"},
  "items": {"type": "RW"}, "actions": {"type": "TW", "owner": 1}, "dt": {"type": "CW", "shards": 4}}}"""
FULLY_SHARDED = """{"default": {"type": "RW"}, "tables": {"items": {"type": "TW"}, "ad": {"type": "CW", "shards": 2}},
  "mp_group": 2, "fully_sharded": true}"""


def alone(args, path):
    p = subprocess.run([GEMTB] + BASE + args + ["--checkpoint", path], capture_output=True, text=True,
                       env=ranks.alone_env(), timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return ranks.arrays_of_file(path), p.stdout


def losses(stdout):
    return [l.split(" train_ne")[0] for l in stdout.splitlines() if l.startswith("step ")]


def check_report(r, world, sharded):
    assert r["world_size"] == world and r["steps"] == 3 and [x["rank"] for x in r["ranks"]] == list(range(world)), r
    for x in r["ranks"]:
        assert x["wall_s"] > 0 and 0 <= x["collectives_s"] <= x["wall_s"], x
        assert abs(x["collectives_s"] - x["data_parallel_s"] - x["sharded_tables_s"]) < 1e-9, x
        assert abs(x["busy_s"] - (x["wall_s"] - x["collectives_s"])) < 1e-9, x
        assert (x["sharded_tables_s"] > 0) == (sharded and world > 1), x
        assert (x["data_parallel_s"] > 0) == (world > 1), x
    busy = [x["busy_s"] for x in r["ranks"]]
    a = r["aggregate"]
    mean = sum(busy) / world
    assert a["slowest_rank"] == busy.index(max(busy)) and abs(a["slowest_busy_s"] - max(busy)) < 1e-9, r
    assert abs(a["mean_busy_s"] - mean) < 1e-9 and abs(a["imbalance"] - (max(busy) / mean - 1)) < 1e-9, r
    assert abs(a["max_wall_s"] - max(x["wall_s"] for x in r["ranks"])) < 1e-9, r


def main():
    with tempfile.TemporaryDirectory() as d:
        mixed = os.path.join(d, "mixed.json")
        open(mixed, "w").write(MIXED)
        fully = os.path.join(d, "fully.json")
        open(fully, "w").write(FULLY_SHARDED)
        plan = ["--plan", mixed, "--gpus-per-host", "2"]

        # 4 processes (torchrun's variables) == 4 virtual ranks in one process, byte for byte.
        expected, out = alone(plan + ["--plan-ranks", "4"], os.path.join(d, "alone4.bin"))
        assert "tables sharded by --plan over 4 virtual ranks" in out, out
        folder = os.path.join(d, "four")
        report = os.path.join(d, "report.json")
        results = ranks.run_job(BASE + plan + ["--checkpoint", folder, "--report", report], 4)
        ranks.assert_ok(results)
        check_report(json.load(open(report)), 4, sharded=True)
        assert "4 ranks data-parallel (torchrun), tables sharded by --plan over 4 ranks" in results[0][1], results[0][1]
        assert ranks.arrays_of_folder(folder) == (3, expected)
        assert losses(results[0][1]) == losses(out), (losses(results[0][1]), losses(out))

        # 2 processes (Open MPI's variables) == 2 virtual ranks.
        expected2, _ = alone(plan + ["--plan-ranks", "2"], os.path.join(d, "alone2.bin"))
        assert expected2 != expected  # another partition of the sums: the comparison can tell them apart
        folder = os.path.join(d, "two")
        ranks.assert_ok(ranks.run_job(BASE + plan + ["--checkpoint", folder], 2, kind="mpi"))
        assert ranks.arrays_of_folder(folder) == (3, expected2)

        # The semi-synchronous pipeline: 2 processes == 2 virtual ranks, and not the synchronous run.
        semi = ["--pipeline", "semi-sync"]
        expected_semi, _ = alone(plan + semi + ["--plan-ranks", "2"], os.path.join(d, "alone2_semi.bin"))
        assert expected_semi != expected2
        folder = os.path.join(d, "two_semi")
        ranks.assert_ok(ranks.run_job(BASE + plan + semi + ["--checkpoint", folder], 2))
        assert ranks.arrays_of_folder(folder) == (3, expected_semi)

        # Fully sharded 2D (mp_group 2 of 4 ranks) across processes == its virtual run.
        expected_fs, _ = alone(["--plan", fully, "--plan-ranks", "4"], os.path.join(d, "alone_fs.bin"))
        folder = os.path.join(d, "fully")
        ranks.assert_ok(ranks.run_job(BASE + ["--plan", fully, "--checkpoint", folder], 4, kind="slurm"))
        assert ranks.arrays_of_folder(folder) == (3, expected_fs)

        # One virtual rank under a 1D plan is the unsharded trainer (the spec's induced partition is one block).
        unsharded, _ = alone(["--report", report], os.path.join(d, "unsharded.bin"))
        check_report(json.load(open(report)), 1, sharded=False)
        one, _ = alone(["--plan", "TW"], os.path.join(d, "tw1.bin"))
        assert one == unsharded

        # mpirun -np 4 (when Open MPI is installed) == the 4 virtual ranks.
        mpirun = shutil.which("mpirun")
        if mpirun is not None:
            folder = os.path.join(d, "mpirun")
            root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
            cmd = [mpirun] + root + ["--oversubscribe", "-np", "4", "-x", "MASTER_ADDR=127.0.0.1", "-x",
                                     "MASTER_PORT=%d" % ranks.free_port(), GEMTB] + BASE + plan + ["--checkpoint", folder]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
            assert ranks.arrays_of_folder(folder) == (3, expected)
        else:
            print("note: no mpirun, its part skipped")

        # A rank killed with SIGKILL mid-run: the others stop naming it (their waits are in the plan's exchanges
        # as often as in the dense model's), well inside the store timeout.
        args = BASE[:-2] + ["--steps", "100000"] + plan  # BASE ends with --steps 3
        procs = ranks.start(args, 4)
        line = ""
        while not line.startswith("step 3 "):
            line = procs[0].stdout.readline()
            assert line, ("rank 0 ended before step 3", procs[0].stderr.read())
        t0 = time.time()
        procs[2].send_signal(signal.SIGKILL)
        results = ranks.finish(procs)
        assert time.time() - t0 < 20, time.time() - t0
        assert results[2][0] == -signal.SIGKILL
        for r in (0, 1, 3):
            rc, _, stderr = results[r]
            assert rc != 0 and "rank 2: its connection to the store closed without a goodbye" in stderr, (r, rc, stderr)

        # Named errors, exit 2, before any step.
        def fails(args, message, world=1):
            if world == 1:
                p = subprocess.run([GEMTB] + BASE + args, capture_output=True, text=True, env=ranks.alone_env(), timeout=60)
                results = [(p.returncode, p.stdout, p.stderr)]
            else:
                results = ranks.run_job(BASE + args, world)
            for rc, _, stderr in results:
                assert rc == 2 and message in stderr, (args, rc, stderr)
        fails(["--plan-ranks", "2"], "--plan-ranks/--gpus-per-host: need --plan")
        fails(["--report", os.path.join(d, "no", "such", "folder.json")], "--report: ")
        fails(["--plan", "XW"], "--plan: 'XW' is neither DP, TW, RW, TWRW nor a readable file")
        bad_cw = os.path.join(d, "bad_cw.json")
        open(bad_cw, "w").write('{"default": {"type": "CW", "shards": 3}}')
        fails(["--plan", bad_cw, "--plan-ranks", "2"], "--plan: plan.")
        fails(["--plan", "TW", "--plan-ranks", "32"], "--batch: 16 is not divisible by the plan's world size 32")
        fails(["--plan", fully, "--plan-ranks", "4", "--resume", os.path.join(d, "alone_fs.bin")], "--resume: the plan is 2D")
        fails(["--plan", "TW", "--plan-ranks", "4"], "--plan-ranks: 4 is not the job's world size 2", world=2)
        fails(["--plan", fully, "--plan-ranks", "4", "--pipeline", "semi-sync"],
              "plan.fully_sharded: the semi-synchronous pipeline does not run")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
