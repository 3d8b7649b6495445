#include "model/description/graph_costs.h"

#include <algorithm>
#include <cmath>

namespace gemtb::model {
namespace {

// Keys cut off on one side of a window of reach `w` over L rows: sum_i max(0, w - i), i < L.
int64_t Truncated(int64_t w, int64_t length) {
  const int64_t m = std::min(w, length);
  return m * w - m * (m - 1) / 2;
}

}  // namespace

int64_t PairsUnderMask(const AttentionMask& mask, int64_t tokens) {
  if (tokens <= 0) return 0;
  const int64_t L = tokens;
  switch (mask.kind) {
    case AttentionMask::Kind::kNone:
      return L * L;
    case AttentionMask::Kind::kBlock: {
      const int64_t n = std::clamp<int64_t>(mask.block, 1, L);  // a block past the end holds all
      const int64_t full = L / n, rest = L % n;
      return full * n * n + rest * rest;
    }
    case AttentionMask::Kind::kCausal:
      return L * (L + 1) / 2;
    case AttentionMask::Kind::kWindow: {
      // Row i keeps [max(0, i-l), min(L-1, i+r)]: (l + r + 1) keys less what falls off each end;
      // an unbounded side reaches the whole row (l = L - 1 is as good as unbounded).
      const int64_t l = mask.left < 0 ? L - 1 : std::min(mask.left, L - 1);
      const int64_t r = mask.right < 0 ? L - 1 : std::min(mask.right, L - 1);
      return L * (l + r + 1) - Truncated(l, L) - Truncated(r, L);
    }
  }
  return 0;
}

int64_t OpPairsPerSample(const Op& op, int64_t tokens) {
  if (!op.attn.has_value() || !op.seq.has_value()) return 0;
  if (op.attn->q_tokens != 0 || op.attn->kv_tokens != 0) return 0;
  return PairsUnderMask(op.attn->mask, tokens);
}

std::vector<int64_t> LengthsAtSparsity(const ModelGraph& graph, double sparsity) {
  std::vector<int64_t> lengths;
  for (const GraphSequence& s : graph.sequences) {
    const double l = std::nearbyint(sparsity * static_cast<double>(s.lmax));
    lengths.push_back(std::clamp(static_cast<int64_t>(l), int64_t{0}, s.lmax));
  }
  return lengths;
}

OpCost EvaluateOp(const ModelGraph& graph, const Op& op, int64_t batch,
                  const std::vector<int64_t>& lengths) {
  double n = 0, p = 0;
  if (op.seq.has_value() && *op.seq >= 0 && static_cast<size_t>(*op.seq) < graph.sequences.size() &&
      static_cast<size_t>(*op.seq) < lengths.size()) {
    const int64_t tokens = lengths[*op.seq] + graph.sequences[*op.seq].n_s;
    n = static_cast<double>(batch) * static_cast<double>(tokens);
    p = static_cast<double>(batch) * static_cast<double>(OpPairsPerSample(op, tokens));
  }
  const double b = static_cast<double>(batch);
  OpCost cost;
  cost.flops_fwd = op.flops.fwd.Eval(b, n, p);
  cost.flops_bwd = op.flops.bwd.Eval(b, n, p);
  cost.bytes_fwd = op.bytes.fwd.Eval(b, n, p);
  cost.bytes_bwd = op.bytes.bwd.Eval(b, n, p);
  cost.saved_bytes = op.saved.bytes.Eval(b, n, p);
  return cost;
}

GraphTotals EvaluateGraph(const ModelGraph& graph, int64_t batch, const std::vector<int64_t>& lengths) {
  GraphTotals totals;
  auto add = [](OpCost& into, const OpCost& c) {
    into.flops_fwd += c.flops_fwd;
    into.flops_bwd += c.flops_bwd;
    into.bytes_fwd += c.bytes_fwd;
    into.bytes_bwd += c.bytes_bwd;
    into.saved_bytes += c.saved_bytes;
  };
  for (const Op& op : graph.ops) {
    const OpCost c = EvaluateOp(graph, op, batch, lengths);
    add(totals.all, c);
    if (op.local_mfu) add(totals.model, c);
  }
  totals.dense_params = DenseParamCount(graph);
  totals.sparse_params = SparseParamCount(graph);
  return totals;
}

int64_t DenseParamCount(const ModelGraph& graph) {
  int64_t total = 0;
  for (const Op& op : graph.ops) total += op.params;
  return total;
}

int64_t SparseParamCount(const ModelGraph& graph) {
  int64_t total = 0;
  for (const GraphTable& t : graph.tables) total += t.rows * t.dim;
  return total;
}

}  // namespace gemtb::model
