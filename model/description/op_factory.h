// Builders for the op graph's ops, one per op kind, each applying the cost rules once:
//
// FLOPs: a multiply-add is 2. Linear a->b over R rows: 2*R*a*b forward, twice that backward (dX and
//   dW); token mixing (LCE) likewise over its token axis; attention 2*H*(Dqk+Dv) per kept pair
//   forward, 2.5x backward; norms 8 and pointwise ops a few per element
//   (counted, but not in Local MFU).
// HBM bytes: activations and weights move as bf16 (2 bytes); forward = read inputs + read weights +
//   write outputs; backward = read the saved inputs + read dY + read weights + write dX + write dW.
//   Attention assumes K/V tiles are reused on chip (each of Q, K, V, O, dO, dQ, dK, dV moves once),
//   plus fp32 LSE for softmax. Embedding lookups: 8-byte ids, rows at the table's storage width,
//   backward reads and writes each touched row and its 4-byte rowwise state (duplicates not merged:
//   an upper bound).
// Saved bytes: an op keeps the inputs its backward needs, once: Linear its input X; LCE its token
//   input; norm its input plus fp32 mean and rstd per row; activation functions their input; gates
//   both operands; residual adds, concatenations and gathers nothing; attention Q, K, V (+ fp32
//   LSE under softmax) — its output O is the input the W_o projection saves; Wukong's interaction
//   Z and Z^T Y; embedding lookups their ids.
#ifndef GEMTB_MODEL_DESCRIPTION_OP_FACTORY_H_
#define GEMTB_MODEL_DESCRIPTION_OP_FACTORY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "model/description/model_graph.h"

namespace gemtb::model::ops {

inline constexpr double kActBytes = 2.0;  // bf16 activations and weights

// Row counts: per-sample rows (B*k), sequence tokens (N), a constant.
inline Affine PerSample(double k) { return Affine{0, k, 0, 0}; }
inline Affine Tokens(double k = 1.0) { return Affine{0, 0, k, 0}; }
inline Affine Constant(double k) { return Affine{k, 0, 0, 0}; }

struct Where {
  std::string name;
  std::string region;
  std::optional<int> seq;
  std::optional<int> expert;
};

// y = x W + b over `rows` rows of width `in` -> `out` (bias optional).
Op Linear(const Where& where, const Affine& rows, int64_t in, int64_t out, bool bias = true,
          int64_t extra_params = 0);
// Token-axis mixing per sample: [n_in, d] -> [n_out, d] with W in R^{n_out x n_in} (no bias).
Op TokenMix(const Where& where, int64_t n_in, int64_t n_out, int64_t d);
// LayerNorm over rows of `width` (gamma, beta), optionally adding `residual_inputs` more inputs of
// the same size first (LN(a + b)).
Op LayerNorm(const Where& where, const Affine& rows, int64_t width, int residual_inputs = 0);
// Elementwise op over rows x width: `inputs` tensors read, one written, `saved_inputs` of them kept
// for backward, `flops_per_element` forward (backward 2x).
Op Pointwise(const Where& where, const Affine& rows, int64_t width, int inputs, int saved_inputs,
             double flops_per_element);
// Copies: concatenation, gather (no arithmetic, nothing saved). `read` and `written` in elements.
Op Copy(const Where& where, const Affine& read, const Affine& written, const Shape& out);

// Attention with q_rows queries and kv_rows keys/values in total; `pairs` is the kept-pair count
// (an Affine: P for self-attention, a multiple of N or B for the cross patterns).
struct AttentionShape {
  Affine q_rows, kv_rows, out_rows, pairs;  // out_rows differs from q_rows for broadcast seeds
};
Op Attention(const Where& where, const AttentionSpec& spec, const AttentionShape& shape);

// Table lookups: `ids` ids read, each a row of `dim` at `row_bytes` per element, output `out_rows`
// x `dim` (pooled: B*F; sequence: l tokens, the item, action and dt rows summed).
Op Embedding(const Where& where, const Affine& ids, const Affine& out_rows, int64_t dim,
             double row_bytes);

// Wukong's FMB interaction per sample: Z (n_z x d) -> Z (Z^T Y), Y in R^{n_z x k} (no bias).
Op WukongInteraction(const Where& where, int64_t n_z, int64_t k, int64_t d);

// Multi-task masked BCE on B x T logits.
Op Loss(const Where& where, int64_t tasks);

}  // namespace gemtb::model::ops

#endif  // GEMTB_MODEL_DESCRIPTION_OP_FACTORY_H_
