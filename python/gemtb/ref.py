"""The oracle: jagged attention forward and backward, the quantize codecs, the embedding bags and
their fused optimizer step, with the options and outputs of `gemtb ref attention|quantize|embed`.

Results are dicts of NumPy arrays named as the command's output files without ".npy"; the bytes are
those the command writes.
"""

import json

from . import _core
from ._arrays import FLOATING, from_wire, to_wire

_INT = ("int64",)
_ATTENTION_FLOAT = ("q", "k", "v", "bias_dense", "bias_rel", "bias_ts", "rope_q", "rope_k", "rope_v", "do")


def _attention(arrays, act, pre_scale, post_scale, mask, window, block, align, max_lq, max_lk, broadcast_q,
               mode, out_dtype, threads, backward):
    wires = {}
    for name, x in arrays.items():
        if x is not None:
            wires[name] = to_wire(name, x, FLOATING if name in _ATTENTION_FLOAT else _INT)
    if not (isinstance(window, (tuple, list)) and len(window) == 2):
        raise TypeError(f"window: want (left, right), got {window!r}")
    result = _core.attention(wires, act, pre_scale, post_scale, mask, int(window[0]), int(window[1]), int(block),
                             align, max_lq, max_lk, bool(broadcast_q), mode, out_dtype or "", int(threads), backward)
    return {name: from_wire(w) for name, w in result.items()}


def attention(q, k, v, q_offsets, kv_offsets, *, act="softmax", pre_scale=None, post_scale=None, mask="none",
              window=(-1, -1), block=64, align="bottom_right", max_lq=None, max_lk=None, kv_index=None,
              broadcast_q=False, bias_dense=None, bias_rel=None, ts=None, bias_ts=None, rope_q=None, rope_k=None,
              rope_v=None, mode="oracle", out_dtype=None, threads=0):
    """The attention forward: {"o", "lse" (softmax)}.

    q [TQ,H,Dqk], k [TK,Hkv,Dqk], v [TK,Hkv,Dv] of one dtype (float64, float32, float16, bfloat16);
    q_offsets, kv_offsets, kv_index, ts int64. act: softmax|identity|gelu|gelu_tanh|silu|relu|
    relu_square|leaky_relu|hardswish; mask: none|causal|window|block with window=(left, right)
    (-1 unbounded) and block=n; align: bottom_right|top_left. mode "oracle" computes in fp64 and
    returns float64; "emulate" mirrors a tensor-core kernel and returns the input dtype; out_dtype
    float64|float32|input overrides.
    """
    arrays = dict(q=q, k=k, v=v, q_offsets=q_offsets, kv_offsets=kv_offsets, kv_index=kv_index,
                  bias_dense=bias_dense, bias_rel=bias_rel, ts=ts, bias_ts=bias_ts, rope_q=rope_q, rope_k=rope_k,
                  rope_v=rope_v)
    return _attention(arrays, act, pre_scale, post_scale, mask, window, block, align, max_lq, max_lk, broadcast_q,
                      mode, out_dtype, threads, False)


def attention_backward(q, k, v, q_offsets, kv_offsets, do, *, act="softmax", pre_scale=None, post_scale=None,
                       mask="none", window=(-1, -1), block=64, align="bottom_right", max_lq=None, max_lk=None,
                       kv_index=None, broadcast_q=False, bias_dense=None, bias_rel=None, ts=None, bias_ts=None,
                       rope_q=None, rope_k=None, rope_v=None, mode="oracle", out_dtype=None, threads=0):
    """Forward and backward: {"o", "lse", "dq", "dk", "dv"} plus "ddense", "drel", "dts" for the
    biases given. do [TO,H,Dv] has q's dtype; the other arguments are attention()'s."""
    arrays = dict(q=q, k=k, v=v, q_offsets=q_offsets, kv_offsets=kv_offsets, kv_index=kv_index,
                  bias_dense=bias_dense, bias_rel=bias_rel, ts=ts, bias_ts=bias_ts, rope_q=rope_q, rope_k=rope_k,
                  rope_v=rope_v, do=do)
    return _attention(arrays, act, pre_scale, post_scale, mask, window, block, align, max_lq, max_lk, broadcast_q,
                      mode, out_dtype, threads, True)


