"""The acceptance check of `gemtb check attention` from Python: its random cases, drawn from the same
seeds, and its judgement of a kernel's outputs against the oracle (fp64) and the oracle's emulate
mode, computed by the same C++ code (tools/check/attention_check.h):

    primary    max|got - ref| <= 2 max|emu - ref| + 2 ulp_dtype(max|ref|), per tensor
    secondary  O rel-L2 <= 5e-3; dQ, dK, dV rel-L2 <= 1e-2; LSE max abs error <= 1e-3, -inf in the
               same places; with the check's "relaxed" and "excused" (kinked acts) rules.

For gemtb.gpu's tests, and for anyone who wants another attention kernel held to the same bar.
"""

from . import _core
from ._arrays import from_wire, to_wire


def attention_families():
    """The families `gemtb check attention` runs: "act/mask" names."""
    return list(_core.testing_attention_families())


def attention_case(family, index, *, seed=1, max_length=300):
    """Case `index` of `family` ("act/mask") under `seed`, as `gemtb check attention --seed` draws it
    (max_length: its --small-max-length).

    Returns {"case_seed", "description", "arrays": {"q", "k", "v", "do" (bfloat16 or float16; head dim
    Dqk = Dv one of 16, 32, 64, 128, the GPU kernels' dims), "q_offsets", "kv_offsets", "kv_index" (when
    the case has one), int64}, "options": keyword arguments of
    gemtb.ref.attention and gemtb.gpu.attention (act, mask, align, pre_scale, post_scale, window, block,
    max_lq, max_lk, broadcast_q)}.
    """
    case = _core.testing_attention_case(str(family), int(index), int(seed), int(max_length))
    case["arrays"] = {name: from_wire(w) for name, w in case["arrays"].items()}
    case["options"] = dict(case["options"])
    return case


def judge_attention(family, case_seed, outputs, *, max_length=300, threads=1):
    """Judges a kernel's outputs for the case `case_seed` of `family` (attention_case()'s
    "case_seed"): outputs {"o", "dq", "dk", "dv" (the input dtype, float32 or float64), "lse" (softmax;
    float32 or float64)} as NumPy arrays or DLPack CPU tensors. The oracle runs on `threads` threads
    (0: all; the verdict does not depend on it) with the GIL released.

    Returns {"passed", "excused" (failed only on dQ/dK of a kinked act with a score at the kink; the
    check lists such cases and does not count them as failures), "relaxed" (secondary verdicts
    judged against 2x the emulate error), "failures" (one line per failed criterion),
    "description"}.
    """
    if not isinstance(outputs, dict):
        raise TypeError(f"outputs: want a dict of arrays, got {type(outputs).__name__}")
    wires = {name: to_wire(name, x, ("float64", "float32", "float16", "bfloat16")) for name, x in outputs.items()}
    return dict(_core.testing_attention_judge(str(family), int(case_seed), int(max_length), wires, int(threads)))


__all__ = ["attention_case", "attention_families", "judge_attention"]
