// Evaluating the op graph's affine cost functions for a concrete batch: pairs per op, per-op
// and whole-model totals (FLOPs, HBM bytes, saved bytes, params). Used by `gemtb model`, tests, and
// any executor that wants the same numbers (sim/ evaluates the affine objects itself per rank).
#ifndef GEMTB_MODEL_DESCRIPTION_GRAPH_COSTS_H_
#define GEMTB_MODEL_DESCRIPTION_GRAPH_COSTS_H_

#include <cstdint>
#include <vector>

#include "model/description/model_graph.h"

namespace gemtb::model {

// P of an op for one sample whose sequence has `tokens` tokens: pairs under its mask when it is a
// self-attention over the sequence (attn.q_tokens == attn.kv_tokens == 0), else 0.
int64_t OpPairsPerSample(const Op& op, int64_t tokens);

// Per-sample event counts l_j at a sparsity s (mean fill): s * Lmax_j rounded half to even, in
// [0, Lmax_j].
std::vector<int64_t> LengthsAtSparsity(const ModelGraph& graph, double sparsity);

struct OpCost {
  double flops_fwd = 0, flops_bwd = 0;
  double bytes_fwd = 0, bytes_bwd = 0;
  double saved_bytes = 0;
};

// One op's costs for `batch` samples, each with l_j = lengths[j] events in sequence j (the tokens
// are l_j + n_s). `lengths` has one entry per graph sequence.
OpCost EvaluateOp(const ModelGraph& graph, const Op& op, int64_t batch,
                  const std::vector<int64_t>& lengths);

struct GraphTotals {
  OpCost all;           // every op
  OpCost model;         // local_mfu ops only: the "model FLOPs" of MFU and of the README's table
  int64_t dense_params = 0;
  int64_t sparse_params = 0;  // sum over tables of rows * dim
};

GraphTotals EvaluateGraph(const ModelGraph& graph, int64_t batch, const std::vector<int64_t>& lengths);

int64_t DenseParamCount(const ModelGraph& graph);
int64_t SparseParamCount(const ModelGraph& graph);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_GRAPH_COSTS_H_
