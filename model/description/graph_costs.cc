#include "model/description/graph_costs.h"

#include <algorithm>
#include <cmath>

namespace gemtb::model {

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
