"""The PyTorch custom ops behind gemtb.gpu.attention (imported only where torch is):

* ``gemtb::attention(q, k, v, q_offsets, kv_offsets, kv_index, <options>) -> (O, LSE)``
* ``gemtb::attention_backward(q, k, v, q_offsets, kv_offsets, kv_index, O, LSE, dO, <options>)
  -> (dQ, dK, dV)``

registered with torch.library.custom_op, with fake (meta) implementations that give the output
shapes from the input shapes alone, so that torch.compile keeps them in one graph, and autograd
that runs the backward op for q, k and v. LSE is marked non-differentiable.

Both implementations check every argument by name before anything runs on the device, so the
argument errors are the same with or without a GPU.
"""

import contextlib
from typing import Optional, Tuple

import torch

from . import _core

_HALF = (torch.bfloat16, torch.float16)
# The option arguments of both ops, in schema order (after the tensors).
OPTION_NAMES = ("act", "mask", "align", "pre_scale", "post_scale", "window_left", "window_right", "block",
                "max_lq", "max_lk", "broadcast_q", "tanh_approx")


def check_inputs(q, k, v, q_offsets, kv_offsets, kv_index):
    """Types, dtypes, ranks and layouts; values only of real (not fake) host offsets."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: want a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _HALF:
            raise TypeError(f"{name}: dtype {x.dtype}, want torch.bfloat16 or torch.float16")
        if x.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {x.dtype} differs from q's {q.dtype}")
        if x.dim() != 3:
            raise ValueError(f"{name}: shape {tuple(x.shape)}, want rank 3 ([tokens, heads, head_dim])")
        if not x.is_contiguous():
            raise ValueError(f"{name}: not contiguous (strides {x.stride()}); pass {name}.contiguous()")
    for name, x in (("q_offsets", q_offsets), ("kv_offsets", kv_offsets), ("kv_index", kv_index)):
        if x is None and name == "kv_index":
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name}: want a torch.Tensor, got {type(x).__name__}")
        if x.dtype != torch.int64:
            raise TypeError(f"{name}: dtype {x.dtype}, want torch.int64")
        if x.dim() != 1:
            raise ValueError(f"{name}: shape {tuple(x.shape)}, want a vector")
        if name != "kv_index" and x.shape[0] < 1:
            raise ValueError(f"{name}: empty; offsets start with 0 and end with the row count")


def _check_offset_ends(q, k, q_offsets, kv_offsets):
    """The last offset of each host vector is its tensor's row count (the library checks the rest)."""
    for name, offsets, rows, tensor in (("q_offsets", q_offsets, q.shape[0], "q"),
                                        ("kv_offsets", kv_offsets, k.shape[0], "k")):
        last = int(offsets[-1])
        if last != rows:
            raise ValueError(f"{name}[{offsets.shape[0] - 1}]={last}: last offset must equal {tensor}'s "
                             f"{rows} rows")


