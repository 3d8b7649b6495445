// The GEM-like model's geometry and parameter layout, read from a ModelConfig: the sizes every
// executor needs (the oracle's GemModel, the GPU trainer) and the flat parameter array's named
// slices, in one place so that executors agree on the bytes of a parameter array.
//
// Parameter names (each executor binds them with ParamLayout::Ref):
//   Linear "<p>":     <p>.w [in, out] (fan-in init), <p>.b [out] (zero)
//   LayerNorm "<p>":  <p>.gamma [w] (one), <p>.beta [w] (zero)
//   Gate "<p>":       the Linear <p> [d, d]
//   TokenMix "<p>":   <p>.m [n_out, n_in] (fan-in n_in)
//   Attention "<p>":  the Linears <p>.wq, .wk, .wv, .wo [d, d]
// in this order: embed.dense (Linear m -> n_d d), embed.lce_in (TokenMix F + n_d -> n_x); per layer
// l = 1..L: L<l>.cross (see AddCross), L<l>.wukong.{y [n_z, k], ln_flat, mlp1, mlp2, lcb, lce_res,
// ln_out} (with E > 1 experts, in place of mlp1 and mlp2: per expert e the Linear mlp1.e<e>
// [n_z k, H/E] and the weight mlp2.e<e>.w [H/E, n_F d], then the shared bias mlp2.b), per sequence j: L<l>.seq<j>.{ln_a, attn_a, ln_b, attn_b, ln_c, ffn1, ffn2}; final.cross;
// head.mlp<i>. A cross "<c>": <c>.lce_s (TokenMix n_x -> n_s), <c>.x_gate, per j: <c>.seq<j>.pma.seeds
// [k_p, d] (fan-in 1), <c>.seq<j>.pma (Attention), <c>.seq<j>.sum_gate.
#ifndef GEMTB_MODEL_DESCRIPTION_GEM_GEOMETRY_H_
#define GEMTB_MODEL_DESCRIPTION_GEM_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/description/model_config.h"
#include "model/description/param_layout.h"
#include "model/embedding/embedding_config.h"

namespace gemtb::model {

struct GemSequenceGeometry {
  int lmax = 0;
  int window = -1, block = 0;  // self-attention mask: window (|i - t| <= w) or blocks
  double self_post = 1.0;      // the self-attention's SiLU scale: 1/(2w+1) or 1/block
  bool rope = false;           // position RoPE on the self-attention's Q and K
};

struct GemGeometry {
  int d = 0, heads = 0, num_features = 0, dense_m = 0, n_d = 0;
  int n_x = 0, n_s = 0, k_p = 0, k_r = 0, wk_k = 0, n_f = 0, n_l = 0, wk_h = 0, ffn = 0;
  int num_tasks = 0, layers = 0;
  int experts = 1;  // E: the FMB MLP is sum_e MLP_e, each wk_h / E wide
  bool compskip = false;
  std::vector<GemSequenceGeometry> seqs;
  std::vector<int> head_widths;  // the head MLP's widths, input first
  int rope_rows = 0;             // RoPE table rows: the longest sequence plus its n_s CLS tokens
  ParamLayout layout;

  int dh() const { return d / heads; }
  int num_sequences() const { return static_cast<int>(seqs.size()); }
  int n_sum() const { return n_s + k_p + k_r; }  // tokens of one sequence's summary S_sum_j
  int n_z() const { return n_x + num_sequences() * n_sum(); }
  // CompSkip: self-attention (a) on odd layers and (b) on even ones (1-based; `layer` is the 0-based
  // index); both without it.
  bool DoA(int layer) const { return !compskip || layer % 2 == 0; }
  bool DoB(int layer) const { return !compskip || layer % 2 == 1; }
};

// InvalidArgument / Unimplemented naming the config field for what the model does not support
// (head dims must be even; SiLU sequences; position RoPE only; ...).
absl::StatusOr<GemGeometry> MakeGemGeometry(const ModelConfig& config);

// One FSDP unit of the dense parameters: a checkpoint region of the model description ("E.dense",
// "L<l>.cross", "L<l>.wukong", "L<l>.seq<j>", "F.cross", "head") and the contiguous slice
// [first, first + count) of the flat layout that its parameters occupy (embed.* is E.dense,
// L<l>.<arch>.* is L<l>.<arch>, final.cross.* is F.cross, head.* is head).
struct ParamUnit {
  std::string region;
  int64_t first = 0, count = 0;
};
// The units in layout order, which is the forward's order of the regions; together they cover the
// layout once.
std::vector<ParamUnit> ParamUnits(const GemGeometry& g);

// Expert parallelism of degree D (spec: e = r mod D): an EP group is D consecutive ranks, and its
// member i runs the Wukong experts {e : e mod D == i} on every member's samples (gathered), the
// experts' outputs summed back to each member's own samples. Ascending.
std::vector<int> ExpertsOfMember(int experts, int degree, int member);
// Whether that member runs expert e: the rule ExpertsOfMember lists.
inline bool MemberRunsExpert(int expert, int degree, int member) { return expert % degree == member; }
// InvalidArgument naming `field` and both values unless 1 <= D and D divides the model's E experts.
absl::Status CheckExpertDegree(const GemGeometry& g, int degree, const std::string& field);

// The model's tables as TBE tables (fp32, the config's hashing, bounds error, rowwise Adagrad with
// `table_lr`); features: the sparse features in key order (their pooling), then per sequence j the
// item, action and dt features ("<seq>.item", ...) with NONE pooling. Sequence bags hold at most Lmax ids.
EmbeddingConfig GemEmbeddingConfig(const ModelConfig& config, float table_lr, uint64_t seed);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_GEM_GEOMETRY_H_
