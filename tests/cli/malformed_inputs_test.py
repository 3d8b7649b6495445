"""Every malformed input to `gemtb ref attention`, as flags or in a case folder's case.json, gets a
one-line error naming the field and the value, exit code 2, and no output file; so does a flag that
disagrees with the case file. A full --out-dir is refused unless --force, which replaces it whole.

usage: /usr/bin/python3 malformed_inputs_test.py --gemtb PATH
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:  # the suite's interpreter is Debian's python3 with python3-numpy
    print("numpy missing: skipped")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gemtb-malformed-")
    rng = np.random.default_rng(3)

    def save(name, array):
        path = os.path.join(tmp, name)
        np.save(path, array)
        return path

    def raw(name, data):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    q = save("q.npy", rng.standard_normal((12, 4, 8)))
    k = save("k.npy", rng.standard_normal((9, 2, 8)))
    v = save("v.npy", rng.standard_normal((9, 2, 8)))
    qo = save("qo.npy", np.array([0, 5, 5, 12], dtype=np.int64))
    ko = save("ko.npy", np.array([0, 4, 9, 9], dtype=np.int64))
    good = ["--q", q, "--k", k, "--v", v, "--q-offsets", qo, "--kv-offsets", ko]

    def with_flag(base, flag, value):
        out = list(base)
        i = out.index(flag)
        out[i + 1] = value
        return out

    # A case folder (case.json, strict: "<file>.<key>: <value> <rule>") naming the same files.
    good_case = {"q": "../q.npy", "k": "../k.npy", "v": "../v.npy", "q-offsets": "../qo.npy",
                 "kv-offsets": "../ko.npy"}

    def case_folder(name, **changes):
        folder = os.path.join(tmp, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "case.json"), "w") as f:
            json.dump({**good_case, **{key.replace("_", "-"): value for key, value in changes.items()}}, f)
        return ["--case", folder]

    q_bytes = open(q, "rb").read()
    header_end = q_bytes.index(b"\n") + 1
    cases = [
        # (name, argv, substrings the one error line must contain)
        ("offsets not starting at 0",
         with_flag(good, "--q-offsets", save("qo_start.npy", np.array([1, 5, 5, 12], dtype=np.int64))),
         ["q_offsets[0]=1"]),
        ("decreasing offsets",
         with_flag(good, "--kv-offsets", save("ko_dec.npy", np.array([0, 6, 4, 9], dtype=np.int64))),
         ["kv_offsets[2]=4", "non-decreasing"]),
        ("offsets past the tensor",
         with_flag(good, "--q-offsets", save("qo_past.npy", np.array([0, 5, 5, 20], dtype=np.int64))),
         ["q_offsets[3]=20", "TQ=12"]),
        ("offsets of the wrong dtype",
         with_flag(good, "--q-offsets", save("qo_f.npy", np.array([0, 5, 5, 12], dtype=np.float64))),
         ["q_offsets", "float64", "int64"]),
        ("head dims disagree",
         with_flag(good, "--k", save("k_d.npy", rng.standard_normal((9, 2, 6)))),
         ["k: Dqk=6", "Dqk=8"]),
        ("k and v rows disagree",
         with_flag(good, "--v", save("v_rows.npy", rng.standard_normal((8, 2, 8)))),
         ["v: shape [8, 2, 8]"]),
        ("dtypes disagree",
         with_flag(good, "--k", save("k_f4.npy", rng.standard_normal((9, 2, 8)).astype(np.float32))),
         ["k: dtype float32", "float64"]),
        ("H not divisible by Hkv",
         with_flag(with_flag(good, "--k", save("k_h3.npy", rng.standard_normal((9, 3, 8)))),
                   "--v", save("v_h3.npy", rng.standard_normal((9, 3, 8)))),
         ["H=4", "Hkv=3"]),
        ("NaN pre-scale", good + ["--pre-scale", "nan"], ["pre_scale=nan"]),
        ("NaN post-scale", good + ["--post-scale", "nan"], ["post_scale=nan"]),
        ("window left < -1", good + ["--mask", "window", "--window-left", "-2"], ["window_left=-2"]),
        ("window right < -1", good + ["--mask", "window", "--window-right", "-5"], ["window_right=-5"]),
        ("block < 1", good + ["--mask", "block", "--block", "0"], ["block=0"]),
        ("declared max too small", good + ["--max-lq", "3"], ["max_lq=3", "length 5"]),
        ("kv_index out of range",
         good + ["--kv-index", save("kvi.npy", np.array([0, 3, 1], dtype=np.int64))], ["kv_index[1]=3"]),
        ("unknown activation", good + ["--act", "tanh"], ["--act=tanh"]),
        ("unknown mask", good + ["--mask", "diagonal"], ["--mask=diagonal"]),
        ("not a number", good + ["--window-left", "abc"], ["--window-left=abc"]),
        ("truncated .npy", with_flag(good, "--q", raw("q_trunc.npy", q_bytes[:-17])), ["q", "truncated"]),
        ("truncated header", with_flag(good, "--q", raw("q_hdr_trunc.npy", q_bytes[:40])), ["q", "truncated"]),
        ("bad magic", with_flag(good, "--q", raw("q_magic.npy", b"XNUMPY" + q_bytes[6:])), ["q", "magic"]),
        ("bad header dict",
         with_flag(good, "--q", raw("q_hdr.npy", q_bytes[:10] + b"{'descr': '<f8', 'fortran_order': False, 'shape': (12, 4, 8 }"
                                    .ljust(header_end - 10 - 1) + b"\n" + q_bytes[header_end:])), ["q", "header"]),
        ("fortran order",
         with_flag(good, "--q", save("q_fortran.npy", np.asfortranarray(rng.standard_normal((12, 4, 8))))),
         ["fortran_order"]),
        ("unsupported dtype", with_flag(good, "--q", save("q_c.npy", np.zeros((12, 4, 8), dtype=np.complex64))),
         ["q", "<c8"]),
        ("missing file", with_flag(good, "--q", os.path.join(tmp, "nope.npy")), ["nope.npy"]),
        ("backward without do", good + ["--backward"], ["--do"]),
        ("do of the wrong shape", good + ["--backward", "--do", save("do_bad.npy", rng.standard_normal((12, 4, 7)))],
         ["d_o: shape [12, 4, 7]"]),
        ("unknown flag", good + ["--frobnicate", "1"], ["--frobnicate"]),
        ("case.json: unknown key", case_folder("case_key", bogus=1), ["case.json.bogus: unknown key"]),
        ("case.json: unknown activation", case_folder("case_act", act="tanh"),
         ['case.json.act: "tanh" is not an activation']),
        ("case.json: mask not a string", case_folder("case_mask", mask=3), ["case.json.mask: 3 is not a string"]),
        ("case.json: block not an integer", case_folder("case_block", block=1.5),
         ["case.json.block: 1.5 is not an integer"]),
        ("case.json: broadcast-q not a boolean", case_folder("case_bq", broadcast_q=1),
         ["case.json.broadcast-q: 1 is not true or false"]),
        # A flag the case file also sets must agree with it; the error names both values.
        ("--act conflicts with case.json", case_folder("case_silu", act="silu") + ["--act", "softmax"],
         ["--act=softmax", "act to silu"]),
        ("--mask conflicts with case.json", case_folder("case_causal", mask="causal") + ["--mask", "none"],
         ["--mask=none", "mask to causal"]),
        ("--q names another file than case.json", case_folder("case_q") + ["--q", k], ["--q=" + k, "sets q to"]),
        ("--max-lq conflicts with case.json", case_folder("case_maxlq", max_lq=7) + ["--max-lq", "8"],
         ["--max-lq=8", "max-lq to 7"]),
    ]
    failures = 0
    for i, (name, argv, needles) in enumerate(cases):
        out_dir = os.path.join(tmp, f"out{i}")
        proc = subprocess.run([args.gemtb, "ref", "attention", *argv, "--out-dir", out_dir],
                              capture_output=True, text=True)
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        problems = []
        if proc.returncode != 2:
            problems.append(f"exit code {proc.returncode}, want 2")
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines, want 1")
        for needle in needles:
            if needle not in proc.stderr:
                problems.append(f"message lacks {needle!r}")
        if os.path.exists(out_dir):
            problems.append("an output folder was created")
        if problems:
            failures += 1
            print(f"FAIL {name}: {'; '.join(problems)}\n  stderr: {proc.stderr.strip()}")
        else:
            print(f"ok   {name}: {lines[0]}")
    # The well-formed call succeeds, so the failures above are about the malformed field alone.
    ok_dir = os.path.join(tmp, "ok")
    proc = subprocess.run([args.gemtb, "ref", "attention", *good, "--out-dir", ok_dir], capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(os.path.join(ok_dir, "o.npy")):
        failures += 1
        print(f"FAIL well-formed call: exit {proc.returncode}: {proc.stderr.strip()}")
    good_folder = case_folder("case_good")
    folder_dir = os.path.join(tmp, "ok_case")
    proc_case = subprocess.run([args.gemtb, "ref", "attention", *good_folder, "--out-dir", folder_dir],
                               capture_output=True, text=True)
    if proc_case.returncode != 0 or not os.path.exists(os.path.join(folder_dir, "o.npy")):
        failures += 1
        print(f"FAIL well-formed case folder: exit {proc_case.returncode}: {proc_case.stderr.strip()}")
    checks = len(cases) + 2

    def run(argv):
        return subprocess.run([args.gemtb, "ref", "attention", *argv], capture_output=True, text=True)

    def listing(folder):
        return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}

    def check(name, ok):
        nonlocal failures, checks
        checks += 1
        if not ok:
            failures += 1
        print(("ok   " if ok else "FAIL ") + name)

    # Flags agreeing with the case, or setting what it leaves out, are taken.
    agree = run(case_folder("case_agree", act="silu") + ["--act", "silu", "--out-dir", os.path.join(tmp, "agree")])
    check("--act equal to case.json's runs", agree.returncode == 0)
    fill = run(case_folder("case_fill") + ["--act", "silu", "--out-dir", os.path.join(tmp, "fill")])
    check("--act set where case.json has none is used (no lse.npy for silu)",
          fill.returncode == 0 and sorted(os.listdir(os.path.join(tmp, "fill"))) == ["o.npy"])
    missing = run(good + ["--out-dir", os.path.join(tmp, "no", "such", "out")])
    check("an --out-dir whose parent is missing exits 2 before any work, nothing created",
          missing.returncode == 2 and "does not exist" in missing.stderr and not os.path.exists(os.path.join(tmp, "no")))
    # A folder holding a set: a second run is refused and the set stays; --force replaces it whole.
    before = listing(ok_dir)
    again = run(good + ["--act", "silu", "--out-dir", ok_dir])
    check("a second run into a full --out-dir exits 2 on one line naming --force, the set unchanged",
          again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1 and "--force" in again.stderr
          and listing(ok_dir) == before)
    forced = run(good + ["--act", "silu", "--force", "--out-dir", ok_dir])
    after = listing(ok_dir)
    check("--force replaces the set as a whole (the softmax run's lse.npy is gone)",
          forced.returncode == 0 and sorted(after) == ["o.npy"] and after["o.npy"] != before["o.npy"])
    print(f"{checks - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
