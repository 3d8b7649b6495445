"""gpu/'s CUDA attention kernels on device tensors (an sm_90a GPU: H100/H200), and the PyTorch
custom op ``gemtb::attention`` with autograd.

The kernels are in the package only when it was built with CUDA
(``pip install . -C cmake.define.GEMTB_WITH_CUDA=ON``); importing this module never fails:
``available()`` says whether they can run here and ``unavailable_reason()`` why not.

Tensors: q [TQ,H,D], k and v [TK,Hkv,D] of one dtype, bfloat16 or float16, row-major, on one CUDA
device; D is 16, 32, 64 or 128 and H a multiple of Hkv. q_offsets, kv_offsets (and kv_index) are
int64 vectors; the kernels' tile lists are built on the host from them, so CPU tensors avoid a copy
(CUDA ones are copied to the host, which waits for the device). The output O is [TO,H,D] with
TO = TQ, or B*TQ under broadcast_q (B the number of output sequences); LSE (softmax only) is
float32 [H,TO]. Options are gemtb.ref.attention's: act, mask, window, block, align, pre/post
scale, max_lq/max_lk (default: the longest sequence in the offsets), broadcast_q; tanh_approx
lets silu and gelu_tanh use the hardware tanh.

Streams: the kernels launch on the device's legacy default stream. With PyTorch tensors the
calls order that stream after the current stream and the current stream after the kernels, so
they behave as if run on the current stream.

Errors name the argument: TypeError for a wrong type or dtype, ValueError for a wrong device,
layout, shape or option (checked before anything runs on the device), RuntimeError when the
kernels cannot run here.
"""

import functools

from . import _core

_ACTS = ("softmax", "identity", "gelu", "gelu_tanh", "silu", "relu", "relu_square", "leaky_relu", "hardswish")
_MASKS = ("none", "causal", "window", "block")
_ALIGNS = ("bottom_right", "top_left")

try:
    import torch

    from . import _torch_op  # registers torch.ops.gemtb.attention (torch.library.custom_op, torch >= 2.4)
    _torch_reason = ""
except ImportError as e:  # the module still imports; gemtb.gpu.attention says why it cannot run
    torch = None
    _torch_reason = f"PyTorch is not importable ({e})"
except AttributeError as e:
    torch = None
    _torch_reason = f"this PyTorch has no torch.library.custom_op (want torch >= 2.4): {e}"


def _built():
    return hasattr(_core, "gpu_attention_forward")


@functools.lru_cache(maxsize=None)
def unavailable_reason():
    """Why the kernels cannot run here ("" when they can). Asked of the driver once per process."""
    if not _built():
        return "gemtb was built without CUDA (pip install . -C cmake.define.GEMTB_WITH_CUDA=ON)"
    ok, why = _core.gpu_attention_available()
    return "" if ok else why


def available():
    """True when this build has the kernels and an sm_90 device is present."""
    return unavailable_reason() == ""


def _require():
    why = unavailable_reason()
    if why:
        raise RuntimeError(f"gemtb.gpu: {why}")


