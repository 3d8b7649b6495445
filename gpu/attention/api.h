// The CUDA jagged attention on one H200 (sm_90a), behind a host API that takes
// and returns host tensors (copied to and from the device on every call, for now).
//
// What the kernels run (everything else is rejected by CanRun with InvalidArgument naming the
// parameter, never ignored):
//   * q, k, v (and dO) in bf16 or fp16, given as their 16-bit patterns; fp32 accumulation;
//     O, dQ, dK, dV in the input type, LSE in fp32;
//   * Dqk = Dv in {16, 32, 64, 128} (params.h kKernelHeadDims); any H, Hkv with H % Hkv == 0
//     (GQA); asymmetric Lq/Lk; kv_index; broadcast_q; every activation and every mask and
//     alignment; pre/post scales;
//   * not yet: dense/rel/time bias, RoPE, Dv != Dqk, other head dims, fp32 inputs.
// The backward is deterministic (bitwise, run to run): dK/dV and dQ run as separate kernels that
// each own their output rows, with no atomics.
#ifndef GEMTB_GPU_ATTENTION_API_H_
#define GEMTB_GPU_ATTENTION_API_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpu/attention/kernel_policy.h"
#include "model/attention/attention_options.h"
#include "model/common/element_type.h"

namespace gemtb::gpu {

// A read-only view of a row-major host tensor; an empty shape means "absent".
template <typename T>
struct HostTensor {
  absl::Span<const T> data;
  std::vector<int64_t> shape;

  bool present() const { return !shape.empty(); }
};

// One attention call, shapes as in the oracle (reference/attention/attention.h).
struct AttentionArgs {
  ElementType dtype = ElementType::kBFloat16;  // storage type of q, k, v and dO
  HostTensor<uint16_t> q;                      // [TQ, H, Dqk] bit patterns of `dtype`
  HostTensor<uint16_t> k;                      // [TK, Hkv, Dqk]
  HostTensor<uint16_t> v;                      // [TK, Hkv, Dv]
  HostTensor<int64_t> q_offsets, kv_offsets;   // [nq+1], [nkv+1]
  HostTensor<int64_t> kv_index;                // [B], optional
  int64_t max_lq = 0;
  int64_t max_lk = 0;
  AttentionOptions options;
  // Spec inputs the kernels do not implement yet: giving any of them is an error.
  HostTensor<float> bias_dense, bias_rel, bias_ts, rope_q, rope_k, rope_v;
  HostTensor<int64_t> ts;
  // Which kernels run: by default ChooseKernels' pick for the call's shape (kernel_policy.h);
  // tests and benchmarks may name a kernel here (an error if it cannot run the call).
  KernelOverride kernels;
};

struct ForwardResult {
  std::vector<uint16_t> o;  // [TO, H, Dv] in the input type
  std::vector<int64_t> o_shape;
  std::vector<float> lse;   // [H, TO], softmax only (-inf for a row without valid keys)
  std::vector<int64_t> lse_shape;
};

struct BackwardResult {
  std::vector<uint16_t> dq, dk, dv;  // shapes (and type) of q, k, v
  std::vector<int64_t> dq_shape, dk_shape, dv_shape;
};

// OK when the kernels implement this call; else InvalidArgument naming the parameter and value.
absl::Status CanRun(const AttentionArgs& args);

// OK when a device this build runs on (compute capability 9.0) is present; else
// FailedPrecondition saying what was found.
absl::Status DeviceAvailable();

absl::StatusOr<ForwardResult> Forward(const AttentionArgs& args);

// `d_o` has O's shape and the input type; `forward` is this API's Forward of the same call
// (softmax reads its O and LSE).
absl::StatusOr<BackwardResult> Backward(const AttentionArgs& args, const HostTensor<uint16_t>& d_o,
                                        const ForwardResult& forward);

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_API_H_
