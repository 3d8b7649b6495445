"""The number formats against ml_dtypes, bit for bit: special values, every halfway case between
neighbouring codes (and one fp32 ulp either side), and random inputs, through gemtb.ref.quantize
(round to nearest even). Inputs are float32, so neither side rounds twice (ml_dtypes converts
float64 to bfloat16 through float32).

Differing conventions (named, each tested on its own side):
  - fp8 overflow: gemtb saturates finite values beyond the largest code to it (448 for E4M3, 57344 for
    E5M2, the kernels' satfinite conversion); ml_dtypes gives NaN (E4M3) or inf (E5M2). Random and
    halfway inputs stay within range; test_saturates checks gemtb's rule. The fp6 and fp4 formats
    (float6_e2m3fn, float6_e3m2fn, float4_e2m1fn) saturate in both, so their overflow and ±inf are
    compared bit for bit.
  - NaN: compared as NaN (isnan of both decodings), not by payload or sign. fp6 and fp4 have no NaN:
    gemtb gives +max (as CUDA's __nv_cvt_float_to_fp4/fp6 and cvt.rn.satfinite do), ml_dtypes a zero
    of the opposite sign; test_fp6_fp4_nan_is_positive_max checks gemtb's rule.
MX: the E8M0 scale codes decode through ml_dtypes' float8_e8m0fnu and, with the element codes through
ml_dtypes, give gemtb's decoded values exactly; FLOOR scales are floor(log2 amax) - emax (numpy's
frexp), and every element code is ml_dtypes' conversion of x·2^-E clipped to ±max (satfinite), for
MXFP8, MXFP6 and MXFP4 elements alike.
"""

import ml_dtypes
import numpy as np
import pytest

import gemtb

FORMATS = {  # gemtb name -> (ml_dtypes type, code dtype)
    "bfloat16": (ml_dtypes.bfloat16, np.uint16),
    "float16": (np.float16, np.uint16),
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, np.uint8),
    "float8_e5m2": (ml_dtypes.float8_e5m2, np.uint8),
    "float6_e2m3fn": (ml_dtypes.float6_e2m3fn, np.uint8),
    "float6_e3m2fn": (ml_dtypes.float6_e3m2fn, np.uint8),
    "float4_e2m1fn": (ml_dtypes.float4_e2m1fn, np.uint8),
}
FP6_FP4 = ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]
MX_ELEMENTS = ["float8_e4m3fn", "float8_e5m2"] + FP6_FP4
# emax of each MX element format, from OFP8 and OCP MX v1.0 (max = 1.75·2^8, 1.75·2^15, 1.875·2^2,
# 1.75·2^4, 1.5·2^2): FLOOR's E is floor(log2 amax) - emax.
EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float6_e2m3fn": 2, "float6_e3m2fn": 4, "float4_e2m1fn": 2}


def largest(fmt):
    return float(ml_dtypes.finfo(FORMATS[fmt][0]).max)


def check(fmt, x):
    x = np.asarray(x, dtype=np.float32)
    target, code = FORMATS[fmt]
    got = gemtb.ref.quantize(x, fmt)["codes"]
    with np.errstate(over="ignore"):  # overflow to infinity is a case under test
        want = x.astype(target)
    nan = np.isnan(want.astype(np.float64))
    assert np.array_equal(np.isnan(got.view(target).astype(np.float64)), nan)
    bad = np.flatnonzero((got != want.view(code)) & ~nan)
    assert bad.size == 0, f"{fmt}: {bad.size} codes differ, first x={x.flat[bad[0]]!r}: " \
        f"gemtb {got.flat[bad[0]]:#x}, ml_dtypes {want.view(code).flat[bad[0]]:#x}"


def codes_of(fmt):
    target, code = FORMATS[fmt]
    if code == np.uint8:
        all_codes = np.arange(256, dtype=np.uint8)
    else:  # every 16-bit code would do too; a stride keeps the suite quick
        all_codes = np.arange(0, 65536, 7, dtype=np.uint16)
    with np.errstate(invalid="ignore"):  # NaN codes, dropped below
        values = all_codes.view(target).astype(np.float64)
    return np.unique(values[np.isfinite(values)])


@pytest.mark.parametrize("fmt", FORMATS)
def test_special_values(fmt):
    m = largest(fmt)
    tiny = float(ml_dtypes.finfo(FORMATS[fmt][0]).smallest_subnormal)
    x = [0.0, -0.0, m, -m, tiny, -tiny, tiny / 2, -tiny / 2, tiny * 0.75, tiny / 4, 1.0, -1.0]
    if fmt in ("bfloat16", "float16"):
        beyond = min(m * 4, float(np.finfo(np.float32).max))  # rounds to infinity in both
        x += [np.inf, -np.inf, np.nan, beyond, -beyond]
    if fmt in FP6_FP4:  # saturate in both: inf, far beyond max, and the tie between max and the next binade
        v = codes_of(fmt)
        step = v[-1] - v[-2]  # the top binade's step, which a next code would also be away
        x += [np.inf, -np.inf, 1e30, -1e30, float(np.finfo(np.float32).max), m + step / 2, -(m + step / 2),
              m + step / 4, m * 1.5]
    check(fmt, x)


