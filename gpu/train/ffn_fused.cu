#include "gpu/train/ffn_fused.h"

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/train/ffn_fused_kernels.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

using ffn::bf16;

const bf16 *Bits(const __nv_bfloat16 *p) {
  return reinterpret_cast<const bf16 *>(p);
}
bf16 *Bits(__nv_bfloat16 *p) { return reinterpret_cast<bf16 *>(p); }

absl::Status
Aligned(std::initializer_list<std::pair<const void *, const char *>> pointers) {
  for (const auto &[ptr, name] : pointers) {
    if (ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": want a 16-byte aligned pointer"));
    }
  }
  return absl::OkStatus();
}

template <int kD, bool kForward>
absl::Status Launch(const ffn::Params &p, cudaStream_t stream,
                    const char *what) {
  constexpr size_t kBytes = ffn::Layout<kD>::kBytes;
  auto *kernel = ffn::FfnChainKernel<kD, kForward>;
  if (absl::Status s =
          CudaOk(cudaFuncSetAttribute(
                     kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                     static_cast<int>(kBytes)),
                 what);
      !s.ok()) {
    return s;
  }
  const auto blocks =
      static_cast<unsigned>((p.n + ffn::kRows - 1) / ffn::kRows);
  kernel<<<blocks, ffn::kThreads, kBytes, stream>>>(p);
  return Launched(what);
}

template <bool kForward>
absl::Status LaunchFor(int d, const ffn::Params &p, cudaStream_t stream,
                       const char *what) {
  switch (d) {
  case 32:
    return Launch<32, kForward>(p, stream, what);
  case 64:
    return Launch<64, kForward>(p, stream, what);
  default:
    return Launch<128, kForward>(p, stream, what);
  }
}

} // namespace

absl::Status ValidateFfnShape(const FfnShape &s) {
  if (s.n < 1 || s.n >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ffn shape n=", s.n, ": want 1 .. 2^31-1"));
  }
  if (s.d != 32 && s.d != 64 && s.d != 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("ffn shape d=", s.d, ": want 32, 64 or 128"));
  }
  if (s.hidden < ffn::kChunk || s.hidden % ffn::kChunk != 0 ||
      s.hidden > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ffn shape hidden=", s.hidden, ": want a multiple of ",
                     ffn::kChunk, " up to 2^20"));
  }
  return absl::OkStatus();
}

absl::Status FfnForwardFused(const FfnShape &s, const __nv_bfloat16 *h,
                             const __nv_bfloat16 *w1, const __nv_bfloat16 *b1,
                             const __nv_bfloat16 *w2, const float *b2,
                             const float *residual, __nv_bfloat16 *u,
                             __nv_bfloat16 *g, float *y, cudaStream_t stream) {
  if (absl::Status v = ValidateFfnShape(s); !v.ok())
    return v;
  if (absl::Status v = NotNull({{h, "h"},
                                {w1, "w1"},
                                {b1, "b1"},
                                {w2, "w2"},
                                {u, "u"},
                                {g, "g"},
                                {y, "y"}});
      !v.ok()) {
    return v;
  }
  if (absl::Status v = Aligned({{h, "h"},
                                {w1, "w1"},
                                {w2, "w2"},
                                {u, "u"},
                                {g, "g"},
                                {y, "y"},
                                {residual, "residual"}});
      !v.ok()) {
    return v;
  }
  ffn::Params p;
  p.n = s.n;
  p.hidden = s.hidden;
  p.x = Bits(h);
  p.w1 = Bits(w1);
  p.w2 = Bits(w2);
  p.b1 = Bits(b1);
  p.b2 = b2;
  p.residual = residual;
  p.u = Bits(u);
  p.g = Bits(g);
  p.out = y;
  return LaunchFor<true>(s.d, p, stream, "FfnForwardFused");
}

absl::Status FfnBackwardInputFused(const FfnShape &s, const __nv_bfloat16 *ds,
                                   const __nv_bfloat16 *w2,
                                   const __nv_bfloat16 *u,
                                   const __nv_bfloat16 *w1, __nv_bfloat16 *du,
                                   float *dh, cudaStream_t stream) {
  if (absl::Status v = ValidateFfnShape(s); !v.ok())
    return v;
  if (absl::Status v = NotNull({{ds, "ds"},
                                {w2, "w2"},
                                {u, "u"},
                                {w1, "w1"},
                                {du, "du"},
                                {dh, "dh"}});
      !v.ok())
    return v;
  if (absl::Status v = Aligned({{ds, "ds"},
                                {w2, "w2"},
                                {u, "u"},
                                {w1, "w1"},
                                {du, "du"},
                                {dh, "dh"}});
      !v.ok())
    return v;
  ffn::Params p;
  p.n = s.n;
  p.hidden = s.hidden;
  p.x = Bits(ds);
  p.w1 = Bits(w1);
  p.w2 = Bits(w2);
  p.u_in = Bits(u);
  p.du = Bits(du);
  p.out = dh;
  return LaunchFor<false>(s.d, p, stream, "FfnBackwardInputFused");
}

} // namespace gemtb::gpu::train
