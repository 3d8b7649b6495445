"""gemtb ref train end to end (run by ctest with the gemtb binary as its argument): bad flags exit 2
and write nothing; a short run prints loss, train NE, samples/s and held-out NE beside the oracle NE;
2 steps + resume 2 == 4 straight, byte for byte; a SIGKILL in the middle of a checkpoint write
(--crash-checkpoint-after-bytes) leaves the previous checkpoint intact and loadable."""
import os
import signal
import subprocess
import sys
import tempfile

GEMTB = sys.argv[1]
SMALL = ["--config", "tiny", "--batch", "4", "--eval-samples", "32", "--log-every", "1", "--threads", "2",
         "--schedule-steps", "4"]


def run(args, env=None, expect=0):
    p = subprocess.run([GEMTB, "ref", "train"] + args, capture_output=True, text=True, env=env)
    assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
    return p


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "c.bin")
        for bad in (["--steps", "-1"], ["--batch", "0"], ["--config", "nope"], ["--schedule", "cosine"],
                    ["--schedule-steps", "0"], ["--resume", os.path.join(d, "missing.bin")]):
            p = run(SMALL + bad + ["--checkpoint", ck], expect=2)
            assert p.stderr.count("\n") == 1 and "error" in p.stderr, p.stderr
            assert not os.path.exists(ck), bad

        straight = os.path.join(d, "straight.bin")
        p = run(SMALL + ["--steps", "4", "--checkpoint", straight])
        for word in ("step 4 loss", "train_ne[ctr]", "samples/s", "held-out", "oracle"):
            assert word in p.stdout, (word, p.stdout)

        half = os.path.join(d, "half.bin")
        run(SMALL + ["--steps", "2", "--checkpoint", half])
        before = read(half)
        resumed = os.path.join(d, "resumed.bin")
        run(SMALL + ["--steps", "4", "--resume", half, "--checkpoint", resumed])
        assert read(resumed) == read(straight), "2 + resume 2 must equal 4 straight"

        # Crash while overwriting `half` with the step-4 state: the step-2 checkpoint stays.
        p = subprocess.run([GEMTB, "ref", "train"] + SMALL + ["--steps", "4", "--resume", half, "--checkpoint", half,
                                                     "--crash-checkpoint-after-bytes", "100000"],
                           capture_output=True, text=True)
        assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
        assert read(half) == before, "the previous checkpoint must be intact"
        again = os.path.join(d, "again.bin")
        run(SMALL + ["--steps", "4", "--resume", half, "--checkpoint", again])
        assert read(again) == read(straight)
    print("ok")


if __name__ == "__main__":
    main()
