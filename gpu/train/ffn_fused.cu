#include <cstdint>

#include "absl/strings/str_cat.h"
#include "gpu/train/ffn_fused.h"
#include "gpu/train/ffn_fused_kernels.cuh"
#include "gpu/train/kernel_utils.cuh"
#include "gpu/train/layer_norm_partials.cuh"

namespace gemtb::gpu::train {
namespace {

template <int kD>
absl::Status Launch(const ffn::Params& p, cudaStream_t stream) {
  constexpr size_t kBytes = ffn::Layout<kD>::kBytes;
  auto* kernel = ffn::FfnBackwardKernel<kD>;
  if (absl::Status s = AllowSharedMemory(kernel, kBytes, "FfnBackwardFused"); !s.ok()) return s;
  const auto blocks = static_cast<unsigned>((p.n + ffn::kRows - 1) / ffn::kRows);
  LaunchDependent(kernel, blocks, ffn::kThreads, kBytes, stream, p);
  return Launched("FfnBackwardFused");
}

absl::Status LaunchFor(int d, const ffn::Params& p, cudaStream_t stream) {
  switch (d) {
    case 32:
      return Launch<32>(p, stream);
    case 64:
      return Launch<64>(p, stream);
    default:
      return Launch<128>(p, stream);
  }
}

}  // namespace

absl::Status ValidateFfnShape(const FfnShape& s) {
  if (s.n < 1 || s.n >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("ffn shape n=", s.n, ": want 1 .. 2^31-1"));
  }
  if (s.d != 32 && s.d != 64 && s.d != 128) {
    return absl::InvalidArgumentError(absl::StrCat("ffn shape d=", s.d, ": want 32, 64 or 128"));
  }
  if (s.hidden < ffn::kChunk || s.hidden % ffn::kChunk != 0 || s.hidden > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ffn shape hidden=", s.hidden, ": want a multiple of ", ffn::kChunk, " up to 2^20"));
  }
  return absl::OkStatus();
}

absl::Status FfnBackwardFused(const FfnShape& s, const __nv_bfloat16* ds, const float* x, const FfnWeights& w,
                              const FfnTape& tape, __nv_bfloat16* du, float* dx, float* dgamma, float* dbeta,
                              cudaStream_t stream) {
  if (absl::Status v = ValidateFfnShape(s); !v.ok()) return v;
  if (absl::Status v = NotNull({{ds, "ds"},
                                {x, "x"},
                                {tape.mean, "mean"},
                                {tape.rstd, "rstd"},
                                {tape.u, "u"},
                                {du, "du"},
                                {dx, "dx"},
                                {dgamma, "dgamma"},
                                {dbeta, "dbeta"}});
      !v.ok()) {
    return v;
  }
  if (absl::Status v = NotNull({{w.gamma, "gamma"}, {w.w1, "w1"}, {w.w2, "w2"}}); !v.ok()) return v;
  if (absl::Status v = CheckAligned16({{w.w1, "w1"}, {w.w2, "w2"}, {ds, "ds"}, {tape.u, "u"}, {du, "du"}}); !v.ok()) {
    return v;
  }
  ffn::Params p;
  p.n = s.n;
  p.hidden = s.hidden;
  p.w1 = Bf16Bits(w.w1);
  p.w2 = Bf16Bits(w.w2);
  p.ds = Bf16Bits(ds);
  p.u = Bf16Bits(tape.u);
  p.du = Bf16Bits(du);
  p.ln.n = s.n;
  p.ln.x = x;
  p.ln.gamma = w.gamma;
  p.ln.mean = tape.mean;
  p.ln.rstd = tape.rstd;
  p.ln.dx = dx;
  const int64_t blocks = (s.n + ln::kBlockRows - 1) / ln::kBlockRows;
  return WithLayerNormPartials(blocks, s.d, dgamma, dbeta, stream, "FfnBackwardFused scratch",
                               [&](float* g_part, float* b_part) {
                                 p.ln.g_part = g_part;
                                 p.ln.b_part = b_part;
                                 return LaunchFor(s.d, p, stream);
                               });
}

}  // namespace gemtb::gpu::train
