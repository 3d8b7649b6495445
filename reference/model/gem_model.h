// The GEM-like model for one sample, forward and backward, built from a ModelConfig
// (no hard-coded sizes). Embedding lookups happen outside (the TBE oracle, or an fp64 gather): the
// model takes the pooled rows of the non-sequence features and the summed (item + action + dt) rows
// of each sequence's events and returns their gradients.
//
// Layer order ([proj] choices marked in gem_model.cc where they are made):
//   E:  X = LCE_in([E ‖ Linear(dense)])                                     [n_x, d]
//   per layer l: Cross  X_sum = Gate(LCE_s(X)); layer 1 prepends X_sum to each sequence as CLS;
//                       S_sum_j = Gate_j([CLS_j ‖ PMA_j ‖ REC_j])
//                Wukong X' = LN([FMB(Z) ‖ LCB(Z)] + LCE_res(Z)), Z = [X ‖ S_sum_1..J]
//                Seq j  S += (a) attn(LN(S) -> X_sum), (b) window/block self-attn with RoPE, (c) FFN
//                X = X'
//   head: final Cross, MLP([flatten(X_sum) ‖ flatten(S_sum_1..J)]) -> T logits.
#ifndef GEMTB_REFERENCE_MODEL_GEM_MODEL_H_
#define GEMTB_REFERENCE_MODEL_GEM_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/description/model_config.h"
#include "reference/model/attention_block.h"
#include "reference/model/layers.h"
#include "reference/model/params.h"

namespace gemtb::reference::model {

// One sample's inputs after the embedding lookup.
template <typename T>
struct SampleInput {
  const T* pooled = nullptr;           // [F, d] non-sequence features, key order
  const T* dense = nullptr;            // [m]
  std::vector<const T*> events;        // per sequence j: [len_j, d]
  std::vector<int> lengths;            // per sequence j: len_j (events after truncation to Lmax)
};

// Gradients of the loss with respect to SampleInput (dense floats get none); overwritten.
template <typename T>
struct SampleInputGrad {
  std::vector<T> pooled;                 // [F, d]
  std::vector<std::vector<T>> events;    // per j: [len_j, d]
};

template <typename T> struct SampleTape;  // activations saved by Forward for Backward (gem_model.cc)

class GemModel {
 public:
  // InvalidArgument / Unimplemented naming the config field for what the model does not support.
  static absl::StatusOr<GemModel> Create(const gemtb::model::ModelConfig& config);

  const ParamLayout& layout() const { return layout_; }
  int d() const { return d_; }
  int num_features() const { return num_features_; }
  int num_dense() const { return dense_m_; }
  int num_sequences() const { return static_cast<int>(seqs_.size()); }
  int num_tasks() const { return num_tasks_; }

  // A tape is reusable across samples (its buffers keep their capacity).
  template <typename T>
  static SampleTape<T>* NewTape();
  template <typename T>
  static void DeleteTape(SampleTape<T>* tape);

  // logits [T].
  template <typename T>
  void Forward(const ParamView<T>& p, const SampleInput<T>& in, SampleTape<T>& tape, T* logits) const;
  // Parameter gradients accumulate into p.g (+=); input gradients are written to `grad`.
  template <typename T>
  void Backward(const ParamView<T>& p, const SampleInput<T>& in, SampleTape<T>& tape, const T* dlogits,
                SampleInputGrad<T>& grad) const;

  // Parts, public so the tape code in gem_model.cc can name them.
  struct Cross {
    TokenMix lce_s;
    Gate x_gate;
    std::vector<AttnBlock> pma;   // per j
    std::vector<ParamRef> seeds;  // per j: [k_p, d]
    std::vector<Gate> sum_gate;   // per j
  };
  struct Wukong {
    ParamRef y;        // [n_z, k]
    LayerNorm ln_flat; // over n_z * k
    // Per expert e: n_z k -> H/E -> n_F d (one expert: the whole MLP with its output bias; more:
    // the experts' second layers without one, their outputs summed in expert order onto mlp2_bias).
    std::vector<Linear> mlp1, mlp2;
    ParamRef mlp2_bias;
    TokenMix lcb, res; // n_z -> n_L, n_z -> n_x
    LayerNorm ln_out;  // over d
  };
  struct SeqLayer {
    LayerNorm ln_a, ln_b, ln_c;
    AttnBlock attn_a, attn_b;
    Linear ffn1, ffn2;
  };
  struct Layer {
    Cross cross;
    Wukong wukong;
    std::vector<SeqLayer> seq;  // per j
    bool do_a = true, do_b = true;
  };
  struct SeqInfo {
    int lmax = 0;
    int window = -1, block = 0;
    double self_post = 1.0;
    bool rope = false;
  };

  GemModel() = default;

  // Internal geometry, read by gem_model.cc.
  ParamLayout layout_;
  int d_ = 0, heads_ = 0, num_features_ = 0, dense_m_ = 0, n_d_ = 0;
  int n_x_ = 0, n_s_ = 0, k_p_ = 0, k_r_ = 0, wk_k_ = 0, n_f_ = 0, n_l_ = 0, wk_h_ = 0, ffn_ = 0;
  int num_tasks_ = 0;
  std::vector<SeqInfo> seqs_;
  Linear dense_proj_;
  TokenMix lce_in_;
  std::vector<Layer> layers_;
  Cross final_cross_;
  std::vector<Linear> head_;
  int rope_rows_ = 0;
  std::vector<float> rope_f_;   // RopeTable<float>(rope_rows_, d / heads)
  std::vector<double> rope_d_;  // RopeTable<double>(rope_rows_, d / heads)

  template <typename T>
  const T* Rope() const;
};

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_GEM_MODEL_H_
