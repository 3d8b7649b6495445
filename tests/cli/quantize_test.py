"""`gemtb ref quantize`: codes agree with NumPy's own conversions where NumPy has one, decoded values
match the codes, MX blocks have the documented shapes and are transpose-invariant for 32x32,
stochastic rounding picks a neighbour and is reproducible per (seed, stream), and bad flags exit 2.

usage: /usr/bin/python3 quantize_test.py --gemtb PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy missing: skipped")
    sys.exit(77)

failures = 0


def check(cond, what):
    global failures
    if cond:
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gemtb-quantize-")
    rng = np.random.default_rng(5)

    def quantize(x, *flags):
        path = os.path.join(tmp, "in.npy")
        np.save(path, x)
        out = tempfile.mkdtemp(dir=tmp)
        p = subprocess.run([args.gemtb, "ref", "quantize", "--in", path, *flags, "--out-dir", out],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return p, None
        res = {n[:-4]: np.load(os.path.join(out, n)) for n in os.listdir(out)}
        return p, res

    np.seterr(over="ignore")  # values past fp16 max are meant to overflow to inf
    x64 = rng.standard_normal((6, 70)) * np.exp(rng.uniform(-20, 20, (6, 70)))
    # fp16: NumPy converts float64 -> float16 with one RNE rounding, like gemtb.
    _, r = quantize(x64, "--format", "fp16")
    check(r is not None and np.array_equal(r["codes"], x64.astype(np.float16).view(np.uint16)),
          "fp16 codes equal NumPy's float64->float16 (one rounding)")
    check(r is not None and np.array_equal(r["values"], x64.astype(np.float16).astype(np.float64)),
          "fp16 values decode the codes")
    # bf16 from float32 input: integer RNE on the fp32 bits.
    x32 = (rng.standard_normal((4, 64)) * 10).astype(np.float32)
    bits = x32.view(np.uint32).astype(np.uint64)
    want = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    _, r = quantize(x32, "--format", "bf16")
    check(r is not None and r["codes"].dtype == np.uint16 and np.array_equal(r["codes"], want),
          "bf16 codes equal integer RNE of the fp32 bits")
    # e4m3: codes are uint8, values on the grid, saturation at 448.
    big = np.array([0.0, 1.0, 448.0, 464.0, 1e6, -1e6, 2.0 ** -10, 3 * 2.0 ** -10], dtype=np.float32)
    _, r = quantize(big, "--format", "e4m3")
    check(r is not None and r["codes"].dtype == np.uint8 and
          list(r["values"]) == [0.0, 1.0, 448.0, 448.0, 448.0, -448.0, 0.0, 2.0 ** -8],
          "e4m3: saturation to 448 and ties of the edge table")
    # e2m1 / e2m3 / e3m2 (OCP MX fp4/fp6): one code per byte in its low bits, RNE ties to even, saturation
    # (inf too), signed zero, NaN to +max. Values written from the OCP tables.
    edges = np.array([0.0, -0.0, 1.25, 1.75, 5.0, 7.0, -100.0, np.inf, np.nan, 0.25, 0.2], dtype=np.float32)
    for fmt, codes, values in [
            ("e2m1", [0x0, 0x8, 0x2, 0x4, 0x6, 0x7, 0xF, 0x7, 0x7, 0x0, 0x0],
             [0.0, -0.0, 1.0, 2.0, 4.0, 6.0, -6.0, 6.0, 6.0, 0.0, 0.0]),
            ("e2m3", [0x0, 0x20, 0xA, 0xE, 0x1A, 0x1E, 0x3F, 0x1F, 0x1F, 0x2, 0x2],
             [0.0, -0.0, 1.25, 1.75, 5.0, 7.0, -7.5, 7.5, 7.5, 0.25, 0.25]),
            ("e3m2", [0x0, 0x20, 0xD, 0xF, 0x15, 0x17, 0x3F, 0x1F, 0x1F, 0x4, 0x3],
             [0.0, -0.0, 1.25, 1.75, 5.0, 7.0, -28.0, 28.0, 28.0, 0.25, 0.1875])]:
        _, r = quantize(edges, "--format", fmt)
        check(r is not None and r["codes"].dtype == np.uint8 and list(r["codes"]) == codes and
              list(r["values"]) == values and list(np.signbit(r["values"])) == list(np.signbit(values)),
              f"{fmt}: the OCP table's codes, ties to even, saturation, signed zero, NaN to +max")
    # MXFP4 with FLOOR: E = floor(log2 amax) - 2, so amax lands in [4, 8) and beyond 6 saturates.
    x4 = np.array([[7.5, -3.0, 0.75] + [0.0] * 29], dtype=np.float32)
    _, r = quantize(x4, "--format", "e2m1", "--block", "32", "--scale-mode", "floor")
    check(r is not None and list(r["scales"].ravel()) == [127] and list(r["values"][0, :3]) == [6.0, -3.0, 1.0],
          "MXFP4 FLOOR: scale 2^0 for amax 7.5, 7.5 saturates to 6, 0.75 ties to 1")
    # MX along an axis: scale shape, and dequantised values within half a step of the block scale.
    xm = (rng.standard_normal((3, 70, 5)) * 3).astype(np.float32)
    _, r = quantize(xm, "--format", "e4m3", "--block", "32", "--axis", "1")
    ok = r is not None and r["scales"].shape == (3, 3, 5) and r["codes"].shape == xm.shape
    if ok:
        scale = np.repeat(2.0 ** (r["scales"].astype(np.float64) - 127), 32, axis=1)[:, :70, :]
        ok = np.all(np.abs(r["values"] - xm) <= scale * 32 + 1e-30)  # e4m3 step <= 2^(8-3) * scale
    check(ok, "MX 32 along axis 1: scales [3,3,5], error within the block's step")
    # 32x32 tiles: transposing the input transposes codes and scales.
    xt = (rng.standard_normal((45, 70)) * np.exp(rng.uniform(-3, 3, (45, 70)))).astype(np.float32)
    _, a = quantize(xt, "--format", "e5m2", "--block", "32x32", "--scale-mode", "floor")
    _, b = quantize(np.ascontiguousarray(xt.T), "--format", "e5m2", "--block", "32x32", "--scale-mode", "floor")
    check(a is not None and b is not None and a["scales"].shape == (2, 3) and
          np.array_equal(a["codes"].T, b["codes"]) and np.array_equal(a["scales"].T, b["scales"]),
          "MX 32x32 is transpose-invariant (codes and scales)")
    # Stochastic rounding: a neighbour of the RNE result, reproducible, seed-dependent.
    xs = (rng.standard_normal(4096)).astype(np.float32)
    _, s1 = quantize(xs, "--format", "bf16", "--rounding", "stochastic", "--seed", "9", "--stream", "2")
    _, s2 = quantize(xs, "--format", "bf16", "--rounding", "stochastic", "--seed", "9", "--stream", "2")
    _, s3 = quantize(xs, "--format", "bf16", "--rounding", "stochastic", "--seed", "10", "--stream", "2")
    ok = s1 is not None and s2 is not None and s3 is not None
    if ok:
        lo = (xs.view(np.uint32) >> 16).astype(np.int64)
        c = s1["codes"].astype(np.int64)
        ok = (np.array_equal(s1["codes"], s2["codes"]) and not np.array_equal(s1["codes"], s3["codes"])
              and np.all((c == lo) | (c == lo + 1)))
        # Unbiased on average: the mean error is far below one bf16 step.
        ok = ok and abs(np.mean(s1["values"] - xs.astype(np.float64))) < 1e-3
    check(ok, "stochastic bf16: truncation or next code, reproducible per seed, unbiased on average")
    # RHT then bf16: an orthogonal transform keeps the norm of each 32-block (up to rounding).
    xr = rng.standard_normal((2, 64)).astype(np.float32)
    _, r = quantize(xr, "--format", "fp16", "--rht", "32", "--seed", "3")
    ok = r is not None
    if ok:
        n_in = np.linalg.norm(xr.astype(np.float64).reshape(-1, 32), axis=1)
        n_out = np.linalg.norm(r["values"].reshape(-1, 32), axis=1)
        ok = np.allclose(n_in, n_out, rtol=2e-3) and not np.allclose(r["values"], xr, atol=1e-2)
    check(ok, "RHT(32) before fp16 preserves block norms and changes the values")
    # Bad flags: exit 2, one line, nothing written.
    for flags, needle in [(["--format", "int4"], "--format=int4"),
                          (["--format", "mxfp4"], "--format=mxfp4"),
                          (["--format", "bf16", "--block", "32"], "--block"),
                          (["--format", "e4m3", "--block", "16"], "--block=16"),
                          (["--format", "e4m3", "--rht", "48"], "--rht=48"),
                          (["--format", "e4m3", "--block", "32", "--axis", "5"], "--axis=5")]:
        p, r = quantize(x32, *flags)
        check(p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1 and r is None,
              f"rejects {' '.join(flags)} with exit 2: {p.stderr.strip()}")
    p, r = quantize(np.array([0.1, 0.2]), "--format", "e4m3", "--rounding", "stochastic")
    check(p.returncode == 2 and "fp32" in p.stderr, "stochastic rounding of non-fp32 values is refused, not double-rounded")
    print("PASS" if failures == 0 else f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