# The formats by their NumPy/ml_dtypes names and by the command line's.
_FORMATS = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
            "float6_e2m3fn": "e2m3", "float6_e3m2fn": "e3m2", "float4_e2m1fn": "e2m1",
            "bf16": "bf16", "fp16": "fp16", "e4m3": "e4m3", "e5m2": "e5m2", "e2m3": "e2m3", "e3m2": "e3m2",
            "e2m1": "e2m1"}


def quantize(x, format, *, block=None, axis=-1, scale_mode="rceil", rounding="rne", seed=0, stream=0, rht=0):
    """Quantises `x` (float64, float32, float16 or bfloat16) bit-exactly.

    format: bfloat16|float16|float8_e4m3fn|float8_e5m2|float6_e2m3fn|float6_e3m2fn|float4_e2m1fn (or
    bf16|fp16|e4m3|e5m2|e2m3|e3m2|e2m1). The fp8, fp6 and fp4 formats saturate at their largest
    value; NaN gives fp8's NaN code, or +max in fp6/fp4, which have no NaN (ml_dtypes gives a zero).
    block "32" forms MX blocks (MXFP8, MXFP6, MXFP4) of 32 along `axis`, "32x32" tiles the last two
    axes (fp8/fp6/fp4 only), with E8M0 scales by scale_mode rceil|floor. rounding rne|stochastic
    (Philox word (seed, stream, flat index)); rht 32|64|128 applies the randomized Hadamard transform
    first. Returns {"codes" (uint16 for 16-bit formats; uint8 for fp8, fp6 and fp4, one code per byte
    in its low bits, as ml_dtypes stores them), "values" (float64, decoded), "scales" (uint8 E8M0
    codes, MX)}.
    """
    if not isinstance(format, str) or format not in _FORMATS:
        raise ValueError(f"format={format!r}: want one of {', '.join(_FORMATS)}")
    result = _core.quantize(to_wire("x", x, FLOATING), _FORMATS[format], "" if block is None else str(block),
                            int(axis), scale_mode, rounding, int(seed), int(stream), int(rht))
    return {name: from_wire(w, raw=(name == "codes")) for name, w in result.items()}


def embed(spec, lengths, ids, *, weights=None, offsets=None, tables=None, grads=None, step=False, step_index=0,
          threads=0):
    """The table-batched embedding oracle on a KeyedJaggedTensor (lengths int32 or int64 [F*B],
    key-major; ids int64; weights float32; offsets int64 [F*B+1]).

    spec: the module spec (dict, or the path of its JSON file) as `gemtb ref embed --spec` reads it.
    tables: initial state by the command's file names without ".npy" (table_<name>, adagrad_<name>,
    adam_m_<name>, ...); default Philox init. With step=True and grads ({"pooled": [B, W],
    "seq_<key>": [rows, D]}, float32) applies each table's fused optimizer. Returns "pooled",
    "seq_<key>", and after a step the updated tables and state (and "comm_report", a dict, when the
    spec has a sharding plan).
    """
    if isinstance(spec, dict):
        spec_json = json.dumps(spec)
    elif isinstance(spec, str):
        with open(spec, encoding="utf-8") as f:
            spec_json = f.read()
    else:
        raise TypeError(f"spec: want a dict or a path, got {type(spec).__name__}")
    for name, group in (("tables", tables), ("grads", grads)):
        if group is not None and not isinstance(group, dict):
            raise TypeError(f"{name}: want a dict of arrays, got {type(group).__name__}")
    table_wires = {key: to_wire(f"tables['{key}']", x, ("float32", "float16", "bfloat16"))
                   for key, x in (tables or {}).items()}
    grad_wires = {key: to_wire(f"grads['{key}']", x, ("float32",)) for key, x in (grads or {}).items()}
    result = _core.embed(
        spec_json, to_wire("lengths", lengths, ("int32", "int64")), to_wire("ids", ids, _INT),
        None if weights is None else to_wire("weights", weights, ("float32",)),
        None if offsets is None else to_wire("offsets", offsets, _INT), table_wires, grad_wires, bool(step),
        int(step_index), int(threads))
    out = {}
    for name, w in result.items():
        out[name] = json.loads(w) if name == "comm_report" else from_wire(w)
    return out


__all__ = ["attention", "attention_backward", "embed", "quantize"]
