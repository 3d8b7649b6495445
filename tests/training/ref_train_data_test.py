"""gemtb ref train --data DIR (run by ctest with the gemtb binary as its argument): a folder written
by `gemtb data generate --seed S` trains to the same checkpoint bytes as training on the generator
with --data-seed S (step s reads samples s*B .. s*B+B-1 either way); a user's set without probs.npy,
meta.json or surface.npy trains, its oracle NE printing n/a; --eval-data gives the held-out NE on a
second folder, labels without positives print it as undefined (and data generate writes null); a malformed set exits 2 with one line
naming the file."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)

GEMTB = sys.argv[1]
B, STEPS, SEED = 4, 6, 5
COMMON = ["--config", "tiny", "--batch", str(B), "--threads", "2", "--schedule-steps", "10",
          "--data-seed", str(SEED)]


def run(args, expect=0):
    p = subprocess.run([GEMTB] + args, capture_output=True, text=True)
    assert p.returncode == expect, (args, p.returncode, p.stdout, p.stderr)
    return p


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "data")
        run(["data", "generate", "--config", "tiny", "--samples", str(B * STEPS), "--seed", str(SEED), "--out-dir", data])
        # The first 24 samples of seed 5 hold no CTR positive: its oracle NE is undefined (null).
        with open(os.path.join(data, "meta.json")) as f:
            ctr = json.load(f)["tasks"][0]
        assert ctr["positives"] == 0 and ctr["oracle_ne"] is None, ctr
        from_folder, from_generator = os.path.join(d, "folder.bin"), os.path.join(d, "generator.bin")
        p = run(["ref", "train"] + COMMON + ["--steps", str(STEPS), "--data", data, "--checkpoint", from_folder])
        assert f"training data: {B * STEPS} samples from {data}" in p.stdout, p.stdout
        assert "final: no held-out evaluation" in p.stdout, p.stdout
        run(["ref", "train"] + COMMON + ["--steps", str(STEPS), "--eval-samples", "8", "--checkpoint", from_generator])
        assert read(from_folder) == read(from_generator), "a data generate folder must train to the generator's bits"

        # A user's set: only the files the layout requires (256 samples, so that the CTR task has
        # positives), trained past its end (the set repeats); evaluated on itself, then on a copy
        # whose labels are all 0.
        generated, user, held = os.path.join(d, "generated"), os.path.join(d, "user"), os.path.join(d, "held")
        run(["data", "generate", "--config", "tiny", "--samples", "256", "--seed", "9", "--out-dir", generated])
        os.mkdir(user)
        for name in ("lengths", "ids", "seq_lengths", "dense", "labels", "masks"):
            shutil.copy(os.path.join(generated, name + ".npy"), user)
        assert np.load(os.path.join(user, "labels.npy"))[:, 0].sum() > 0
        shutil.copytree(user, held)
        np.save(os.path.join(held, "labels.npy"), np.zeros_like(np.load(os.path.join(held, "labels.npy"))))
        steps = str(256 // B + 2)
        p = run(["ref", "train"] + COMMON + ["--steps", steps, "--log-every", "50", "--data", user, "--eval-data", user])
        assert "training data: 256 samples" in p.stdout and "(no probs.npy: oracle NE n/a)" in p.stdout, p.stdout
        eval_line = [l for l in p.stdout.splitlines() if l.startswith(f"eval step {steps} --eval-data samples 256: ctr ne ")]
        assert eval_line and "ctr ne undefined" not in eval_line[0], p.stdout
        assert "(oracle n/a, gap n/a" in eval_line[0], eval_line
        train_lines = [l for l in p.stdout.splitlines() if l.startswith("step ")]
        assert train_lines and all(l.count(", oracle n/a)") == 2 for l in train_lines), train_lines
        p = run(["ref", "train"] + COMMON + ["--steps", "2", "--data", user, "--eval-data", held])
        eval_line = [l for l in p.stdout.splitlines() if l.startswith("eval step 2 --eval-data samples 256:")]
        assert eval_line and eval_line[0].count("ne undefined (oracle undefined") == 2, p.stdout

        # Malformed sets: one line naming the file, exit 2, nothing written.
        ids = np.load(os.path.join(user, "ids.npy"))
        cases = {
            "ids.npy": lambda: np.save(os.path.join(bad, "ids.npy"), np.where(np.arange(ids.size) == 0, 10**9, ids)),
            "labels.npy": lambda: np.save(os.path.join(bad, "labels.npy"), np.full((256, 2), 2, np.uint8)),
            "dense.npy": lambda: np.save(os.path.join(bad, "dense.npy"), np.zeros((256, 3), np.float64)),
            "lengths.npy": lambda: np.save(os.path.join(bad, "lengths.npy"),
                                           np.load(os.path.join(user, "lengths.npy")) + 1),
        }
        for name, damage in cases.items():
            bad = os.path.join(d, "bad")
            shutil.rmtree(bad, ignore_errors=True)
            shutil.copytree(user, bad)
            damage()
            ck = os.path.join(d, "bad.bin")
            p = run(["ref", "train"] + COMMON + ["--steps", "1", "--data", bad, "--checkpoint", ck], expect=2)
            assert p.stderr.count("\n") == 1 and name in p.stderr, (name, p.stderr)
            assert not os.path.exists(ck), name
        os.remove(os.path.join(bad, "masks.npy"))
        p = run(["ref", "train"] + COMMON + ["--steps", "1", "--data", bad], expect=2)
        assert p.stderr.count("\n") == 1 and "masks.npy" in p.stderr, p.stderr
    print("ok")


if __name__ == "__main__":
    main()
