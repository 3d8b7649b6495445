#!/usr/bin/python3
"""Self-checks of the NumPy embedding model (embedding_np.py); no C++ needed.

    /usr/bin/python3 selftest_embedding_np.py

Checks:
  * Philox4x32-10: the three "philox4x32 10" known-answer lines of DEShawResearch/random123
    tests/kat_vectors; Philox(seed, stream, e) takes word e%4 of the block at counter
    (e/4 lo, e/4 hi, stream lo, stream hi) under key (seed lo, seed hi), across the e/4 32-bit carry;
  * splitmix64: h(0) = 0xE220A8397B1DCDAF and the next outputs of the reference generator from state
    0 (h(k·0x9E3779B97F4A7C15), k = 1..3); the uint64-array version equals the integer version;
  * u24 exactness; the init formula's range;
  * bf16 / fp16 RNE: the tie table; fp16 equals NumPy's own float32 -> float16
    on 2^20 random fp32 bit patterns plus edges; bf16 equals the integer RNE formula; all 65,536 bf16
    and fp16 patterns survive -> fp32 -> back (NaN by class);
  * stochastic rounding: injecting every r < 2^16 rounds exactly f of them away; the bf16 "add r to
    the low half" shortcut equals the value definition; unbiasedness over 2^16 Philox draws within a
    stated 6-sigma binomial bound;
  * rowwise Adagrad (L2 / decoupled / none) and Adam / AdamW on hand-worked rows;
  * duplicate ids: G_r sums all occurrences (all features of the table) in the order b, key, p, and
    each touched row is updated once; untouched rows keep their bits;
  * KJT validation codes and their order.
Exit 0 if all pass, 1 otherwise, 77 without numpy.
"""
import math
import os
import sys

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import embedding_np as enp  # noqa: E402

F32 = np.float32
failures = 0


def check(cond, what):
    global failures
    if cond:
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}")


def bits32(x):
    return int(np.array(x, dtype=F32).view(np.uint32))


def f32_of_bits(b):
    return np.array(b, dtype=np.uint32).view(F32)


