"""Independent NumPy model of gemtb's *unsharded* embedding oracle (`gemtb ref embed`).

Written only from the definitions of the numeric conventions (Philox, splitmix64, stream ids, u24),
the KeyedJaggedTensor and its validation, table-batched embeddings (id -> row, forward pooling,
backward G_r, fused optimizers, storage rounding, init) and the number formats
(Philox4x32-10, bf16/fp16 RNE and stochastic rounding). It shares no code with reference/ or
model/: every format and every random stream is rebuilt here from its definition.

fp32 arithmetic: every ⊕ ⊖ ⊗ ⊘ is one NumPy float32 operation (IEEE binary32, RNE per op; NumPy
never contracts to FMA), np.sqrt on float32 is correctly rounded, and every sum is an explicit
left-to-right loop (never np.sum, which is pairwise). Constants are made float32 before use so that
no operation is silently promoted to float64.
"""
import numpy as np

F32 = np.float32
U64 = np.uint64
MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1

# --------------------------------------------------------------------------------------------------
# splitmix64 and stream ids
# --------------------------------------------------------------------------------------------------


def splitmix64(x):
    """h(x) mod 2^64 on a Python int (Steele et al.)."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def splitmix64_array(x):
    """h elementwise on a uint64 array (wrapping uint64 arithmetic)."""
    x = np.asarray(x, dtype=U64)
    with np.errstate(over="ignore"):
        z = x + U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


TAG_INIT, TAG_SR, TAG_DATA, TAG_TEACHER = 1, 2, 3, 4


def stream_id(tag, a, b):
    """S(tag, a, b) = h(h(tag ^ a) ^ b)."""
    return splitmix64(splitmix64((tag ^ a) & MASK64) ^ (b & MASK64))


# --------------------------------------------------------------------------------------------------
# Philox4x32-10 (Salmon et al. SC'11)
# --------------------------------------------------------------------------------------------------
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def philox4x32_10(ctr, key):
    """ctr: four uint64 arrays (or ints) holding 32-bit words c0..c3; key: (k0, k1) ints.
    Returns the four 32-bit output words as uint64 arrays."""
    c = [np.asarray(w, dtype=U64) & U64(MASK32) for w in ctr]
    k0, k1 = key[0] & MASK32, key[1] & MASK32
    for rnd in range(10):
        if rnd > 0:  # the key is bumped between rounds (9 bumps for 10 rounds)
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        p0 = U64(PHILOX_M0) * c[0]  # < 2^64: exact in uint64
        p1 = U64(PHILOX_M1) * c[2]
        hi0, lo0 = p0 >> U64(32), p0 & U64(MASK32)
        hi1, lo1 = p1 >> U64(32), p1 & U64(MASK32)
        c = [hi1 ^ c[1] ^ U64(k0), lo1, hi0 ^ c[3] ^ U64(k1), lo0]
    return c


def philox_words(seed, stream, elements):
    """Philox(seed, stream, e) = word e mod 4 of the block at counter (e/4 lo, e/4 hi, stream lo,
    stream hi) under key (seed lo, seed hi), for every e in `elements`. Returns uint32 array."""
    e = np.asarray(elements, dtype=U64)
    blk = e >> U64(2)
    ctr = (blk & U64(MASK32), blk >> U64(32),
           np.full(e.shape, stream & MASK32, dtype=U64), np.full(e.shape, (stream >> 32) & MASK32, dtype=U64))
    out = philox4x32_10(ctr, (seed & MASK32, (seed >> 32) & MASK32))
    word = (e & U64(3)).astype(np.int64)
    res = np.choose(word, out) if e.size else np.zeros(e.shape, dtype=U64)
    return res.astype(np.uint32)


def u24(words):
    """u24(ω) = (ω >> 8) · 2^-24, exact in fp32."""
    return ((np.asarray(words, dtype=np.uint32) >> np.uint32(8)).astype(np.float64) * 2.0 ** -24).astype(F32)


# --------------------------------------------------------------------------------------------------
# bf16 / fp16 rounding, from the value definition with exact float64 arithmetic
# --------------------------------------------------------------------------------------------------
# Format parameters: fraction bits, smallest normal exponent, largest finite value.
FORMATS = {
    "fp16": (10, -14, 65504.0),
    "bf16": (7, -126, float.fromhex("0x1.fep127")),
}


def _spacing_and_lo(ax, fmt):
    """For |x| (float64 holding an fp32 value, finite, >= 0): the spacing u of the target format
    at |x| and q = |x|/u (exact). lo = floor(q)·u is |x| truncated to the format."""
    frac_bits, emin, _ = FORMATS[fmt]
    _, ex = np.frexp(ax)  # ax = m·2^ex, m in [0.5, 1): floor(log2 ax) = ex-1 (ax > 0)
    e = np.maximum(ex.astype(np.int64) - 1, emin)  # subnormal range uses the emin spacing
    e = np.where(ax == 0, emin, e)
    u = np.ldexp(1.0, (e - frac_bits).astype(np.int64))
    q = ax / u  # power-of-two scaling: exact
    return u, q


def round_to_format(x, fmt, r=None):
    """fp32 array -> values (float64, exactly representable in fmt or ±inf/NaN) rounded to `fmt`:
    RNE when r is None, else stochastic rounding with the 16-bit integers r (same shape):
    result = lo + u iff f + r >= 2^16 with f = floor((|x|-lo)/u · 2^16); sign restored.
    Overflow -> ±inf in both modes."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _round_to_format(np.asarray(x, dtype=F32), fmt, r)


