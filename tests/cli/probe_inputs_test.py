"""Every command that reads a file, fed what a stranger might give it instead: a directory, /dev/zero,
a fifo, an empty file, a truncated file and a file whose header declares a shape far larger than
memory. Each must exit 2 with exactly one line on stderr, within a second (a fifo must not hang the
reader), and leave nothing behind: no output folder, no temporary files.

usage: /usr/bin/python3 probe_inputs_test.py --gemtb PATH
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import resource

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)

# A refusal must cost at most a second of the command's CPU time (user + system), so that a reader
# that starts loading /dev/zero or a huge shape fails the probe; the wall clock only bounds hangs (a
# fifo read blocks without using CPU), with room for a loaded machine running tests in parallel.
TIME_LIMIT_S = 1.0
HANG_TIMEOUT_S = 10.0


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def npy_header(descr, shape):
    """A version 1.0 .npy header (magic, version, length, dict padded to 64 bytes)."""
    shape_text = "(" + "".join(f"{d}, " for d in shape).rstrip(" ") + ")" if len(shape) != 1 else f"({shape[0]},)"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


def bad_inputs(kind, root, name, checkpoint):
    """Writes the bad variants of one input under root/bad/<name>; returns {variant: path}."""
    base = os.path.join(root, "bad", name)
    os.makedirs(base)
    out = {}
    out["directory"] = os.path.join(base, "dir")
    os.makedirs(out["directory"])
    out["/dev/zero"] = "/dev/zero"
    out["fifo"] = os.path.join(base, "fifo")
    os.mkfifo(out["fifo"])
    out["empty"] = os.path.join(base, "empty")
    open(out["empty"], "wb").close()
    out["truncated"] = os.path.join(base, "truncated")
    out["oversize shape"] = os.path.join(base, "oversize")
    if kind == "npy":
        whole = npy_header("<f4", (16,)) + bytes(64)
        with open(out["truncated"], "wb") as f:
            f.write(whole[: len(whole) - 7])
        with open(out["oversize shape"], "wb") as f:  # 4 TiB of floats declared, 64 bytes present
            f.write(npy_header("<f4", (1 << 32, 256)) + bytes(64))
    elif kind == "json":
        with open(out["truncated"], "w") as f:
            f.write('{"seed": 1, "tables": [{"name": "t", "ro')
        del out["oversize shape"]  # a JSON text declares no shape; the embedding spec has its own case
    elif kind == "checkpoint":
        with open(checkpoint, "rb") as f:
            whole = f.read()
        with open(out["truncated"], "wb") as f:
            f.write(whole[: len(whole) // 2])
        del out["oversize shape"]
    return out


def snapshot(root):
    entries = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            entries.add(os.path.relpath(os.path.join(dirpath, n), root))
    return entries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    g = args.gemtb
    root = tempfile.mkdtemp(prefix="gemtb-probe-")
    valid = os.path.join(root, "valid")
    os.makedirs(valid)
    rng = np.random.default_rng(5)

    # Valid inputs of each command; the probe replaces one at a time.
    off = np.array([0, 3, 8], dtype=np.int64)
    files = {
        "q": rng.standard_normal((8, 2, 16)).astype(np.float32),
        "k": rng.standard_normal((8, 2, 16)).astype(np.float32),
        "v": rng.standard_normal((8, 2, 16)).astype(np.float32),
        "do": rng.standard_normal((8, 2, 16)).astype(np.float32),
        "off": off,
        "x": rng.standard_normal((4, 32)).astype(np.float32),
        "lengths": np.array([1, 2, 0, 1], dtype=np.int32),
        "ids": np.array([0, 3, 5, 7], dtype=np.int64),
        "weights": np.ones(4, dtype=np.float32),
        "offsets": np.array([0, 1, 3, 3, 4], dtype=np.int64),
    }
    for name, a in files.items():
        np.save(os.path.join(valid, name + ".npy"), a)
    p = lambda name: os.path.join(valid, name + ".npy")
    case = os.path.join(valid, "case")
    os.makedirs(case)
    for name in ["q", "k", "v", "do", "off"]:
        shutil.copy(p(name), case)
    with open(os.path.join(case, "case.json"), "w") as f:
        json.dump({"q": "q.npy", "k": "k.npy", "v": "v.npy", "do": "do.npy", "q-offsets": "off.npy",
                   "kv-offsets": "off.npy"}, f)
    spec = {"seed": 1, "batch": 2, "keys": ["a", "b"],
            "tables": [{"name": "t", "rows": 8, "dim": 4, "optimizer": {"kind": "sgd", "lr": 0.1}}],
            "features": [{"key": "a", "table": "t"}, {"key": "b", "table": "t"}]}
    with open(os.path.join(valid, "spec.json"), "w") as f:
        json.dump(spec, f)
    golden = os.path.join(valid, "golden")
    os.makedirs(golden)
    with open(os.path.join(golden, "manifest.json"), "w") as f:
        f.write("{}")
    tables = os.path.join(valid, "tables")
    os.makedirs(tables)
    np.save(os.path.join(tables, "table_t.npy"), np.zeros((8, 4), dtype=np.float32))
    test_dir = os.path.join(valid, "test")
    r = subprocess.run([g, "ref", "attention", "--case", case, "--backward", "--out-dir", test_dir],
                       capture_output=True, text=True)
    r2 = subprocess.run([g, "ref", "train", "--steps", "1", "--batch", "4", "--eval-samples", "16",
                         "--checkpoint", os.path.join(valid, "train.ck")], capture_output=True, text=True)
    r3 = subprocess.run([g, "ref", "embed", "--spec", os.path.join(valid, "spec.json"), "--lengths", p("lengths"),
                         "--ids", p("ids"), "--out-dir", os.path.join(valid, "embed")], capture_output=True, text=True)
    for what, res in [("ref attention", r), ("ref train", r2), ("ref embed", r3)]:
        if res.returncode != 0:
            print(f"FAIL: the valid {what} run failed (exit {res.returncode}): {res.stderr.strip()}")
            sys.exit(1)

    attention = lambda **kw: ["ref", "attention", "--q", kw.get("q", p("q")), "--k", kw.get("k", p("k")),
                              "--v", kw.get("v", p("v")), "--q-offsets", kw.get("q_offsets", p("off")),
                              "--kv-offsets", kw.get("kv_offsets", p("off")), "--do", kw.get("do", p("do")),
                              "--backward"]
    embed = lambda **kw: ["ref", "embed", "--spec", kw.get("spec", os.path.join(valid, "spec.json")),
                          "--lengths", kw.get("lengths", p("lengths")), "--ids", kw.get("ids", p("ids")),
                          "--weights", kw.get("weights", p("weights")), "--offsets", kw.get("offsets", p("offsets"))]

    def in_folder(folder, name, make_args):
        """Runs with a copy of `folder` whose `name` is the bad input."""
        def build(bad):
            copy = tempfile.mkdtemp(prefix="folder-", dir=root)
            shutil.rmtree(copy)
            shutil.copytree(folder, copy)
            target = os.path.join(copy, name)
            os.remove(target)
            os.symlink(bad, target)
            return make_args(copy)
        return build

    # (label, kind of input, argv from the bad path, writes an --out-dir)
    readers = [
        ("ref attention --q", "npy", lambda b: attention(q=b), True),
        ("ref attention --k", "npy", lambda b: attention(k=b), True),
        ("ref attention --v", "npy", lambda b: attention(v=b), True),
        ("ref attention --q-offsets", "npy", lambda b: attention(q_offsets=b), True),
        ("ref attention --kv-offsets", "npy", lambda b: attention(kv_offsets=b), True),
        ("ref attention --do", "npy", lambda b: attention(do=b), True),
        ("ref attention --case (case.json)", "json",
         in_folder(case, "case.json", lambda c: ["ref", "attention", "--case", c]), True),
        ("ref attention --case (q.npy)", "npy",
         in_folder(case, "q.npy", lambda c: ["ref", "attention", "--case", c]), True),
        ("ref compare --case (case.json)", "json",
         in_folder(case, "case.json", lambda c: ["ref", "compare", "--case", c, "--test", test_dir]), False),
        ("ref compare --test (o.npy)", "npy",
         in_folder(test_dir, "o.npy", lambda t: ["ref", "compare", "--case", case, "--test", t]), False),
        ("ref compare --test (dq.npy)", "npy",
         in_folder(test_dir, "dq.npy", lambda t: ["ref", "compare", "--case", case, "--test", t]), False),
        ("ref quantize --in", "npy", lambda b: ["ref", "quantize", "--in", b, "--format", "e4m3", "--block", "32"], True),
        ("ref embed --spec", "json", lambda b: embed(spec=b), True),
        ("ref embed --lengths", "npy", lambda b: embed(lengths=b), True),
        ("ref embed --ids", "npy", lambda b: embed(ids=b), True),
        ("ref embed --weights", "npy", lambda b: embed(weights=b), True),
        ("ref embed --offsets", "npy", lambda b: embed(offsets=b), True),
        ("ref embed --tables (table_t.npy)", "npy",
         in_folder(tables, "table_t.npy", lambda t: embed() + ["--tables", t]), True),
        ("ref train --resume", "checkpoint",
         lambda b: ["ref", "train", "--steps", "2", "--batch", "4", "--eval-samples", "16", "--resume", b], False),
        ("model --config", "json", lambda b: ["model", "--config", b], False),
        ("train --config", "json", lambda b: ["train", "--config", b, "--steps", "2", "--eval-samples", "0"], False),
        ("data generate --data-params", "json",
         lambda b: ["data", "generate", "--samples", "4", "--data-params", b], True),
        ("whatif (scenario)", "json", lambda b: ["whatif", b], True),
        ("whatif calibrate --in", "json",
         lambda b: ["whatif", "calibrate", "--in", b, "--out", os.path.join(root, "calibration.json")], False),
        ("golden verify --dir (manifest.json)", "json",
         in_folder(golden, "manifest.json", lambda d: ["golden", "verify", "--dir", d]), False),
        ("whatif collective --cluster", "json",
         lambda b: ["whatif", "collective", "--op", "all_reduce", "--gpus", "16", "--size", "1M", "--cluster", b], False),
    ]

    failures = 0
    cases = 0
    slowest = (0.0, "")
    for label, kind, make_args, writes in readers:
        name = "".join(c if c.isalnum() else "_" for c in label)
        variants = bad_inputs(kind, root, name, os.path.join(valid, "train.ck"))
        for variant, bad in variants.items():
            argv = make_args(bad)
            out_dir = os.path.join(root, "out")
            if writes:
                argv = argv + ["--out-dir", out_dir]
            before = snapshot(root)
            t0 = child_cpu_s()
            try:
                res = subprocess.run([g] + argv, capture_output=True, text=True, timeout=HANG_TIMEOUT_S,
                                     stdin=subprocess.DEVNULL)
                rc, err = res.returncode, res.stderr
            except subprocess.TimeoutExpired:
                rc, err = "hang", ""
            elapsed = child_cpu_s() - t0
            slowest = max(slowest, (elapsed, f"{label} <- {variant}"))
            after = snapshot(root)
            lines = err.strip().splitlines()
            problems = []
            if rc != 2:
                problems.append(f"exit {rc}")
            if len(lines) != 1:
                problems.append(f"{len(lines)} lines on stderr")
            if elapsed > TIME_LIMIT_S:
                problems.append(f"took {elapsed:.2f} s of CPU")
            if after - before:
                problems.append(f"wrote {sorted(after - before)}")
            cases += 1
            if problems:
                failures += 1
                print(f"FAIL {label} <- {variant}: {', '.join(problems)}: {err.strip()[:300]}")
            else:
                print(f"ok   {label} <- {variant}: {lines[0][:160]}")

    # A 2^24 x 1024 float32 table (64 GiB) with a 16 GiB limit: refused with the number before anything
    # is allocated.
    huge = dict(spec, tables=[{"name": "t", "rows": 1 << 24, "dim": 1024, "optimizer": {"kind": "sgd", "lr": 0.1}}])
    huge_path = os.path.join(root, "huge_spec.json")
    with open(huge_path, "w") as f:
        json.dump(huge, f)
    t0 = child_cpu_s()
    res = subprocess.run([g] + embed(spec=huge_path) + ["--max-memory-mib", "16384", "--out-dir", os.path.join(root, "out")],
                         capture_output=True, text=True, timeout=HANG_TIMEOUT_S)
    elapsed = child_cpu_s() - t0
    lines = res.stderr.strip().splitlines()
    cases += 1
    if res.returncode != 2 or len(lines) != 1 or str(64 << 30) not in lines[0] or elapsed > TIME_LIMIT_S \
            or os.path.exists(os.path.join(root, "out")):
        failures += 1
        print(f"FAIL ref embed with a 2^24 x 1024 table: exit {res.returncode}, {elapsed:.2f} s: {res.stderr.strip()}")
    else:
        print(f"ok   ref embed with a 2^24 x 1024 table: {lines[0]}")

    print(f"{cases - failures} passed, {failures} failed; slowest case {slowest[0]:.2f} s of CPU ({slowest[1]})")
    if failures == 0:
        shutil.rmtree(root)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
