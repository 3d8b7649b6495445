// The jagged attention oracle: forward and backward, in two modes.
//
//  * Precision::kOracle, the "oracle of record": inputs converted exactly to fp64, every operation
//    in fp64, two-pass softmax, fixed-order sums. Callers round the result once to a storage type.
//  * Precision::kEmulate mirrors a tensor-core kernel's casts: fp32 accumulation, P and dS
//    rounded to the input storage type before their matmuls. It measures the error a plain
//    same-precision implementation makes, which GPU tolerances are based on.
//
// Both are bitwise deterministic: the same bytes for any thread count and run: each task
// owns a disjoint output slice and every reduction has an order fixed by the shapes alone.
//
// Every tensor is passed as fp64 values plus a shape; values of the storage type `input_type` are
// exactly representable in fp64. Entry points validate everything first and return
// InvalidArgument naming the field and the bad value.
#ifndef GEMTB_REFERENCE_ATTENTION_ATTENTION_H_
#define GEMTB_REFERENCE_ATTENTION_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/attention/attention_options.h"
#include "model/common/element_type.h"

namespace gemtb::reference {

// A read-only view of a row-major tensor. An empty shape means "absent" (optional inputs).
template <typename T>
struct TensorView {
  absl::Span<const T> data;
  std::vector<int64_t> shape;

  bool present() const { return !shape.empty(); }
};

// The jagged problem. Shapes:
//   q [TQ,H,Dqk], k [TK,Hkv,Dqk], v [TK,Hkv,Dv]; q_offsets [nq+1], kv_offsets [nkv+1];
//   kv_index [B] (optional); bias_dense [B,Hb,maxLq,maxLk]; bias_rel [Hr,2*maxL-1];
//   ts [TQ] with bias_ts [Ht,129] (self-attention only); rope_q [TQ,Dqk], rope_k [TK,Dqk],
//   rope_v [TK,Dv] (optional, needs rope_q/rope_k).
struct AttentionInputs {
  TensorView<double> q, k, v;
  TensorView<int64_t> q_offsets, kv_offsets;
  int64_t max_lq = 0;
  int64_t max_lk = 0;
  TensorView<int64_t> kv_index;
  TensorView<double> bias_dense, bias_rel, bias_ts;
  TensorView<int64_t> ts;
  TensorView<double> rope_q, rope_k, rope_v;
  // Storage type of q, k, v and dO: emulate mode rounds P, dS, RoPE outputs and results to it.
  ElementType input_type = ElementType::kFloat64;
};

enum class Precision { kOracle, kEmulate };

struct ExecutionOptions {
  Precision precision = Precision::kOracle;
  int threads = 0;  // 0 = all hardware threads; the result does not depend on it
};

// O [TO,H,Dv] (TO = TQ, or B*Lq under broadcast_q) and, for softmax, LSE [H,TO] (-inf for an empty
// row). In emulate mode O holds values of the input type and LSE values of fp32.
struct AttentionForwardResult {
  std::vector<double> o;
  std::vector<int64_t> o_shape;
  std::vector<double> lse;
  std::vector<int64_t> lse_shape;
};

// Gradients with respect to the un-rotated inputs, in the shapes of the inputs; the bias
// gradients are present (non-empty shape) exactly when the bias was given.
struct AttentionBackwardResult {
  std::vector<double> dq, dk, dv;
  std::vector<int64_t> dq_shape, dk_shape, dv_shape;
  std::vector<double> d_bias_dense, d_bias_rel, d_bias_ts;
  std::vector<int64_t> d_bias_dense_shape, d_bias_rel_shape, d_bias_ts_shape;
};

// Checks every shape, offset, index and option; OK means forward and backward cannot fail.
absl::Status ValidateAttention(const AttentionInputs& in, const AttentionOptions& options);

absl::StatusOr<AttentionForwardResult> AttentionForward(const AttentionInputs& in,
                                                        const AttentionOptions& options,
                                                        const ExecutionOptions& exec = {});

// `d_o` has O's shape. `forward` must be this oracle's forward of the same call in the same
// precision (softmax reads its O and LSE).
absl::StatusOr<AttentionBackwardResult> AttentionBackward(const AttentionInputs& in,
                                                          const AttentionOptions& options,
                                                          const TensorView<double>& d_o,
                                                          const AttentionForwardResult& forward,
                                                          const ExecutionOptions& exec = {});

// Effective FLOPs of the forward: 2*H*(Dqk+Dv)*pairs over valid pairs only.
absl::StatusOr<double> AttentionForwardFlops(const AttentionInputs& in,
                                             const AttentionOptions& options);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_ATTENTION_ATTENTION_H_
