#include "gpu/train/ffn_forward.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "gpu/common/sm_count.h"
#include "gpu/train/ffn_forward_kernel.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {

absl::Status ValidateFfnHopperShape(const FfnShape& s, const char* what) {
  if (s.n < 1 || s.n >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " n=", s.n, ": want 1 .. 2^31-1"));
  }
  if (s.d != ffn_forward::kD) {
    return absl::InvalidArgumentError(absl::StrCat(what, " d=", s.d, ": want ", ffn_forward::kD));
  }
  if (s.hidden < ffn_forward::kChunk || s.hidden % ffn_forward::kChunk != 0 || s.hidden > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " hidden=", s.hidden, ": want a multiple of ", ffn_forward::kChunk, " up to 2^20"));
  }
  return absl::OkStatus();
}

absl::Status ValidateFfnForwardShape(const FfnShape& s) { return ValidateFfnHopperShape(s, "ffn forward shape"); }

absl::Status FfnForwardFused(const FfnShape& s, const __nv_bfloat16* h, const FfnForwardWeights& w, const float* x,
                             __nv_bfloat16* u, __nv_bfloat16* g, float* y, __nv_bfloat16* y16, cudaStream_t stream) {
  if (absl::Status v = ValidateFfnForwardShape(s); !v.ok()) return v;
  if (absl::Status v = NotNull({{h, "h"}, {w.w1, "w1"}, {w.b1, "b1"}, {w.w2, "w2"}, {w.b2, "b2"}, {x, "x"},
                                {u, "u"}, {g, "g"}, {y, "y"}});
      !v.ok()) {
    return v;
  }
  if (absl::Status v = CheckAligned16({{h, "h"}, {w.w1, "w1"}, {w.b1, "b1"}, {w.w2, "w2"}, {w.b2, "b2"}, {x, "x"},
                                       {u, "u"}, {g, "g"}, {y, "y"}, {y16, "y16"}});
      !v.ok()) {
    return v;
  }
  ffn_forward::Params p;
  p.n = s.n;
  p.hidden = s.hidden;
  p.h = Bf16Bits(h);
  p.w1 = Bf16Bits(w.w1);
  p.b1 = Bf16Bits(w.b1);
  p.w2 = Bf16Bits(w.w2);
  p.b2 = w.b2;
  p.x = x;
  p.u = Bf16Bits(u);
  p.g = Bf16Bits(g);
  p.out = y;
  p.out16 = Bf16Bits(y16);
  constexpr size_t kBytes = ffn_forward::Layout::kBytes;
  if (absl::Status a = AllowSharedMemory(ffn_forward::FfnForwardKernel, kBytes, "FfnForwardFused"); !a.ok()) {
    return a;
  }
  // Persistent: one CTA an SM (the kernel's shared memory allows no second), each walking its tiles.
  const unsigned grid = PersistentGrid((s.n + ffn_forward::kRows - 1) / ffn_forward::kRows);
  LaunchDependent(ffn_forward::FfnForwardKernel, grid, ffn_forward::kThreads, kBytes, stream, p);
  return Launched("FfnForwardFused");
}

}  // namespace gemtb::gpu::train
