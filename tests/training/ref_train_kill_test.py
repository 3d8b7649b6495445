"""gemtb ref train killed (SIGKILL, --crash-checkpoint-after-bytes) at ten random bytes (fixed seed) of
the checkpoint write at step 4: each time the step-2 checkpoint stays intact, and --resume from it to
step 6 ends with the bytes of a run never killed. Tiny, batch 4: a few seconds on 2 cores.

usage: ref_train_kill_test.py GEMTB
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile

GEMTB = sys.argv[1]
FLAGS = ["--config", "tiny", "--batch", "4", "--schedule-steps", "6", "--eval-samples", "8", "--log-every", "100",
         "--threads", "2"]


def train(args, expect=0):
    p = subprocess.run([GEMTB, "ref", "train"] + FLAGS + args, capture_output=True, text=True)
    assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
    return p


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    with tempfile.TemporaryDirectory() as d:
        straight, base = os.path.join(d, "straight.bin"), os.path.join(d, "base.bin")
        train(["--steps", "6", "--checkpoint", straight])
        train(["--steps", "2", "--checkpoint", base])
        final, before = read(straight), read(base)
        rng = random.Random(4)
        for trial in range(10):
            at = rng.randrange(len(final))  # the step-4 file has the step-6 file's size
            ck = os.path.join(d, f"kill{trial}.bin")
            shutil.copyfile(base, ck)
            train(["--steps", "6", "--checkpoint-every", "2", "--resume", ck, "--checkpoint", ck,
                   "--crash-checkpoint-after-bytes", str(at)], expect=-signal.SIGKILL)
            assert read(ck) == before, (trial, at, "the step-2 checkpoint must be intact")
            p = train(["--steps", "6", "--resume", ck, "--checkpoint", ck])
            assert f"resumed from {ck} at step 2" in p.stdout, p.stdout
            assert read(ck) == final, (trial, at, "resumed != never killed")
            print(f"kill {trial} at byte {at} of {len(final)}: step 2 intact, resumed to the same bytes")
    print("ok")


if __name__ == "__main__":
    main()
