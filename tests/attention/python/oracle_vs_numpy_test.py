#!/usr/bin/python3
"""Compare the gemtb C++ attention oracle (``gemtb ref attention --mode oracle``)
with the independent NumPy reference ``attention_np.py`` on random small cases.

Usage:
    /usr/bin/python3 oracle_vs_numpy_test.py --gemtb PATH [--cases N] [--seed S]
                                             [--workdir DIR] [--only I] [--verbose]

Every case is run with --threads 1 and --threads 2; the output files must be
byte-identical, and every tensor must satisfy
    max|oracle - numpy| <= 1e-12 * max(1, max|numpy|)
with -inf LSE in the same places.  The first 72 cases enumerate every
activation x mask kind x {forward-only, backward} (each with at least 10 valid
pairs); the rest are fully random.  Coverage counts only passing cases with a
valid pair.

Exit status: 0 all pass, 1 any failure, 77 skip (numpy missing).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("SKIP: numpy is not available for %s" % sys.executable)
    sys.exit(77)

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_np as ref  # noqa: E402

ACTS = ref.ACTS
MASKS = ref.MASKS
TOL = 1e-12
N_SCHEDULED = len(ACTS) * len(MASKS) * 2  # act x mask x {fwd, bwd}
BLOCK_SIZES = (1, 2, 3, 4, 5, 7, 8, 16, 64)


# ---------------------------------------------------------------------------
# Case generation
# ---------------------------------------------------------------------------

def _draw_len(rng, hi=40):
    u = rng.random()
    if u < 0.12:
        return 0
    if u < 0.24:
        return 1
    return int(rng.integers(2, hi + 1))


def _draw_lens(rng, n, hi=40):
    return [_draw_len(rng, hi) for _ in range(n)]


def _offsets(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def _rope_table(rng, T, D):
    """Real sin/cos tables of random positions: sin in [0,D/2), cos in [D/2,D)."""
    pos = rng.integers(0, 4096, size=T).astype(np.float64)
    freq = 10000.0 ** (-np.arange(D // 2) / max(D // 2, 1))
    ang = pos[:, None] * freq[None, :]
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=1)


def _draw_ts(rng, lens):
    """int64 timestamps per token, with gaps that hit the T_k bucket edges."""
    thr = ref.TS_THRESHOLDS
    out = []
    for L in lens:
        t = int(rng.integers(0, 10**6))
        seq = []
        for _ in range(L):
            seq.append(t)
            u = rng.random()
            if u < 0.15:
                gap = 0
            elif u < 0.5:
                kk = int(rng.integers(0, 110))
                gap = thr[kk] + int(rng.integers(-1, 2))
            else:
                gap = int(10 ** rng.uniform(0, 13))
            if rng.random() < 0.2:
                gap = -gap  # not necessarily sorted; |Delta| is used
            t += gap
        out.extend(seq)
    return np.array(out, dtype=np.int64)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def make_case(rng, act, mask, backward):
    """Return (case dict of numpy inputs/options, description string)."""
    c = {"act": act, "mask": mask, "backward": backward}
    H = int(rng.choice([1, 2, 4]))
    Hkv = int(rng.choice(_divisors(H)))
    Dqk = int(rng.choice([2, 4, 6, 8]))
    Dv = int(rng.choice([2, 4, 6, 8]))
    c["align"] = str(rng.choice(ref.ALIGNS))

    pairing = str(rng.choice(["self", "cross", "kv_index", "broadcast_q"],
                             p=[0.35, 0.3, 0.2, 0.15]))
    kv_index = None
    broadcast = False
    if pairing == "self":
        B = int(rng.integers(1, 5))
        qlens = _draw_lens(rng, B)
        klens = list(qlens)
    elif pairing == "cross":
        B = int(rng.integers(1, 5))
        qlens = _draw_lens(rng, B)
        klens = _draw_lens(rng, B)
    elif pairing == "kv_index":
        Bkv = int(rng.integers(1, 4))
        B = int(rng.integers(1, 5))
        kv_index = rng.integers(0, Bkv, size=B).astype(np.int64)
        qlens = _draw_lens(rng, B)
        klens = _draw_lens(rng, Bkv)
    else:
        broadcast = True
        Bkv = int(rng.integers(1, 5))
        qlens = [_draw_len(rng, 20)]
        klens = _draw_lens(rng, Bkv)
        if rng.random() < 0.5:
            B = int(rng.integers(1, 5))
            kv_index = rng.integers(0, Bkv, size=B).astype(np.int64)
    if rng.random() < 0.03:  # occasionally everything empty
        qlens = [0] * len(qlens)
        klens = [0] * len(klens)
        if pairing == "self":
            klens = list(qlens)
    q_off = _offsets(qlens)
    kv_off = _offsets(klens)
    TQ, TK = int(q_off[-1]), int(kv_off[-1])
    pairs = ref.pairing(q_off, kv_off, kv_index, broadcast)
    B = len(pairs)
    TO = B * qlens[0] if broadcast else TQ

    self_attn = pairing == "self"
    slack = 0 if rng.random() < 0.5 else int(rng.integers(1, 4))
    max_lq = max(1, max([p[2] for p in pairs] + [0]) + slack)
    max_lk = max(1, max(klens + [0]) + slack)
    if self_attn:
        max_lq = max_lk = max(max_lq, max_lk)
    maxL = max(max_lq, max_lk)

    scale = 1.0 if rng.random() < 0.75 else None  # None: U(-0.1, 0.1) inputs

    def draw(*shape):
        if scale is None:
            return rng.uniform(-0.1, 0.1, size=shape)
        return rng.standard_normal(shape)

    c.update(q=draw(TQ, H, Dqk), k=draw(TK, Hkv, Dqk), v=draw(TK, Hkv, Dv),
             q_off=q_off, kv_off=kv_off, max_lq=max_lq, max_lk=max_lk,
             kv_index=kv_index, broadcast_q=broadcast)

    if rng.random() < 0.5:
        c["pre_scale"] = float(rng.uniform(0.1, 1.5))
    if rng.random() < 0.5:
        c["post_scale"] = float(rng.uniform(0.2, 2.0))

    if mask == "window":
        def side():
            u = rng.random()
            if u < 0.25:
                return -1
            if u < 0.45:
                return 0
            if u < 0.85:
                return int(rng.integers(1, 11))
            return int(rng.integers(11, 46))
        c["window"] = (side(), side())
    elif mask == "block":
        c["block"] = int(rng.choice(BLOCK_SIZES))

    # biases
    if rng.random() < 0.4:
        Hb = int(rng.choice(_divisors(H)))
        dense = np.full((B, Hb, max_lq, max_lk), np.nan)
        for (b, _, Lq, _, Lk, _) in pairs:
            keep = ref.valid_mask(Lq, Lk, mask, c.get("window", (-1, -1)),
                                  c.get("block", 64), c["align"])
            blk = dense[b, :, :Lq, :Lk]
            vals = rng.standard_normal((Hb, Lq, Lk)) * 0.5
            blk[:, keep] = vals[:, keep]  # NaN outside valid pairs
        c["bias_dense"] = dense
    if rng.random() < 0.4:
        Hr = int(rng.choice(sorted({1, H})))
        c["bias_rel"] = rng.standard_normal((Hr, 2 * maxL - 1)) * 0.5
    if self_attn and rng.random() < 0.5:
        Ht = int(rng.choice(sorted({1, H})))
        c["ts"] = _draw_ts(rng, qlens)
        c["bias_ts"] = rng.standard_normal((Ht, ref.NUM_TS_BUCKETS)) * 0.5

    if rng.random() < 0.35:
        c["rope_q"] = _rope_table(rng, TQ, Dqk)
        c["rope_k"] = _rope_table(rng, TK, Dqk)
        if rng.random() < 0.5:
            c["rope_v"] = _rope_table(rng, TK, Dv)

    if backward:
        c["do"] = rng.standard_normal((TO, H, Dv))

    c["n_valid"] = sum(int(ref.valid_mask(Lq, Lk, mask, c.get("window", (-1, -1)),
                                          c.get("block", 64), c["align"]).sum())
                       for (_, _, Lq, _, Lk, _) in pairs)

    feats = [pairing, c["align"], "H=%d/Hkv=%d" % (H, Hkv), "Dqk=%d,Dv=%d" % (Dqk, Dv),
             "qlens=%s" % qlens, "klens=%s" % klens, "maxLq=%d,maxLk=%d" % (max_lq, max_lk)]
    if kv_index is not None:
        feats.append("kv_index=%s" % kv_index.tolist())
    if mask == "window":
        feats.append("window=%s" % (c["window"],))
    if mask == "block":
        feats.append("block=%d" % c["block"])
    for key in ("bias_dense", "bias_rel", "bias_ts", "rope_q", "rope_v",
                "pre_scale", "post_scale"):
        if key in c:
            feats.append(key)
    if scale is None:
        feats.append("U(-0.1,0.1)")
    feats.append("valid_pairs=%d" % c["n_valid"])
    return c, " ".join(feats)


# ---------------------------------------------------------------------------
# Running the CLI
# ---------------------------------------------------------------------------

def write_inputs(c, d):
    """Write the case's .npy inputs into d; return the CLI arguments that go
    before and after ``--threads T``."""
    def save(name, arr, dtype):
        path = os.path.join(d, name)
        np.save(path, np.ascontiguousarray(arr, dtype=dtype))
        return path

    f8, i8 = np.float64, np.int64
    args = ["ref", "attention",
            "--q", save("q.npy", c["q"], f8),
            "--k", save("k.npy", c["k"], f8),
            "--v", save("v.npy", c["v"], f8),
            "--q-offsets", save("qo.npy", c["q_off"], i8),
            "--kv-offsets", save("ko.npy", c["kv_off"], i8),
            "--max-lq", str(c["max_lq"]), "--max-lk", str(c["max_lk"]),
            "--act", c["act"]]
    if "pre_scale" in c:
        args += ["--pre-scale", repr(c["pre_scale"])]
    if "post_scale" in c:
        args += ["--post-scale", repr(c["post_scale"])]
    args += ["--mask", c["mask"]]
    if c["mask"] == "window":
        args += ["--window-left", str(c["window"][0]), "--window-right", str(c["window"][1])]
    if c["mask"] == "block":
        args += ["--block", str(c["block"])]
    args += ["--align", c["align"]]
    if "bias_dense" in c:
        args += ["--bias-dense", save("bias_dense.npy", c["bias_dense"], f8)]
    if "bias_rel" in c:
        args += ["--bias-rel", save("bias_rel.npy", c["bias_rel"], f8)]
    if "bias_ts" in c:
        args += ["--ts", save("ts.npy", c["ts"], i8),
                 "--bias-ts", save("bias_ts.npy", c["bias_ts"], f8)]
    if "rope_q" in c:
        args += ["--rope-q", save("rope_q.npy", c["rope_q"], f8),
                 "--rope-k", save("rope_k.npy", c["rope_k"], f8)]
        if "rope_v" in c:
            args += ["--rope-v", save("rope_v.npy", c["rope_v"], f8)]
    if c["broadcast_q"]:
        args += ["--broadcast-q"]
    if c["kv_index"] is not None:
        args += ["--kv-index", save("kv_index.npy", c["kv_index"], i8)]
    args += ["--mode", "oracle"]
    tail = []
    if c["backward"]:
        tail += ["--backward", "--do", save("do.npy", c["do"], f8)]
    return args, tail


def run_cli(gemtb, args, threads, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    head, tail = args
    cmd = [gemtb] + head + ["--threads", str(threads)] + tail + ["--out-dir", out_dir]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p, cmd


def numpy_reference(c):
    return ref.attention(
        c["q"], c["k"], c["v"], c["q_off"], c["kv_off"], c["max_lq"], c["max_lk"],
        act=c["act"], pre_scale=c.get("pre_scale"), post_scale=c.get("post_scale"),
        mask=c["mask"], window=c.get("window", (-1, -1)), block=c.get("block", 64),
        align=c["align"], bias_dense=c.get("bias_dense"), bias_rel=c.get("bias_rel"),
        ts=c.get("ts"), bias_ts=c.get("bias_ts"), rope_q=c.get("rope_q"),
        rope_k=c.get("rope_k"), rope_v=c.get("rope_v"), broadcast_q=c["broadcast_q"],
        kv_index=c["kv_index"], do=c.get("do"))


def compare(name, got, want):
    """Return None if ok, else a failure message."""
    if got.dtype != np.float64:
        return "dtype %s, expected float64" % got.dtype
    if got.shape != want.shape:
        return "shape %s, expected %s" % (got.shape, want.shape)
    if np.isnan(got).any():
        return "NaN in output (%d entries)" % int(np.isnan(got).sum())
    if name == "lse":
        gi, wi = np.isneginf(got), np.isneginf(want)
        if not np.array_equal(gi, wi):
            return "-inf LSE pattern differs (%d vs %d entries)" % (int(gi.sum()), int(wi.sum()))
        got = np.where(wi, 0.0, got)
        want = np.where(wi, 0.0, want)
    if not np.isfinite(got).all():
        return "non-finite output"
    if want.size == 0:
        return None
    err = float(np.max(np.abs(got - want)))
    scale = max(1.0, float(np.max(np.abs(want))))
    if not err <= TOL * scale:
        return "max err %.3e > tol %.3e (max|ref| %.3e)" % (err, TOL * scale, scale)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemtb", required=True, help="path to the gemtb binary")
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--workdir", default=None,
                    help="keep case files here (default: temp dir, removed if all pass)")
    ap.add_argument("--only", type=int, default=None, help="run only case index I")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    gemtb = os.path.abspath(a.gemtb)
    if not (os.path.isfile(gemtb) and os.access(gemtb, os.X_OK)):
        print("FAIL: gemtb binary not found or not executable: %s" % gemtb)
        return 1
    own_tmp = a.workdir is None
    workdir = tempfile.mkdtemp(prefix="gemtb_attn_np_") if own_tmp else a.workdir
    os.makedirs(workdir, exist_ok=True)

    t0 = time.time()
    failures = 0
    failed_cases = 0
    cov_fwd, cov_bwd = set(), set()
    indices = [a.only] if a.only is not None else range(a.cases)
    for idx in indices:
        if idx < N_SCHEDULED:
            act = ACTS[idx % len(ACTS)]
            mask = MASKS[(idx // len(ACTS)) % len(MASKS)]
            backward = (idx // (len(ACTS) * len(MASKS))) % 2 == 1
        else:
            prng = np.random.default_rng([a.seed, idx, 1])
            act = str(prng.choice(ACTS))
            mask = str(prng.choice(MASKS))
            backward = bool(prng.random() < 0.7)
        rng = np.random.default_rng([a.seed, idx])
        c, desc = make_case(rng, act, mask, backward)
        # a scheduled act x mask case must exercise at least 10 valid pairs
        for _ in range(50):
            if idx >= N_SCHEDULED or c["n_valid"] >= 10:
                break
            c, desc = make_case(rng, act, mask, backward)
        tag = "seed=%d case=%d act=%s mask=%s %s" % (a.seed, idx, act, mask,
                                                    "bwd" if backward else "fwd")
        cdir = os.path.join(workdir, "case%04d" % idx)
        if os.path.isdir(cdir):
            shutil.rmtree(cdir)
        os.makedirs(cdir)
        args = write_inputs(c, cdir)
        case_fail = []

        outs = {}
        for threads in (1, 2):
            od = os.path.join(cdir, "out_t%d" % threads)
            cmd = [gemtb] + args[0] + ["--threads", str(threads)] + args[1] + ["--out-dir", od]
            try:
                p, cmd = run_cli(gemtb, args, threads, od)
            except subprocess.TimeoutExpired:
                case_fail.append(("cli", "timeout with --threads %d" % threads))
                continue
            if p.returncode != 0:
                tail = (p.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
                case_fail.append(("cli", "exit %d with --threads %d: %s"
                                  % (p.returncode, threads, tail[:300])))
                if a.verbose:
                    print("  cmd: %s" % " ".join(cmd))
                continue
            outs[threads] = od
        with open(os.path.join(cdir, "cmd.txt"), "w") as fh:
            fh.write(" ".join(cmd) + "\n")

        if 1 in outs and 2 in outs:
            f1 = sorted(os.listdir(outs[1]))
            f2 = sorted(os.listdir(outs[2]))
            if f1 != f2:
                case_fail.append(("threads", "file sets differ: %s vs %s" % (f1, f2)))
            for fn in sorted(set(f1) & set(f2)):
                with open(os.path.join(outs[1], fn), "rb") as x, \
                        open(os.path.join(outs[2], fn), "rb") as y:
                    if x.read() != y.read():
                        case_fail.append((fn, "not byte-identical for --threads 1 vs 2"))

        want = None
        if 1 in outs:
            try:
                want = numpy_reference(c)
            except Exception as e:  # noqa: BLE001
                want = None
                case_fail.append(("numpy", "reference raised %s: %s" % (type(e).__name__, e)))
        if want is not None:
            required = ["o"] + (["lse"] if act == "softmax" else [])
            if backward:
                required += ["dq", "dk", "dv"]
                required += [n for n, key in (("ddense", "bias_dense"), ("drel", "bias_rel"),
                                              ("dts", "bias_ts")) if key in c]
            compared = set()
            for name in required:
                path = os.path.join(outs[1], name + ".npy")
                if not os.path.exists(path):
                    # o/lse are only mandatory in forward-only runs
                    if backward and name in ("o", "lse"):
                        continue
                    case_fail.append((name, "missing output file %s.npy" % name))
                    continue
                try:
                    got = np.load(path)
                except Exception as e:  # noqa: BLE001
                    case_fail.append((name, "unreadable: %s" % e))
                    continue
                msg = compare(name, got, want[name])
                if msg:
                    case_fail.append((name, msg))
                else:
                    compared.add(name)
            if not case_fail and c["n_valid"] > 0:
                if "o" in compared:
                    cov_fwd.add((act, mask))
                if backward and "dq" in compared:
                    cov_bwd.add((act, mask))

        if case_fail:
            failed_cases += 1
            for tensor, msg in case_fail:
                failures += 1
                print("FAIL %s tensor=%s: %s" % (tag, tensor, msg))
            print("     case: %s  (files in %s)" % (desc, cdir))
        else:
            if a.verbose:
                print("ok   %s  %s" % (tag, desc))
            shutil.rmtree(cdir, ignore_errors=True)

    n = len(indices)
    total = len(ACTS) * len(MASKS)
    print("oracle_vs_numpy: %d/%d cases passed, %d failures; act x mask coverage "
          "fwd %d/%d, bwd %d/%d; %.1f s"
          % (n - failed_cases, n, failures, len(cov_fwd), total, len(cov_bwd), total,
             time.time() - t0))
    if failed_cases == 0 and own_tmp:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if failed_cases == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
