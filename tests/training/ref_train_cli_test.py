"""gemtb ref train end to end (run by ctest with the gemtb binary as its argument): bad flags exit 2
and write nothing; a short run prints loss, train NE, samples/s and held-out NE beside the oracle NE;
2 steps + resume 2 == 4 straight, byte for byte (also under --pipeline semi-sync); a SIGKILL in the middle of a checkpoint write
(--crash-checkpoint-after-bytes) leaves the previous checkpoint intact and loadable; non-finite or
negative rates and an unwritable --checkpoint fail before the first step; a refused --resume names
the option and both values; an NE without positives prints as undefined; SIGTERM saves a checkpoint
after the current step that resumes to the bits of a straight run, SIGINT without --checkpoint
exits 130 saving nothing."""
import os
import re
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
                    ["--pipeline", "async"],
                    ["--schedule-steps", "0"], ["--resume", os.path.join(d, "missing.bin")]):
            p = run(SMALL + bad + ["--checkpoint", ck], expect=2)
            assert p.stderr.count("\n") == 1 and "error" in p.stderr, p.stderr
            assert not os.path.exists(ck), bad

        # Checked before training starts: no step line is printed.
        for bad, words in ((["--lr", "inf"], "--lr: inf"), (["--lr", "nan"], "--lr: nan"), (["--lr", "-1"], "--lr: -1"),
                           (["--lr", "1e39"], "--lr: 1e+39"), (["--table-lr", "nan"], "--table-lr: nan"),
                           (["--table-decay", "2"], "--table-decay: 2"),
                           (["--checkpoint", os.path.join(d, "missing", "c.bin")], "does not exist"),
                           (["--checkpoint", d], "is a folder"), (["--eval-data", d], "--eval-data")):
            p = run(SMALL + ["--steps", "2"] + bad, expect=2)
            assert p.stderr.count("\n") == 1 and words in p.stderr, (bad, p.stderr)
            assert "step 1 " not in p.stdout, (bad, p.stdout)

        # One sample per evaluation: one task has no positive or no negative, its NE is undefined.
        p = run(["--config", "tiny", "--batch", "1", "--steps", "1", "--eval-samples", "1", "--threads", "2"])
        eval_line = [l for l in p.stdout.splitlines() if l.startswith("eval step 1 ")][0]
        assert eval_line.count("ne undefined (oracle undefined, gap undefined") == 2, eval_line
        assert "NE undefined vs oracle undefined" in p.stdout and "not checkable" in p.stdout, p.stdout

        straight = os.path.join(d, "straight.bin")
        p = run(SMALL + ["--steps", "4", "--checkpoint", straight])
        for word in ("step 4 loss", "train_ne[ctr]", "samples/s", "held-out", "oracle"):
            assert word in p.stdout, (word, p.stdout)

        half = os.path.join(d, "half.bin")
        run(SMALL + ["--steps", "2", "--checkpoint", half])
        before = read(half)
        resumed = os.path.join(d, "resumed.bin")
        p = run(SMALL + ["--steps", "4", "--lr", "0.002", "--resume", half, "--checkpoint", resumed], expect=2)
        assert "lr differs: the checkpoint has 0.001, this run 0.002" in p.stderr, p.stderr
        p = run(SMALL + ["--steps", "4", "--data-seed", "7", "--resume", half, "--checkpoint", resumed], expect=2)
        assert "data_seed differs: the checkpoint has 1, this run 7" in p.stderr, p.stderr
        run(SMALL + ["--steps", "4", "--resume", half, "--checkpoint", resumed])
        assert read(resumed) == read(straight), "2 + resume 2 must equal 4 straight"

        # The semi-synchronous pipeline: its own bits, resumed to them; a synchronous checkpoint is refused.
        semi = ["--pipeline", "semi-sync"]
        semi_straight, semi_half = os.path.join(d, "semi_straight.bin"), os.path.join(d, "semi_half.bin")
        p = run(SMALL + semi + ["--steps", "4", "--checkpoint", semi_straight])
        assert "pipeline semi-sync" in p.stdout, p.stdout
        assert read(semi_straight) != read(straight), "the pipeline changes what steps 2.. read"
        run(SMALL + semi + ["--steps", "2", "--checkpoint", semi_half])
        semi_resumed = os.path.join(d, "semi_resumed.bin")
        p = run(SMALL + semi + ["--steps", "4", "--resume", half, "--checkpoint", semi_resumed], expect=2)
        assert "'pipeline.pooled' is missing" in p.stderr, p.stderr
        run(SMALL + semi + ["--steps", "4", "--resume", semi_half, "--checkpoint", semi_resumed])
        assert read(semi_resumed) == read(semi_straight), "semi-sync: 2 + resume 2 must equal 4 straight"

        # Crash while overwriting `half` with the step-4 state: the step-2 checkpoint stays.
        p = subprocess.run([GEMTB, "ref", "train"] + SMALL + ["--steps", "4", "--resume", half, "--checkpoint", half,
                                                     "--crash-checkpoint-after-bytes", "100000"],
                           capture_output=True, text=True)
        assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
        assert read(half) == before, "the previous checkpoint must be intact"
        again = os.path.join(d, "again.bin")
        run(SMALL + ["--steps", "4", "--resume", half, "--checkpoint", again])
        assert read(again) == read(straight)
        signals(d)
    print("ok")


def stop_after_step(args, sig, step):
    """Starts a long ref train, sends `sig` to it once it printed `step`, returns (rc, stdout, stderr)."""
    p = subprocess.Popen([GEMTB, "ref", "train"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if line.startswith(f"step {step} "):
            p.send_signal(sig)
            break
    out, err = p.communicate(timeout=120)
    return p.returncode, "".join(lines) + out, err


def signals(d):
    long = ["--config", "tiny", "--batch", "4", "--eval-samples", "32", "--log-every", "1", "--threads", "2",
            "--schedule-steps", "1000", "--steps", "1000"]
    ck = os.path.join(d, "term.bin")
    rc, out, err = stop_after_step(long + ["--checkpoint", ck], signal.SIGTERM, 3)
    assert rc == 128 + signal.SIGTERM, (rc, out, err)
    m = re.fullmatch(r"gemtb ref train: stopped by SIGTERM after step (\d+); checkpoint written to (.*) "
                     r"\(continue with --resume \2\)\n", err)
    assert m and m.group(2) == ck, err
    stopped = int(m.group(1))
    assert stopped >= 3 and f"step {stopped} " in out, (stopped, out)
    assert "eval step" not in out, out  # stopped, not finished
    total = str(stopped + 2)
    resumed, straight = os.path.join(d, "term_resumed.bin"), os.path.join(d, "term_straight.bin")
    args = [a if a != "1000" or i != len(long) - 1 else total for i, a in enumerate(long)]
    p = run(args + ["--resume", ck, "--checkpoint", resumed])
    assert f"resumed from {ck} at step {stopped}" in p.stdout, p.stdout
    run(args + ["--checkpoint", straight])
    assert read(resumed) == read(straight), "stopped by SIGTERM + resumed must equal a straight run"

    rc, out, err = stop_after_step(long, signal.SIGINT, 2)
    assert rc == 128 + signal.SIGINT and "stopped by SIGINT" in err and "nothing saved (no --checkpoint)" in err, (rc, err)


if __name__ == "__main__":
    main()
