#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gpu/train/attention_input.h"
#include "gpu/train/attention_input_kernels.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

template <int kD, int kDh>
absl::Status Launch(const ain::Params& p, cudaStream_t stream) {
  constexpr size_t kBytes = ain::Layout<kD>::kBytes;
  auto* kernel = ain::AttentionInputKernel<kD, kDh>;
  if (absl::Status s = AllowSharedMemory(kernel, kBytes, "AttentionInputForward"); !s.ok()) return s;
  const auto blocks = static_cast<unsigned>((p.n + ain::kRows - 1) / ain::kRows);
  LaunchDependent(kernel, blocks, ain::kThreads, kBytes, stream, p);
  return Launched("AttentionInputForward");
}

template <int kD>
absl::Status LaunchD(int dh, const ain::Params& p, cudaStream_t stream) {
  if constexpr (kD >= 64) {
    if (dh == 64) return Launch<kD, 64>(p, stream);
  }
  if (dh == 32) return Launch<kD, 32>(p, stream);
  return Launch<kD, 16>(p, stream);
}

}  // namespace

absl::Status ValidateAttentionInputShape(const AttentionInputShape& s) {
  if (s.n < 1 || s.n >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("attention input n=", s.n, ": want 1 .. 2^31-1"));
  }
  if (s.d != 32 && s.d != 64 && s.d != 128) {
    return absl::InvalidArgumentError(absl::StrCat("attention input d=", s.d, ": want 32, 64 or 128"));
  }
  if ((s.dh != 16 && s.dh != 32 && s.dh != 64) || s.dh > s.d) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention input dh=", s.dh, ": want 16, 32 or 64, at most d=", s.d));
  }
  return absl::OkStatus();
}

absl::Status AttentionInputForward(const AttentionInputShape& s, const AttentionNorm& norm,
                                   const std::vector<AttentionProjection>& projections, const AttentionRope& rope,
                                   cudaStream_t stream) {
  if (absl::Status v = ValidateAttentionInputShape(s); !v.ok()) return v;
  if (projections.empty() || projections.size() > ain::kMaxProjections) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention input projections=", projections.size(), ": want 1 .. 3"));
  }
  if (absl::Status v = NotNull({{norm.x, "x"},
                                {norm.gamma, "gamma"},
                                {norm.beta, "beta"},
                                {norm.h, "h"},
                                {norm.mean, "mean"},
                                {norm.rstd, "rstd"}});
      !v.ok()) {
    return v;
  }
  if (rope.table != nullptr) {
    if (absl::Status v = NotNull({{rope.offsets, "offsets"}}); !v.ok()) return v;
    if (rope.batch < 1) return absl::InvalidArgumentError(absl::StrCat("rope batch=", rope.batch, ": want >= 1"));
  }
  ain::Params p;
  p.n = s.n;
  p.x = norm.x;
  p.gamma = norm.gamma;
  p.beta = norm.beta;
  p.h = Bf16Bits(norm.h);
  p.mean = norm.mean;
  p.rstd = norm.rstd;
  p.projections = static_cast<int>(projections.size());
  for (size_t i = 0; i < projections.size(); ++i) {
    const AttentionProjection& pr = projections[i];
    const std::string w = absl::StrCat("projections[", i, "].w"), b = absl::StrCat("projections[", i, "].bias"),
                      y = absl::StrCat("projections[", i, "].y");
    if (absl::Status v = NotNull({{pr.w, w.c_str()}, {pr.bias, b.c_str()}, {pr.y, y.c_str()}}); !v.ok()) return v;
    if ((pr.normed == nullptr) != (pr.inv == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("projections[", i, "]: normed and inv go together (one is null, the other not)"));
    }
    if (!Aligned16({pr.w, pr.y, pr.normed})) {
      return absl::InvalidArgumentError(absl::StrCat("projections[", i, "]: want 16-byte aligned pointers"));
    }
    p.proj[i] = ain::Projection{Bf16Bits(pr.w), Bf16Bits(pr.bias), Bf16Bits(pr.y), Bf16Bits(pr.normed), pr.inv};
  }
  p.table = rope.table;
  p.offsets = rope.offsets;
  p.batch = rope.batch;
  switch (s.d) {
    case 32:
      return LaunchD<32>(s.dh, p, stream);
    case 64:
      return LaunchD<64>(s.dh, p, stream);
    default:
      return LaunchD<128>(s.dh, p, stream);
  }
}

}  // namespace gemtb::gpu::train
