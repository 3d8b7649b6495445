"""The stored golden attention answers agree with the independent NumPy fp64 reference
(tests/attention/python/attention_np.py, written from the definitions alone), so the golden set freezes
values that are right, not just values that are stable.

Every oracle-mode folder of golden/attention is read from its case.json and .npy files (no gemtb
binary involved) and each stored output is compared with NumPy's: max |golden - numpy| <= 1e-12 *
max(1, max |numpy|), the -inf pattern of LSE equal. Emulate-mode folders are skipped: they hold a
kernel's roundings, which the NumPy reference does not model.

usage: /usr/bin/python3 golden_vs_numpy_test.py --golden DIR   (exit 0 pass, 1 fail, 77 no numpy)
"""

import argparse
import json
import os
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("SKIP: numpy is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "attention", "python"))
import attention_np as ref  # noqa: E402

TOL = 1e-12


def load_float(path):
    a = np.load(path)
    if a.dtype == np.uint16:  # bfloat16 bits
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", required=True)
    args = ap.parse_args()
    manifest = json.load(open(os.path.join(args.golden, "manifest.json")))
    failures = checked = 0
    for p in manifest["producers"]:
        if p["kind"] != "attention" or p["params"].get("mode", "oracle") != "oracle":
            continue
        d = os.path.join(args.golden, p["name"])
        c = json.load(open(os.path.join(d, "case.json")))
        f = lambda key: load_float(os.path.join(d, c[key])) if key in c else None  # noqa: E731
        i = lambda key: np.load(os.path.join(d, c[key])) if key in c else None  # noqa: E731
        want = ref.attention(
            f("q"), f("k"), f("v"), i("q-offsets"), i("kv-offsets"), c["max-lq"], c["max-lk"], act=c["act"],
            pre_scale=c.get("pre-scale"), post_scale=c.get("post-scale"), mask=c["mask"],
            window=(c["window-left"], c["window-right"]), block=c["block"], align=c["align"],
            bias_dense=f("bias-dense"), bias_rel=f("bias-rel"), ts=i("ts"), bias_ts=f("bias-ts"),
            rope_q=f("rope-q"), rope_k=f("rope-k"), rope_v=f("rope-v"), broadcast_q=c["broadcast-q"],
            kv_index=i("kv-index"), do=f("do"))
        for name in ("o", "lse", "dq", "dk", "dv", "ddense", "drel", "dts"):
            path = os.path.join(d, name + ".npy")
            if not os.path.exists(path):
                if name in want:
                    print("FAIL %s: numpy has %s, golden does not" % (p["name"], name))
                    failures += 1
                continue
            got = np.load(path)
            w = np.asarray(want.get(name))
            msg = None
            if got.dtype != np.float64 or got.shape != w.shape:
                msg = "dtype/shape %s %s vs numpy %s" % (got.dtype, got.shape, w.shape)
            else:
                gi, wi = np.isneginf(got), np.isneginf(w)
                if not np.array_equal(gi, wi):
                    msg = "-inf pattern differs"
                elif w.size:
                    g0, w0 = np.where(wi, 0.0, got), np.where(wi, 0.0, w)
                    err = float(np.max(np.abs(g0 - w0)))
                    scale = max(1.0, float(np.max(np.abs(w0))))
                    if not err <= TOL * scale:
                        msg = "max err %.3e > %.1e * %.3e" % (err, TOL, scale)
            checked += 1
            if msg:
                print("FAIL %s/%s.npy: %s" % (p["name"], name, msg))
                failures += 1
    print("%d golden arrays checked against NumPy, %d failures" % (checked, failures))
    if checked == 0:
        print("FAIL nothing checked")
        failures += 1
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
