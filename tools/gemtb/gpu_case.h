// Bridges the oracle's case representation (fp64 values of a storage type, reference::
// AttentionInputs) and the GPU API (16-bit patterns, gpu::AttentionArgs), for `gemtb gpu attention`
// and `gemtb check attention`. Only built with CUDA (GEMTB_HAVE_CUDA).
#ifndef GEMTB_TOOLS_GEMTB_GPU_CASE_H_
#define GEMTB_TOOLS_GEMTB_GPU_CASE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "gpu/attention/api.h"
#include "model/attention/attention_options.h"
#include "reference/attention/attention.h"

namespace gemtb::cli {

// Owns the converted tensors that `args` views; movable (the views follow the vectors' buffers),
// not copyable.
struct GpuCall {
  GpuCall() = default;
  GpuCall(GpuCall&&) = default;
  GpuCall& operator=(GpuCall&&) = default;
  GpuCall(const GpuCall&) = delete;
  GpuCall& operator=(const GpuCall&) = delete;

  std::vector<uint16_t> q, k, v, d_o;
  std::vector<int64_t> d_o_shape;
  std::vector<float> bias_dense, bias_rel, bias_ts, rope_q, rope_k, rope_v;
  gpu::AttentionArgs args;

  gpu::HostTensor<uint16_t> DoView() const { return {d_o, d_o_shape}; }
};

// The GPU form of an oracle call. Values must be exact values of in.input_type when it is bf16 or
// fp16; other input types (and the bias/RoPE inputs) are passed along for gpu::CanRun to reject by
// name. `d_o` (may be empty) is converted too.
GpuCall MakeGpuCall(const reference::AttentionInputs& in, const AttentionOptions& options,
                    absl::Span<const double> d_o, const std::vector<int64_t>& d_o_shape);

// Bit patterns of a bf16/fp16 storage type as exact fp64 values.
std::vector<double> BitsToValues(absl::Span<const uint16_t> bits, ElementType type);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_GPU_CASE_H_
