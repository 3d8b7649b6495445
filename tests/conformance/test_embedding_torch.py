"""Pooled embeddings and one optimizer step against PyTorch's embedding_bag, fp32 tables.

Conventions that coincide (compared bit for bit): SUM pooling (fp32, ids in position order); one SGD
step w - lr*G and one rowwise-Adagrad step (FBGEMM's EXACT_ROWWISE_ADAGRAD, written out in torch
fp32 ops with the row's mean square summed column by column in order, as the spec's seqsum) from
embedding_bag's gradient.
Conventions that differ (compared to 1 fp32 ulp-scale tolerance, named here):
  - MEAN: gemtb divides the sum by n; embedding_bag multiplies by 1/n.
  - weighted sum (per_sample_weights): gemtb rounds w*e then adds; embedding_bag's kernels may fuse
    the multiply-add.
  - square root: FBGEMM and gemtb take IEEE sqrt; torch's CPU float32 sqrt can be 1 ulp off, so the
    written-out Adagrad step takes the correctly rounded one (ieee_sqrt).
  - duplicate ids: gemtb sums a row's gradients in (sample, feature, position) order, embedding_bag's
    backward in its own; the step tests give a row at most two occurrences, where order cannot matter.
FBGEMM's CPU TBE is not compared: fbgemm-gpu-cpu's wheels are built against one torch release each,
and the newest (1.9.0, for torch 2.14) fails to import beside torch 2.15, which the test command
installs (undefined symbol c10::report_overflow); there is no fbgemm-gpu-cpu release for torch 2.15
yet, only nightly builds.
"""

import numpy as np
import pytest

import gemtb

torch = pytest.importorskip("torch", reason="PyTorch absent: embedding conformance skipped")

ROWS, DIM, BATCH = 64, 8, 6


def bags(rng, max_len=4, unique_pairs=False):
    lengths = rng.integers(0, max_len + 1, size=BATCH).astype(np.int32)
    n = int(lengths.sum())
    if unique_pairs:  # every row at most twice
        ids = np.repeat(rng.permutation(ROWS)[: (n + 1) // 2], 2)[:n]
        ids = rng.permutation(ids).astype(np.int64)
    else:
        ids = rng.integers(0, ROWS, size=n).astype(np.int64)
    return lengths, ids


def spec(pooling, optimizer):
    return {"seed": 3, "batch": BATCH,
            "tables": [{"name": "t", "rows": ROWS, "dim": DIM, "optimizer": optimizer}],
            "features": [{"key": "f", "table": "t", "pooling": pooling}]}


def torch_bag(table, lengths, ids, mode, weights=None):
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)[:-1]]), dtype=torch.int64)
    return torch.nn.functional.embedding_bag(torch.tensor(ids), table, offsets, mode=mode,
                                             per_sample_weights=None if weights is None else torch.tensor(weights))


@pytest.mark.parametrize("seed", range(5))
def test_sum_pooling_is_bitwise(seed):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    lengths, ids = bags(rng, max_len=12)
    got = gemtb.ref.embed(spec("sum", {"kind": "sgd"}), lengths, ids, tables={"table_t": table})["pooled"]
    want = torch_bag(torch.tensor(table), lengths, ids, "sum").numpy()
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("pooling,mode", [("mean", "mean"), ("weighted_sum", "sum")])
def test_mean_and_weighted_pooling_within_an_ulp(pooling, mode):
    rng = np.random.default_rng(9)
    table = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    lengths, ids = bags(rng, max_len=12)
    weights = rng.standard_normal(ids.size).astype(np.float32) if pooling == "weighted_sum" else None
    got = gemtb.ref.embed(spec(pooling, {"kind": "sgd"}), lengths, ids, weights=weights,
                          tables={"table_t": table})["pooled"]
    want = torch_bag(torch.tensor(table), lengths, ids, mode, weights).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def ieee_sqrt(x):
    """The correctly rounded fp32 square root (fp64 sqrt rounded once more is exact for fp32 inputs):
    torch's CPU fp32 sqrt is a vectorised approximation that can be 1 ulp off."""
    return torch.sqrt(x.double()).float()


def step(optimizer, seed):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    lengths, ids = bags(rng, unique_pairs=True)
    grad = rng.standard_normal((BATCH, DIM)).astype(np.float32)
    got = gemtb.ref.embed(spec("sum", optimizer), lengths, ids, tables={"table_t": table},
                          grads={"pooled": grad}, step=True)
    w = torch.tensor(table, requires_grad=True)
    torch_bag(w, lengths, ids, "sum").backward(torch.tensor(grad))
    return table, w.grad.detach(), ids, got


@pytest.mark.parametrize("seed", range(4))
def test_one_sgd_step_is_bitwise(seed):
    table, g, ids, got = step({"kind": "sgd", "lr": 0.05}, seed)
    lr = torch.tensor(0.05, dtype=torch.float32)
    want = torch.tensor(table)
    touched = torch.tensor(np.unique(ids))
    want[touched] = want[touched] - lr * g[touched]
    assert got["table_t"].tobytes() == want.numpy().tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_one_rowwise_adagrad_step_is_bitwise(seed):
    table, g, ids, got = step({"kind": "rowwise_adagrad", "lr": 0.05}, seed)
    # One-element tensors, not 0-d ones: torch divides by a 0-d CPU tensor as a multiply by its
    # reciprocal, which rounds differently from the division both FBGEMM and gemtb do.
    one = lambda x: torch.full((1,), x, dtype=torch.float32)  # noqa: E731
    lr, eps, dim = one(0.05), one(1e-8), one(DIM)
    want, state = torch.tensor(table), torch.zeros(ROWS, dtype=torch.float32)
    for r in np.unique(ids):
        square = one(0.0)
        for j in range(DIM):  # in column order
            square = square + g[r, j:j + 1] * g[r, j:j + 1]
        state[r:r + 1] = state[r:r + 1] + square / dim
        mu = lr / (ieee_sqrt(state[r:r + 1]) + eps)
        want[r] = want[r] - mu * g[r]
    assert got["adagrad_t"].tobytes() == state.numpy().tobytes()
    assert got["table_t"].tobytes() == want.numpy().tobytes()
