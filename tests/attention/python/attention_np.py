"""Independent fp64 NumPy reference of gemtb jagged attention.

Written from the definitions only, as a cross-check of the C++ oracle.  Readability
over speed: a loop over output sequences b and query heads h, with dense
per-sequence [Lq, Lk] score matrices.

Entry point: ``attention(q, k, v, q_off, kv_off, max_lq, max_lk, ..., do=None)``
returns a dict with ``o`` [TO,H,Dv] and, for softmax, ``lse`` [H,TO]; when ``do`` is
given also ``dq``, ``dk``, ``dv`` (w.r.t. the un-rotated inputs) and ``ddense``,
``drel``, ``dts`` for the bias forms that were given.
"""

import math

import numpy as np

ACTS = ("softmax", "identity", "gelu", "gelu_tanh", "silu", "relu",
        "relu_square", "leaky_relu", "hardswish")
MASKS = ("none", "causal", "window", "block")
ALIGNS = ("bottom_right", "top_left")

NUM_TS_BUCKETS = 129  # buckets 0..128


# ---------------------------------------------------------------------------
# Activations and their exact derivatives, kinks take the LEFT derivative.
# ---------------------------------------------------------------------------

_erfc_ufunc = np.frompyfunc(math.erfc, 1, 1)
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715
_LEAKY_SLOPE = 0.01


def _erfc(x):
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(_erfc_ufunc(x), dtype=np.float64).reshape(x.shape)


def normal_cdf(x):
    """Phi(x) = 1/2 erfc(-x/sqrt(2))."""
    return 0.5 * _erfc(-np.asarray(x, dtype=np.float64) / _SQRT2)


def normal_pdf(x):
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-0.5 * x * x) * _INV_SQRT_2PI