@pytest.mark.parametrize("fmt", FORMATS)
def test_halfway_cases(fmt):
    v = codes_of(fmt)
    mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)
    assert np.array_equal(mid.astype(np.float64), (v[:-1] + v[1:]) / 2), "a midpoint is not an fp32 number"
    check(fmt, np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_inputs(fmt):
    rng = np.random.default_rng(17)
    m = largest(fmt)
    bits = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    in_range = np.isfinite(bits) if fmt in FP6_FP4 else np.isfinite(bits) & (np.abs(bits) <= m)
    bits = bits[in_range]
    scaled = (rng.standard_normal(20000) * m / 8).astype(np.float32)
    check(fmt, np.concatenate([bits, scaled]))


@pytest.mark.parametrize("fmt", MX_ELEMENTS)
def test_saturates(fmt):
    m = largest(fmt)
    x = np.array([m * 1.5, -m * 4, 1e30, -1e30, np.inf, -np.inf], dtype=np.float32)
    values = gemtb.ref.quantize(x, fmt)["values"]
    assert np.array_equal(values, [m, -m, m, -m, m, -m])


@pytest.mark.parametrize("fmt", FP6_FP4)
def test_fp6_fp4_nan_is_positive_max(fmt):
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], dtype=np.uint32).view(np.float32)
    r = gemtb.ref.quantize(nans, fmt)
    assert np.array_equal(r["values"], np.full(4, largest(fmt)))
    with np.errstate(invalid="ignore"):
        theirs = nans.astype(FORMATS[fmt][0]).astype(np.float64)
    assert np.all(theirs == 0), "ml_dtypes' convention changed: update the docstring"


def test_fp6_fp4_codes_sit_in_the_low_bits():
    x = np.array([-0.0, -6.0, 6.0, 0.5], dtype=np.float32)
    assert np.array_equal(gemtb.ref.quantize(x, "float4_e2m1fn")["codes"], [0x8, 0xF, 0x7, 0x1])
    assert np.array_equal(gemtb.ref.quantize(x, "float6_e2m3fn")["codes"], [0x20, 0x3C, 0x1C, 0x4])
    assert np.array_equal(gemtb.ref.quantize(x, "float6_e3m2fn")["codes"], [0x20, 0x36, 0x16, 0x8])


@pytest.mark.parametrize("fmt", MX_ELEMENTS)
@pytest.mark.parametrize("block", [32, "32x32"])
@pytest.mark.parametrize("scale_mode", ["rceil", "floor"])
def test_mx_scales_and_elements_decode_through_ml_dtypes(fmt, block, scale_mode):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-20, 20, size=(64, 1)))).astype(np.float32)
    x[3, 7] = 0.0
    x[40, 40] = -0.0
    r = gemtb.ref.quantize(x, fmt, block=block, scale_mode=scale_mode)
    scales = r["scales"].view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    elements = r["codes"].view(FORMATS[fmt][0]).astype(np.float64)
    if block == 32:
        per_element = np.repeat(scales, 32, axis=-1)
        amax = np.abs(x.astype(np.float64)).reshape(64, 2, 32).max(axis=-1)
    else:
        per_element = np.repeat(np.repeat(scales, 32, axis=0), 32, axis=1)
        amax = np.abs(x.astype(np.float64)).reshape(2, 32, 2, 32).max(axis=(1, 3))
    assert np.array_equal(elements * per_element, r["values"])
    assert np.array_equal(np.exp2(r["scales"].astype(np.float64) - 127), scales)
    if scale_mode == "floor":
        _, ex = np.frexp(amax)  # amax = f·2^ex with f in [0.5, 1): floor(log2 amax) = ex - 1
        assert np.array_equal(r["scales"].astype(np.int64), np.clip(ex - 1 - EMAX[fmt], -127, 127) + 127)
    # Each element is ml_dtypes' round-to-nearest-even of x·2^-E (exact in float32 here), clipped to
    # ±max first: satfinite.
    scaled = x * (1 / per_element).astype(np.float32)
    assert np.array_equal(scaled.astype(np.float64), x.astype(np.float64) / per_element)
    m = largest(fmt)
    want = np.clip(scaled, -m, m).astype(FORMATS[fmt][0]).view(np.uint8)
    assert np.array_equal(r["codes"], want)
