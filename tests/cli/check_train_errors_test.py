"""`gemtb check train` refuses bad flags and configs with exit code 2 and a one-line error naming the
flag or field, before any training; on a machine without a usable GPU it exits 2 saying so (with a
GPU, the trainer comparison itself is run by tools/train_gpu_check.sh --check-train).

usage: /usr/bin/python3 check_train_errors_test.py --gemtb PATH
"""
import argparse
import shutil
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    failures = 0

    def expect(argv, rc, needle):
        nonlocal failures
        p = subprocess.run([args.gemtb, "check", "train"] + argv, capture_output=True, text=True, timeout=120)
        ok = p.returncode == rc and needle in p.stderr and p.stdout == ""
        print(("ok   " if ok else "FAIL ") + repr(argv), "rc", p.returncode, p.stderr.strip()[:200])
        failures += 0 if ok else 1

    expect(["--steps", "0"], 2, "--steps=0")
    expect(["--batch", "-3"], 2, "--batch=-3")
    expect(["--compare-every", "-1"], 2, "--compare-every=-1")
    expect(["--eval-samples", "-5"], 2, "--eval-samples=-5")
    expect(["--steps", "60", "--ne-steps", "50"], 2, "--ne-steps=50")
    expect(["--grad-bound", "0"], 2, "--grad-bound=0")
    expect(["--param-bound", "-1"], 2, "--param-bound=-1")
    expect(["--config", "no-such-config"], 2, "no-such-config")
    expect(["--nosuch"], 2, "--nosuch")
    expect(["--pipeline", "async"], 2, "--pipeline: 'async' is not sync or semi-sync")
    # This test runs where CI runs: without a GPU the command must say so, not train.
    p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) if shutil.which("nvidia-smi") else None
    if p is None or p.returncode != 0:
        expect(["--steps", "1"], 2, "CUDA")
    print("FAILED" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
