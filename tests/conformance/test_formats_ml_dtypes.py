"""The number formats against ml_dtypes, bit for bit: special values, every halfway case between
neighbouring codes (and one fp32 ulp either side), and random inputs, through gemtb.ref.quantize
(round to nearest even). Inputs are float32, so neither side rounds twice (ml_dtypes converts
float64 to bfloat16 through float32).

Differing conventions (named, each tested on its own side):
  - fp8 overflow: gemtb saturates finite values beyond the largest code to it (448 for E4M3, 57344 for
    E5M2, the kernels' satfinite conversion); ml_dtypes gives NaN (E4M3) or inf (E5M2). Random and
    halfway inputs stay within range; test_fp8_saturates checks gemtb's rule.
  - NaN: compared as NaN (isnan of both decodings), not by payload or sign.
MX: the E8M0 scale codes decode through ml_dtypes' float8_e8m0fnu and, with the element codes through
ml_dtypes, give gemtb's decoded values exactly. ml_dtypes' float4_e2m1fn, float6_e2m3fn and
float6_e3m2fn have no gemtb codec (its MX elements are fp8): those cases skip by name.
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
}


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
    bits = bits[np.isfinite(bits) & (np.abs(bits) <= m)]
    scaled = (rng.standard_normal(20000) * m / 8).astype(np.float32)
    check(fmt, np.concatenate([bits, scaled]))


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_saturates(fmt):
    m = largest(fmt)
    x = np.array([m * 1.5, -m * 4, 1e30, -1e30], dtype=np.float32)
    values = gemtb.ref.quantize(x, fmt)["values"]
    assert np.array_equal(values, [m, -m, m, -m])


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("block", [32, "32x32"])
def test_mx_scales_and_elements_decode_through_ml_dtypes(fmt, block):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-20, 20, size=(64, 1)))).astype(np.float32)
    r = gemtb.ref.quantize(x, fmt, block=block)
    scales = r["scales"].view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    elements = r["codes"].view(FORMATS[fmt][0]).astype(np.float64)
    if block == 32:
        per_element = np.repeat(scales, 32, axis=-1)
    else:
        per_element = np.repeat(np.repeat(scales, 32, axis=0), 32, axis=1)
    assert np.array_equal(elements * per_element, r["values"])
    assert np.array_equal(np.exp2(r["scales"].astype(np.float64) - 127), scales)


@pytest.mark.parametrize("name", ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"])
def test_mx_element_formats_without_a_gemtb_codec(name):
    if not hasattr(ml_dtypes, name):
        pytest.skip(f"ml_dtypes {ml_dtypes.__version__} has no {name}")
    pytest.skip(f"gemtb has no {name} codec: its MX element formats are float8_e4m3fn and float8_e5m2")
