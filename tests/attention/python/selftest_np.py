#!/usr/bin/python3
"""Self-checks of the NumPy attention reference (attention_np.py); no C++ needed.

    /usr/bin/python3 selftest_np.py [--seed S] [--quick]

Checks:
  * act_grad vs central differences of act_fwd on a grid (away from kinks),
    and the left-derivative kink rule;
  * time-bias buckets: the exact T_k edges and the nominal log formula;
  * fp64 central-difference gradients (dQ, dK, dV, dDense, dRel, dTs) for
    every act x mask kind, in two configurations each (self-attention with
    dense + rel + time bias, RoPE on q/k/v and GQA; cross-attention with
    Lq != Lk, kv_index or broadcast_q, dense + rel bias, RoPE on q/k), scores
    kept >= 1e-3 away from kinks: rel err <= 1e-6;
  * dense bias filled with NaN outside valid pairs never leaks; dDense is zero there;
  * identity act, pre = post = 1, no mask equals (Q K^T) V;
  * GQA / kv_index / broadcast_q equal materialised copies (forward and summed gradients);
  * jagged vs a vectorised padded [B,H,maxLq,maxLk] path with explicit masks;
  * window(maxL, maxL) is bitwise equal to none;
  * key permutation invariance and query equivariance;
  * kink rule with exactly-zero scores (orthogonal q, k) and with S = +-3;
  * empty rows: O = 0, LSE = -inf, zero gradients, no NaN.
Exit 0 if all pass, 1 otherwise (77 if numpy is missing).
"""

import argparse
import math
import os
import sys
import time

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("SKIP: numpy is not available for %s" % sys.executable)
    sys.exit(77)

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_np as ref  # noqa: E402

ACTS, MASKS = ref.ACTS, ref.MASKS
FAILS = []
NCHECKS = [0]


def check(cond, what):
    NCHECKS[0] += 1
    if not cond:
        FAILS.append(what)
        print("FAIL %s" % what)