def _round_to_format(x, fmt, r):
    xd = x.astype(np.float64)
    ax = np.abs(xd)
    finite = np.isfinite(ax)
    axf = np.where(finite, ax, 0.0)
    u, q = _spacing_and_lo(axf, fmt)
    fl = np.floor(q)
    if r is None:
        n = np.rint(q)  # round half to even (q's fraction is exact)
    else:
        f = np.floor((q - fl) * 65536.0)  # exact: q - fl is q's fraction; ·2^16 is a power of two
        up = (f + np.asarray(r, dtype=np.float64)) >= 65536.0
        n = fl + up
    mag = n * u
    mag = np.where(mag > FORMATS[fmt][2], np.inf, mag)  # beyond the largest finite -> inf
    mag = np.where(finite, mag, ax)  # ±inf stays, NaN stays NaN
    return np.copysign(mag, xd)


def fp16_from_f32(x, r=None):
    """fp32 -> float16 array (RNE, or SR with r)."""
    return round_to_format(x, "fp16", r).astype(np.float16)  # exact: values are fp16 already


def bf16_bits_from_f32(x, r=None):
    """fp32 -> bfloat16 raw bits (uint16) (RNE, or SR with r)."""
    v = round_to_format(x, "bf16", r).astype(F32)  # exact: bf16 ⊂ fp32
    bits = (v.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(v)
    # NaN by class only; keep the sign, make it quiet.
    return np.where(nan, (bits & np.uint16(0x8000)) | np.uint16(0x7FC0), bits).astype(np.uint16)


def f32_from_bf16_bits(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(F32)


def bf16_sr_bit_trick(x, r):
    """The bf16 SR shortcut: add r to the low half of the fp32 bits, truncate (finite x)."""
    b = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64) + np.asarray(r, dtype=np.uint64)
    return (b >> np.uint64(16)).astype(np.uint16)


# Storage: fp32 tables as float32, fp16 as float16, bf16 as raw uint16 bits.
def storage_dtype(dtype):
    return {"fp32": np.dtype("<f4"), "fp16": np.dtype("<f2"), "bf16": np.dtype("<u2")}[dtype]


def widen(stored, dtype):
    """Exact widening of storage to fp32."""
    if dtype == "fp32":
        return np.asarray(stored, dtype=F32).copy()
    if dtype == "fp16":
        return np.asarray(stored, dtype=np.float16).astype(F32)
    return f32_from_bf16_bits(stored)


def to_storage(x, dtype, r=None):
    if dtype == "fp32":
        return np.asarray(x, dtype=F32).copy()
    if dtype == "fp16":
        return fp16_from_f32(x, r)
    return bf16_bits_from_f32(x, r)


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------
class InputError(Exception):
    def __init__(self, code, index, key=None, b=None, p=None):
        super().__init__(f"{code} at {index} (key {key}, b {b}, p {p})")
        self.code, self.index, self.key, self.b, self.p = code, index, key, b, p


class Table:
    def __init__(self, t, d):
        self.index = t
        self.name = d["name"]
        self.rows = int(d["rows"])
        self.dim = int(d["dim"])
        self.dtype = d.get("dtype", "fp32")
        self.hashing = d.get("hashing", "identity")
        self.hash_seed = int(d["hash_seed"]) & MASK64 if "hash_seed" in d else splitmix64(t)
        self.bounds = d.get("bounds", "error")
        self.stochastic_rounding = bool(d.get("stochastic_rounding", True))
        o = d.get("optimizer", {"kind": "sgd"})
        self.opt = o.get("kind", "sgd")
        # JSON numbers (doubles) -> fp32 by RNE (np.float32 of a Python float is RNE)
        self.lr = F32(o.get("lr", 0.01))
        self.weight_decay = F32(o.get("weight_decay", 0.0))
        self.decay_mode = o.get("decay_mode", "none")
        self.eps = F32(o.get("eps", 1e-8))
        self.beta1 = F32(o.get("beta1", 0.9))
        self.beta2 = F32(o.get("beta2", 0.999))


class Feature:
    def __init__(self, d, table_index):
        self.key = d["key"]
        self.table = table_index
        self.pooling = d.get("pooling", "sum")
        self.max_len = int(d.get("max_len", 64))


class Config:
    def __init__(self, spec):
        self.seed = int(spec.get("seed", 0)) & MASK64
        self.batch = int(spec["batch"])
        self.tables = [Table(t, d) for t, d in enumerate(spec["tables"])]
        by_name = {t.name: t.index for t in self.tables}
        self.features = [Feature(d, by_name[d["table"]]) for d in spec["features"]]
        self.keys = list(spec.get("keys", [f.key for f in self.features]))


# --------------------------------------------------------------------------------------------------
# id -> row
# --------------------------------------------------------------------------------------------------
def map_ids(table, ids):
    """Returns (row, valid_under_hashing) for an int64 array of ids (row meaningful where valid)."""
    ids = np.asarray(ids, dtype=np.int64)
    n = table.rows
    if table.hashing == "identity":
        valid = (ids >= 0) & (ids < n)
        row = np.where(valid, ids, 0)
    elif table.hashing == "mod":
        valid = ids >= 0
        row = np.where(valid, ids, 0) % n
    elif table.hashing == "splitmix64":
        valid = np.ones(ids.shape, dtype=bool)
        h = splitmix64_array(ids.view(U64) ^ U64(table.hash_seed))
        row = (h % U64(n)).astype(np.int64)
    else:
        raise ValueError(table.hashing)
    return row.astype(np.int64), valid


def resolve(table, ids):
    """Applies the bounds mode: returns (row, used). used = the occurrence is a term (forward),
    counts in MEAN's n and gets a gradient. Under `error` invalid ids never reach here."""
    row, valid = map_ids(table, ids)
    if table.bounds == "remap0":
        return np.where(valid, row, 0), np.ones(row.shape, dtype=bool)
    return row, valid  # "zero" (and "error": all valid after validation)


# --------------------------------------------------------------------------------------------------
# KJT validation
# --------------------------------------------------------------------------------------------------
def validate(cfg, lengths, ids, weights=None, offsets=None):
    """Raises InputError for the first failing check. Returns offsets (derived)."""
    B = cfg.batch
    feats = {f.key: f for f in cfg.features}
    F = len(cfg.keys)
    lengths = np.asarray(lengths).reshape(-1).astype(np.int64)
    ids = np.asarray(ids).reshape(-1)
    # 1. shape
    if lengths.size != F * B:
        raise InputError("E_KJT_SHAPE", lengths.size)
    if weights is not None and np.asarray(weights).size != ids.size:
        raise InputError("E_KJT_SHAPE", np.asarray(weights).size)
    seen = set()
    for i, k in enumerate(cfg.keys):
        if k in seen or k not in feats:
            raise InputError("E_KJT_SHAPE", i, key=k)
        seen.add(k)
    # [interpretation] a weighted_sum feature needs weights: without the array there is nothing to
    # weight by. An EMPTY array (no ids at all) is a valid weights array of |values| = 0.
    for i, k in enumerate(cfg.keys):
        if weights is None and feats[k].pooling == "weighted_sum":
            raise InputError("E_KJT_SHAPE", i, key=k)
    # 2. negative lengths
    neg = np.nonzero(lengths < 0)[0]
    if neg.size:
        i = int(neg[0])
        raise InputError("E_KJT_NEG_LENGTH", i, cfg.keys[i // B], i % B)
    # 3. length cap
    for i in range(lengths.size):
        if lengths[i] > feats[cfg.keys[i // B]].max_len:
            raise InputError("E_KJT_LENGTH_CAP", i, cfg.keys[i // B], i % B)
    # 4. offsets
    derived = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if offsets is not None:
        offsets = np.asarray(offsets).reshape(-1).astype(np.int64)
        if offsets.size != derived.size:
            raise InputError("E_KJT_OFFSETS", min(offsets.size, derived.size))
        bad = np.nonzero(offsets != derived)[0]
        if bad.size:
            raise InputError("E_KJT_OFFSETS", int(bad[0]))
    if int(derived[-1]) != ids.size:
        raise InputError("E_KJT_OFFSETS", lengths.size)
    # 5. weights
    if weights is not None:
        bad = np.nonzero(~np.isfinite(np.asarray(weights, dtype=F32).reshape(-1)))[0]
        if bad.size:
            raise InputError("E_KJT_WEIGHT", int(bad[0]))
    # 6. ids under `error`
    for fi, k in enumerate(cfg.keys):
        t = cfg.tables[feats[k].table]
        if t.bounds != "error":
            continue
        lo, hi = int(derived[fi * B]), int(derived[(fi + 1) * B])
        _, valid = map_ids(t, ids[lo:hi])
        bad = np.nonzero(~valid)[0]
        if bad.size:
            v = lo + int(bad[0])
            b = int(np.searchsorted(derived[fi * B:(fi + 1) * B + 1], v, side="right")) - 1
            raise InputError("E_ID_OUT_OF_RANGE", v, k, b, v - int(derived[fi * B + b]))
    # The first failure over all features is the smallest value index: features are contiguous in
    # key order, so the loop above already returns the smallest.
    return derived


# --------------------------------------------------------------------------------------------------
# init
# --------------------------------------------------------------------------------------------------
def init_table(cfg, t):
    """W[r][j] = (2·u24(ω) ⊖ 1) ⊗ (1 ⊘ sqrt(fp32(N_t))), ω = Philox(seed, S(INIT, t, 0), r·D_t + j),
    RNE to storage."""
    tab = cfg.tables[t]
    n, d = tab.rows, tab.dim
    w = philox_words(cfg.seed, stream_id(TAG_INIT, t, 0), np.arange(n * d, dtype=np.uint64))
    scale = F32(1) / np.sqrt(F32(n))
    vals = ((F32(2) * u24(w)) - F32(1)) * scale
    return to_storage(vals.reshape(n, d).astype(F32), tab.dtype)


def initial_state(cfg):
    """Zero optimizer state, (b1, b2) = (1, 1)."""
    st = {}
    for tab in cfg.tables:
        if tab.opt == "rowwise_adagrad":
            st[tab.name] = {"adagrad": np.zeros(tab.rows, dtype=F32)}
        elif tab.opt == "adam":
            st[tab.name] = {"m": np.zeros((tab.rows, tab.dim), dtype=F32),
                            "v": np.zeros((tab.rows, tab.dim), dtype=F32),
                            "step": np.ones(2, dtype=F32)}
        else:
            st[tab.name] = {}
    return st


# --------------------------------------------------------------------------------------------------
# Arithmetic helpers
# --------------------------------------------------------------------------------------------------
def seqsum(terms, dim):
    """((x1 ⊕ x2) ⊕ x3)… with the first term taken as is; empty = +0."""
    acc = None
    for x in terms:
        acc = np.array(x, dtype=F32, copy=True) if acc is None else (acc + np.asarray(x, dtype=F32))
    return np.zeros(dim, dtype=F32) if acc is None else acc


# --------------------------------------------------------------------------------------------------
# forward / backward
# --------------------------------------------------------------------------------------------------
class Batch:
    """A validated KJT resolved to rows: bags[(key_index, b)] = list of (p, row, used, weight)."""

    def __init__(self, cfg, lengths, ids, weights=None, offsets=None):
        self.cfg = cfg
        offs = validate(cfg, lengths, ids, weights, offsets)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        w = None if weights is None else np.asarray(weights, dtype=F32).reshape(-1)
        feats = {f.key: f for f in cfg.features}
        self.feats = [feats[k] for k in cfg.keys]
        B = cfg.batch
        self.bags = {}
        for fi, f in enumerate(self.feats):
            tab = cfg.tables[f.table]
            for b in range(B):
                lo, hi = int(offs[fi * B + b]), int(offs[fi * B + b + 1])
                row, used = resolve(tab, ids[lo:hi])
                self.bags[(fi, b)] = [(p, int(row[p]), bool(used[p]), None if w is None else w[lo + p])
                                      for p in range(hi - lo)]


def forward(cfg, batch, tables_f32):
    """tables_f32: list of fp32 [N_t, D_t] (exact widening of storage). Returns (pooled or None,
    {key: seq})."""
    B = cfg.batch
    pooled_cols, seqs = [], {}
    for fi, f in enumerate(batch.feats):
        tab = cfg.tables[f.table]
        W, D = tables_f32[f.table], tab.dim
        if f.pooling == "none":
            rows = []
            for b in range(B):
                for (p, r, used, w) in batch.bags[(fi, b)]:
                    rows.append(W[r].copy() if used else np.zeros(D, dtype=F32))
            seqs[f.key] = np.array(rows, dtype=F32).reshape(len(rows), D)
            continue
        out = np.zeros((B, D), dtype=F32)
        for b in range(B):
            occ = [o for o in batch.bags[(fi, b)] if o[2]]
            if f.pooling == "sum":
                out[b] = seqsum([W[r] for (_, r, _, _) in occ], D)
            elif f.pooling == "weighted_sum":
                out[b] = seqsum([w * W[r] for (_, r, _, w) in occ], D)
            elif f.pooling == "mean":
                n = len(occ)
                out[b] = np.zeros(D, dtype=F32) if n == 0 else seqsum([W[r] for (_, r, _, _) in occ], D) / F32(n)
            else:
                raise ValueError(f.pooling)
        pooled_cols.append(out)
    pooled = np.concatenate(pooled_cols, axis=1).astype(F32) if pooled_cols else None
    return pooled, seqs


def row_gradients(cfg, batch, grad_pooled, grad_seq):
    """G per table: {row: fp32[D]} over touched rows. Occurrences in order: ascending b, feature in
    key order, position p; first contribution taken as is, then ⊕."""
    B = cfg.batch
    # Column offset of each pooled feature and running sequence offset of each NONE feature.
    col, c = {}, 0
    for fi, f in enumerate(batch.feats):
        if f.pooling != "none":
            col[fi] = c
            c += cfg.tables[f.table].dim
    seq_start = {}
    for fi, f in enumerate(batch.feats):
        if f.pooling == "none":
            starts, s = [], 0
            for b in range(B):
                starts.append(s)
                s += len(batch.bags[(fi, b)])
            seq_start[fi] = starts
    G = [dict() for _ in cfg.tables]
    for b in range(B):
        for fi, f in enumerate(batch.feats):
            tab = cfg.tables[f.table]
            D = tab.dim
            occ = batch.bags[(fi, b)]
            n = sum(1 for o in occ if o[2])
            for (p, r, used, w) in occ:
                if not used:
                    continue
                if f.pooling == "none":
                    co = np.asarray(grad_seq[f.key][seq_start[fi][b] + p], dtype=F32)
                else:
                    gamma = np.asarray(grad_pooled[b, col[fi]:col[fi] + D], dtype=F32)
                    if f.pooling == "sum":
                        co = gamma
                    elif f.pooling == "weighted_sum":
                        co = w * gamma
                    else:  # mean
                        co = gamma / F32(n)
                acc = G[tab.index]
                acc[r] = co.astype(F32).copy() if r not in acc else (acc[r] + co)
    return G


# --------------------------------------------------------------------------------------------------
# fused optimizers
# --------------------------------------------------------------------------------------------------
def adagrad_row(tab, w, G, m):
    """One EXACT_ROWWISE_ADAGRAD row update. w, G: fp32[D]; m: fp32 scalar. Returns (w', m')."""
    lam, lr, eps = tab.weight_decay, tab.lr, tab.eps
    if tab.decay_mode == "l2":
        gt = G + lam * w
    else:
        gt = G
    sq = None  # seqsum_j(g̃_j ⊗ g̃_j), first term as is
    for j in range(tab.dim):
        term = F32(gt[j] * gt[j])
        sq = term if sq is None else F32(sq + term)
    a = F32(sq / F32(tab.dim))
    m = F32(m + a)
    mu = F32(lr / (np.sqrt(m) + eps))
    if tab.decay_mode == "l2":
        c = F32(F32(1) - mu * lam)
    elif tab.decay_mode == "decoupled":
        c = F32(F32(1) - lr * lam)
    else:
        c = F32(1)
    return (c * w - mu * G).astype(F32), m


def adam_row(tab, w, g, m, v, b1, b2):
    one = F32(1)
    beta1, beta2, lr, lam, eps = tab.beta1, tab.beta2, tab.lr, tab.weight_decay, tab.eps
    m = (beta1 * m + (one - beta1) * g).astype(F32)
    v = (beta2 * v + (one - beta2) * (g * g)).astype(F32)
    if tab.decay_mode == "decoupled":  # AdamW
        w = (w - (lr * lam) * w).astype(F32)
    elif tab.decay_mode != "none":
        raise ValueError("Adam with decay_mode l2 is not supported")
    w = (w - lr * ((m / (one - b1)) / (np.sqrt(v / (one - b2)) + eps))).astype(F32)
    return w, m, v


def apply_step(cfg, tables, state, G, step_index):
    """Updates `tables` (storage arrays) and `state` in place for one step s = step_index."""
    for tab in cfg.tables:
        t, D = tab.index, tab.dim
        st = state[tab.name]
        if tab.opt == "adam":  # advanced once per step, before the update, touched or not
            st["step"] = np.array([st["step"][0] * tab.beta1, st["step"][1] * tab.beta2], dtype=F32)
        rows = sorted(G[t])
        if not rows:
            continue
        W = widen(tables[t], tab.dtype)
        new = {}
        for r in rows:
            w, g = W[r], G[t][r]
            if tab.opt == "sgd":
                w2 = (w - tab.lr * g).astype(F32)
            elif tab.opt == "rowwise_adagrad":
                w2, m2 = adagrad_row(tab, w, g, st["adagrad"][r])
                st["adagrad"][r] = m2
            elif tab.opt == "adam":
                w2, m2, v2 = adam_row(tab, w, g, st["m"][r], st["v"][r], st["step"][0], st["step"][1])
                st["m"][r], st["v"][r] = m2, v2
            else:
                raise ValueError(tab.opt)
            new[r] = w2
        rr = np.array(rows, dtype=np.int64)
        vals = np.stack([new[r] for r in rows]).astype(F32)
        if tab.dtype != "fp32" and tab.stochastic_rounding:
            elems = (rr[:, None] * D + np.arange(D)[None, :]).astype(np.uint64)
            words = philox_words(cfg.seed, stream_id(TAG_SR, t, step_index), elems)
            r16 = (words & np.uint32(0xFFFF)).astype(np.uint32)
            tables[t][rr] = to_storage(vals, tab.dtype, r16)
        else:
            tables[t][rr] = to_storage(vals, tab.dtype)


# --------------------------------------------------------------------------------------------------
# The whole `gemtb ref embed` call
# --------------------------------------------------------------------------------------------------
def embed(spec, lengths, ids, weights=None, offsets=None, tables=None, state=None, grads=None,
          step=False, step_index=0):
    """Returns {output file name: array} as `gemtb ref embed` writes them.
    tables: {name: storage array} or None (init); state: {file stem: array} as read from --tables
    (adagrad_<n>, adam_m_<n>, adam_v_<n>, adam_step_<n>), missing entries zero / (1, 1).
    grads: {"pooled": [B,W], "seq_<key>": [...]} for step."""
    cfg = Config(spec)
    batch = Batch(cfg, lengths, ids, weights, offsets)
    if tables is None:
        stored = [init_table(cfg, t) for t in range(len(cfg.tables))]
    else:
        stored = [np.array(tables[tab.name], dtype=storage_dtype(tab.dtype), copy=True) for tab in cfg.tables]
    st = initial_state(cfg)
    state = state or {}
    for tab in cfg.tables:
        if tab.opt == "rowwise_adagrad" and f"adagrad_{tab.name}" in state:
            st[tab.name]["adagrad"] = np.array(state[f"adagrad_{tab.name}"], dtype=F32).reshape(tab.rows)
        if tab.opt == "adam":
            for k, stem in (("m", "adam_m_"), ("v", "adam_v_"), ("step", "adam_step_")):
                if stem + tab.name in state:
                    st[tab.name][k] = np.array(state[stem + tab.name], dtype=F32, copy=True)
    pooled, seqs = forward(cfg, batch, [widen(s, tab.dtype) for s, tab in zip(stored, cfg.tables)])
    out = {}
    if pooled is not None:
        out["pooled.npy"] = pooled
    for k, v in seqs.items():
        out[f"seq_{k}.npy"] = v
    if step:
        gs = {k[4:]: v for k, v in grads.items() if k.startswith("seq_")}
        G = row_gradients(cfg, batch, grads.get("pooled"), gs)
        apply_step(cfg, stored, st, G, step_index)
        for tab, s in zip(cfg.tables, stored):
            out[f"table_{tab.name}.npy"] = s
            if tab.opt == "rowwise_adagrad":
                out[f"adagrad_{tab.name}.npy"] = st[tab.name]["adagrad"]
            elif tab.opt == "adam":
                out[f"adam_m_{tab.name}.npy"] = st[tab.name]["m"]
                out[f"adam_v_{tab.name}.npy"] = st[tab.name]["v"]
                out[f"adam_step_{tab.name}.npy"] = st[tab.name]["step"]
    return out
