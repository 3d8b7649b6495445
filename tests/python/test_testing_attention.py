"""gemtb.testing: the cases and the judgement of `gemtb check attention`, from Python (no GPU)."""

import numpy as np
import pytest

import gemtb


def emulate(case):
    """The oracle's emulate mode (a plain same-precision kernel) on the case: what the check
    compares a kernel's error against, so it must pass."""
    a, opts = case["arrays"], case["options"]
    return gemtb.ref.attention_backward(a["q"], a["k"], a["v"], a["q_offsets"], a["kv_offsets"], a["do"],
                                        kv_index=a.get("kv_index"), mode="emulate", **opts)


def test_families_are_the_checks_six_acts_by_four_masks():
    families = gemtb.testing.attention_families()
    assert len(families) == 24 and len(set(families)) == 24
    assert "softmax/causal" in families and all(f.count("/") == 1 for f in families)


def test_a_case_is_a_function_of_family_index_and_seed():
    a = gemtb.testing.attention_case("silu/window", 3, seed=7)
    b = gemtb.testing.attention_case("silu/window", 3, seed=7)
    c = gemtb.testing.attention_case("silu/window", 4, seed=7)
    assert a["case_seed"] == b["case_seed"] != c["case_seed"]
    assert all(np.array_equal(a["arrays"][n].view(np.uint8), b["arrays"][n].view(np.uint8)) for n in a["arrays"])
    assert a["options"]["act"] == "silu" and a["options"]["mask"] == "window"
    assert a["arrays"]["q"].dtype.name in ("bfloat16", "float16")


def test_cases_draw_every_head_dim_of_the_gpu_kernels():
    dims = set()
    for index in range(40):
        a = gemtb.testing.attention_case("silu/causal", index, max_length=40)["arrays"]
        assert a["q"].shape[2] == a["k"].shape[2] == a["v"].shape[2]
        dims.add(a["q"].shape[2])
    assert dims == {16, 32, 64, 128}


@pytest.mark.parametrize("family", ["softmax/none", "silu/causal", "relu/block"])
def test_the_emulate_mode_passes_and_a_perturbed_gradient_fails(family):
    for index in range(3):
        case = gemtb.testing.attention_case(family, index, max_length=100)
        r = emulate(case)
        outputs = {n: r[n] for n in ("o", "lse", "dq", "dk", "dv") if n in r}
        verdict = gemtb.testing.judge_attention(family, case["case_seed"], outputs, max_length=100)
        assert verdict["passed"], verdict["failures"]
        if not np.any(r["dv"].astype(np.float64)):
            continue  # nothing to perturb (every row masked or empty)
        outputs["dv"] = r["dv"].astype(np.float64) * 1.5 + 0.25
        verdict = gemtb.testing.judge_attention(family, case["case_seed"], outputs, max_length=100)
        assert not verdict["passed"] and any(f.startswith("dV") for f in verdict["failures"])


@pytest.mark.parametrize("call,error,message", [
    (lambda: gemtb.testing.attention_case("softmax", 0), ValueError, "family=softmax"),
    (lambda: gemtb.testing.attention_case("all", 0), ValueError, "family=all"),
    (lambda: gemtb.testing.attention_case("silu/none", -1), ValueError, "index=-1"),
    (lambda: gemtb.testing.attention_case("silu/none", 0, max_length=0), ValueError, "max_length=0"),
    (lambda: gemtb.testing.judge_attention("silu/none", 1, {"o": np.zeros(1)}), ValueError, "dq: missing"),
    (lambda: gemtb.testing.judge_attention("silu/none", 1, {"x": np.zeros(1)}), ValueError, "x: not an output"),
    (lambda: gemtb.testing.judge_attention("silu/none", 1, [1]), TypeError, "outputs: want a dict"),
])
def test_bad_arguments_name_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()