def relerr(a, b):
    """max|a-b| / max(1, max|b|); infinities must coincide exactly (else inf)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or np.isnan(a).any() or np.isnan(b).any():
        return float("inf")
    inf = np.isinf(b)
    if not np.array_equal(a[inf], b[inf]) or np.isinf(a[~inf]).any():
        return float("inf")
    a, b = a[~inf], b[~inf]
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(b))))


def run(c, **over):
    kw = dict(c)
    kw.update(over)
    return ref.attention(**kw)


# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------

def test_activations():
    x = np.linspace(-6.0, 6.0, 2401) + 1.234e-4  # off every kink
    h = 1e-6
    for act in ACTS[1:]:
        fd = (ref.act_fwd(act, x + h) - ref.act_fwd(act, x - h)) / (2 * h)
        an = ref.act_grad(act, x)
        err = float(np.max(np.abs(fd - an)))
        check(err < 1e-7, "act_grad %s vs finite differences: err %.2e" % (act, err))
        check(ref.act_fwd(act, np.array([0.0]))[0] == 0.0, "%s(0) == 0" % act)
    # reference values
    check(abs(ref.act_fwd("gelu", np.array([1.0]))[0] - 0.8413447460685429) < 1e-15, "gelu(1)")
    check(abs(ref.act_fwd("silu", np.array([-800.0]))[0]) == 0.0 and
          np.isfinite(ref.act_grad("silu", np.array([-800.0, 800.0]))).all(), "silu overflow-safe")
    check(abs(ref.act_fwd("hardswish", np.array([1.0]))[0] - 4.0 / 6.0) < 1e-16, "hardswish(1)")
    # kink rule (left derivative)
    g = lambda a, v: float(ref.act_grad(a, np.array([v]))[0])  # noqa: E731
    check(g("relu", 0.0) == 0.0, "relu'(0) = 0")
    check(g("leaky_relu", 0.0) == 0.01, "leaky'(0) = 0.01")
    check(g("hardswish", -3.0) == 0.0, "hardswish'(-3) = 0")
    check(g("hardswish", 3.0) == 1.5, "hardswish'(3) = 1.5")
    check(g("relu_square", 0.0) == 0.0, "relu_square'(0) = 0")


def test_ts_buckets():
    T = ref.TS_THRESHOLDS
    check(len(T) == 128 and T[0] == 2 and all(T[i] <= T[i + 1] for i in range(127)),
          "T_k table shape/monotone")
    for kk in range(1, 129):
        b_at = int(ref.ts_bucket(np.array([T[kk - 1]]))[0])
        b_below = int(ref.ts_bucket(np.array([T[kk - 1] - 1]))[0])
        check(b_at >= kk and b_below < kk, "bucket edge at T_%d" % kk)
        check(int(ref.ts_bucket(np.array([-T[kk - 1]]))[0]) == b_at, "bucket symmetric at T_%d" % kk)
    check(int(ref.ts_bucket(np.array([0]))[0]) == 0 and int(ref.ts_bucket(np.array([1]))[0]) == 0,
          "bucket(0) = bucket(1) = 0")
    check(int(ref.ts_bucket(np.array([2 ** 62]))[0]) == 128, "bucket saturates at 128")
    # nominal formula away from the edges
    rng = np.random.default_rng(7)
    d = np.unique((10 ** rng.uniform(0, 16, 4000)).astype(np.int64))
    nominal = np.minimum(128, np.floor(np.log(np.maximum(d, 1)) / 0.301)).astype(np.int64)
    got = ref.ts_bucket(d)
    near = np.abs(np.log(np.maximum(d, 1)) / 0.301 - np.round(np.log(np.maximum(d, 1)) / 0.301)) < 1e-6
    bad = (~near) & (got != nominal)
    # ceil() moves an edge by < 1 unit, which matters only for small |Delta|
    bad &= d > 50
    check(not bad.any(), "bucket vs nominal log formula (%d mismatches)" % int(bad.sum()))


# ---------------------------------------------------------------------------
# Finite-difference gradients
# ---------------------------------------------------------------------------

def _offsets(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def _rope(rng, T, D):
    ang = rng.uniform(0, 2 * math.pi, size=(T, D // 2))
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=1)


def _mask_params(rng, mask):
    kw = {"mask": mask}
    if mask == "window":
        kw["window"] = (int(rng.choice([-1, 0, 1, 2])), int(rng.choice([-1, 0, 1, 2])))
    elif mask == "block":
        kw["block"] = int(rng.integers(2, 5))  # block(1) makes softmax trivial
    return kw


def _dense_bias(rng, pairs, Hb, max_lq, max_lk, mkw, align):
    B = len(pairs)
    dense = np.full((B, Hb, max_lq, max_lk), np.nan)
    for (b, _, Lq, _, Lk, _) in pairs:
        keep = ref.valid_mask(Lq, Lk, mkw["mask"], mkw.get("window", (-1, -1)),
                              mkw.get("block", 64), align)
        vals = rng.standard_normal((Hb, Lq, Lk)) * 0.5
        blk = dense[b, :, :Lq, :Lk]
        blk[:, keep] = vals[:, keep]
    return dense


def make_fd_case(rng, act, mask, variant):
    """Small case; variant 0 = self-attention with all biases and full RoPE + GQA,
    variant 1/2/3 = cross / kv_index / broadcast_q with dense + rel + RoPE(q,k)."""
    H, Dqk, Dv = 2, 4, 2
    align = str(rng.choice(ref.ALIGNS))
    mkw = _mask_params(rng, mask)
    kv_index, broadcast = None, False
    if variant == 0:
        Hkv = 1
        qlens = [int(rng.integers(2, 5)), int(rng.integers(0, 4))]
        klens = list(qlens)
    elif variant == 1:
        Hkv = 2
        qlens = [int(rng.integers(1, 4)), int(rng.integers(3, 6))]
        klens = [int(rng.integers(3, 6)), int(rng.integers(0, 3))]
    elif variant == 2:
        Hkv = 1
        qlens = [int(rng.integers(1, 5)) for _ in range(3)]
        klens = [int(rng.integers(2, 6)), int(rng.integers(1, 4))]
        kv_index = np.array([1, 0, 1], dtype=np.int64)
    else:
        Hkv = 2
        qlens = [int(rng.integers(2, 5))]
        klens = [int(rng.integers(1, 6)), int(rng.integers(2, 5)), 0]
        broadcast = True
        if rng.random() < 0.5:
            kv_index = np.array([2, 0, 1, 0], dtype=np.int64)
    q_off, kv_off = _offsets(qlens), _offsets(klens)
    TQ, TK = int(q_off[-1]), int(kv_off[-1])
    pairs = ref.pairing(q_off, kv_off, kv_index, broadcast)
    max_lq = max(p[2] for p in pairs) + int(rng.integers(0, 2))
    max_lk = max(klens) + int(rng.integers(0, 2))
    if variant == 0:
        max_lq = max_lk = max(max_lq, max_lk)
    max_lq, max_lk = max(max_lq, 1), max(max_lk, 1)
    maxL = max(max_lq, max_lk)
    TO = len(pairs) * qlens[0] if broadcast else TQ
    c = dict(q=rng.standard_normal((TQ, H, Dqk)), k=rng.standard_normal((TK, Hkv, Dqk)),
             v=rng.standard_normal((TK, Hkv, Dv)), q_off=q_off, kv_off=kv_off,
             max_lq=max_lq, max_lk=max_lk, act=act, align=align,
             kv_index=kv_index, broadcast_q=broadcast,
             pre_scale=float(rng.uniform(0.4, 1.2)), post_scale=float(rng.uniform(0.5, 1.5)))
    c.update(mkw)
    c["bias_dense"] = _dense_bias(rng, pairs, int(rng.choice([1, 2])), max_lq, max_lk, mkw, align)
    c["bias_rel"] = rng.standard_normal((int(rng.choice([1, H])), 2 * maxL - 1)) * 0.5
    c["rope_q"] = _rope(rng, TQ, Dqk)
    c["rope_k"] = _rope(rng, TK, Dqk)
    if variant == 0:
        c["rope_v"] = _rope(rng, TK, Dv)
        ts = []
        for L in qlens:
            t = int(rng.integers(0, 1000))
            for _ in range(L):
                ts.append(t)
                t += int(10 ** rng.uniform(0, 6))
        c["ts"] = np.array(ts, dtype=np.int64)
        c["bias_ts"] = rng.standard_normal((int(rng.choice([1, H])), ref.NUM_TS_BUCKETS)) * 0.5
    c["do"] = rng.standard_normal((TO, H, Dv))
    return c


def _kink_ok(c):
    kinks = ref.ACT_KINKS.get(c["act"])
    if not kinks:
        return True
    sc = []
    ref.attention(**dict(c, do=None), scores_out=sc)
    s = np.concatenate(sc) if sc else np.zeros(0)
    return all(np.all(np.abs(s - kk) >= 1e-3) for kk in kinks)


def _loss(c):
    o = ref.attention(**dict(c, do=None))["o"]
    return float(np.sum(o * c["do"]))


GRAD_OF = {"q": "dq", "k": "dk", "v": "dv", "bias_dense": "ddense",
           "bias_rel": "drel", "bias_ts": "dts"}


def fd_gradients(c, label, h=1e-5):
    res = ref.attention(**c)
    for key in ("o", "lse", "dq", "dk", "dv", "ddense", "drel", "dts"):
        if key in res:
            arr = res[key]
            ok = not np.isnan(arr).any() and (key == "lse" or np.isfinite(arr).all())
            check(ok, "%s: NaN/inf in %s" % (label, key))
    if "ddense" in res:
        nanpos = np.isnan(c["bias_dense"])
        check(np.all(res["ddense"][nanpos] == 0.0), "%s: dDense nonzero outside valid pairs" % label)
    for key, gkey in GRAD_OF.items():
        if c.get(key) is None:
            continue
        base = c[key]
        an = res[gkey]
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            if not np.isfinite(base[idx]):
                continue
            p = base.copy()
            p[idx] = base[idx] + h
            lp = _loss(dict(c, **{key: p}))
            p[idx] = base[idx] - h
            lm = _loss(dict(c, **{key: p}))
            fd[idx] = (lp - lm) / (2 * h)
        amax = float(np.max(np.abs(an))) if an.size else 0.0
        err = float(np.max(np.abs(fd - an))) if an.size else 0.0
        if amax > 1e-12:
            check(err / amax <= 1e-6, "%s: %s rel err %.2e (max|grad| %.2e)"
                  % (label, gkey, err / amax, amax))
        else:
            check(err <= 1e-8, "%s: %s is zero but fd max %.2e" % (label, gkey, err))


def test_fd(seed, quick):
    variants = (0, 1) if quick else (0, 1, 2, 3)
    for ai, act in enumerate(ACTS):
        for mi, mask in enumerate(MASKS):
            for vi, variant in enumerate(variants):
                if quick and (ai + mi + vi) % 2:
                    continue
                rng = np.random.default_rng([seed, ai, mi, variant])
                for _ in range(200):
                    c = make_fd_case(rng, act, mask, variant)
                    if _kink_ok(c):
                        break
                else:
                    check(False, "fd %s/%s/v%d: could not avoid kinks" % (act, mask, variant))
                    continue
                fd_gradients(c, "fd act=%s mask=%s variant=%d" % (act, mask, variant))


# ---------------------------------------------------------------------------
# Structural identities
# ---------------------------------------------------------------------------

def test_identity_plain(rng):
    for align in ref.ALIGNS:
        qlens, klens = [3, 0, 7, 1], [5, 2, 0, 4]
        H, Hkv, D, Dv = 2, 2, 4, 6
        q_off, kv_off = _offsets(qlens), _offsets(klens)
        q = rng.standard_normal((q_off[-1], H, D))
        k = rng.standard_normal((kv_off[-1], Hkv, D))
        v = rng.standard_normal((kv_off[-1], Hkv, Dv))
        o = ref.attention(q, k, v, q_off, kv_off, 7, 5, act="identity", pre_scale=1.0,
                          post_scale=1.0, align=align)["o"]
        exp = np.zeros_like(o)
        for b in range(4):
            for hh in range(H):
                Qb = q[q_off[b]:q_off[b + 1], hh]
                Kb = k[kv_off[b]:kv_off[b + 1], hh]
                Vb = v[kv_off[b]:kv_off[b + 1], hh]
                exp[q_off[b]:q_off[b + 1], hh] = (Qb @ Kb.T) @ Vb
        check(relerr(o, exp) <= 1e-12, "identity == (QK^T)V (%s)" % align)
        # default pre/post for identity is 1 as well
        o2 = ref.attention(q, k, v, q_off, kv_off, 7, 5, act="identity", align=align)["o"]
        check(np.array_equal(o, o2), "identity default scales are 1")


def _grad_keys(res):
    return [k for k in ("o", "lse", "dq", "dk", "dv") if k in res]


def test_gqa(rng):
    for act in ("softmax", "silu", "relu"):
        for mask in ("none", "causal"):
            H, Hkv = 4, 2
            g = H // Hkv
            lens = [4, 0, 6]
            off = _offsets(lens)
            T = int(off[-1])
            c = dict(q=rng.standard_normal((T, H, 4)), k=rng.standard_normal((T, Hkv, 4)),
                     v=rng.standard_normal((T, Hkv, 2)), q_off=off, kv_off=off, max_lq=6,
                     max_lk=6, act=act, mask=mask, do=rng.standard_normal((T, H, 2)),
                     rope_q=_rope(rng, T, 4), rope_k=_rope(rng, T, 4),
                     bias_rel=rng.standard_normal((H, 11)))
            r1 = run(c)
            km = np.repeat(c["k"], g, axis=1)  # head h reads kv head h // g
            vm = np.repeat(c["v"], g, axis=1)
            r2 = run(c, k=km, v=vm)
            for key in ("o", "lse", "dq"):
                if key in r1:
                    check(relerr(r1[key], r2[key]) <= 1e-14, "GQA == copies: %s (%s,%s)"
                          % (key, act, mask))
            dk2 = r2["dk"].reshape(T, Hkv, g, 4).sum(axis=2)
            dv2 = r2["dv"].reshape(T, Hkv, g, 2).sum(axis=2)
            check(relerr(r1["dk"], dk2) <= 1e-13, "GQA dK == summed copies (%s,%s)" % (act, mask))
            check(relerr(r1["dv"], dv2) <= 1e-13, "GQA dV == summed copies (%s,%s)" % (act, mask))


def test_kv_index_and_broadcast(rng):
    H, D, Dv = 2, 4, 2
    for act in ("softmax", "gelu"):
        # kv_index vs materialised K/V copies
        qlens, klens = [3, 5, 0, 2], [4, 6]
        kv_index = np.array([1, 0, 1, 1], dtype=np.int64)
        q_off, kv_off = _offsets(qlens), _offsets(klens)
        k = rng.standard_normal((kv_off[-1], H, D))
        v = rng.standard_normal((kv_off[-1], H, Dv))
        rk = _rope(rng, int(kv_off[-1]), D)
        c = dict(q=rng.standard_normal((q_off[-1], H, D)), k=k, v=v, q_off=q_off,
                 kv_off=kv_off, max_lq=5, max_lk=6, act=act, kv_index=kv_index,
                 align="top_left", mask="causal", do=rng.standard_normal((q_off[-1], H, Dv)),
                 rope_q=_rope(rng, int(q_off[-1]), D), rope_k=rk)
        r1 = run(c)
        rows = np.concatenate([np.arange(kv_off[s], kv_off[s + 1]) for s in kv_index])
        mlens = [klens[s] for s in kv_index]
        r2 = run(c, k=k[rows], v=v[rows], kv_off=_offsets(mlens), kv_index=None, rope_k=rk[rows])
        for key in ("o", "lse", "dq"):
            if key in r1:
                check(relerr(r1[key], r2[key]) <= 1e-14, "kv_index == copies: %s (%s)" % (key, act))
        for key in ("dk", "dv"):
            summed = np.zeros_like(r1[key])
            np.add.at(summed, rows, r2[key])
            check(relerr(r1[key], summed) <= 1e-13, "kv_index %s == summed copies (%s)" % (key, act))

        # broadcast_q vs materialised Q copies
        Lq = 3
        klens = [4, 0, 5]
        kv_off = _offsets(klens)
        q = rng.standard_normal((Lq, H, D))
        rq = _rope(rng, Lq, D)
        B = len(klens)
        c = dict(q=q, k=rng.standard_normal((kv_off[-1], H, D)),
                 v=rng.standard_normal((kv_off[-1], H, Dv)), q_off=np.array([0, Lq]),
                 kv_off=kv_off, max_lq=Lq, max_lk=5, act=act, broadcast_q=True,
                 do=rng.standard_normal((B * Lq, H, Dv)), rope_q=rq,
                 bias_dense=rng.standard_normal((B, 1, Lq, 5)))
        r1 = run(c)
        r2 = run(c, q=np.tile(q, (B, 1, 1)), q_off=_offsets([Lq] * B), broadcast_q=False,
                 rope_q=np.tile(rq, (B, 1)))
        check(r1["o"].shape == (B * Lq, H, Dv), "broadcast_q output rows = B*Lq")
        for key in ("o", "lse", "dk", "dv", "ddense"):
            if key in r1:
                check(relerr(r1[key], r2[key]) <= 1e-14, "broadcast_q == copies: %s (%s)" % (key, act))
        check(relerr(r1["dq"], r2["dq"].reshape(B, Lq, H, D).sum(axis=0)) <= 1e-13,
              "broadcast_q dQ == summed copies (%s)" % act)


def padded_forward(c):
    """Independent vectorised formulation: padded [B,H,maxLq,maxLk] with explicit masks."""
    q, k, v = c["q"], c["k"], c["v"]
    if c.get("rope_q") is not None:
        q = ref.rope_apply(q, c["rope_q"])
        k = ref.rope_apply(k, c["rope_k"])
    if c.get("rope_v") is not None:
        v = ref.rope_apply(v, c["rope_v"])
    pairs = ref.pairing(c["q_off"], c["kv_off"], c.get("kv_index"), c.get("broadcast_q", False))
    B, H, Dqk = len(pairs), q.shape[1], q.shape[2]
    Hkv, Dv = k.shape[1], v.shape[2]
    mq, mk = c["max_lq"], c["max_lk"]
    maxL = max(mq, mk)
    Qp = np.zeros((B, H, mq, Dqk))
    Kp = np.zeros((B, H, mk, Dqk))
    Vp = np.zeros((B, H, mk, Dv))
    keep = np.zeros((B, mq, mk), dtype=bool)
    rel_idx = np.zeros((B, mq, mk), dtype=np.int64)
    bucket = np.zeros((B, mq, mk), dtype=np.int64)
    headmap = np.arange(H) // (H // Hkv)
    ii = np.arange(mq)[:, None]
    jj = np.arange(mk)[None, :]
    for (b, q0, Lq, k0, Lk, _) in pairs:
        Qp[b, :, :Lq] = q[q0:q0 + Lq].transpose(1, 0, 2)
        Kp[b, :, :Lk] = k[k0:k0 + Lk][:, headmap].transpose(1, 0, 2)
        Vp[b, :, :Lk] = v[k0:k0 + Lk][:, headmap].transpose(1, 0, 2)
        a = ii + (Lk - Lq if c.get("align", "bottom_right") == "bottom_right" else 0)
        m = (ii < Lq) & (jj < Lk)
        mask = c.get("mask", "none")
        left, right = {"none": (-1, -1), "causal": (-1, 0)}.get(mask, c.get("window", (-1, -1)))
        if mask == "block":
            n = c.get("block", 64)
            m &= (a // n) == (jj // n)
        elif mask != "none":
            if left >= 0:
                m &= jj >= a - left
            if right >= 0:
                m &= jj <= a + right
        keep[b] = m
        rel_idx[b] = np.clip(maxL - 1 + jj - a, 0, 2 * maxL - 2)
        if c.get("ts") is not None and Lq > 0:
            ts = c["ts"]
            tq = ts[q0 + np.minimum(np.arange(mq) + 1, Lq - 1)]
            tk = ts[k0 + np.minimum(np.arange(mk), Lk - 1)]
            bucket[b] = ref.ts_bucket(tq[:, None] - tk[None, :])
    beta = np.zeros((B, H, mq, mk))
    if c.get("bias_dense") is not None:
        dense = c["bias_dense"]
        hb = np.arange(H) // (H // dense.shape[1])
        beta += np.where(keep[:, None], dense[:, hb], 0.0)
    if c.get("bias_rel") is not None:
        rel = c["bias_rel"]
        hr = np.zeros(H, dtype=int) if rel.shape[0] == 1 else np.arange(H)
        beta += np.where(keep[:, None], rel[hr][:, rel_idx].transpose(1, 0, 2, 3), 0.0)
    if c.get("bias_ts") is not None:
        tab = c["bias_ts"]
        ht = np.zeros(H, dtype=int) if tab.shape[0] == 1 else np.arange(H)
        beta += np.where(keep[:, None], tab[ht][:, bucket].transpose(1, 0, 2, 3), 0.0)
    S = c.get("pre_scale") or ref.default_pre_scale(c["act"], Dqk)
    S = S * (np.einsum("bhid,bhjd->bhij", Qp, Kp) + beta)
    post = c.get("post_scale") or 1.0
    km = keep[:, None]
    if c["act"] == "softmax":
        Sm = np.where(km, S, -np.inf)
        M = Sm.max(axis=3, keepdims=True)
        Mf = np.where(np.isfinite(M), M, 0.0)
        E = np.where(km, np.exp(np.where(km, S, 0.0) - Mf), 0.0)
        ssum = E.sum(axis=3, keepdims=True)
        P = post * E / np.where(ssum > 0, ssum, 1.0)
        with np.errstate(divide="ignore"):
            lse_p = np.where(ssum[..., 0] > 0, Mf[..., 0] + np.log(np.where(ssum[..., 0] > 0,
                                                                             ssum[..., 0], 1.0)),
                             -np.inf)
    else:
        P = np.where(km, post * ref.act_fwd(c["act"], np.where(km, S, 0.0)), 0.0)
    Op = np.einsum("bhij,bhjd->bhid", P, Vp)
    TO = len(pairs) * pairs[0][2] if c.get("broadcast_q") else q.shape[0]
    o = np.zeros((TO, H, Dv))
    lse = np.full((H, TO), -np.inf)
    for (b, _, Lq, _, _, o0) in pairs:
        o[o0:o0 + Lq] = Op[b, :, :Lq].transpose(1, 0, 2)
        if c["act"] == "softmax":
            lse[:, o0:o0 + Lq] = lse_p[b, :, :Lq]
    return o, lse


def test_jagged_vs_padded(seed):
    for ai, act in enumerate(ACTS):
        for mi, mask in enumerate(MASKS):
            for variant in (0, 1, 2, 3):
                rng = np.random.default_rng([seed, 99, ai, mi, variant])
                c = make_fd_case(rng, act, mask, variant)
                c["do"] = None
                r = ref.attention(**c)
                o, lse = padded_forward(c)
                check(relerr(r["o"], o) <= 1e-12, "jagged vs padded O (%s,%s,v%d): %.2e"
                      % (act, mask, variant, relerr(r["o"], o)))
                if act == "softmax":
                    same_inf = np.array_equal(np.isneginf(r["lse"]), np.isneginf(lse))
                    fin = np.isfinite(lse)
                    check(same_inf and relerr(r["lse"][fin], lse[fin]) <= 1e-12,
                          "jagged vs padded LSE (%s,v%d)" % (mask, variant))


def test_window_ge_maxl(rng):
    qlens, klens = [5, 3, 0], [2, 6, 4]
    q_off, kv_off = _offsets(qlens), _offsets(klens)
    for act in ACTS:
        for align in ref.ALIGNS:
            c = dict(q=rng.standard_normal((q_off[-1], 2, 4)), k=rng.standard_normal((kv_off[-1], 1, 4)),
                     v=rng.standard_normal((kv_off[-1], 1, 2)), q_off=q_off, kv_off=kv_off,
                     max_lq=5, max_lk=6, act=act, align=align,
                     do=rng.standard_normal((q_off[-1], 2, 2)))
            r1 = run(c, mask="none")
            r2 = run(c, mask="window", window=(6, 6))
            check(all(np.array_equal(r1[kk], r2[kk]) for kk in r1),
                  "window(maxL,maxL) bitwise == none (%s,%s)" % (act, align))


def test_permutation(rng):
    lens = [6]
    off = _offsets(lens)
    for act in ACTS:
        c = dict(q=rng.standard_normal((6, 2, 4)), k=rng.standard_normal((6, 2, 4)),
                 v=rng.standard_normal((6, 2, 2)), q_off=off, kv_off=off, max_lq=6, max_lk=6,
                 act=act, bias_dense=rng.standard_normal((1, 2, 6, 6)))
        r1 = run(c)
        pk = rng.permutation(6)
        r2 = run(c, k=c["k"][pk], v=c["v"][pk], bias_dense=c["bias_dense"][:, :, :, pk])
        check(relerr(r1["o"], r2["o"]) <= 1e-13, "key permutation invariance (%s)" % act)
        pq = rng.permutation(6)
        r3 = run(c, q=c["q"][pq], bias_dense=c["bias_dense"][:, :, pq, :])
        check(relerr(r1["o"][pq], r3["o"]) <= 1e-13, "query equivariance (%s)" % act)


def test_kinks_exact(rng):
    # q along e0, k along e1 -> S == 0 exactly
    T, D = 4, 4
    off = _offsets([T])
    q = np.zeros((T, 1, D))
    q[:, 0, 0] = rng.standard_normal(T)
    k = np.zeros((T, 1, D))
    k[:, 0, 1] = rng.standard_normal(T)
    v = rng.standard_normal((T, 1, 2))
    do = rng.standard_normal((T, 1, 2))
    base = dict(q=q, k=k, v=v, q_off=off, kv_off=off, max_lq=T, max_lk=T, do=do,
                post_scale=1.3)
    rid = run(base, act="identity")
    rr = run(base, act="relu")
    check(np.all(rr["dq"] == 0.0) and np.all(rr["dk"] == 0.0) and np.all(rr["o"] == 0.0),
          "relu'(0) = 0 with exactly-zero scores")
    rl = run(base, act="leaky_relu")
    check(relerr(rl["dq"], 0.01 * rid["dq"]) <= 1e-15 and relerr(rl["dk"], 0.01 * rid["dk"]) <= 1e-15,
          "leaky'(0) = 0.01 with exactly-zero scores")
    rs = run(base, act="relu_square")
    check(np.all(rs["dq"] == 0.0), "relu_square'(0) = 0")
    # S == +3 and S == -3 exactly for hardswish
    for sgn, factor in ((1.0, 1.5), (-1.0, 0.0)):
        q3 = np.zeros((1, 1, 2))
        q3[0, 0, 0] = 3.0 * sgn
        k3 = np.zeros((1, 1, 2))
        k3[0, 0, 0] = 1.0
        b3 = dict(q=q3, k=k3, v=np.ones((1, 1, 2)), q_off=[0, 1], kv_off=[0, 1], max_lq=1,
                  max_lk=1, do=np.ones((1, 1, 2)))
        rh = run(b3, act="hardswish")
        ri = run(b3, act="identity")
        check(np.array_equal(rh["dq"], factor * ri["dq"]),
              "hardswish'(%+d) = %g with exact scores" % (int(3 * sgn), factor))


def test_empty_rows(rng):
    # causal bottom_right with Lk < Lq gives leading empty rows; also empty sequences
    qlens, klens = [5, 0, 3, 2], [2, 3, 0, 2]
    q_off, kv_off = _offsets(qlens), _offsets(klens)
    for act in ACTS:
        c = dict(q=rng.standard_normal((q_off[-1], 2, 4)), k=rng.standard_normal((kv_off[-1], 2, 4)),
                 v=rng.standard_normal((kv_off[-1], 2, 2)), q_off=q_off, kv_off=kv_off,
                 max_lq=5, max_lk=3, act=act, mask="causal",
                 do=rng.standard_normal((q_off[-1], 2, 2)),
                 bias_rel=rng.standard_normal((2, 9)))
        r = run(c)
        empty_rows = [0, 1, 2] + [5, 6, 7]  # seq0 rows 0..2 (a_i < 0), seq2 (Lk = 0)
        check(all(np.isfinite(r[kk]).all() for kk in ("o", "dq", "dk", "dv", "drel")),
              "no NaN/inf with empty rows (%s)" % act)
        check(np.all(r["o"][empty_rows] == 0.0) and np.all(r["dq"][empty_rows] == 0.0),
              "empty rows: O = 0 and dQ = 0 (%s)" % act)
        if act == "softmax":
            check(np.all(np.isneginf(r["lse"][:, empty_rows])) and
                  np.isfinite(np.delete(r["lse"], empty_rows, axis=1)).all(),
                  "empty rows: LSE = -inf exactly there")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--quick", action="store_true", help="half of the FD matrix")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    steps = [("activations", test_activations), ("ts buckets", test_ts_buckets),
             ("identity == (QK^T)V", lambda: test_identity_plain(rng)),
             ("GQA == copies", lambda: test_gqa(rng)),
             ("kv_index/broadcast == copies", lambda: test_kv_index_and_broadcast(rng)),
             ("jagged vs padded", lambda: test_jagged_vs_padded(a.seed)),
             ("window >= maxL", lambda: test_window_ge_maxl(rng)),
             ("permutation", lambda: test_permutation(rng)),
             ("exact kinks", lambda: test_kinks_exact(rng)),
             ("empty rows", lambda: test_empty_rows(rng)),
             ("finite differences", lambda: test_fd(a.seed, a.quick))]
    for name, fn in steps:
        n0, f0, t1 = NCHECKS[0], len(FAILS), time.time()
        fn()
        print("%-30s %4d checks, %d failed (%.1f s)"
              % (name, NCHECKS[0] - n0, len(FAILS) - f0, time.time() - t1))
    print("selftest_np: %d checks, %d failed, %.1f s" % (NCHECKS[0], len(FAILS), time.time() - t0))
    return 0 if not FAILS else 1


if __name__ == "__main__":
    sys.exit(main())
