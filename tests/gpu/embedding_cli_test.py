"""`gemtb gpu embed` against `gemtb ref embed` on the same case folders: a malformed KJT gives the
same named error from both (exit 2, one line; checked with or without a GPU, since validation runs
on the host before anything launches), and with a GPU every output file (pooled, sequence, updated
tables in their storage dtype, optimizer state) is byte-identical. Exit 77 (skipped) when the
valid cases cannot run for want of a GPU.

usage: python3 embedding_cli_test.py --gemtb PATH
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile


def save_npy(path, values, descr, fmt):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def save_matrix(path, values, rows, cols):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gemtb-gpu-embed-")
    failures = 0
    rng = random.Random(5)

    def run(which, case, out, step):
        cmd = [args.gemtb, which, "embed", "--spec", os.path.join(case, "spec.json"),
               "--lengths", os.path.join(case, "lengths.npy"), "--ids", os.path.join(case, "ids.npy"),
               "--out-dir", os.path.join(case, out)]
        if os.path.exists(os.path.join(case, "weights.npy")):
            cmd += ["--weights", os.path.join(case, "weights.npy")]
        if step:
            cmd += ["--grads", os.path.join(case, "grads"), "--step", "--step-index", "3"]
        return subprocess.run(cmd, capture_output=True, text=True)

    def make_case(name, pooling, optimizer, dtype, lengths, ids, batch):
        case = os.path.join(tmp, name)
        os.makedirs(os.path.join(case, "grads"))
        spec = {"seed": 9, "batch": batch,
                "tables": [{"name": "t0", "rows": 11, "dim": 8, "dtype": dtype,
                            "optimizer": {"kind": optimizer, "lr": 0.25}}],
                "features": [{"key": "a", "table": "t0", "pooling": pooling},
                             {"key": "b", "table": "t0", "pooling": pooling}]}
        json.dump(spec, open(os.path.join(case, "spec.json"), "w"))
        save_npy(os.path.join(case, "lengths.npy"), lengths, "<i4", "i")
        save_npy(os.path.join(case, "ids.npy"), ids, "<i8", "q")
        if pooling == "weighted_sum":
            save_npy(os.path.join(case, "weights.npy"), [rng.uniform(-1, 1) for _ in ids], "<f4", "f")
        if pooling == "none":
            for key, part in (("a", lengths[:batch]), ("b", lengths[batch:])):
                n = sum(max(0, l) for l in part)
                save_matrix(os.path.join(case, "grads", f"seq_{key}.npy"), [rng.uniform(-1, 1) for _ in range(8 * n)], n, 8)
        else:
            save_matrix(os.path.join(case, "grads", "pooled.npy"), [rng.uniform(-1, 1) for _ in range(16 * batch)], batch, 16)
        return case

    # Malformed KJTs: the same error line from both, exit 2.
    for name, lengths, ids in (("negative length", [2, -1, 1, 1], [0, 1, 2, 3]),
                               ("id out of range", [2, 1, 1, 1], [0, 1, 2, 99, 4])):
        case = make_case(name.replace(" ", "_"), "sum", "sgd", "fp32", lengths, ids, 2)
        ref, gpu = run("ref", case, "ref", False), run("gpu", case, "gpu", False)
        ref_msg = ref.stderr.strip().split("error: ", 1)[-1]
        gpu_msg = gpu.stderr.strip().split("error: ", 1)[-1]
        ok = ref.returncode == 2 and gpu.returncode == 2 and ref_msg == gpu_msg and ref_msg.startswith("E_") \
            and len(gpu.stderr.strip().splitlines()) == 1 and not os.path.exists(os.path.join(case, "gpu"))
        print(("ok   " if ok else "FAIL ") + f"{name}: ref '{ref_msg}', gpu '{gpu_msg}'")
        failures += not ok

    # Valid cases: identical files.
    skipped = False
    for pooling in ("sum", "mean", "weighted_sum", "none"):
        for optimizer in ("sgd", "rowwise_adagrad", "adam"):
            for dtype in ("fp32", "fp16", "bf16"):
                batch = 3
                lengths = [rng.randint(0, 5) for _ in range(2 * batch)]
                ids = [rng.randint(0, 10) for _ in range(sum(lengths))]
                case = make_case(f"{pooling}_{optimizer}_{dtype}", pooling, optimizer, dtype, lengths, ids, batch)
                ref, gpu = run("ref", case, "ref", True), run("gpu", case, "gpu", True)
                if gpu.returncode == 2 and "CUDA" in gpu.stderr:
                    skipped = True
                    break
                names = sorted(os.listdir(os.path.join(case, "ref"))) if ref.returncode == 0 else []
                same = ref.returncode == 0 and gpu.returncode == 0 and names == sorted(os.listdir(os.path.join(case, "gpu")))
                for n in names if same else []:
                    same &= open(os.path.join(case, "ref", n), "rb").read() == open(os.path.join(case, "gpu", n), "rb").read()
                print(("ok   " if same else "FAIL ") + f"{pooling}/{optimizer}/{dtype}: {len(names)} files"
                      + ("" if same else f" ref exit {ref.returncode} {ref.stderr.strip()} gpu exit {gpu.returncode} {gpu.stderr.strip()}"))
                failures += not same
            if skipped:
                break
        if skipped:
            break
    if failures:
        return 1
    if skipped:
        print("no usable GPU: the valid cases were skipped")
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