def sigmoid(x):
    """Overflow-safe logistic function."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def act_fwd(name, x):
    x = np.asarray(x, dtype=np.float64)
    if name == "identity":
        return x.copy()
    if name == "gelu":
        return 0.5 * x * _erfc(-x / _SQRT2)
    if name == "gelu_tanh":
        t = np.tanh(_GELU_C * (x + _GELU_A * x * x * x))
        return 0.5 * x * (1.0 + t)
    if name == "silu":
        return x * sigmoid(x)
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "relu_square":
        r = np.maximum(x, 0.0)
        return r * r
    if name == "leaky_relu":
        return np.where(x > 0, x, _LEAKY_SLOPE * x)
    if name == "hardswish":
        return x * np.minimum(np.maximum(x + 3.0, 0.0), 6.0) / 6.0
    raise ValueError("unknown pointwise activation %r" % (name,))


def act_grad(name, x):
    """f'(x); at kinks the left derivative: relu'(0)=0, leaky'(0)=0.01,
    hardswish'(-3)=0, hardswish'(3)=1.5."""
    x = np.asarray(x, dtype=np.float64)
    if name == "identity":
        return np.ones_like(x)
    if name == "gelu":
        return normal_cdf(x) + x * normal_pdf(x)
    if name == "gelu_tanh":
        t = np.tanh(_GELU_C * (x + _GELU_A * x * x * x))
        return (0.5 * (1.0 + t)
                + 0.5 * x * (1.0 - t * t) * (_GELU_C + 3.0 * _GELU_A * _GELU_C * x * x))
    if name == "silu":
        s = sigmoid(x)
        return s * (1.0 + x * (1.0 - s))
    if name == "relu":
        return np.where(x > 0, 1.0, 0.0)
    if name == "relu_square":
        return 2.0 * np.maximum(x, 0.0)
    if name == "leaky_relu":
        return np.where(x > 0, 1.0, _LEAKY_SLOPE)
    if name == "hardswish":
        return np.where(x <= -3.0, 0.0, np.where(x <= 3.0, x / 3.0 + 0.5, 1.0))
    raise ValueError("unknown pointwise activation %r" % (name,))


# Kink locations of each act (used by tests to stay away from them).
ACT_KINKS = {"relu": (0.0,), "relu_square": (0.0,), "leaky_relu": (0.0,),
             "hardswish": (-3.0, 3.0)}


# ---------------------------------------------------------------------------
# RoPE: row holds sin in [0, D/2), cos in [D/2, D); pairs (x_2m, x_2m+1).
# ---------------------------------------------------------------------------

def rope_apply(x, tab):
    """x [T, Hx, D], tab [T, D] -> rotated copy."""
    D = x.shape[2]
    half = D // 2
    s = tab[:, None, :half]
    c = tab[:, None, half:]
    xe = x[:, :, 0::2]
    xo = x[:, :, 1::2]
    y = np.empty_like(x)
    y[:, :, 0::2] = xe * c - xo * s
    y[:, :, 1::2] = xo * c + xe * s
    return y


def rope_apply_transposed(dy, tab):
    """Gradient w.r.t. the un-rotated input: dx_2m = dy_2m cos + dy_2m+1 sin,
    dx_2m+1 = dy_2m+1 cos - dy_2m sin."""
    D = dy.shape[2]
    half = D // 2
    s = tab[:, None, :half]
    c = tab[:, None, half:]
    de = dy[:, :, 0::2]
    do = dy[:, :, 1::2]
    dx = np.empty_like(dy)
    dx[:, :, 0::2] = de * c + do * s
    dx[:, :, 1::2] = do * c - de * s
    return dx


# ---------------------------------------------------------------------------
# Time-bias buckets: bucket = #{k in 1..128 : |Delta| >= T_k},
# T_k = ceil(exp(0.301 k)) in fp64.
# ---------------------------------------------------------------------------

TS_THRESHOLDS = [int(math.ceil(math.exp(0.301 * kk))) for kk in range(1, 129)]
_TS_THRESH_ARR = np.array(TS_THRESHOLDS, dtype=np.int64)  # all < 2^63


def ts_bucket(delta):
    """delta: int64 array -> bucket indices in 0..128 (integer comparison)."""
    a = np.abs(np.asarray(delta, dtype=np.int64))
    # count of thresholds T_k <= |delta|; thresholds are non-decreasing
    return np.searchsorted(_TS_THRESH_ARR, a, side="right").astype(np.int64)


# ---------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------

def valid_mask(Lq, Lk, mask="none", window=(-1, -1), block=64, align="bottom_right"):
    """[Lq, Lk] bool matrix of kept pairs."""
    if align == "bottom_right":
        delta = Lk - Lq
    elif align == "top_left":
        delta = 0
    else:
        raise ValueError("unknown align %r" % (align,))
    a = np.arange(Lq, dtype=np.int64)[:, None] + delta
    j = np.arange(Lk, dtype=np.int64)[None, :]
    keep = np.ones((Lq, Lk), dtype=bool)
    if mask == "none":
        return keep
    if mask == "causal":
        left, right = -1, 0
    elif mask == "window":
        left, right = int(window[0]), int(window[1])
    elif mask == "block":
        n = int(block)
        if n <= 0:
            raise ValueError("block size must be positive")
        return np.floor_divide(a, n) == np.floor_divide(j, n)  # floor division
    else:
        raise ValueError("unknown mask %r" % (mask,))
    if left >= 0:
        keep &= j >= a - left
    if right >= 0:
        keep &= j <= a + right
    return keep


def align_shift(Lq, Lk, align):
    return (Lk - Lq) if align == "bottom_right" else 0


# ---------------------------------------------------------------------------
# Validation / pairing
# ---------------------------------------------------------------------------

def _check_offsets(off, T, name):
    off = np.asarray(off)
    if off.ndim != 1 or off.size < 1:
        raise ValueError("%s must be 1-D with n+1 >= 1 entries" % name)
    if int(off[0]) != 0 or int(off[-1]) != T or np.any(np.diff(off) < 0):
        raise ValueError("%s invalid (off[0]=0, non-decreasing, off[n]=T=%d)" % (name, T))


def pairing(q_off, kv_off, kv_index=None, broadcast_q=False):
    """List of (b, q_start, Lq, k_start, Lk, o_start) for every output sequence."""
    q_off = [int(x) for x in q_off]
    kv_off = [int(x) for x in kv_off]
    Bkv = len(kv_off) - 1
    if broadcast_q:
        if len(q_off) != 2:
            raise ValueError("broadcast_q: q_off must hold exactly one sequence")
        Lq = q_off[1] - q_off[0]
        ks_list = [int(x) for x in kv_index] if kv_index is not None else list(range(Bkv))
        out = []
        for b, ks in enumerate(ks_list):
            out.append((b, 0, Lq, kv_off[ks], kv_off[ks + 1] - kv_off[ks], b * Lq))
        return out
    B = len(q_off) - 1
    if kv_index is not None:
        if len(kv_index) != B:
            raise ValueError("kv_index must have one entry per query sequence")
        ks_list = [int(x) for x in kv_index]
    else:
        if Bkv != B:
            raise ValueError("q_off and kv_off describe different batch sizes")
        ks_list = list(range(B))
    out = []
    for b, ks in enumerate(ks_list):
        out.append((b, q_off[b], q_off[b + 1] - q_off[b],
                    kv_off[ks], kv_off[ks + 1] - kv_off[ks], q_off[b]))
    return out


# ---------------------------------------------------------------------------
# Forward + backward
# ---------------------------------------------------------------------------

def default_pre_scale(act, Dqk):
    return 1.0 / math.sqrt(Dqk) if act == "softmax" else 1.0


def attention(q, k, v, q_off, kv_off, max_lq, max_lk, act="softmax",
              pre_scale=None, post_scale=None, mask="none", window=(-1, -1),
              block=64, align="bottom_right", bias_dense=None, bias_rel=None,
              ts=None, bias_ts=None, rope_q=None, rope_k=None, rope_v=None,
              broadcast_q=False, kv_index=None, do=None, scores_out=None):
    """Forward (and backward when ``do`` is given); see the module docstring.

    ``scores_out``: optional list; S on the valid pairs of every (b, h) is appended
    to it (tests use it to stay away from activation kinks)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    q_off = np.asarray(q_off, dtype=np.int64)
    kv_off = np.asarray(kv_off, dtype=np.int64)
    if act not in ACTS:
        raise ValueError("unknown act %r" % (act,))
    if mask not in MASKS:
        raise ValueError("unknown mask %r" % (mask,))
    if align not in ALIGNS:
        raise ValueError("unknown align %r" % (align,))
    TQ, H, Dqk = q.shape
    TK, Hkv, Dk = k.shape
    Dv = v.shape[2]
    if Dk != Dqk or v.shape[0] != TK or v.shape[1] != Hkv:
        raise ValueError("shape mismatch between q, k, v")
    if Hkv <= 0 or H % Hkv != 0:
        raise ValueError("H % Hkv != 0")
    group = H // Hkv
    _check_offsets(q_off, TQ, "q_off")
    _check_offsets(kv_off, TK, "kv_off")
    if kv_index is not None:
        kv_index = np.asarray(kv_index, dtype=np.int64)
        Bkv = kv_off.size - 1
        if np.any(kv_index < 0) or np.any(kv_index >= Bkv):
            raise ValueError("kv_index out of range")
    pairs = pairing(q_off, kv_off, kv_index, broadcast_q)
    B = len(pairs)
    max_lq = int(max_lq)
    max_lk = int(max_lk)
    for (_, _, Lq, _, Lk, _) in pairs:
        if Lq > max_lq or Lk > max_lk:
            raise ValueError("sequence longer than declared maximum")
    maxL = max(max_lq, max_lk)
    TO = B * pairs[0][2] if (broadcast_q and B > 0) else (0 if broadcast_q else TQ)

    pre = default_pre_scale(act, Dqk) if pre_scale is None else float(pre_scale)
    post = 1.0 if post_scale is None else float(post_scale)

    # bias tables
    Hb = Hr = Ht = None
    if bias_dense is not None:
        bias_dense = np.asarray(bias_dense, dtype=np.float64)
        if bias_dense.ndim != 4 or bias_dense.shape[0] != B or \
                bias_dense.shape[2] != max_lq or bias_dense.shape[3] != max_lk:
            raise ValueError("bias_dense must be [B,Hb,maxLq,maxLk]")
        Hb = bias_dense.shape[1]
        if Hb <= 0 or H % Hb != 0:
            raise ValueError("H % Hb != 0")
    if bias_rel is not None:
        bias_rel = np.asarray(bias_rel, dtype=np.float64)
        Hr = bias_rel.shape[0]
        if bias_rel.ndim != 2 or Hr not in (1, H) or bias_rel.shape[1] != 2 * maxL - 1:
            raise ValueError("bias_rel must be [Hr,2*maxL-1], Hr in {1,H}")
    if (ts is None) != (bias_ts is None):
        raise ValueError("time bias needs both ts and bias_ts")
    if bias_ts is not None:
        ts = np.asarray(ts, dtype=np.int64)
        bias_ts = np.asarray(bias_ts, dtype=np.float64)
        Ht = bias_ts.shape[0]
        if bias_ts.ndim != 2 or Ht not in (1, H) or bias_ts.shape[1] != NUM_TS_BUCKETS:
            raise ValueError("bias_ts must be [Ht,129], Ht in {1,H}")
        self_attn = (not broadcast_q and kv_index is None and
                     q_off.shape == kv_off.shape and np.array_equal(q_off, kv_off))
        if not self_attn:
            raise ValueError("time bias is defined for self-attention only")
        if ts.shape != (TQ,):
            raise ValueError("ts must hold one int64 per token")

    # RoPE on the inputs (tables are constants)
    for tab, rows, D, nm in ((rope_q, TQ, Dqk, "rope_q"), (rope_k, TK, Dqk, "rope_k"),
                             (rope_v, TK, Dv, "rope_v")):
        if tab is not None and (np.shape(tab) != (rows, D) or D % 2 != 0):
            raise ValueError("%s must be [T,D] with even D" % nm)
    qr = rope_apply(q, np.asarray(rope_q, dtype=np.float64)) if rope_q is not None else q
    kr = rope_apply(k, np.asarray(rope_k, dtype=np.float64)) if rope_k is not None else k
    vr = rope_apply(v, np.asarray(rope_v, dtype=np.float64)) if rope_v is not None else v

    backward = do is not None
    o = np.zeros((TO, H, Dv), dtype=np.float64)
    lse = np.full((H, TO), -np.inf, dtype=np.float64) if act == "softmax" else None
    if backward:
        do = np.asarray(do, dtype=np.float64)
        if do.shape != (TO, H, Dv):
            raise ValueError("do must be [TO,H,Dv]")
        dqr = np.zeros_like(qr)
        dkr = np.zeros_like(kr)
        dvr = np.zeros_like(vr)
        ddense = np.zeros_like(bias_dense) if bias_dense is not None else None
        drel = np.zeros_like(bias_rel) if bias_rel is not None else None
        dts = np.zeros_like(bias_ts) if bias_ts is not None else None

    for (b, q0, Lq, k0, Lk, o0) in pairs:
        valid = valid_mask(Lq, Lk, mask, window, block, align)
        delta = align_shift(Lq, Lk, align)
        i_idx = np.arange(Lq)[:, None]
        j_idx = np.arange(Lk)[None, :]
        rel_idx = maxL - 1 + j_idx - (i_idx + delta)          # [Lq, Lk]
        if bias_ts is not None:
            L = Lq  # self-attention: Lq == Lk
            nxt = np.minimum(np.arange(Lq) + 1, L - 1)
            dts_ij = ts[q0 + nxt][:, None] - ts[k0 + np.arange(Lk)][None, :]
            bucket = ts_bucket(dts_ij)                         # [Lq, Lk]
        has_valid = valid.any(axis=1)                          # non-empty rows
        for h in range(H):
            hk = h // group
            Qb = qr[q0:q0 + Lq, h, :]
            Kb = kr[k0:k0 + Lk, hk, :]
            Vb = vr[k0:k0 + Lk, hk, :]

            # bias beta_ij, read only on valid pairs
            beta = np.zeros((Lq, Lk))
            if bias_dense is not None:
                dslice = bias_dense[b, h // (H // Hb), :Lq, :Lk]
                beta = beta + np.where(valid, dslice, 0.0)
            if bias_rel is not None:
                hr = 0 if Hr == 1 else h
                beta = beta + np.where(valid, bias_rel[hr][rel_idx], 0.0)
            if bias_ts is not None:
                ht = 0 if Ht == 1 else h
                beta = beta + np.where(valid, bias_ts[ht][bucket], 0.0)

            Z = Qb @ Kb.T + beta
            S = pre * Z
            S = np.where(valid, S, 0.0)
            if scores_out is not None:
                scores_out.append(S[valid])

            if act == "softmax":
                Phat = np.zeros((Lq, Lk))
                lse_row = np.full(Lq, -np.inf)
                for i in range(Lq):
                    if not has_valid[i]:
                        continue
                    si = S[i][valid[i]]
                    M = si.max()
                    e = np.exp(si - M)
                    ssum = e.sum()
                    Phat[i, valid[i]] = e / ssum
                    lse_row[i] = M + math.log(ssum)
                P = post * Phat
                lse[h, o0:o0 + Lq] = lse_row
            else:
                P = np.where(valid, post * act_fwd(act, S), 0.0)

            Ob = P @ Vb
            o[o0:o0 + Lq, h, :] = Ob

            if not backward:
                continue
            dOb = do[o0:o0 + Lq, h, :]
            dvr[k0:k0 + Lk, hk, :] += P.T @ dOb
            dP = dOb @ Vb.T
            if act == "softmax":
                Drow = np.sum(dOb * Ob, axis=1)
                dS = np.where(valid, Phat * (post * dP - Drow[:, None]), 0.0)
            else:
                dS = np.where(valid, post * act_grad(act, S) * dP, 0.0)
            dZ = pre * dS
            dqr[q0:q0 + Lq, h, :] += dZ @ Kb
            dkr[k0:k0 + Lk, hk, :] += dZ.T @ Qb
            if ddense is not None:
                ddense[b, h // (H // Hb), :Lq, :Lk] += dZ
            if drel is not None:
                np.add.at(drel[0 if Hr == 1 else h], rel_idx[valid], dZ[valid])
            if dts is not None:
                np.add.at(dts[0 if Ht == 1 else h], bucket[valid], dZ[valid])

    result = {"o": o}
    if lse is not None:
        result["lse"] = lse
    if backward:
        result["dq"] = rope_apply_transposed(dqr, np.asarray(rope_q, np.float64)) \
            if rope_q is not None else dqr
        result["dk"] = rope_apply_transposed(dkr, np.asarray(rope_k, np.float64)) \
            if rope_k is not None else dkr
        result["dv"] = rope_apply_transposed(dvr, np.asarray(rope_v, np.float64)) \
            if rope_v is not None else dvr
        if ddense is not None:
            result["ddense"] = ddense
        if drel is not None:
            result["drel"] = drel
        if dts is not None:
            result["dts"] = dts
    return result
