#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/: small valid inputs and near-valid ones (one
thing wrong). No dependencies. The binary formats of the attention and kjt harnesses are read
front to back, one byte per field; the encoders below mirror their Decode functions field by field
and pick each byte by searching 0..255 for the one that decodes to the wanted value, so a change to
a harness's byte codes shows up here as a failed search.

    python3 fuzz/make_seeds.py        # rewrites fuzz/corpus/*/seed_*
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
EXTREMES = [-(1 << 63), -(1 << 63) + 1, -(1 << 62), -(1 << 31) - 1, -(1 << 31), (1 << 31) - 1,
            1 << 31, (1 << 31) + 1, 1 << 32, 1 << 40, (1 << 53) + 1, 1 << 62, (1 << 63) - 2,
            (1 << 63) - 1, 1 << 20, 65536]


def size_code(b, modulus):
    return b % modulus if b < 240 else EXTREMES[b - 240]


def range_code(b, lo, hi):
    return lo + b % (hi - lo + 1) if b < 240 else EXTREMES[b - 240]


def find(decode, want):
    for b in range(256):
        if decode(b) == want:
            return b
    raise ValueError(f"no byte decodes to {want!r}")


def values(n, seed):
    """n value bytes (int8 steps of 1/8 in the harness), deterministic."""
    out, x = [], seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append((x >> 16) & 0xFF)
    return out


# ---- attention (fuzz/attention_fuzzer.cc, Decode) --------------------------------------------
ACTS = ["softmax", "identity", "gelu", "gelu_tanh", "silu", "relu", "relu_square", "leaky_relu",
        "hardswish"]
MASKS = ["none", "causal", "window", "block"]
TYPES = ["fp64", "fp32", "fp16", "bf16"]


def attention(act="softmax", mask="none", window=(-1, -1), block=2, top_left=False,
              broadcast=False, pre=None, post=None, dtype="fp64", kv_heads=1, group=1, dqk=2, dv=2,
              kv_lengths=(2, 3), pairing="self", q_lengths=(), kv_index=None, slack=(0, 0),
              dense=None, rel=None, ts=None, rope=False, rope_v=False, corruptions=(), seed=1):
    out = [ACTS.index(act) if act in ACTS else 9]
    flags = MASKS.index(mask) | (4 if top_left else 0) | (8 if broadcast else 0)
    flags |= (16 if pre is not None else 0) | (32 if post is not None else 0)
    flags |= TYPES.index(dtype) << 6
    out.append(flags)
    out += [find(lambda b: range_code(b, -2, 9), window[0]),
            find(lambda b: range_code(b, -2, 9), window[1]),
            find(lambda b: range_code(b, 0, 9), block)]
    for s in (pre, post):
        if s is not None:
            out.append(find(lambda b: b < 240 and (b - 120) / 32 == s, True))
    out.append(find(lambda b: size_code(b, 4), kv_heads))
    out.append(group - 1)
    heads = kv_heads * group
    out += [find(lambda b: size_code(b, 7), dqk), find(lambda b: size_code(b, 7), dv)]
    out.append(len(kv_lengths))
    out += [find(lambda b: size_code(b, 7), n) for n in kv_lengths]
    kvi = list(kv_index or [])
    if broadcast:
        out.append(4 if kv_index is not None else 0)
        out.append(find(lambda b: size_code(b, 7), q_lengths[0]))
        if kv_index is not None:
            out.append(len(kvi))
        q_lengths = list(q_lengths)
    else:
        code = {"self": 0, "cross": 1, "kv_index": 2, "count": 3}[pairing]
        out.append(code | (8 if kv_index is not None and not kvi else 0))
        if pairing == "self":
            q_lengths = list(kv_lengths)
        else:
            if pairing == "kv_index":
                out.append(len(kvi))
            elif pairing == "count":
                out.append(len(q_lengths))
            out += [find(lambda b: size_code(b, 7), n) for n in q_lengths]
    out += [find(lambda b: range_code(b, -1, len(kv_lengths)), x) for x in kvi]
    out += [slack[0] + 1, slack[1] + 1]
    max_lq = max(q_lengths, default=0) + slack[0]
    max_lk = max(kv_lengths, default=0) + slack[1]
    extras = (1 if dense else 0) | (2 if rel else 0) | (4 if ts else 0) | (8 if rope else 0)
    extras |= (16 if rope_v else 0) | (64 if ts and pairing != "self" else 0)
    out.append(extras)
    num_out = len(kvi) if kv_index is not None else len(kv_lengths)
    if dense:
        out.append(dense)
        out += values(num_out * dense * max_lq * max_lk, seed + 1)
    max_l = max(max_lq, max_lk)
    if rel:
        out.append(1 if rel == heads else 0)
        out += values(rel * max(2 * max_l - 1, 0), seed + 2)
    tq, tk = sum(q_lengths), sum(kv_lengths)
    if ts:
        out.append(1 if ts == heads else 0)
        out += values(ts * 129, seed + 3)
        out += [(7 * i + 11) % 240 for i in range(tq)]  # timestamps +-(2^k + small)
    if rope:
        out += values(tq * dqk + tk * dqk + (tk * dv if rope_v else 0), seed + 4)
    out.append(160 + len(corruptions) if corruptions else 0)
    for op, at, value in corruptions:
        out += [op, at, value]
    out += values(tq * heads * dqk + tk * kv_heads * (dqk + dv), seed)
    return bytes(out)


