#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"
#include "gpu/train/layer_norm_partials.cuh"
#include "gpu/train/projection_backward.h"
#include "gpu/train/projection_backward_kernels.cuh"

namespace gemtb::gpu::train {
namespace {

template <int kD>
absl::Status Launch(const proj::Params& p, cudaStream_t stream) {
  constexpr size_t kBytes = proj::Layout<kD>::kBytes;
  auto* kernel = proj::ProjectionsBackwardKernel<kD>;
  if (absl::Status s = AllowSharedMemory(kernel, kBytes, "ProjectionsLayerNormBackward"); !s.ok()) return s;
  const auto blocks = static_cast<unsigned>((p.ln.n + proj::kRows - 1) / proj::kRows);
  LaunchDependent(kernel, blocks, proj::kThreads, kBytes, stream, p);
  return Launched("ProjectionsLayerNormBackward");
}

}  // namespace

absl::Status ValidateProjectionsShape(int64_t n, int d) {
  if (n < 1 || n >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("projections n=", n, ": want 1 .. 2^31-1"));
  }
  if (d != 32 && d != 64 && d != 128) {
    return absl::InvalidArgumentError(absl::StrCat("projections d=", d, ": want 32, 64 or 128"));
  }
  return absl::OkStatus();
}

absl::Status ProjectionsLayerNormBackward(int64_t n, int d, const std::vector<ProjectionGrad>& sources,
                                          const LayerNormGrads& ln, cudaStream_t stream) {
  if (absl::Status v = ValidateProjectionsShape(n, d); !v.ok()) return v;
  if (sources.empty() || sources.size() > proj::kMaxSources) {
    return absl::InvalidArgumentError(absl::StrCat("projections sources=", sources.size(), ": want 1 .. 3"));
  }
  proj::Params p;
  p.sources = static_cast<int>(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    const std::string dy = absl::StrCat("sources[", s, "].dy"), w = absl::StrCat("sources[", s, "].w");
    if (absl::Status v = NotNull({{sources[s].dy, dy.c_str()}, {sources[s].w, w.c_str()}}); !v.ok()) return v;
    if (!Aligned16({sources[s].dy, sources[s].w})) {
      return absl::InvalidArgumentError(absl::StrCat("projections sources[", s, "]: want 16-byte aligned pointers"));
    }
    p.dy[s] = Bf16Bits(sources[s].dy);
    p.w[s] = Bf16Bits(sources[s].w);
  }
  if (absl::Status v = NotNull({{ln.x, "x"},
                                {ln.gamma, "gamma"},
                                {ln.mean, "mean"},
                                {ln.rstd, "rstd"},
                                {ln.dx, "dx"},
                                {ln.dgamma, "dgamma"},
                                {ln.dbeta, "dbeta"}});
      !v.ok()) {
    return v;
  }
  p.ln.n = n;
  p.ln.x = ln.x;
  p.ln.gamma = ln.gamma;
  p.ln.mean = ln.mean;
  p.ln.rstd = ln.rstd;
  p.ln.dx = ln.dx;
  const int64_t blocks = (n + ln::kBlockRows - 1) / ln::kBlockRows;
  return WithLayerNormPartials(blocks, d, ln.dgamma, ln.dbeta, stream, "ProjectionsLayerNormBackward scratch",
                               [&](float* g_part, float* b_part) {
                                 p.ln.g_part = g_part;
                                 p.ln.b_part = b_part;
                                 return d == 32   ? Launch<32>(p, stream)
                                        : d == 64 ? Launch<64>(p, stream)
                                                  : Launch<128>(p, stream);
                               });
}

}  // namespace gemtb::gpu::train
