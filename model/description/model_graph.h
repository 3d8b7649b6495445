// The model as an op graph: the `model.json` schema (docs). ExpandModel
// turns a ModelConfig into the ops in execution order (E stage, per layer cross -> Wukong ->
// sequence arch per j, final cross, head, loss); ToJson / ParseModelJson convert to and from
// model.json. sim/ builds its task DAG from this; reference/ and gpu/ read shapes and attention
// options from it.
//
// Quantities are affine in the batch: Affine{c, B, N, P} evaluates to c + B*b + N*n + P*p where
//   b = samples in the batch (the rank's local batch),
//   n = N_j = sum_b (l_bj + n_s): tokens of the op's sequence j over the batch (CLS tokens included),
//   p = P_j = sum_b pairs of sample b's sequence j (l_bj + n_s tokens) under the op's attention mask
//       (attn.mask; PairsUnderMask in model/attention/attention_mask.h counts them for one sample).
// N and P are zero for ops with seq == null; coefficients may be negative (a sequence lookup reads
// N - n_s*B events). Bytes are bytes, FLOPs are FLOPs (a multiply-add = 2). The cost rules are
// stated in op_factory.h; region and op names in README.md.
#ifndef GEMTB_MODEL_DESCRIPTION_MODEL_GRAPH_H_
#define GEMTB_MODEL_DESCRIPTION_MODEL_GRAPH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/attention/attention_mask.h"
#include "model/description/model_config.h"
#include "nlohmann/json.hpp"

namespace gemtb::model {

// c + B*b + N*n + P*p. JSON: {"c": .., "B": .., "N": .., "P": ..}, zero terms omitted; a pure
// constant dim inside `shapes` is written as a bare number.
struct Affine {
  double c = 0.0;
  double B = 0.0;
  double N = 0.0;
  double P = 0.0;

