#include "tools/gemtb/gpu_case.h"

#include "model/numerics/float_formats.h"

namespace gemtb::cli {
namespace {

std::vector<uint16_t> ToBits(absl::Span<const double> values, ElementType type) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = type == ElementType::kBFloat16 ? numerics::DoubleToBf16BitsRne(values[i])
                                             : numerics::DoubleToFp16BitsRne(values[i]);
  }
  return bits;
}

std::vector<float> ToFloats(absl::Span<const double> values) {
  return std::vector<float>(values.begin(), values.end());
}

}  // namespace

GpuCall MakeGpuCall(const reference::AttentionInputs& in, const AttentionOptions& options,
                    absl::Span<const double> d_o, const std::vector<int64_t>& d_o_shape) {
  GpuCall c;
  const ElementType type = in.input_type;
  const bool sixteen = type == ElementType::kBFloat16 || type == ElementType::kFloat16;
  if (sixteen) {
    c.q = ToBits(in.q.data, type);
    c.k = ToBits(in.k.data, type);
    c.v = ToBits(in.v.data, type);
    c.d_o = ToBits(d_o, type);
  }
  c.d_o_shape = d_o_shape;
  c.bias_dense = ToFloats(in.bias_dense.data);
  c.bias_rel = ToFloats(in.bias_rel.data);
  c.bias_ts = ToFloats(in.bias_ts.data);
  c.rope_q = ToFloats(in.rope_q.data);
  c.rope_k = ToFloats(in.rope_k.data);
  c.rope_v = ToFloats(in.rope_v.data);

  gpu::AttentionArgs& a = c.args;
  a.dtype = type;
  a.q = {c.q, in.q.shape};
  a.k = {c.k, in.k.shape};
  a.v = {c.v, in.v.shape};
  a.q_offsets = {in.q_offsets.data, in.q_offsets.shape};
  a.kv_offsets = {in.kv_offsets.data, in.kv_offsets.shape};
  a.kv_index = {in.kv_index.data, in.kv_index.shape};
  a.max_lq = in.max_lq;
  a.max_lk = in.max_lk;
  a.options = options;
  a.bias_dense = {c.bias_dense, in.bias_dense.shape};
  a.bias_rel = {c.bias_rel, in.bias_rel.shape};
  a.bias_ts = {c.bias_ts, in.bias_ts.shape};
  a.ts = {in.ts.data, in.ts.shape};
  a.rope_q = {c.rope_q, in.rope_q.shape};
  a.rope_k = {c.rope_k, in.rope_k.shape};
  a.rope_v = {c.rope_v, in.rope_v.shape};
  return c;
}

std::vector<double> BitsToValues(absl::Span<const uint16_t> bits, ElementType type) {
  std::vector<double> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    values[i] = type == ElementType::kBFloat16 ? numerics::Bf16BitsToFloat(bits[i])
                                               : numerics::Fp16BitsToFloat(bits[i]);
  }
  return values;
}

}  // namespace gemtb::cli