def attention_seeds():
    return {
        "self_softmax_causal": attention(mask="causal", kv_heads=1, group=2, dqk=4, dv=2),
        "cross_silu_window_rel": attention(act="silu", mask="window", window=(1, 0),
                                           pairing="cross", q_lengths=(3, 1), rel=1, pre=0.5,
                                           post=0.25, dtype="bf16"),
        "kv_index_gelu_dense": attention(act="gelu", pairing="kv_index", q_lengths=(2, 1, 2),
                                         kv_index=(1, 0, 1), dense=1, top_left=True),
        "broadcast_block_gqa": attention(mask="block", block=2, broadcast=True, q_lengths=(3,),
                                         kv_index=(0, 1, 1), kv_heads=2, group=2, dense=2),
        "self_time_bias_rope": attention(act="relu_square", ts=1, rope=True, rope_v=True, dqk=4,
                                         dv=2, kv_lengths=(3, 0, 2)),
        "empty_sequences": attention(kv_lengths=(0, 0), slack=(1, 2), rel=1),
        "bad_offset": attention(corruptions=[(0, 1, 0)]),  # q_offsets[1] = -120
        "short_v": attention(corruptions=[(5, 2, 0)]),  # v one value short
        "bad_kv_index": attention(pairing="kv_index", q_lengths=(1, 1), kv_index=(0, 2)),
        "unknown_activation": attention(act="none"),
    }


# ---- kjt (fuzz/kjt_fuzzer.cc, DecodeConfig / DecodeKjt / DecodePartition) -------------------
POOLING = ["sum", "mean", "weighted_sum", "none"]


def float_code(x):
    return find(lambda b: b < 248 and (b - 124) / 64 == x, True)