def _check_device(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.device.type != "cuda":
            raise ValueError(f"{name}: on {x.device}, want a CUDA tensor (gemtb.gpu runs on the GPU)")
        if x.device != q.device:
            raise ValueError(f"{name}: on {x.device}, q on {q.device}")


def _host(x):
    return None if x is None else x.detach().to("cpu", copy=False).contiguous()


def _prepare(q, k, v, q_offsets, kv_offsets, kv_index, options):
    """Checks everything and returns the host offsets and the options dict the binding takes."""
    from . import gpu

    check_inputs(q, k, v, q_offsets, kv_offsets, kv_index)
    host = _host(q_offsets), _host(kv_offsets), _host(kv_index)
    _check_offset_ends(q, k, host[0], host[1])
    _check_device(q, k, v)
    gpu._require()
    options = dict(zip(OPTION_NAMES, options))
    for key, offsets in (("max_lq", host[0]), ("max_lk", host[1])):
        if options[key] is None:
            options[key] = int((offsets[1:] - offsets[:-1]).max()) if offsets.shape[0] > 1 else 0
    return host, options


def output_rows(q, kv_offsets, kv_index, broadcast_q):
    """TO from shapes alone: TQ, or under broadcast_q (one query sequence, so Lq = TQ) B*TQ with B
    the kv_index entries, else the K/V sequences."""
    if not broadcast_q:
        return q.shape[0]
    sequences = kv_index.shape[0] if kv_index is not None else kv_offsets.shape[0] - 1
    return sequences * q.shape[0]


@contextlib.contextmanager
def _on_default_stream(device):
    """The kernels launch on the legacy default stream: order it after the current stream, and the
    current stream after the kernels."""
    current = torch.cuda.current_stream(device)
    default = torch.cuda.default_stream(device)
    if current == default:
        yield
        return
    default.wait_stream(current)
    yield
    current.wait_stream(default)


@torch.library.custom_op("gemtb::attention", mutates_args=())
def attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offsets: torch.Tensor,
                 kv_offsets: torch.Tensor, kv_index: Optional[torch.Tensor], act: str, mask: str, align: str,
                 pre_scale: Optional[float], post_scale: Optional[float], window_left: int, window_right: int,
                 block: int, max_lq: Optional[int], max_lk: Optional[int], broadcast_q: bool,
                 tanh_approx: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    options = (act, mask, align, pre_scale, post_scale, window_left, window_right, block, max_lq, max_lk,
               broadcast_q, tanh_approx)
    (q_off, kv_off, kv_idx), opts = _prepare(q, k, v, q_offsets, kv_offsets, kv_index, options)
    to = output_rows(q, kv_off, kv_idx, broadcast_q)
    softmax = act == "softmax"
    with torch.cuda.device(q.device):
        out = torch.empty((to, q.shape[1], v.shape[2]), dtype=q.dtype, device=q.device)
        lse = torch.empty((q.shape[1], to) if softmax else (0,), dtype=torch.float32, device=q.device)
        with _on_default_stream(q.device):
            _core.gpu_attention_forward(q, k, v, q_off, kv_off, kv_idx, opts, out, lse if softmax else None)
    return out, lse


@attention_op.register_fake
def _attention_fake(q, k, v, q_offsets, kv_offsets, kv_index, act, mask, align, pre_scale, post_scale,
                    window_left, window_right, block, max_lq, max_lk, broadcast_q, tanh_approx):
    to = output_rows(q, kv_offsets, kv_index, broadcast_q)
    out = q.new_empty((to, q.shape[1], v.shape[2]))
    lse = q.new_empty((q.shape[1], to) if act == "softmax" else (0,), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("gemtb::attention_backward", mutates_args=())
def attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offsets: torch.Tensor,
                          kv_offsets: torch.Tensor, kv_index: Optional[torch.Tensor], out: torch.Tensor,
                          lse: torch.Tensor, d_out: torch.Tensor, act: str, mask: str, align: str,
                          pre_scale: Optional[float], post_scale: Optional[float], window_left: int,
                          window_right: int, block: int, max_lq: Optional[int], max_lk: Optional[int],
                          broadcast_q: bool, tanh_approx: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    options = (act, mask, align, pre_scale, post_scale, window_left, window_right, block, max_lq, max_lk,
               broadcast_q, tanh_approx)
    (q_off, kv_off, kv_idx), opts = _prepare(q, k, v, q_offsets, kv_offsets, kv_index, options)
    softmax = act == "softmax"
    with torch.cuda.device(q.device):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        workspace = torch.empty((q.shape[1], out.shape[0]), dtype=torch.float32, device=q.device) if softmax else None
        with _on_default_stream(q.device):
            _core.gpu_attention_backward(q, k, v, q_off, kv_off, kv_idx, opts, out, lse if softmax else None,
                                         d_out.contiguous(), dq, dk, dv, workspace)
    return dq, dk, dv


@attention_backward_op.register_fake
def _attention_backward_fake(q, k, v, q_offsets, kv_offsets, kv_index, out, lse, d_out, *options):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, q_offsets, kv_offsets, kv_index = inputs[:6]
    out, lse = output
    ctx.save_for_backward(q, k, v, q_offsets, kv_offsets, kv_index, out, lse)
    ctx.options = tuple(inputs[6:])
    ctx.mark_non_differentiable(lse)


def _backward(ctx, d_out, d_lse):
    q, k, v, q_offsets, kv_offsets, kv_index, out, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward_op(q, k, v, q_offsets, kv_offsets, kv_index, out, lse, d_out.contiguous(),
                                       *ctx.options)
    return (dq, dk, dv, None, None, None) + (None,) * len(OPTION_NAMES)


attention_op.register_autograd(_backward, setup_context=_setup_context)
