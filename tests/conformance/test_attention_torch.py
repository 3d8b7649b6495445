"""The attention oracle against PyTorch float64 (autograd for the backward) on every activation and
mask PyTorch can express: each activation is a torch function, each mask a boolean matrix built from
the spec's rule. Differing conventions:
  - the oracle's exp/log/erf/tanh are its own deterministic fp64 routines, not libm's: agreement is to
    a few ulps (rtol 1e-12), not bitwise;
  - masked pointwise scores are exactly 0 in the oracle; the reference multiplies by the mask, which
    is the same for every finite score.
"""

import math

import numpy as np
import pytest

import gemtb

torch = pytest.importorskip("torch", reason="PyTorch absent: attention conformance skipped")
F = torch.nn.functional

ACTS = {
    "identity": lambda x: x,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
    "relu_square": lambda x: F.relu(x) ** 2,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "hardswish": F.hardswish,
}
MASKS = [("none", {}), ("causal", {}), ("window", {"window": (2, 1)}), ("window", {"window": (-1, 2)}),
         ("block", {"block": 3})]


def keep(mask, opts, lq, lk, align):
    delta = lk - lq if align == "bottom_right" else 0
    a = torch.arange(lq).unsqueeze(1) + delta
    j = torch.arange(lk).unsqueeze(0)
    if mask == "none":
        return torch.ones(lq, lk, dtype=torch.bool)
    if mask == "block":
        n = opts["block"]
        return torch.div(a, n, rounding_mode="floor") == torch.div(j, n, rounding_mode="floor")
    left, right = opts.get("window", (-1, 0))
    ok = torch.ones(lq, lk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= a - left
    if right >= 0:
        ok &= j <= a + right
    return ok


def reference(q, k, v, q_off, kv_off, do, act, mask, opts, align):
    """O, dQ, dK, dV by PyTorch float64 autograd, one sequence and head at a time."""
    q, k, v = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    H, Hkv, D = q.shape[1], k.shape[1], q.shape[2]
    outs = []
    for b in range(len(q_off) - 1):
        qs, ks = q[q_off[b]:q_off[b + 1]], k[kv_off[b]:kv_off[b + 1]]
        vs = v[kv_off[b]:kv_off[b + 1]]
        lq, lk = qs.shape[0], ks.shape[0]
        ok = keep(mask, opts, lq, lk, align)
        heads = []
        for h in range(H):
            g = h // (H // Hkv)
            if act == "softmax":
                s = (qs[:, h] @ ks[:, g].T) / math.sqrt(D)
                s = s.masked_fill(~ok, float("-inf"))
                p = torch.softmax(s, dim=1).nan_to_num(0.0)  # empty rows give 0
            else:
                p = ACTS[act](qs[:, h] @ ks[:, g].T) * ok
            heads.append(p @ vs[:, g])
        outs.append(torch.stack(heads, dim=1))
    o = torch.cat(outs)
    o.backward(torch.tensor(do))
    return o.detach().numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


@pytest.mark.parametrize("act", ["softmax", *ACTS])
@pytest.mark.parametrize("mask,opts", MASKS, ids=["none", "causal", "window2_1", "window_inf_2", "block3"])
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_attention_matches_torch_float64(act, mask, opts, align):
    rng = np.random.default_rng(abs(hash((act, mask, str(opts), align))) % 2**32)
    lq, lk = [4, 1, 6, 0], [5, 3, 6, 2]
    q_off = np.concatenate([[0], np.cumsum(lq)]).astype(np.int64)
    kv_off = np.concatenate([[0], np.cumsum(lk)]).astype(np.int64)
    H, Hkv, D = 4, 2, 8
    q = rng.standard_normal((q_off[-1], H, D))
    k = rng.standard_normal((kv_off[-1], Hkv, D))
    v = rng.standard_normal((kv_off[-1], Hkv, D))
    do = rng.standard_normal((q_off[-1], H, D))
    got = gemtb.ref.attention_backward(q, k, v, q_off, kv_off, do, act=act, mask=mask, align=align, **opts)
    want = reference(q, k, v, q_off, kv_off, do, act, mask, opts, align)
    for name, w in zip(("o", "dq", "dk", "dv"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-12, atol=1e-12, err_msg=name)
