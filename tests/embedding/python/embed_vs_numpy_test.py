#!/usr/bin/python3
"""`gemtb ref embed` (unsharded) agrees BIT-FOR-BIT with the independent NumPy model embedding_np.py.

    /usr/bin/python3 embed_vs_numpy_test.py --gemtb PATH [--cases N] [--seed S] [--only CASE] [--keep]

Each random case (seeded by CASE = S·100000 + i, printed on failure; rerun one with --only CASE) draws:
  * 1-3 tables: rows 1..40, dim 4/8/12, fp32/fp16/bf16, hashing identity/mod/splitmix64 (hash_seed
    given or the default h(t)), bounds error/zero/remap0 (invalid ids only under zero/remap0),
    stochastic_rounding default/true/false, optimizer SGD, rowwise Adagrad (decay none/l2/decoupled),
    Adam (none) or AdamW (decoupled), with lr etc. that are not fp32 numbers (RNE conversion);
  * 1-4 features, often two sharing one table, pooling sum/mean/weighted_sum/none, max_len 1..6;
    keys a permutation of the features (or omitted = config order); batch 1..4; many empty bags;
    ids drawn from a small pool (duplicates within and across bags and features); weights (when a
    weighted feature exists) with ±0; offsets sometimes given;
  * tables from --tables (with ±0 and fp16 subnormals; optimizer state given or not) or the
    Philox init; --step-index and --threads sometimes given; in a quarter of the cases every
    table value, weight and gradient comes from {±0, ±1, 0.5, -2}, so signs of zero flow everywhere.
Then it runs the CLI forward, and forward + --step with random upstream gradients, and compares
every output file's dtype, shape and raw bytes with the model (so -0 vs +0 counts); missing or
unexpected output files fail too. A coverage line counts the cases exercising each feature.

Hand-made edge cases follow: the G_r order (a sum that sample-major and feature-major orders round
differently), `zero` bounds under MEAN / NONE, `remap0` with mod hashing under MEAN, a weighted
feature with every bag empty (empty weights), AdamW with λ = 0 on -0 weights, and a batch of 64 with
--threads 1 and 8.

Also: malformed inputs (negative length, lengths vs |ids|, id out of range under `error`, NaN / inf
weight, length over max_len, bad offsets, unknown key) must exit 2, write no output folder, and say
one line on stderr (printed); and, as a diagnostic of the shared codecs, `gemtb ref quantize
--rounding stochastic` must draw the same SR bits as the model's Philox/SR.

One line per failure; a summary line; exit 0 if all agree, 1 otherwise, 77 without numpy.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:  # the suite's interpreter is Debian's python3 with python3-numpy
    print("numpy missing: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import embedding_np as enp  # noqa: E402

F32 = np.float32
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg, flush=True)


# --------------------------------------------------------------------------------------------------
# Random cases
# --------------------------------------------------------------------------------------------------
OPTIMIZERS = [("sgd", "none"), ("rowwise_adagrad", "none"), ("rowwise_adagrad", "l2"),
              ("rowwise_adagrad", "decoupled"), ("adam", "none"), ("adam", "decoupled")]


COARSE = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0], dtype=F32)


def rand_f32_values(rng, shape, scale=0.5, specials=True, coarse=False):
    """Normal values with a few ±0, ±1; or (coarse) only values from COARSE: ±0 everywhere, so that
    the sign of zero is exercised through every sum and update."""
    if coarse:
        return COARSE[rng.integers(0, COARSE.size, size=shape)] * F32(scale)
    x = (rng.standard_normal(shape) * scale).astype(F32)
    if specials and x.size:
        flat = x.reshape(-1)
        for v in (0.0, -0.0, 1.0, -0.25):
            if rng.random() < 0.5:
                flat[rng.integers(flat.size)] = v
    return x


def gen_ids(rng, tab, n):
    """n ids for table `tab`: drawn from a small pool so that duplicates are common."""
    N = tab["rows"]
    h = tab["hashing"]
    if h == "identity":
        valid = list(range(N))
        invalid = [-1, -7, N, N + 3, 1 << 40, -(1 << 62)]
    elif h == "mod":
        valid = list(range(0, 5 * N + 2)) + [(1 << 62) + 3, (1 << 40) + 1, np.iinfo(np.int64).max]
        invalid = [-1, -N, np.iinfo(np.int64).min]
    else:
        valid = [0, 1, 2, 3, -1, -5, 12345, 1 << 40, np.iinfo(np.int64).max, np.iinfo(np.int64).min]
        invalid = []
    pool = [valid[i] for i in rng.integers(0, len(valid), size=min(3, len(valid)) + 1)]
    ids = []
    for _ in range(n):
        if invalid and tab["bounds"] != "error" and rng.random() < 0.4:
            ids.append(invalid[rng.integers(len(invalid))])
        else:
            ids.append(pool[rng.integers(len(pool))])
    return ids


def gen_case(rng):
    coarse = bool(rng.random() < 0.25)
    T = int(rng.integers(1, 4))
    tables = []
    for t in range(T):
        kind, mode = OPTIMIZERS[rng.integers(len(OPTIMIZERS))]
        opt = {"kind": kind, "lr": float(rng.choice([0.01, 0.05, 0.1, 0.5, 1.0, float(rng.uniform(0.001, 0.5))])),
               "weight_decay": 0.0 if kind == "sgd" else float(rng.choice([0.0, 0.01, 0.75, 1.5, float(rng.uniform(0, 0.2))])),
               "decay_mode": mode, "eps": float(rng.choice([1e-8, 1e-6, 1e-3])),
               "beta1": float(rng.choice([0.9, 0.5, float(rng.uniform(0.5, 0.99))])),
               "beta2": float(rng.choice([0.999, 0.75, float(rng.uniform(0.9, 0.9999))]))}
        tab = {"name": f"t{t}" if rng.random() < 0.7 else f"tab_{t}x",
               "rows": int(rng.choice([1, 2, 5, 17, 40])), "dim": int(rng.choice([4, 8, 12])),
               "dtype": str(rng.choice(["fp32", "fp16", "bf16"])),
               "hashing": str(rng.choice(["identity", "mod", "splitmix64"], p=[0.4, 0.35, 0.25])),
               "bounds": str(rng.choice(["error", "zero", "remap0"], p=[0.25, 0.4, 0.35])), "optimizer": opt}
        if rng.random() < 0.5:
            tab["hash_seed"] = int(rng.integers(0, 1 << 53))
        sr = rng.random()
        if sr < 0.3:
            tab["stochastic_rounding"] = False
        elif sr < 0.6:
            tab["stochastic_rounding"] = True
        tables.append(tab)
    F = int(rng.integers(1, 5))
    feats = []
    for f in range(F):
        t = int(rng.integers(T))
        if f == 1 and rng.random() < 0.7:
            t = feats[0]["_t"]  # two features share one table
        feats.append({"key": f"f{f}", "table": tables[t]["name"], "_t": t,
                      "pooling": str(rng.choice(["sum", "mean", "weighted_sum", "none"])),
                      "max_len": int(rng.integers(1, 7))})
    B = int(rng.integers(1, 5))
    order = [int(i) for i in rng.permutation(F)]
    keys = [feats[i]["key"] for i in order]
    spec = {"seed": int(rng.integers(0, 1 << 31)) if rng.random() < 0.8 else int(rng.integers(0, 1 << 53)),
            "batch": B, "tables": tables,
            "features": [{k: v for k, v in f.items() if k != "_t"} for f in feats]}
    if rng.random() < 0.7:
        spec["keys"] = keys
    else:
        order = list(range(F))
    lengths, ids = [], []
    for fi in order:
        f = feats[fi]
        for b in range(B):
            n = 0 if rng.random() < 0.3 else int(rng.integers(0, f["max_len"] + 1))
            lengths.append(n)
            ids += gen_ids(rng, tables[f["_t"]], n)
    case = {"spec": spec, "lengths": np.array(lengths, dtype=np.int32), "ids": np.array(ids, dtype=np.int64),
            "weights": None, "offsets": None, "tables": None, "state": None, "step_index": None,
            "threads": None, "coarse": coarse}
    if any(f["pooling"] == "weighted_sum" for f in feats):
        w = rand_f32_values(rng, len(ids), scale=1.0, coarse=coarse)
        case["weights"] = w
    if rng.random() < 0.3:
        case["offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if rng.random() < 0.5:
        tabs, state = {}, {}
        for tab in tables:
            x = rand_f32_values(rng, (tab["rows"], tab["dim"]), scale=0.25, coarse=coarse)
            if tab["dtype"] == "fp16" and x.size > 1:
                x.reshape(-1)[rng.integers(x.size)] = F32(3e-6)  # an fp16 subnormal
            tabs[tab["name"]] = enp.to_storage(x, tab["dtype"])
            o = tab["optimizer"]
            if rng.random() < 0.6:
                if o["kind"] == "rowwise_adagrad":
                    m = rng.uniform(0, 2, tab["rows"]).astype(F32)
                    m[rng.random(tab["rows"]) < 0.3] = 0
                    state[f"adagrad_{tab['name']}"] = m
                elif o["kind"] == "adam":
                    state[f"adam_m_{tab['name']}"] = rand_f32_values(rng, (tab["rows"], tab["dim"]), 0.125, coarse=coarse)
                    state[f"adam_v_{tab['name']}"] = np.abs(rand_f32_values(rng, (tab["rows"], tab["dim"]), 0.0078125, False, coarse))
                    b = np.ones(2, dtype=F32)
                    for _ in range(int(rng.integers(1, 6))):
                        b = b * np.array([o["beta1"], o["beta2"]], dtype=F32)
                    state[f"adam_step_{tab['name']}"] = b.astype(F32)
        case["tables"], case["state"] = tabs, state
    if rng.random() < 0.5:
        case["step_index"] = int(rng.choice([0, 1, 7, int(rng.integers(0, 1 << 40))]))
    if rng.random() < 0.4:
        case["threads"] = int(rng.choice([1, 2, 3, 7]))
    case["grads"] = random_grads(rng, spec, case["lengths"], coarse)
    return case


def random_grads(rng, spec, lengths, coarse=False):
    """Upstream gradients: pooled [B, W] (pooled features in key order) and seq_<key> [Σℓ, D]."""
    cfg = enp.Config(spec)
    B = cfg.batch
    feats = {f.key: f for f in cfg.features}
    W = sum(cfg.tables[feats[k].table].dim for k in cfg.keys if feats[k].pooling != "none")
    grads = {}
    if W:
        grads["pooled"] = rand_f32_values(rng, (B, W), 1.0, coarse=coarse)
    for fi, k in enumerate(cfg.keys):
        if feats[k].pooling == "none":
            n = int(np.sum(lengths[fi * B:(fi + 1) * B]))
            grads[f"seq_{k}"] = rand_f32_values(rng, (n, cfg.tables[feats[k].table].dim), 1.0, coarse=coarse)
    return grads


def opt_json(kind, lr, decay_mode="none", weight_decay=0.0, eps=1e-8, beta1=0.9, beta2=0.999):
    return {"kind": kind, "lr": lr, "weight_decay": weight_decay, "decay_mode": decay_mode, "eps": eps,
            "beta1": beta1, "beta2": beta2}


def edge_cases():
    """Hand-made cases for points that random draws hit rarely. Returns [(name, case)]."""
    out = []

    def case(spec, lengths, ids, weights=None, tables=None, state=None, grads=None, threads=None, step_index=None):
        c = {"spec": spec, "lengths": np.array(lengths, dtype=np.int32), "ids": np.array(ids, dtype=np.int64),
             "weights": None if weights is None else np.array(weights, dtype=F32), "offsets": None,
             "tables": tables, "state": state or {}, "step_index": step_index, "threads": threads, "coarse": False}
        c["grads"] = grads if grads is not None else random_grads(np.random.default_rng(5), spec, c["lengths"])
        return c

    def table(name, rows, dim, opt, dtype="fp32", hashing="identity", bounds="error"):
        return {"name": name, "rows": rows, "dim": dim, "dtype": dtype, "hashing": hashing, "bounds": bounds,
                "optimizer": opt}

    # 1. G_r order: ascending b, then feature (key order), then p. Row 1 column 0 gets, sample-major,
    #    ((2^23 ⊕ 2^23) ⊕ -2^24) ⊕ 1 = 1; feature-major would give ((2^23 ⊕ 2^23) ⊕ 1) ⊕ -2^24 = 0.
    spec = {"seed": 1, "batch": 2, "keys": ["f0", "f1"],
            "tables": [table("t", 4, 4, opt_json("sgd", 1.0))],
            "features": [{"key": "f0", "table": "t", "pooling": "sum", "max_len": 4},
                         {"key": "f1", "table": "t", "pooling": "mean", "max_len": 4}]}
    g = np.zeros((2, 8), dtype=F32)
    g[0, 0], g[0, 1], g[1, 0], g[0, 4] = 2.0 ** 23, 1.0, 1.0, -(2.0 ** 25)
    out.append(("G order sample-major", case(spec, [2, 1, 2, 0], [1, 1, 1, 1, 2],
                                             tables={"t": np.zeros((4, 4), dtype=F32)}, grads={"pooled": g})))
    # 2. zero bounds: invalid ids drop out of SUM/MEAN (and MEAN's n), NONE gives a +0 row, no gradient.
    spec = {"seed": 2, "batch": 2, "keys": ["m", "s", "n"],
            "tables": [table("z", 3, 4, opt_json("rowwise_adagrad", 0.1, "decoupled", 0.5), "bf16", "identity", "zero")],
            "features": [{"key": "m", "table": "z", "pooling": "mean", "max_len": 4},
                         {"key": "s", "table": "z", "pooling": "sum", "max_len": 4},
                         {"key": "n", "table": "z", "pooling": "none", "max_len": 4}]}
    out.append(("zero bounds: MEAN n, NONE +0 row", case(spec, [3, 1, 2, 0, 2, 2], [0, 7, 1, -3, 9, 2, 2, -1, 1, 4])))
    # 3. remap0 with mod hashing: invalid (negative) ids use row 0 and count in MEAN.
    spec = {"seed": 3, "batch": 2, "tables": [table("r", 5, 4, opt_json("sgd", 0.25), "fp16", "mod", "remap0")],
            "features": [{"key": "m", "table": "r", "pooling": "mean", "max_len": 4}]}
    out.append(("remap0: row 0 counted in MEAN", case(spec, [3, 2], [-1, 12, -5, 0, 8])))
    # 4. weighted_sum with every bag empty: weights is an empty float32 array (one per id, none).
    spec = {"seed": 4, "batch": 3, "tables": [table("w", 6, 4, opt_json("sgd", 0.1))],
            "features": [{"key": "ws", "table": "w", "pooling": "weighted_sum", "max_len": 2}]}
    out.append(("weighted_sum, all bags empty, empty weights", case(spec, [0, 0, 0], [], weights=[])))
    # 5. AdamW with λ = 0 on -0 weights: w ⊖ ((lr ⊗ 0) ⊗ -0) = -0 ⊖ -0 = +0 (formula applied as written).
    spec = {"seed": 5, "batch": 1, "tables": [table("a", 2, 4, opt_json("adam", 0.5, "decoupled", 0.0)),
                                              table("b", 2, 4, opt_json("adam", 0.5, "none", 0.0))],
            "features": [{"key": "fa", "table": "a", "pooling": "sum", "max_len": 2},
                         {"key": "fb", "table": "b", "pooling": "sum", "max_len": 2}]}
    w0 = np.array([[-0.0, -0.0, 0.0, 1.0], [-0.0, 2.0, -0.0, 0.0]], dtype=F32)
    out.append(("AdamW lambda=0 on -0", case(spec, [1, 1], [0, 0], tables={"a": w0.copy(), "b": w0.copy()},
                                             grads={"pooled": np.array([[0.0, -0.0, 0.0, -0.0] * 2], dtype=F32)})))
    # 6. A larger batch, run with 1 and with 8 threads: results may not depend on the thread count.
    rng = np.random.default_rng(6)
    spec = {"seed": 6, "batch": 64, "keys": ["b", "a", "c"],
            "tables": [table("big", 1000, 16, opt_json("rowwise_adagrad", 0.05, "l2", 0.01), "bf16", "splitmix64"),
                       table("small", 50, 8, opt_json("adam", 0.01, "decoupled", 0.1), "fp16", "mod", "zero")],
            "features": [{"key": "a", "table": "big", "pooling": "sum", "max_len": 16},
                         {"key": "b", "table": "big", "pooling": "none", "max_len": 16},
                         {"key": "c", "table": "small", "pooling": "weighted_sum", "max_len": 16}]}
    lengths = rng.integers(0, 17, size=3 * 64)
    ids = rng.integers(-20, 200, size=int(lengths.sum()))
    weights = rng.standard_normal(ids.size).astype(F32)
    for th in (1, 8):
        out.append((f"large batch, --threads {th}", case(spec, lengths, ids, weights, threads=th, step_index=3)))
    return out


# --------------------------------------------------------------------------------------------------
# Running and comparing
# --------------------------------------------------------------------------------------------------
def write_inputs(d, case):
    os.makedirs(d, exist_ok=True)
    p = {"spec": os.path.join(d, "spec.json"), "lengths": os.path.join(d, "lengths.npy"),
         "ids": os.path.join(d, "ids.npy")}
    with open(p["spec"], "w") as f:
        json.dump(case["spec"], f, indent=1)
    np.save(p["lengths"], case["lengths"])
    np.save(p["ids"], case["ids"])
    if case["weights"] is not None:
        p["weights"] = os.path.join(d, "weights.npy")
        np.save(p["weights"], case["weights"])
    if case["offsets"] is not None:
        p["offsets"] = os.path.join(d, "offsets.npy")
        np.save(p["offsets"], case["offsets"])
    if case["tables"] is not None:
        td = os.path.join(d, "tables")
        os.makedirs(td, exist_ok=True)
        for name, arr in case["tables"].items():
            np.save(os.path.join(td, f"table_{name}.npy"), arr)
        for stem, arr in case["state"].items():
            np.save(os.path.join(td, f"{stem}.npy"), arr)
        p["tables"] = td
    gd = os.path.join(d, "grads")
    os.makedirs(gd, exist_ok=True)
    for stem, arr in case["grads"].items():
        np.save(os.path.join(gd, f"{stem}.npy"), arr)
    p["grads"] = gd
    return p


def cli_argv(gemtb, p, case, out_dir, step):
    argv = [gemtb, "ref", "embed", "--spec", p["spec"], "--lengths", p["lengths"], "--ids", p["ids"]]
    for k in ("weights", "offsets", "tables"):
        if k in p:
            argv += [f"--{k}", p[k]]
    if step:
        argv += ["--grads", p["grads"], "--step"]
    if case["step_index"] is not None:
        argv += ["--step-index", str(case["step_index"])]
    if case["threads"] is not None:
        argv += ["--threads", str(case["threads"])]
    return argv + ["--out-dir", out_dir]


def expected(case, step):
    return enp.embed(case["spec"], case["lengths"], case["ids"], case["weights"], case["offsets"],
                     case["tables"], case["state"], case["grads"], step,
                     case["step_index"] if case["step_index"] is not None else 0)


def show(arr, idx):
    v = arr[idx]
    if arr.dtype == np.dtype("<u2"):  # bf16 bits
        return f"{float(enp.f32_from_bf16_bits(np.array([v]))[0])!r} (bf16 0x{int(v):04x})"
    bits = np.array([v]).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[arr.dtype.itemsize])[0]
    return f"{float(v)!r} (0x{int(bits):0{2 * arr.dtype.itemsize}x})"


def compare_file(tag, fname, path, exp):
    if not os.path.exists(path):
        fail(f"{tag} {fname}: missing (expected {exp.dtype.str} {exp.shape})")
        return
    try:
        got = np.load(path)
    except Exception as e:  # noqa: BLE001
        fail(f"{tag} {fname}: unreadable ({e})")
        return
    exp = np.ascontiguousarray(exp)
    if got.dtype.str != exp.dtype.str or got.shape != exp.shape:
        fail(f"{tag} {fname}: got {got.dtype.str} {got.shape}, expected {exp.dtype.str} {exp.shape}")
        return
    if got.tobytes() == exp.tobytes():
        return
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[exp.dtype.itemsize]
    diff = np.ascontiguousarray(got).view(u) != exp.view(u)
    first = tuple(int(i) for i in np.argwhere(diff)[0])
    fail(f"{tag} {fname}: first differing index {first}: got {show(got, first)}, expected {show(exp, first)}"
         f" ({int(diff.sum())} of {diff.size} differ)")


def tally(case, cov):
    """Counts what a case exercises (printed at the end, so that thin coverage is visible)."""
    spec = case["spec"]
    cfg = enp.Config(spec)
    batch = enp.Batch(cfg, case["lengths"], case["ids"], case["weights"], case["offsets"])

    seen = set()

    def add(k):
        if k not in seen:
            seen.add(k)
            cov[k] = cov.get(k, 0) + 1
    for f in batch.feats:
        add("pool:" + f.pooling)
    for tab in cfg.tables:
        add("dtype:" + tab.dtype)
        add("hash:" + tab.hashing)
        add("bounds:" + tab.bounds)
        add(f"opt:{tab.opt}/{tab.decay_mode}")
        if tab.dtype != "fp32":
            add("sr:on" if tab.stochastic_rounding else "sr:off")
    users = [cfg.tables[f.table].name for f in batch.feats]
    if len(set(users)) < len(users):
        add("shared table")
    for fi, f in enumerate(batch.feats):
        tab = cfg.tables[f.table]
        lo = sum(len(batch.bags[(g, b)]) for g in range(fi) for b in range(cfg.batch))
        n = sum(len(batch.bags[(fi, b)]) for b in range(cfg.batch))
        _, valid = enp.map_ids(tab, case["ids"][lo:lo + n])
        if not valid.all():
            add(f"invalid ids under {tab.bounds}")
    tabs_of = {}
    for (fi, b), bag in batch.bags.items():
        if not bag:
            add("empty bags")
        rows = [o[1] for o in bag if o[2]]
        if len(rows) != len(set(rows)):
            add("duplicate row in a bag")
        for r in set(rows):
            tabs_of.setdefault((batch.feats[fi].table, r), set()).add((fi, b))
    if any(len(v) > 1 for v in tabs_of.values()):
        add("row in several bags")
    add("init from --tables" if case["tables"] is not None else "init by Philox")
    if case["coarse"]:
        add("values from {±0, ±1, 0.5, -2}")
    if case["weights"] is not None and np.any(np.signbit(case["weights"]) & (case["weights"] == 0)):
        add("weight -0")


def run_case(gemtb, case_id, case, work):
    d = os.path.join(work, "case" + "".join(ch if ch.isalnum() else "_" for ch in str(case_id)))
    p = write_inputs(d, case)
    for step in (False, True):
        tag = f"case {case_id} {'step' if step else 'fwd'}"
        try:
            exp = expected(case, step)
        except enp.InputError as e:
            fail(f"{tag}: the generator made an invalid case ({e}) -- test bug")
            return
        out = os.path.join(d, "out_step" if step else "out_fwd")
        r = subprocess.run(cli_argv(gemtb, p, case, out, step), capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            line = (r.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            fail(f"{tag}: exit {r.returncode}: {line}")
            continue
        for fname, arr in sorted(exp.items()):
            compare_file(tag, fname, os.path.join(out, fname), arr)
        extra = sorted(set(os.listdir(out)) - set(exp)) if os.path.isdir(out) else []
        if extra:
            fail(f"{tag}: unexpected output files {extra}")


# --------------------------------------------------------------------------------------------------
# Malformed inputs
# --------------------------------------------------------------------------------------------------
def malformed_checks(gemtb, work):
    spec = {"seed": 3, "batch": 2, "keys": ["a", "b"],
            "tables": [{"name": "t", "rows": 10, "dim": 4, "dtype": "fp32", "hashing": "identity",
                        "bounds": "error", "optimizer": {"kind": "sgd", "lr": 0.1, "weight_decay": 0.0,
                                                         "decay_mode": "none", "eps": 1e-8,
                                                         "beta1": 0.9, "beta2": 0.999}}],
            "features": [{"key": "a", "table": "t", "pooling": "weighted_sum", "max_len": 4},
                         {"key": "b", "table": "t", "pooling": "sum", "max_len": 4}]}
    good_len = np.array([2, 1, 0, 3], dtype=np.int32)
    good_ids = np.array([1, 2, 3, 4, 5, 9], dtype=np.int64)
    good_w = np.array([0.5, 1.0, 2.0, 1.0, 1.0, 1.0], dtype=F32)
    cases = [
        ("negative length", {"lengths": np.array([2, -1, 1, 3], dtype=np.int32)}, "E_KJT_NEG_LENGTH"),
        ("sum of lengths != |ids|", {"lengths": np.array([2, 1, 1, 3], dtype=np.int32)}, "E_KJT_OFFSETS"),
        ("id out of range under bounds=error", {"ids": np.array([1, 2, 3, 4, 10, 9], dtype=np.int64)},
         "E_ID_OUT_OF_RANGE"),
        ("negative id under bounds=error", {"ids": np.array([1, 2, 3, -1, 5, 9], dtype=np.int64)},
         "E_ID_OUT_OF_RANGE"),
        ("NaN weight", {"weights": np.array([0.5, np.nan, 2, 1, 1, 1], dtype=F32)}, "E_KJT_WEIGHT"),
        ("inf weight", {"weights": np.array([0.5, 1, 2, 1, 1, -np.inf], dtype=F32)}, "E_KJT_WEIGHT"),
        ("length over max_len", {"lengths": np.array([2, 1, 0, 5], dtype=np.int32),
                                 "ids": np.arange(8, dtype=np.int64), "weights": np.ones(8, dtype=F32)},
         "E_KJT_LENGTH_CAP"),
        ("offsets != cumsum(lengths)", {"offsets": np.array([0, 2, 2, 3, 6], dtype=np.int64)}, "E_KJT_OFFSETS"),
        ("unknown key", {"spec_keys": ["a", "zz"]}, "E_KJT_SHAPE"),
        ("duplicate key", {"spec_keys": ["a", "a"]}, "E_KJT_SHAPE"),
    ]
    for i, (name, change, code) in enumerate(cases):
        d = os.path.join(work, f"malformed{i}")
        os.makedirs(d)
        s = json.loads(json.dumps(spec))
        if "spec_keys" in change:
            s["keys"] = change["spec_keys"]
        arrays = {"lengths": change.get("lengths", good_len), "ids": change.get("ids", good_ids),
                  "weights": change.get("weights", good_w)}
        if "offsets" in change:
            arrays["offsets"] = change["offsets"]
        # The model must agree that this input is invalid, with this code.
        try:
            enp.validate(enp.Config(s), arrays["lengths"], arrays["ids"], arrays["weights"], arrays.get("offsets"))
            fail(f"malformed '{name}': the NumPy model accepts it (test bug)")
        except enp.InputError as e:
            if e.code != code:
                fail(f"malformed '{name}': the NumPy model says {e.code}, expected {code} (test bug)")
        with open(os.path.join(d, "spec.json"), "w") as f:
            json.dump(s, f)
        argv = [gemtb, "ref", "embed", "--spec", os.path.join(d, "spec.json")]
        for k, arr in arrays.items():
            np.save(os.path.join(d, f"{k}.npy"), arr)
            argv += [f"--{k}", os.path.join(d, f"{k}.npy")]
        out = os.path.join(d, "out")
        r = subprocess.run(argv + ["--out-dir", out], capture_output=True, text=True, timeout=60)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        print(f"     malformed '{name}': exit {r.returncode}: {lines[0] if lines else '(no stderr)'}", flush=True)
        if r.returncode != 2:
            fail(f"malformed '{name}': exit {r.returncode}, expected 2")
        if os.path.exists(out):
            fail(f"malformed '{name}': output folder {out} was created")
        if len(lines) != 1:
            fail(f"malformed '{name}': stderr has {len(lines)} lines, expected one")
        elif code not in lines[0]:
            fail(f"malformed '{name}': stderr does not name {code}")


# --------------------------------------------------------------------------------------------------
# The shared SR codec (diagnostic): ref quantize's SR bits == the model's Philox + SR
# --------------------------------------------------------------------------------------------------
def quantize_check(gemtb, work):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(4096) * np.exp(rng.uniform(-25, 12, 4096))).astype(F32)
    x[:6] = [0.0, -0.0, 65504.0, 65519.0, 6e-6, -1.0]
    path = os.path.join(work, "q.npy")
    np.save(path, x)
    # streams as the embedding's SR stream ids (kept below 2^63: the flag is a signed integer)
    for seed, stream in ((7, enp.stream_id(enp.TAG_SR, 0, 0) >> 1), (1 << 40, enp.stream_id(enp.TAG_SR, 2, 5) >> 1)):
        for fmt in ("bf16", "fp16"):
            out = os.path.join(work, f"q_{fmt}_{seed}")
            r = subprocess.run([gemtb, "ref", "quantize", "--in", path, "--format", fmt, "--rounding", "stochastic",
                                "--seed", str(seed), "--stream", str(stream), "--out-dir", out],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                print(f"     (ref quantize unavailable: {r.stderr.strip()[:200]}) -- check skipped")
                return
            codes = np.load(os.path.join(out, "codes.npy"))
            r16 = enp.philox_words(seed, stream, np.arange(x.size, dtype=np.uint64)) & np.uint32(0xFFFF)
            mine = enp.fp16_from_f32(x, r16).view(np.uint16) if fmt == "fp16" else enp.bf16_bits_from_f32(x, r16)
            bad = np.nonzero(mine != codes)[0]
            if bad.size:
                i = int(bad[0])
                fail(f"ref quantize SR {fmt} seed {seed} stream {stream}: index {i} x={float(x[i])!r} "
                     f"got 0x{int(codes[i]):04x} expected 0x{int(mine[i]):04x}")


# --------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemtb", required=True)
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", type=int, default=None, help="run just this CASE id")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    gemtb = os.path.abspath(args.gemtb) if os.path.exists(args.gemtb) else args.gemtb
    work = tempfile.mkdtemp(prefix="gemtb-embed-np-")
    t0 = time.time()
    ids = [args.only] if args.only is not None else [args.seed * 100000 + i for i in range(args.cases)]
    cov = {}
    for cid in ids:
        case = gen_case(np.random.default_rng(cid))
        tally(case, cov)
        try:
            run_case(gemtb, cid, case, work)
        except subprocess.TimeoutExpired:
            fail(f"case {cid}: timed out")
    n_case_fail = len(failures)
    if args.only is None:
        for i, (name, case) in enumerate(edge_cases()):
            try:
                run_case(gemtb, f"edge{i} '{name}'", case, work)
            except subprocess.TimeoutExpired:
                fail(f"edge case '{name}': timed out")
        malformed_checks(gemtb, work)
        quantize_check(gemtb, work)
    print(f"coverage (cases of {len(ids)} that exercise it):", ", ".join(f"{k} {v}" for k, v in sorted(cov.items())))
    dt = time.time() - t0
    if args.keep:
        print(f"work folder kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAILED' if failures else 'PASSED'}: {len(ids)} random cases (fwd + step): {n_case_fail} failures; "
          f"edge cases, malformed inputs, SR codec: {len(failures) - n_case_fail} failures; {dt:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