def same_bits(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# --------------------------------------------------------------------------------------------------
def test_philox():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
           ((0xffffffff,) * 4, (0xffffffff, 0xffffffff), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
           ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
            (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for ctr, key, want in kat:
        got = tuple(int(w) for w in enp.philox4x32_10(ctr, key))
        check(got == want, f"Philox4x32-10 KAT ctr={[hex(c) for c in ctr]} key={[hex(k) for k in key]}: "
                           f"{' '.join(f'{w:08x}' for w in got)}")
    seed, stream = 0x0123456789ABCDEF, 0xFEDCBA9876543210
    es = [0, 1, 2, 3, 4, 7, (1 << 34) - 1, 1 << 34, (1 << 34) + 6, (1 << 40) + 9]
    got = enp.philox_words(seed, stream, np.array(es, dtype=np.uint64))
    ok = True
    for e, g in zip(es, got):
        blk = e // 4
        words = enp.philox4x32_10((blk & 0xFFFFFFFF, blk >> 32, 0x76543210, 0xFEDCBA98), (0x89ABCDEF, 0x01234567))
        ok &= int(words[e % 4]) == int(g)
    check(ok, "Philox(seed, stream, e) = word e%4 of counter (e/4 lo, e/4 hi, stream lo, stream hi), key (seed lo, hi)")


def test_splitmix():
    check(enp.splitmix64(0) == 0xE220A8397B1DCDAF, f"splitmix64 h(0) = {enp.splitmix64(0):#018x}")
    gamma = 0x9E3779B97F4A7C15
    # prng.di.unimi.it/splitmix64.c from x = 0: next() returns h(x) with x advanced by gamma each call
    seq = [enp.splitmix64((k * gamma) & enp.MASK64) for k in range(4)]
    check(seq == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC],
          "splitmix64 reference generator from state 0: e220a839.. 6e789e6a.. 06c45d18.. f88bb8a8..")
    rng = np.random.default_rng(1)
    xs = rng.integers(0, 1 << 63, size=1000, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 1000).astype(np.uint64)
    arr = enp.splitmix64_array(xs)
    check(all(int(a) == enp.splitmix64(int(x)) for a, x in zip(arr, xs)), "splitmix64 uint64-array == integer version")
    t, a, b = 2, 5, 9
    check(enp.stream_id(t, a, b) == enp.splitmix64(enp.splitmix64(t ^ a) ^ b), "S(tag, a, b) = h(h(tag ^ a) ^ b)")


def test_u24_init():
    u = enp.u24(np.array([0, 0xFF, 0x100, 0xFFFFFFFF], dtype=np.uint32))
    check(same_bits(u, np.array([0, 0, 2.0 ** -24, 1 - 2.0 ** -24], dtype=F32)), "u24: (ω >> 8)·2^-24 exact")
    spec = {"seed": 9, "batch": 1, "tables": [{"name": "t", "rows": 7, "dim": 8, "dtype": "fp32"}],
            "features": [{"key": "f", "table": "t", "pooling": "sum"}]}
    W = enp.init_table(enp.Config(spec), 0)
    bound = F32(1) / np.sqrt(F32(7))
    check(W.dtype == F32 and W.shape == (7, 8) and np.all(np.abs(W) <= bound) and len(np.unique(W)) == 56,
          "init: 7x8 distinct values within ±1/sqrt(7)")
    # element (r, j) = (2·u24(ω) ⊖ 1) ⊗ (1 ⊘ sqrt(fp32(7))), ω = Philox(9, S(INIT, 0, 0), r·8 + j)
    w = enp.philox_words(9, enp.stream_id(enp.TAG_INIT, 0, 0), np.array([3 * 8 + 5], dtype=np.uint64))[0]
    uu = F32(float(int(w) >> 8) * 2.0 ** -24)
    check(same_bits(W[3, 5], F32(F32(F32(2) * uu) - F32(1)) * F32(F32(1) / np.sqrt(F32(7)))),
          "init element (3, 5) from its own Philox word")


# --------------------------------------------------------------------------------------------------
def test_rne():
    # bf16 / fp16 tie table
    bf = enp.bf16_bits_from_f32(f32_of_bits([0x3F808000, 0x3F818000, 0x7F7F8000, 0x00008000]))
    check(list(bf) == [0x3F80, 0x3F82, 0x7F80, 0x0000], f"bf16 ties: {[hex(int(b)) for b in bf]}")
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2.0 ** -25, 3 * 2.0 ** -25, 65520.0, -65520.0, 65519.99], dtype=F32)
    want = np.array([1.0, 1 + 2.0 ** -9, 0.0, 2.0 ** -23, np.inf, -np.inf, 65504.0], dtype=np.float16)
    check(same_bits(enp.fp16_from_f32(x), want), "fp16 ties: 1+2^-11->1, 1+3·2^-11->1+2^-9, 2^-25->0, 3·2^-25->2^-23, 65520->inf")
    # fp16 vs NumPy's own conversion, bf16 vs the integer formula, on random bit patterns
    rng = np.random.default_rng(2)
    b = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    b[:8] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x387FE000, 0x477FF000, 0x477FEFFF]
    x = b.view(F32)
    finite = np.isfinite(x)
    mine16 = enp.fp16_from_f32(x)
    with np.errstate(over="ignore", invalid="ignore"):
        np16 = x.astype(np.float16)
    nan_ok = np.array_equal(np.isnan(mine16), np.isnan(np16))
    check(nan_ok and same_bits(mine16[~np.isnan(np16)], np16[~np.isnan(np16)]),
          "fp16 RNE == NumPy float32->float16 on 2^20 random patterns (NaN by class)")
    mine_bf = enp.bf16_bits_from_f32(x)
    bb = b.astype(np.uint64)
    ref_bf = ((bb + np.uint64(0x7FFF) + ((bb >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)).astype(np.uint16)
    nanx = np.isnan(x)
    check(np.array_equal(mine_bf[~nanx], ref_bf[~nanx]) and np.all((mine_bf[nanx] & 0x7FFF) > 0x7F80),
          "bf16 RNE == (bits + 0x7FFF + lsb) >> 16 on 2^20 random patterns (NaN stays NaN)")
    # all 65,536 patterns round-trip
    p = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = enp.f32_from_bf16_bits(p)
    back = enp.bf16_bits_from_f32(f)
    isn = np.isnan(f)
    check(np.array_equal(back[~isn], p[~isn]) and np.all(np.isnan(enp.f32_from_bf16_bits(back[isn]))),
          "all 65,536 bf16 patterns -> fp32 -> bf16: identity (NaN by class)")
    h = p.view(np.float16)
    back = enp.fp16_from_f32(h.astype(F32))
    isn = np.isnan(h)
    check(same_bits(back[~isn], h[~isn]) and np.all(np.isnan(back[isn])),
          "all 65,536 fp16 patterns -> fp32 -> fp16: identity (NaN by class)")
    del finite


def test_sr():
    r_all = np.arange(1 << 16, dtype=np.uint32)
    # 1. every r injected: exactly f round away
    xs = [(1 + 3 * 2.0 ** -12, "fp16"), (-(1 + 2.0 ** -20), "fp16"), (3e-6, "fp16"), (65510.0, "fp16"),
          (1.0 + 2.0 ** -9 + 2.0 ** -20, "bf16"), (-3.3e-39, "bf16"), (1.0, "bf16"), (0.1, "bf16"), (0.1, "fp16")]
    for xv, fmt in xs:
        x = np.full(r_all.size, xv, dtype=F32)
        if fmt == "fp16":
            out = enp.fp16_from_f32(x, r_all).astype(np.float64)
            base = enp.fp16_from_f32(x[:1], np.zeros(1, np.uint32)).astype(np.float64)[0]  # truncation
        else:
            out = enp.f32_from_bf16_bits(enp.bf16_bits_from_f32(x, r_all)).astype(np.float64)
            base = float(enp.f32_from_bf16_bits(enp.bf16_bits_from_f32(x[:1], np.zeros(1, np.uint32)))[0])
        up = int(np.sum(out != base))
        # f = floor((|x| - lo)/u · 2^16), from the spacing at |x|
        ax = abs(float(F32(xv)))
        u, q = enp._spacing_and_lo(np.array([ax]), fmt)
        f = int(math.floor((q[0] - math.floor(q[0])) * 65536))
        check(up == f, f"SR {fmt} x={float(F32(xv))!r}: every r < 2^16 injected, {up} round away == f = {f}")
    # 2. bf16 shortcut == value definition (finite x, random r)
    rng = np.random.default_rng(3)
    b = rng.integers(0, 1 << 32, size=1 << 18, dtype=np.uint64).astype(np.uint32)
    x = b.view(F32)
    x = x[np.isfinite(x)]
    r = rng.integers(0, 1 << 16, size=x.size).astype(np.uint32)
    check(np.array_equal(enp.bf16_bits_from_f32(x, r), enp.bf16_sr_bit_trick(x, r)),
          "bf16 SR by definition == add r to the low 16 bits and truncate (2^18 finite random x)")
    # 3. unbiasedness. Each draw rounds up with probability p = f/2^16 if r is uniform, and
    #    f/2^16 <= (|x|-lo)/u < f/2^16 + 2^-16. Over N = 2^16 independent draws the mean of the
    #    results lies within u·(6·sqrt(p(1-p)/N) + 2^-16) <= u·(3/256 + 2^-16) of x (6 sigma of a
    #    binomial: a false alarm has probability < 1e-8 per x; the draws are fixed, so it is repeatable).
    N = 1 << 16
    for k, (xv, fmt) in enumerate([(1 + 0.3 * 2.0 ** -10, "fp16"), (-0.7 * 2.0 ** -24 * 5, "fp16"),
                                   (1 + 0.5 * 2.0 ** -7, "bf16"), (123.456, "bf16"), (-2.0 ** -130 * 1.37, "bf16"),
                                   (0.1, "fp16")]):
        words = enp.philox_words(77, enp.stream_id(enp.TAG_SR, k, 0), np.arange(N, dtype=np.uint64))
        r16 = words & np.uint32(0xFFFF)
        x = np.full(N, xv, dtype=F32)
        if fmt == "fp16":
            out = enp.fp16_from_f32(x, r16).astype(np.float64)
        else:
            out = enp.f32_from_bf16_bits(enp.bf16_bits_from_f32(x, r16)).astype(np.float64)
        u, _ = enp._spacing_and_lo(np.array([abs(float(F32(xv)))]), fmt)
        u = float(u[0])
        err = abs(float(np.mean(out)) - float(F32(xv)))
        bound = u * (6 * 0.5 / math.sqrt(N) + 2.0 ** -16)
        check(err <= bound and len(np.unique(out)) <= 2,
              f"SR {fmt} unbiased: x={float(F32(xv))!r}, |mean - x| = {err:.3e} <= {bound:.3e} over 2^16 Philox draws")


# --------------------------------------------------------------------------------------------------
class Tab:
    """A table's optimizer fields as embedding_np.Table holds them."""

    def __init__(self, dim, lr, lam, mode, eps=1e-8, beta1=0.9, beta2=0.999):
        self.dim, self.lr, self.weight_decay, self.decay_mode = dim, F32(lr), F32(lam), mode
        self.eps, self.beta1, self.beta2 = F32(eps), F32(beta1), F32(beta2)


def test_adagrad_by_hand():
    # A. L2 mode. D = 4, lr = 0.5, λ = 0.25, eps = 1e-8, m0 = 0.75,
    #    w = [1, -0.5, 0.25, 0], G = [0.25, -0.375, 0.4375, 0.5].
    #    λ⊗w = [0.25, -0.125, 0.0625, 0];  g̃ = G ⊕ λw = [0.5, -0.5, 0.5, 0.5]
    #    g̃⊗g̃ = 0.25 each; seqsum = 1; a = 1 ⊘ 4 = 0.25;  m = 0.75 ⊕ 0.25 = 1
    #    sqrt(1) ⊕ 1e-8 = 1 (1e-8 < half an ulp of 1, 2^-24 ≈ 5.96e-8);  μ = 0.5 ⊘ 1 = 0.5
    #    c = 1 ⊖ (μ ⊗ λ) = 1 - 0.125 = 0.875
    #    c⊗w = [0.875, -0.4375, 0.21875, 0];  μ⊗G = [0.125, -0.1875, 0.21875, 0.25]
    #    w' = [0.75, -0.25, +0 (x ⊖ x = +0), -0.25];  m' = 1
    w = np.array([1, -0.5, 0.25, 0], dtype=F32)
    G = np.array([0.25, -0.375, 0.4375, 0.5], dtype=F32)
    w2, m2 = enp.adagrad_row(Tab(4, 0.5, 0.25, "l2"), w, G, F32(0.75))
    check(same_bits(w2, np.array([0.75, -0.25, 0.0, -0.25], dtype=F32)) and m2 == F32(1.0),
          f"rowwise Adagrad L2 by hand: w' = {w2.tolist()}, m' = {float(m2)}")
    # C. mode none, the same w and G, λ = 0.25 ignored. m0 = 0.8388671875 (= 859/1024):
    #    g̃ = G; squares 0.0625, 0.140625, 0.19140625, 0.25; seqsum: 0.203125, 0.39453125, 0.64453125
    #    a = 0.64453125 ⊘ 4 = 0.1611328125;  m = 0.8388671875 ⊕ 0.1611328125 = 1;  μ = 0.5;  c = 1
    #    w' = w ⊖ 0.5⊗G = [1 - 0.125, -0.5 + 0.1875, 0.25 - 0.21875, 0 - 0.25] = [0.875, -0.3125, 0.03125, -0.25]
    w2, m2 = enp.adagrad_row(Tab(4, 0.5, 0.25, "none"), w, G, F32(0.8388671875))
    check(same_bits(w2, np.array([0.875, -0.3125, 0.03125, -0.25], dtype=F32)) and m2 == F32(1.0),
          f"rowwise Adagrad none (λ ignored) by hand: w' = {w2.tolist()}")
    # B. decoupled mode with rounding. D = 4, lr = 0.5, λ = 0.5, m0 = 1.5, w = [2, 0.5, -0.75, 1], G = [1, -1, 0, 0].
    #    g̃ = G; seqsum of squares = 2; a = 2 ⊘ 4 = 0.5; m = 1.5 ⊕ 0.5 = 2
    #    sqrt(2) in fp32 = 0x3FB504F3 = 1.41421353816986083984375 (√2 = 1.414213562373…; the next fp32
    #      up, 1.41421365737915, is farther); ⊕ 1e-8 leaves it (half ulp in [1,2) is 5.96e-8)
    #    μ = 0.5 ⊘ 1.41421353816986083984375 = 0.35355339664… exactly; the fp32 neighbours are
    #      0x3EB504F3 = 0.353553384542465209960937 (11863283·2^-25) at 1.21e-8 and
    #      0x3EB504F4 = 0.353553414344787597656250 at 1.77e-8  ->  μ = 0x3EB504F3
    #    c = 1 ⊖ (lr ⊗ λ) = 1 - 0.25 = 0.75
    #    j=0: c⊗w = 1.5 = 50331648·2^-25; μ⊗1 = 11863283·2^-25; difference 38468365·2^-25 lies in [1, 2)
    #         where the spacing is 2^-23 = 4·2^-25: 38468365/4 = 9617091.25 -> 9617091·2^-23
    #         = 1.14644658565521240234375 = 0x3F92BEC3
    #    j=1: c⊗w = 0.375 = 12582912·2^-25; μ⊗(-1) = -μ; 0.375 ⊖ (-μ) = 24446195·2^-25 in [0.5, 1)
    #         where the spacing is 2^-24: 12223097.5 is a tie -> even 12223098·2^-24
    #         = 0.72855341434478759765625 = 0x3F3A827A
    #    j=2: c⊗w = -0.5625; μ⊗0 = +0; -0.5625 ⊖ +0 = -0.5625
    #    j=3: 0.75 ⊖ +0 = 0.75;   m' = 2
    w = np.array([2, 0.5, -0.75, 1], dtype=F32)
    G = np.array([1, -1, 0, 0], dtype=F32)
    w2, m2 = enp.adagrad_row(Tab(4, 0.5, 0.5, "decoupled"), w, G, F32(1.5))
    want = np.array([0x3F92BEC3, 0x3F3A827A, bits32(-0.5625), bits32(0.75)], dtype=np.uint32)
    check(same_bits(w2.view(np.uint32), want) and m2 == F32(2.0),
          f"rowwise Adagrad decoupled by hand (rounding, a tie): w' bits = {[hex(int(v)) for v in w2.view(np.uint32)]}")
    check(bits32(F32(0.5) / (np.sqrt(F32(2)) + F32(1e-8))) == 0x3EB504F3, "μ = 0.5 ⊘ (sqrt(2) ⊕ 1e-8) = 0x3EB504F3")


def test_adam_by_hand():
    # β1 = 0.5, β2 = 0.75, lr = 0.5, eps = 1e-8, from m = v = 0, (b1, b2) = (1, 1) advanced to (0.5, 0.75).
    # w = [1, 1, 1, 1], g = [1, -2, 0, 0.5]
    #   m = 0.5⊗0 ⊕ 0.5⊗g = [0.5, -1, 0, 0.25];  v = 0.75⊗0 ⊕ 0.25⊗g² = [0.25, 1, 0, 0.0625]
    #   m ⊘ (1 ⊖ 0.5) = [1, -2, 0, 0.5];  v ⊘ (1 ⊖ 0.75) = [1, 4, 0, 0.25];  sqrt = [1, 2, 0, 0.5]
    #   ⊕ eps = [1, 2, fp32(1e-8), 0.5];  ratio = [1, -1, +0, 1];  lr ⊗ ratio = [0.5, -0.5, 0, 0.5]
    #   Adam: w' = [0.5, 1.5, 1, 0.5]
    #   AdamW (λ = 0.5): w ⊖ ((0.5⊗0.5)⊗w) = 0.75 each, then w' = [0.25, 1.25, 0.75, 0.25]
    w = np.ones(4, dtype=F32)
    g = np.array([1, -2, 0, 0.5], dtype=F32)
    z = np.zeros(4, dtype=F32)
    w2, m2, v2 = enp.adam_row(Tab(4, 0.5, 0.5, "none", beta1=0.5, beta2=0.75), w, g, z, z, F32(0.5), F32(0.75))
    check(same_bits(w2, np.array([0.5, 1.5, 1, 0.5], dtype=F32)) and same_bits(m2, np.array([0.5, -1, 0, 0.25], dtype=F32))
          and same_bits(v2, np.array([0.25, 1, 0, 0.0625], dtype=F32)), f"Adam by hand: w' = {w2.tolist()}")
    w2, _, _ = enp.adam_row(Tab(4, 0.5, 0.5, "decoupled", beta1=0.5, beta2=0.75), w, g, z, z, F32(0.5), F32(0.75))
    check(same_bits(w2, np.array([0.25, 1.25, 0.75, 0.25], dtype=F32)), f"AdamW by hand: w' = {w2.tolist()}")
    # (b1, b2) advance once per step even for a table no id touches
    spec = {"seed": 1, "batch": 1, "tables": [
        {"name": "a", "rows": 3, "dim": 4, "optimizer": {"kind": "adam", "lr": 0.5, "beta1": 0.5, "beta2": 0.75}},
        {"name": "b", "rows": 3, "dim": 4, "optimizer": {"kind": "sgd", "lr": 0.5}}],
        "features": [{"key": "f", "table": "b", "pooling": "sum"}]}
    out = enp.embed(spec, np.array([1], np.int32), np.array([2]), step=True,
                    state={"adam_step_a": np.array([0.25, 0.5625], dtype=F32)},
                    grads={"pooled": np.ones((1, 4), dtype=F32)})
    init_a = enp.init_table(enp.Config(spec), 0)
    check(same_bits(out["adam_step_a.npy"], np.array([0.125, 0.421875], dtype=F32))
          and same_bits(out["table_a.npy"], init_a),
          "Adam (b1, b2) advanced for an untouched table, its rows unchanged")


# --------------------------------------------------------------------------------------------------
def test_duplicates():
    # One fp32 table (6 rows x 4, W[r][j] = r + j/4), SGD lr 0.5, features f0 (sum) and f1 (mean)
    # on it, B = 2. Bags: f0 b0 = [3, 3, 1], f0 b1 = [3], f1 b0 = [3, 2], f1 b1 = [].
    spec = {"seed": 1, "batch": 2, "keys": ["f0", "f1"],
            "tables": [{"name": "t", "rows": 6, "dim": 4, "dtype": "fp32", "hashing": "identity",
                        "bounds": "error", "optimizer": {"kind": "sgd", "lr": 0.5}}],
            "features": [{"key": "f0", "table": "t", "pooling": "sum"}, {"key": "f1", "table": "t", "pooling": "mean"}]}
    W = (np.arange(6)[:, None] + np.arange(4)[None, :] / 4).astype(F32)
    g = np.zeros((2, 8), dtype=F32)
    g[0, :4] = [2.0 ** 23, 1, 0.5, -1]   # γ f0 b0
    g[1, :4] = [1, 2, 0.25, 0]           # γ f0 b1
    g[0, 4:] = [-(2.0 ** 25), 4, 1, 0]   # γ f1 b0 (mean over 2: contributes half)
    g[1, 4:] = [9, 9, 9, 9]              # γ f1 b1: empty bag, no contribution
    lengths, ids = np.array([3, 1, 2, 0], np.int32), np.array([3, 3, 1, 3, 3, 2])
    out = enp.embed(spec, lengths, ids, tables={"t": W}, grads={"pooled": g}, step=True)
    pooled = np.array([[7, 7.75, 8.5, 9.25, 2.5, 2.75, 3, 3.25], [3, 3.25, 3.5, 3.75, 0, 0, 0, 0]], dtype=F32)
    check(same_bits(out["pooled.npy"], pooled), "duplicates in the forward: f0 b0 = W3 ⊕ W3 ⊕ W1, f1 b0 = (W3 ⊕ W2) ⊘ 2")
    # G_3, order b, key, p: b0: f0 p0, f0 p1, f1 p0 (γ/2); b1: f0 p0
    #   col 0: (2^23 ⊕ 2^23) ⊕ -2^24 = 0, ⊕ 1 = 1   (feature-major order would give (2^24 ⊕ 1) ⊕ -2^24 = 0)
    #   col 1: 1, 2, 4, 6;  col 2: 0.5, 1, 1.5, 1.75;  col 3: -1, -2, -2, -2
    # G_1 = γ f0 b0 = [2^23, 1, 0.5, -1];  G_2 = γ f1 b0 ⊘ 2 = [-2^24, 2, 0.5, 0]
    cfg = enp.Config(spec)
    G = enp.row_gradients(cfg, enp.Batch(cfg, lengths, ids), g, {})[0]
    check(sorted(G) == [1, 2, 3] and same_bits(G[3], np.array([1, 6, 1.75, -2], dtype=F32))
          and same_bits(G[1], np.array([2.0 ** 23, 1, 0.5, -1], dtype=F32))
          and same_bits(G[2], np.array([-(2.0 ** 24), 2, 0.5, 0], dtype=F32)),
          f"G_r sums every occurrence of a row over both features in the order b, key, p: G_3 = {G[3].tolist()}")
    # one SGD update per touched row with G_r: W3 = [3, 3.25, 3.5, 3.75] ⊖ 0.5⊗G_3 = [2.5, 0.25, 2.625, 4.75]
    #   W1 = [1, 1.25, 1.5, 1.75] ⊖ [2^22, 0.5, 0.25, -0.5] = [-4194303, 0.75, 1.25, 2.25]
    #   W2 = [2, 2.25, 2.5, 2.75] ⊖ [-2^23, 1, 0.25, 0] = [8388610, 1.25, 2.25, 2.75]; rows 0, 4, 5 unchanged
    want = W.copy()
    want[3] = [2.5, 0.25, 2.625, 4.75]
    want[1] = [-4194303, 0.75, 1.25, 2.25]
    want[2] = [8388610, 1.25, 2.25, 2.75]
    check(same_bits(out["table_t.npy"], want), "one SGD update per touched row with the summed G_r; untouched rows keep their bits")


def test_validation():
    spec = {"seed": 1, "batch": 2, "keys": ["a", "b"],
            "tables": [{"name": "t", "rows": 5, "dim": 4, "bounds": "error"}],
            "features": [{"key": "a", "table": "t", "pooling": "weighted_sum", "max_len": 3},
                         {"key": "b", "table": "t", "pooling": "sum", "max_len": 3}]}
    cfg = enp.Config(spec)

    def code(lengths, ids, weights=None, offsets=None, c=cfg):
        if weights is None:  # feature "a" is weighted: it needs weights (one per id)
            weights = np.ones(len(ids), dtype=F32)
        try:
            enp.validate(c, np.array(lengths), np.array(ids, dtype=np.int64), np.array(weights, dtype=F32), offsets)
            return None
        except enp.InputError as e:
            return (e.code, e.index)

    check(code([1, 0, 2, 1], [0, 1, 2, 3]) is None, "validation: a good KJT passes")
    try:
        enp.validate(cfg, np.array([1, 0, 2, 1]), np.array([0, 1, 2, 3]), None)
        got = None
    except enp.InputError as e:
        got = (e.code, e.index)
    check(got == ("E_KJT_SHAPE", 0), "validation: a weighted_sum feature without weights -> E_KJT_SHAPE at its key")
    check(code([1, 0, 2], [0, 1, 2]) == ("E_KJT_SHAPE", 3), "validation: |lengths| != F·B -> E_KJT_SHAPE")
    check(code([1, -1, 2, -1], [0, 1, 2], [np.nan] * 3) == ("E_KJT_NEG_LENGTH", 1),
          "validation: negative length reported at its first index, before a NaN weight")
    check(code([1, 0, 4, 1], [0] * 6) == ("E_KJT_LENGTH_CAP", 2), "validation: length over max_len -> E_KJT_LENGTH_CAP")
    check(code([1, 0, 2, 1], [0, 1, 2]) == ("E_KJT_OFFSETS", 4), "validation: sum of lengths != |ids| -> E_KJT_OFFSETS")
    check(code([1, 0, 2, 1], [0, 1, 2, 3], offsets=np.array([0, 1, 2, 3, 4])) == ("E_KJT_OFFSETS", 2),
          "validation: offsets != cumsum -> E_KJT_OFFSETS at the first differing index")
    check(code([1, 0, 2, 1], [0, 9, 2, 3], [1, 1, np.inf, 1]) == ("E_KJT_WEIGHT", 2),
          "validation: inf weight -> E_KJT_WEIGHT before the bad id")
    check(code([1, 0, 2, 1], [0, 1, 7, -1]) == ("E_ID_OUT_OF_RANGE", 2), "validation: first invalid id under error")
    spec2 = dict(spec, keys=["a", "a"])
    check(code([1, 0, 2, 1], [0, 1, 2, 3], c=enp.Config(spec2)) == ("E_KJT_SHAPE", 1), "validation: duplicate key")


def main():
    for t in (test_philox, test_splitmix, test_u24_init, test_rne, test_sr, test_adagrad_by_hand,
              test_adam_by_hand, test_duplicates, test_validation):
        t()
    print(f"{'FAILED' if failures else 'PASSED'}: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
