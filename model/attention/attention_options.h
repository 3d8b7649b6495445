// What a jagged attention call computes, independent of who executes it.
// The oracle (reference/), the CUDA kernels (gpu/) and the simulator (sim/) all read these.
#ifndef GEMTB_MODEL_ATTENTION_ATTENTION_OPTIONS_H_
#define GEMTB_MODEL_ATTENTION_ATTENTION_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/attention/activation_table.h"
#include "model/attention/attention_mask.h"

namespace gemtb {

enum class Alignment { kBottomRight, kTopLeft };

struct AttentionOptions {
  Activation act = Activation::kSoftmax;
  // Unset means the default: pre = 1/sqrt(Dqk) for softmax, else 1; post = 1.
  std::optional<double> pre_scale;
  std::optional<double> post_scale;
  MaskKind mask = MaskKind::kNone;
  int64_t window_left = -1;   // window(l, r); -1 = unbounded. causal == window(-1, 0).
  int64_t window_right = -1;
  int64_t block = 64;         // block(n)
  Alignment align = Alignment::kBottomRight;
  bool broadcast_q = false;   // q_offsets holds one sequence read by every output sequence
  // A speed knob, not part of what is computed: GPU kernels may evaluate silu and gelu_tanh (and
  // their derivatives) through the hardware tanh, tanh.approx.f32 (relative error up to 2^-11 of
  // tanh by the PTX ISA; one special-function op per pair instead of an exp and a reciprocal), as
  // upstream GDPA's fast_silu and fast_gelu do. The oracle always evaluates the exact act, and a
  // GPU result with the knob on is judged against that with the GPU criteria (tools/check/criteria.h). Other acts and
  // kernels without a tanh path ignore it.
  bool tanh_approx = false;
};

constexpr std::string_view AlignmentName(Alignment align) {
  return align == Alignment::kTopLeft ? "top_left" : "bottom_right";
}

constexpr std::optional<Alignment> ParseAlignment(std::string_view name) {
  if (name == "top_left") return Alignment::kTopLeft;
  if (name == "bottom_right") return Alignment::kBottomRight;
  return std::nullopt;
}

// The mask fields of `o` as one value, and back (align stays the options' own).
constexpr AttentionMask MaskOf(const AttentionOptions& o) {
  return AttentionMask{o.mask, o.window_left, o.window_right, o.block};
}
constexpr void SetMask(const AttentionMask& mask, AttentionOptions* o) {
  o->mask = mask.kind;
  o->window_left = mask.left;
  o->window_right = mask.right;
  o->block = mask.block;
}

// The key range [begin, end) that query `i` of a (Lq, Lk) pair may see under `options`' mask
// Every mask keeps a contiguous range, so executors iterate it directly.
struct KeyRange {
  int64_t begin;
  int64_t end;
};

constexpr int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

constexpr int64_t AlignmentShift(Alignment align, int64_t lq, int64_t lk) {
  return align == Alignment::kBottomRight ? lk - lq : 0;
}

constexpr KeyRange ValidKeys(const AttentionOptions& o, int64_t i, int64_t lq, int64_t lk) {
  const int64_t a = i + AlignmentShift(o.align, lq, lk);
  int64_t begin = 0;
  int64_t end = lk;
  switch (o.mask) {
    case MaskKind::kNone: break;
    // Written so that no sum can overflow for any int64 window (a is bounded by the lengths).
    case MaskKind::kCausal: end = a >= lk ? lk : a + 1; break;
    case MaskKind::kWindow:
      if (o.window_left >= 0) begin = o.window_left >= a ? 0 : a - o.window_left;
      if (o.window_right >= 0) end = o.window_right >= lk - a ? lk : a + o.window_right + 1;
      break;
    case MaskKind::kBlock: {
      begin = FloorDiv(a, o.block) * o.block;
      end = begin + o.block;
      break;
    }
  }
  begin = begin < 0 ? 0 : begin;
  end = end > lk ? lk : end;
  if (end < begin) end = begin;
  return {begin, end};
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_ATTENTION_ATTENTION_OPTIONS_H_