def _options(act, mask, window, block, align, pre_scale, post_scale, max_lq, max_lk, broadcast_q, tanh_approx):
    """The options as the binding takes them, each checked by name."""
    for name, value, allowed in (("act", act, _ACTS), ("mask", mask, _MASKS), ("align", align, _ALIGNS)):
        if not isinstance(value, str):
            raise TypeError(f"{name}: want a string, got {type(value).__name__}")
        if value not in allowed:
            raise ValueError(f"{name}={value!r}: want one of {', '.join(allowed)}")
    if not (isinstance(window, (tuple, list)) and len(window) == 2):
        raise TypeError(f"window: want (left, right), got {window!r}")
    for name, value in (("window[0]", window[0]), ("window[1]", window[1]), ("block", block),
                        ("max_lq", max_lq), ("max_lk", max_lk)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name}: want an int, got {type(value).__name__}")
    for name, value in (("pre_scale", pre_scale), ("post_scale", post_scale)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise TypeError(f"{name}: want a float or None, got {type(value).__name__}")
    return dict(act=act, mask=mask, align=align, pre_scale=None if pre_scale is None else float(pre_scale),
                post_scale=None if post_scale is None else float(post_scale), window_left=int(window[0]),
                window_right=int(window[1]), block=int(block), max_lq=max_lq, max_lk=max_lk,
                broadcast_q=bool(broadcast_q), tanh_approx=bool(tanh_approx))


def _longest(offsets):
    """The longest sequence of a host int64 vector of offsets (0 for none)."""
    best = 0
    for a, b in zip(offsets[:-1], offsets[1:]):
        best = max(best, int(b) - int(a))
    return best


# --- the binding on any DLPack tensors ---------------------------------------------------------


def attention_forward_into(q, k, v, q_offsets, kv_offsets, out, lse=None, *, kv_index=None, act="softmax",
                           mask="none", window=(-1, -1), block=64, align="bottom_right", pre_scale=None,
                           post_scale=None, max_lq=None, max_lk=None, broadcast_q=False, tanh_approx=False):
    """Launches the forward into `out` [TO,H,D] (q's dtype) and, for softmax, `lse` [H,TO]
    (float32), all on q's device, which must be the current one.

    Any DLPack tensors (q, k, v, out, lse on the device; offsets and kv_index on the host). The
    launch is on the legacy default stream and returns without waiting for it.
    """
    _require()
    options = _options(act, mask, window, block, align, pre_scale, post_scale, max_lq, max_lk, broadcast_q,
                       tanh_approx)
    _check_dlpack(q=q, k=k, v=v, q_offsets=q_offsets, kv_offsets=kv_offsets, kv_index=kv_index, out=out, lse=lse)
    _fill_max_lengths(options, q_offsets, kv_offsets)
    _core.gpu_attention_forward(q, k, v, q_offsets, kv_offsets, kv_index, options, out, lse)


def attention_backward_into(q, k, v, q_offsets, kv_offsets, out, lse, d_out, dq, dk, dv, workspace=None, *,
                            kv_index=None, act="softmax", mask="none", window=(-1, -1), block=64,
                            align="bottom_right", pre_scale=None, post_scale=None, max_lq=None, max_lk=None,
                            broadcast_q=False, tanh_approx=False):
    """Launches the backward: dq, dk, dv (q, k, v's shapes and dtype) from the forward's `out`
    and `lse` and the cotangent `d_out` (out's shape); softmax also needs `workspace`, float32
    [H,TO] scratch. Same conventions as attention_forward_into()."""
    _require()
    options = _options(act, mask, window, block, align, pre_scale, post_scale, max_lq, max_lk, broadcast_q,
                       tanh_approx)
    _check_dlpack(q=q, k=k, v=v, q_offsets=q_offsets, kv_offsets=kv_offsets, kv_index=kv_index, out=out, lse=lse,
                  d_out=d_out, dq=dq, dk=dk, dv=dv, workspace=workspace)
    _fill_max_lengths(options, q_offsets, kv_offsets)
    _core.gpu_attention_backward(q, k, v, q_offsets, kv_offsets, kv_index, options, out, lse, d_out, dq, dk, dv,
                                 workspace)


def _check_dlpack(**arrays):
    """Each given array supports DLPack (the binding's own error would not name it)."""
    for name, x in arrays.items():
        if x is not None and not hasattr(x, "__dlpack__"):
            raise TypeError(f"{name}: want a DLPack tensor (PyTorch, CuPy, JAX, NumPy), got {type(x).__name__}")


def _fill_max_lengths(options, q_offsets, kv_offsets):
    """max_lq/max_lk left as None: the longest sequence in the (host) offsets."""
    import numpy as np

    for key, offsets in (("max_lq", q_offsets), ("max_lk", kv_offsets)):
        if options[key] is None:
            try:
                options[key] = _longest(np.from_dlpack(offsets))
            except (AttributeError, BufferError, TypeError, ValueError, RuntimeError):
                options[key] = 0  # not a host array: the binding rejects it by name


# --- PyTorch -----------------------------------------------------------------------------------

if torch is not None:

    def attention(q, k, v, q_offsets, kv_offsets, *, act="softmax", pre_scale=None, post_scale=None, mask="none",
                  window=(-1, -1), block=64, align="bottom_right", max_lq=None, max_lk=None, kv_index=None,
                  broadcast_q=False, tanh_approx=False, return_lse=False):
        """O [TO,H,D] (and LSE [H,TO] with return_lse, softmax only) of the jagged attention on
        PyTorch CUDA tensors, differentiable in q, k and v (LSE is returned as a constant: no
        gradient flows through it). Goes through torch.ops.gemtb.attention, so torch.compile keeps
        it in the graph. Arguments as gemtb.ref.attention's (see the module's docstring)."""
        options = _options(act, mask, window, block, align, pre_scale, post_scale, max_lq, max_lk, broadcast_q,
                           tanh_approx)
        _torch_op.check_inputs(q, k, v, q_offsets, kv_offsets, kv_index)
        o, lse = _torch_op.attention_op(q, k, v, q_offsets, kv_offsets, kv_index, **options)
        return (o, lse) if return_lse else o

else:

    def attention(*args, **kwargs):
        """Needs PyTorch >= 2.4; attention_forward_into() does not."""
        raise RuntimeError(f"gemtb.gpu.attention: {_torch_reason}; use attention_forward_into() with DLPack "
                           "tensors, or install torch")


__all__ = ["attention", "attention_backward_into", "attention_forward_into", "available", "unavailable_reason"]