def kjt(tables, features, keys, stride, lengths, ids, weights=None, offsets=False,
        partition=None, seed=3):
    out = [seed, find(lambda b: 1 + b % 3, len(tables))]
    for rows, dim, dtype, hashing, bounds, opt in tables:
        out.append(find(lambda b: range_code(b, 0, 12), rows))
        out.append(find(lambda b: 4 * (b % 4) + (2 if b % 11 == 10 else 0) if b < 240 else None,
                        dim))
        want = (["fp32", "fp16", "bf16", "fp64"].index(dtype),
                ["identity", "mod", "splitmix64"].index(hashing),
                ["error", "zero", "remap0"].index(bounds))
        out.append(find(lambda b: (b & 3, (b >> 2) % 3, (b >> 4) % 3), want))
        out.append(7)  # hash_seed
        kind = ["sgd", "rowwise_adagrad", "adam"].index(opt)
        out.append(find(lambda b: (b % 3, (b // 3) % 3, b & 32), (kind, 0, 0)))
    out.append(len(features))
    for key, table, pooling, max_len in features:
        out.append("abcde".index(key))
        out.append(find(lambda b: range_code(b, -1, len(tables)), table))
        out.append(POOLING.index(pooling))
        out.append(find(lambda b: range_code(b, -1, 6), max_len))
    out.append(len(keys))
    out += ["abcde".index(k) for k in keys]
    out.append(find(lambda b: size_code(b, 5), stride))
    shape = (4 if weights is not None else 0) | (16 if offsets else 0)
    out.append(shape)
    out += [l + 1 for l in lengths]
    out += [find(lambda b: b % 16 - 2 if b < 240 else None, i) for i in ids]
    if weights is not None:
        out += [float_code(w) for w in weights]
    out += partition or [0]  # DecodePartition's bytes: which parts, then their sizes
    return bytes(out)


def kjt_seeds():
    sgd = (10, 8, "fp32", "identity", "error", "sgd")
    ada = (5, 4, "fp16", "mod", "zero", "rowwise_adagrad")
    adam = (6, 4, "bf16", "splitmix64", "remap0", "adam")
    feats = [("a", 0, "sum", 4), ("b", 1, "mean", 4), ("c", 2, "none", 4), ("d", 0, "weighted_sum", 4)]
    return {
        "sum_mean_none": kjt([sgd, ada, adam], feats[:3], "abc", 2, [1, 2, 0, 3, 1, 1],
                             [1, 2, 9, 7, 8, 0, 3, 4]),
        "weighted_with_offsets": kjt([sgd], [feats[0], feats[3]], "da", 2, [2, 1, 0, 1],
                                     [1, 2, 3, 4], weights=[0.5, -1.0, 1.5, 0.25], offsets=True,
                                     # batch blocks [2], rows in 3 blocks of 4, 2 column shards
                                     partition=[7, 1, 4, 3, 2]),
        "no_keys": kjt([sgd], feats[:1], "", 3, [], []),
        "negative_length": kjt([sgd], feats[:1], "a", 2, [-1, 1], [0]),
        "id_out_of_range": kjt([sgd], feats[:1], "a", 1, [2], [3, 12]),
        "unknown_key": kjt([sgd], feats[:1], "e", 1, [0], []),
        "length_cap": kjt([sgd], [("a", 0, "sum", 1)], "a", 1, [3], [0, 1, 2]),
    }


# ---- npy --------------------------------------------------------------------------------------
def npy(descr, shape, data, version=1, fortran=False, header=None):
    if header is None:
        dims = "".join(f"{d}, " if len(shape) > 1 else f"{d}," for d in shape).rstrip(" ")
        header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({dims}), }}"
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + size + header.encode() + data


def npy_seeds():
    f8 = struct.pack("<4d", 1.5, -0.0, float("inf"), 2.0 ** -1074)
    return {
        "f8_2x2": npy("<f8", (2, 2), f8),
        "f4_3": npy("<f4", (3,), struct.pack("<3f", 1.0, -2.5, 3e38)),
        "f2_2": npy("<f2", (2,), bytes([0x00, 0x3C, 0x01, 0x00])),
        "bf16_2": npy("<u2", (2,), bytes([0x80, 0x3F, 0x80, 0x7F])),
        "i8_3_v2": npy("<i8", (3,), struct.pack("<3q", 0, 2, 5), version=2),
        "i4_scalar": npy("<i4", (), struct.pack("<i", -7)),
        "u1_empty": npy("|u1", (0, 4), b""),
        "fortran": npy("<f8", (1,), struct.pack("<d", 1.0), fortran=True),
        "truncated": npy("<f8", (2,), struct.pack("<d", 1.0)),
        "huge_shape": npy("<f8", (1 << 40, 1 << 40), b""),
        "big_endian": npy(">f8", (1,), struct.pack(">d", 1.0)),
    }


# ---- embedding spec ---------------------------------------------------------------------------
def embedding_spec(**override):
    spec = {
        "seed": 7, "batch": 2, "keys": ["items", "ads"],
        "tables": [
            {"name": "t_items", "rows": 16, "dim": 8, "dtype": "bf16", "hashing": "mod",
             "bounds": "error", "stochastic_rounding": True,
             "optimizer": {"kind": "rowwise_adagrad", "lr": 0.05, "eps": 1e-8,
                           "decay_mode": "l2", "weight_decay": 0.01}},
            {"name": "t_ads", "rows": 8, "dim": 4, "hashing": "splitmix64", "hash_seed": 3,
             "optimizer": {"kind": "adam", "lr": 0.01, "beta1": 0.9, "beta2": 0.999,
                           "decay_mode": "decoupled"}},
        ],
        "features": [{"key": "items", "table": "t_items", "pooling": "sum", "max_len": 8},
                     {"key": "ads", "table": "t_ads", "pooling": "weighted_sum"},
                     {"key": "seq", "table": "t_items", "pooling": "none"}],
    }
    spec.update(override)
    return json.dumps(spec, separators=(",", ":")).encode()


def embedding_spec_seeds():
    return {
        "valid": embedding_spec(),
        "sharded": embedding_spec(world_size=4, gpus_per_host=2,
                                  plan={"default": {"type": "RW"},
                                        "tables": {"t_ads": {"type": "TW", "owner": 1}}}),
        "unknown_key": embedding_spec(keyz=[]),
        "dim_not_multiple_of_4": embedding_spec(tables=[{"name": "t", "rows": 2, "dim": 6}],
                                                features=[]),
        "world_size_wraps": embedding_spec(world_size=4294967297),
        "lr_out_of_fp32_range": embedding_spec(
            tables=[{"name": "t", "rows": 2, "dim": 4, "optimizer": {"lr": 1e39}}], features=[]),
        "spec_key_not_a_feature": embedding_spec(keys=["nope"]),
    }


# ---- attention case folder --------------------------------------------------------------------
def archive(case, files):
    out = json.dumps(case).encode()
    for name, body in files.items():
        out += b"\n@@ " + name.encode() + b"\n" + body
    return out


def case_files(dtype="<f8", offsets=(0, 2, 3)):
    tq = offsets[-1]
    fmt = {"<f8": "d", "<f4": "f"}[dtype]
    vals = lambda n, s: struct.pack("<" + fmt * n, *[((i * 7 + s) % 9 - 4) / 4 for i in range(n)])
    return {
        "q.npy": npy(dtype, (tq, 2, 2), vals(tq * 4, 1)),
        "k.npy": npy(dtype, (tq, 1, 2), vals(tq * 2, 2)),
        "v.npy": npy(dtype, (tq, 1, 2), vals(tq * 2, 3)),
        "off.npy": npy("<i8", (len(offsets),), struct.pack(f"<{len(offsets)}q", *offsets)),
    }


def attention_case_seeds():
    base = {"q": "q.npy", "k": "k.npy", "v": "v.npy", "q-offsets": "off.npy",
            "kv-offsets": "off.npy"}
    with_do = dict(case_files())
    with_do["do.npy"] = npy("<f8", (3, 2, 2), struct.pack("<12d", *[0.5] * 12))
    mixed = dict(case_files())
    mixed["k.npy"] = case_files("<f4")["k.npy"]
    return {
        "softmax_causal": archive(dict(base, mask="causal"), case_files()),
        "silu_window_backward": archive(dict(base, act="silu", mask="window", **{
            "window-left": 1, "window-right": 0, "do": "do.npy", "max-lq": 4}), with_do),
        "fp32_top_left": archive(dict(base, align="top_left", **{"pre-scale": 0.5}),
                                 case_files("<f4")),
        "dtype_mismatch": archive(base, mixed),
        "decreasing_offsets": archive(base, case_files(offsets=(0, 3, 2))),
        "missing_file": archive(dict(base, **{"kv-index": "idx.npy"}), case_files()),
        "unknown_key": archive(dict(base, masks="causal"), case_files()),
    }


# ---- sharding plan (fuzz/sharding_plan_fuzzer.cc: world byte, gpus-per-host byte, plan JSON) ---
WORLDS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 4096, 0, -1, 5]
GPUS_PER_HOST = [1, 2, 4, 8, 3, 16, 0, 6]


def plan(world, gpus, body):
    text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return bytes([WORLDS.index(world), GPUS_PER_HOST.index(gpus)]) + text.encode()


def sharding_plan_seeds():
    return {
        "tw_rw_cw": plan(8, 4, {"default": {"type": "RW"}, "tables": {
            "t0": {"type": "TW", "owner": 3}, "t2": {"type": "CW", "shards": 3}}}),
        "grid_2d": plan(16, 8, {"default": {"type": "GRID", "shards": 2}, "mp_group": 4,
                                "fully_sharded": True, "gather": "touched",
                                "keep_gathered": True}),
        "twrw_sync": plan(8, 2, {"default": {"type": "TWRW"}, "mp_group": 4, "sync_period": 3,
                                 "state_sync": False, "cw_state": "per_shard"}),
        "dp": plan(1, 1, {"default": {"type": "DP"}}),
        "owner_out_of_range": plan(4, 8, {"default": {"type": "TW", "owner": 4}}),
        "shards_do_not_divide": plan(4, 4, {"default": {"type": "CW", "shards": 3}}),
        "mp_group_not_divisor": plan(12, 4, {"default": {"type": "RW"}, "mp_group": 5}),
        "unknown_table": plan(2, 2, {"default": {"type": "RW"}, "tables": {"t9": {"type": "DP"}}}),
        "hosts_do_not_split": plan(6, 4, {"default": {"type": "TWRW"}, "mp_group": 2}),
    }


def main():
    for target, seeds in [("attention", attention_seeds()), ("kjt", kjt_seeds()),
                          ("npy", npy_seeds()), ("embedding_spec", embedding_spec_seeds()),
                          ("attention_case", attention_case_seeds()),
                          ("sharding_plan", sharding_plan_seeds())]:
        folder = os.path.join(HERE, "corpus", target)
        os.makedirs(folder, exist_ok=True)
        for old in os.listdir(folder):
            if old.startswith("seed_"):
                os.remove(os.path.join(folder, old))
        for name, data in seeds.items():
            with open(os.path.join(folder, "seed_" + name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")


if __name__ == "__main__":
    main()
