#include "model/description/op_factory.h"

namespace gemtb::model::ops {
namespace {

Op Start(const Where& where, OpKind kind) {
  Op op;
  op.name = where.name;
  op.region = where.region;
  op.seq = where.seq;
  op.expert = where.expert;
  op.kind = kind;
  return op;
}

Shape Dims(const Affine& rows, int64_t width) { return Shape{rows, Constant(static_cast<double>(width))}; }

}  // namespace

Op Linear(const Where& where, const Affine& rows, int64_t in, int64_t out, bool bias,
          int64_t extra_params) {
  Op op = Start(where, OpKind::kLinear);
  const double a = static_cast<double>(in), b = static_cast<double>(out);
  op.params = in * out + (bias ? out : 0) + extra_params;
  const double w = static_cast<double>(op.params);
  op.shapes.in = {Dims(rows, in)};
  op.shapes.out = Dims(rows, out);
  op.flops.fwd = (2.0 * a * b) * rows;
  op.flops.bwd = (4.0 * a * b) * rows;
  op.bytes.fwd = (kActBytes * (a + b)) * rows + Constant(kActBytes * w);
  op.bytes.bwd = (kActBytes * (2.0 * a + b)) * rows + Constant(2.0 * kActBytes * w);
  op.saved = SavedSpec{(kActBytes * a) * rows, RecomputeClass::kLinear};
  op.local_mfu = true;
  return op;
}

Op TokenMix(const Where& where, int64_t n_in, int64_t n_out, int64_t d) {
  Op op = Start(where, OpKind::kLinear);
  const double i = static_cast<double>(n_in), o = static_cast<double>(n_out),
               w = static_cast<double>(d);
  op.params = n_in * n_out;
  op.shapes.in = {Shape{PerSample(1), Constant(i), Constant(w)}};
  op.shapes.out = Shape{PerSample(1), Constant(o), Constant(w)};
  op.flops.fwd = PerSample(2.0 * i * o * w);
  op.flops.bwd = PerSample(4.0 * i * o * w);
  const double p = static_cast<double>(op.params);
  op.bytes.fwd = PerSample(kActBytes * (i + o) * w) + Constant(kActBytes * p);
  op.bytes.bwd = PerSample(kActBytes * (2.0 * i + o) * w) + Constant(2.0 * kActBytes * p);
  op.saved = SavedSpec{PerSample(kActBytes * i * w), RecomputeClass::kLinear};
  op.local_mfu = true;
  return op;
}

Op LayerNorm(const Where& where, const Affine& rows, int64_t width, int residual_inputs) {
  Op op = Start(where, OpKind::kNorm);
  const double w = static_cast<double>(width);
  const double inputs = 1.0 + residual_inputs;
  op.params = 2 * width;
  for (int i = 0; i < 1 + residual_inputs; ++i) op.shapes.in.push_back(Dims(rows, width));
  op.shapes.out = Dims(rows, width);
  op.flops.fwd = ((8.0 + residual_inputs) * w) * rows;
  op.flops.bwd = ((16.0 + residual_inputs) * w) * rows;
  const double p = static_cast<double>(op.params);
  // Backward reads the saved (summed) input, dY and the stats; writes dX (to each input: one
  // tensor, shared) and dgamma, dbeta.
  op.bytes.fwd = (kActBytes * (inputs + 1.0) * w + 8.0) * rows + Constant(kActBytes * p);
  op.bytes.bwd = (kActBytes * 3.0 * w + 8.0) * rows + Constant(2.0 * kActBytes * p);
  op.saved = SavedSpec{(kActBytes * w + 8.0) * rows, RecomputeClass::kNorm};
  return op;
}

Op Pointwise(const Where& where, const Affine& rows, int64_t width, int inputs, int saved_inputs,
             double flops_per_element) {
  Op op = Start(where, OpKind::kPointwise);
  const double w = static_cast<double>(width);
  for (int i = 0; i < inputs; ++i) op.shapes.in.push_back(Dims(rows, width));
  op.shapes.out = Dims(rows, width);
  op.flops.fwd = (flops_per_element * w) * rows;
  op.flops.bwd = (2.0 * flops_per_element * w) * rows;
  op.bytes.fwd = (kActBytes * (inputs + 1.0) * w) * rows;
  // Backward reads dY and the saved inputs, writes one gradient per input.
  op.bytes.bwd = (kActBytes * (1.0 + saved_inputs + inputs) * w) * rows;
  op.saved = SavedSpec{(kActBytes * saved_inputs * w) * rows,
                       saved_inputs > 0 ? RecomputeClass::kPointwise : RecomputeClass::kNone};
  return op;
}

Op Copy(const Where& where, const Affine& read, const Affine& written, const Shape& out) {
  Op op = Start(where, OpKind::kPointwise);
  op.shapes.in = {};
  op.shapes.out = out;
  op.bytes.fwd = kActBytes * (read + written);
  op.bytes.bwd = kActBytes * (read + written);
  op.saved = SavedSpec{Affine{}, RecomputeClass::kNone};
  return op;
}

Op Attention(const Where& where, const AttentionSpec& spec, const AttentionShape& shape) {
  Op op = Start(where, OpKind::kAttention);
  op.attn = spec;
  const double dq = static_cast<double>(spec.H * spec.Dqk);
  const double dk = static_cast<double>(spec.Hkv * spec.Dqk);
  const double dv = static_cast<double>(spec.Hkv * spec.Dv);
  const double dout = static_cast<double>(spec.H * spec.Dv);
  op.shapes.in = {Dims(shape.q_rows, spec.H * spec.Dqk), Dims(shape.kv_rows, spec.Hkv * spec.Dqk),
                  Dims(shape.kv_rows, spec.Hkv * spec.Dv)};
  op.shapes.out = Dims(shape.out_rows, spec.H * spec.Dv);
  const double per_pair = 2.0 * static_cast<double>(spec.H) * static_cast<double>(spec.Dqk + spec.Dv);
  op.flops.fwd = per_pair * shape.pairs;
  op.flops.bwd = (2.5 * per_pair) * shape.pairs;
  const bool softmax = spec.act == Activation::kSoftmax;
  const Affine lse = (softmax ? 4.0 * static_cast<double>(spec.H) : 0.0) * shape.q_rows;
  const Affine q = (kActBytes * dq) * shape.q_rows;
  const Affine kv = (kActBytes * (dk + dv)) * shape.kv_rows;
  const Affine o = (kActBytes * dout) * shape.out_rows;
  op.bytes.fwd = q + kv + o + lse;
  // Reads Q, K, V, O, dO (and LSE); writes dQ, dK, dV.
  op.bytes.bwd = 2.0 * q + 2.0 * kv + 2.0 * o + lse;
  op.saved = SavedSpec{q + kv + lse, RecomputeClass::kAttention};
  op.local_mfu = true;
  return op;
}

Op Embedding(const Where& where, const Affine& ids, const Affine& out_rows, int64_t dim,
             double row_bytes) {
  Op op = Start(where, OpKind::kEmbedding);
  const double w = static_cast<double>(dim);
  op.shapes.in = {Shape{ids}};
  op.shapes.out = Dims(out_rows, dim);
  // Pooling / summing: one add per looked-up element; backward scatters the same.
  op.flops.fwd = w * ids;
  op.flops.bwd = (2.0 * w) * ids;
  op.bytes.fwd = (8.0 + row_bytes * w) * ids + (kActBytes * w) * out_rows;
  // Backward: read dY, ids; read and write each touched row and its rowwise optimizer state.
  op.bytes.bwd = (8.0 + 2.0 * row_bytes * w + 8.0) * ids + (kActBytes * w) * out_rows;
  op.saved = SavedSpec{8.0 * ids, RecomputeClass::kNone};
  return op;
}

Op WukongInteraction(const Where& where, int64_t n_z, int64_t k, int64_t d) {
  Op op = Start(where, OpKind::kInteraction);
  const double z = static_cast<double>(n_z), kk = static_cast<double>(k), w = static_cast<double>(d);
  op.params = n_z * k;
  op.shapes.in = {Shape{PerSample(1), Constant(z), Constant(w)}};
  op.shapes.out = Shape{PerSample(1), Constant(z), Constant(kk)};
  // Z^T Y (d x k) then Z (Z^T Y) (n_z x k): 2 n_z d k each.
  op.flops.fwd = PerSample(4.0 * z * kk * w);
  op.flops.bwd = PerSample(8.0 * z * kk * w);
  const double p = static_cast<double>(op.params);
  op.bytes.fwd = PerSample(kActBytes * (z * w + w * kk + z * kk)) + Constant(kActBytes * p);
  op.bytes.bwd = PerSample(kActBytes * (z * w + w * kk + z * kk + z * w)) + Constant(2.0 * kActBytes * p);
  op.saved = SavedSpec{PerSample(kActBytes * (z * w + w * kk)), RecomputeClass::kLinear};
  op.local_mfu = true;
  return op;
}

Op Loss(const Where& where, int64_t tasks) {
  Op op = Start(where, OpKind::kLoss);
  const double t = static_cast<double>(tasks);
  op.shapes.in = {Shape{PerSample(1), Constant(t)}, Shape{PerSample(1), Constant(t)}};
  op.shapes.out = Shape{Constant(1)};
  // max(z,0) - z y + log1p(exp(-|z|)) and the mask: ~10 ops per logit; backward sigma(z) - y.
  op.flops.fwd = PerSample(10.0 * t);
  op.flops.bwd = PerSample(6.0 * t);
  // fp32 logits, labels and masks (4 bytes each) read; the gradient written.
  op.bytes.fwd = PerSample(12.0 * t);
  op.bytes.bwd = PerSample(16.0 * t);
  op.saved = SavedSpec{PerSample(4.0 * t), RecomputeClass::kPointwise};
  return op;
}

}  // namespace gemtb::model::ops