  double Eval(double batch, double tokens, double pairs) const {
    return c + B * batch + N * tokens + P * pairs;
  }
  bool IsConstant() const { return B == 0.0 && N == 0.0 && P == 0.0; }
  Affine& operator+=(const Affine& o) {
    c += o.c; B += o.B; N += o.N; P += o.P;
    return *this;
  }
  friend Affine operator+(Affine a, const Affine& o) { return a += o; }
  friend Affine operator*(double s, Affine a) {
    a.c *= s; a.B *= s; a.N *= s; a.P *= s;
    return a;
  }
  friend bool operator==(const Affine&, const Affine&) = default;
};

enum class OpKind { kLinear, kAttention, kNorm, kPointwise, kEmbedding, kInteraction, kLoss };
inline constexpr EnumName<OpKind> kOpKindNames[] = {
    {OpKind::kLinear, "linear"},       {OpKind::kAttention, "attention"},
    {OpKind::kNorm, "norm"},           {OpKind::kPointwise, "pointwise"},
    {OpKind::kEmbedding, "embedding"}, {OpKind::kInteraction, "interaction"},
    {OpKind::kLoss, "loss"}};
// How an op's saved activations are rebuilt if its region is checkpointed (cheapest
// first = pointwise, norm; GEMMs and attention last). kNone: nothing saved.
enum class RecomputeClass { kNone, kPointwise, kNorm, kLinear, kAttention };
inline constexpr EnumName<RecomputeClass> kRecomputeClassNames[] = {
    {RecomputeClass::kNone, "none"},     {RecomputeClass::kPointwise, "pointwise"},
    {RecomputeClass::kNorm, "norm"},     {RecomputeClass::kLinear, "linear"},
    {RecomputeClass::kAttention, "attention"}};

// attn.mask is model/attention's AttentionMask. JSON: "none" | {"window": [l, r]} | {"block": n}
// | {"causal": true}. Self-attention masks apply to the op's sequence tokens (l_bj + n_s per
// sample, CLS first); block chunks start at the first token.
struct AttentionSpec {
  Activation act = Activation::kSilu;  // JSON: the activation's name (activation_table.h)
  int64_t H = 0, Hkv = 0, Dqk = 0, Dv = 0;
  AttentionMask mask;
  // Queries and keys per sample: 0 = the op's sequence (l_bj + n_s tokens), k > 0 = k tokens per
  // sample (PMA seeds: q = k_p; cross-attention to X_sum: kv = n_s). P counts pairs only when
  // both are the sequence (self-attention); cross patterns are charged through N.
  int64_t q_tokens = 0, kv_tokens = 0;
  double scale = 1.0;        // post-activation scale (SiLU) or 1/sqrt(Dqk) pre-scale (softmax)
  bool qk_norm = false;      // parameter-free per-head RMSNorm of q, k
  RopeKind rope = RopeKind::kNone;  // JSON: none | position | log_dt
  bool broadcast_q = false;  // PMA: the same seed queries for every sample
  friend bool operator==(const AttentionSpec&, const AttentionSpec&) = default;
};

using Shape = std::vector<Affine>;  // dims; the first is usually rows (B- or N-affine)

struct OpShapes {
  std::vector<Shape> in;
  Shape out;
  friend bool operator==(const OpShapes&, const OpShapes&) = default;
};

struct FwdBwd {
  Affine fwd, bwd;
  friend bool operator==(const FwdBwd&, const FwdBwd&) = default;
};

struct SavedSpec {
  Affine bytes;
  RecomputeClass recompute = RecomputeClass::kNone;
  friend bool operator==(const SavedSpec&, const SavedSpec&) = default;
};

struct Op {
  std::string name;    // unique, e.g. "L1.seq0.swa"
  std::string region;  // checkpoint region and FSDP unit: "<layer>.<arch>[j]", e.g. "L1.seq0"
  OpKind kind = OpKind::kLinear;
  std::optional<int> seq;             // j, or none for per-sample ops
  std::optional<AttentionSpec> attn;  // kind == kAttention only
  OpShapes shapes;
  FwdBwd flops;
  FwdBwd bytes;    // HBM traffic
  SavedSpec saved; // activations kept for backward
  int64_t params = 0;           // dense params (sparse tables are in ModelGraph::tables)
  std::optional<int> expert;    // e for an expert's ops
  bool local_mfu = false;       // counts in Local MFU (GEMMs, attention)
  friend bool operator==(const Op&, const Op&) = default;
};

struct GraphSequence {
  int j = 0;
  int64_t lmax = 0;
  int64_t n_s = 0;  // CLS tokens prepended per sample
  friend bool operator==(const GraphSequence&, const GraphSequence&) = default;
};

struct GraphTable {
  std::string name;
  int64_t rows = 0;
  int64_t dim = 0;
  ElementType dtype = ElementType::kFloat32;  // JSON: fp32 | fp16 | bf16 (kTableDtypeNames)
  Pooling pooling = Pooling::kMean;          // JSON: sum | mean | weighted_sum | none
  std::vector<std::string> features; // features reading it (sequence reads: "<seq>.item" etc.)
  OptimizerKind optimizer = OptimizerKind::kRowwiseAdagrad;  // JSON: sgd | rowwise_adagrad | adam
  friend bool operator==(const GraphTable&, const GraphTable&) = default;
};

struct GraphExperts {
  int64_t count = 1;
  int64_t shard_group = 1;
  friend bool operator==(const GraphExperts&, const GraphExperts&) = default;
};

struct ModelGraph {
  int version = 1;
  std::string config;  // config name
  int64_t d = 0;
  std::vector<GraphSequence> sequences;
  std::vector<GraphTable> tables;
  GraphExperts experts;
  std::vector<Op> ops;  // execution order of the forward pass
  friend bool operator==(const ModelGraph&, const ModelGraph&) = default;
};

// Config -> op graph (deterministic; ops in forward execution order).
absl::StatusOr<ModelGraph> ExpandModel(const ModelConfig& config);

// model.json: fixed key order, doubles in shortest round-trip form.
nlohmann::json ToJson(const ModelGraph& graph);
std::string ToJsonText(const ModelGraph& graph);  // ToJson + indentation + trailing newline

// Parses and validates model.json. Unknown keys are errors; errors name the JSON path under
// `json_path` (e.g. "model.ops[3].flops.fwd.Q: unknown key").
absl::StatusOr<ModelGraph> ParseModelJson(const nlohmann::json& json,
                                          std::string_view json_path = "model");
absl::StatusOr<ModelGraph> ParseModelJsonText(std::string_view text,
                                              std::string_view json_path = "model");

std::string_view OpKindName(OpKind kind);                 // "linear", "attention", ...
std::string_view RecomputeClassName(RecomputeClass cls);  // "none", "pointwise", ...

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_MODEL_GRAPH_H_
