#include "gpu/train/ffn_hidden_grad.h"

#include <cstdint>

#include "gpu/common/sm_count.h"
#include "gpu/train/ffn_forward.h"
#include "gpu/train/ffn_hidden_grad_kernel.cuh"
#include "gpu/train/kernel_utils.cuh"
#include "gpu/train/model_kernels.h"

namespace gemtb::gpu::train {

static_assert(ffn_hidden_grad::kBlockRows == kColumnSumsBlockRows, "the kernel writes the tree's first level");

absl::Status ValidateFfnHiddenGradShape(const FfnShape& s) {
  return ValidateFfnHopperShape(s, "ffn hidden gradient shape");
}

namespace {

// The kernel into p.partial (`blocks` rows of the tree's first level), then the tree's upper levels
// over it into db1.
absl::Status GradAndSums(const ffn_hidden_grad::Params& p, int64_t blocks, float* db1, bool accumulate,
                         cudaStream_t stream) {
  namespace k = ffn_hidden_grad;
  constexpr size_t kBytes = k::Layout::kBytes;
  if (absl::Status a = AllowSharedMemory(k::FfnHiddenGradKernel, kBytes, "FfnHiddenGradFused"); !a.ok()) return a;
  // Persistent: one CTA an SM (the kernel's shared memory allows no second), each walking its tiles.
  LaunchDependent(k::FfnHiddenGradKernel, PersistentGrid((p.n + k::kRows - 1) / k::kRows), k::kThreads, kBytes, stream,
                  p);
  if (absl::Status l = Launched("FfnHiddenGradFused"); !l.ok()) return l;
  return ColumnSums(p.partial, blocks, p.hidden, p.hidden, db1, accumulate, stream);
}

}  // namespace

absl::Status FfnHiddenGradFused(const FfnShape& s, const __nv_bfloat16* dy, const __nv_bfloat16* w2,
                                const __nv_bfloat16* u, __nv_bfloat16* du, float* db1, bool accumulate,
                                cudaStream_t stream) {
  if (absl::Status v = ValidateFfnHiddenGradShape(s); !v.ok()) return v;
  if (absl::Status v = NotNull({{dy, "dy"}, {w2, "w2"}, {u, "u"}, {du, "du"}, {db1, "db1"}}); !v.ok()) return v;
  if (absl::Status v = CheckAligned16({{dy, "dy"}, {w2, "w2"}, {u, "u"}, {du, "du"}, {db1, "db1"}}); !v.ok()) {
    return v;
  }
  namespace k = ffn_hidden_grad;
  const int64_t blocks = (s.n + k::kBlockRows - 1) / k::kBlockRows;  // the column-sum tree's first level
  float* partial = nullptr;
  if (absl::Status a = CudaOk(cudaMallocAsync(reinterpret_cast<void**>(&partial),
                                              static_cast<size_t>(blocks) * s.hidden * sizeof(float), stream),
                              "FfnHiddenGradFused scratch");
      !a.ok()) {
    return a;
  }
  k::Params p;
  p.n = s.n;
  p.hidden = s.hidden;
  p.dy = Bf16Bits(dy);
  p.w2 = Bf16Bits(w2);
  p.u = Bf16Bits(u);
  p.du = Bf16Bits(du);
  p.partial = partial;
  const absl::Status status = GradAndSums(p, blocks, db1, accumulate, stream);
  const absl::Status freed = CudaOk(cudaFreeAsync(partial, stream), "FfnHiddenGradFused scratch");
  return status.ok() ? freed : status;
}

}  // namespace gemtb::gpu::train
