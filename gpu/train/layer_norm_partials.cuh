// LayerNorm's parameter gradients from a backward kernel's per-block partial rows, as every LayerNorm
// backward forms them (layer_norm.cu, and the fused feed-forward's and projections' backward): scratch
// for the partial rows, the kernel, the partial rows added in block order, the scratch freed.
// nvcc-only (the callers are .cu files).
#ifndef GEMTB_GPU_TRAIN_LAYER_NORM_PARTIALS_CUH_
#define GEMTB_GPU_TRAIN_LAYER_NORM_PARTIALS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "gpu/train/kernel_utils.cuh"
#include "gpu/train/model_kernels.h"

namespace gemtb::gpu::train {

// dgamma += the column sums of g_part [blocks, width] and dbeta += those of b_part, in block order
// (ColumnSumsPair: ColumnSums' bytes), where launch(g_part, b_part) launches the kernel that writes
// them on `stream` and returns its launch's status. With handed_sums (null: none), a third matrix of
// partial rows follows b_part (at b_part + blocks * width: the sums of the gradient a LayerNorm hands
// on) and handed_sums += its column sums, the three in one tree of launches (ColumnSumsTriple).
// `what` names the scratch in errors.
template <typename Launch>
absl::Status WithLayerNormPartials(int64_t blocks, int64_t width, float* dgamma, float* dbeta, cudaStream_t stream,
                                   const char* what, Launch launch, float* handed_sums = nullptr) {
  const int64_t matrices = handed_sums != nullptr ? 3 : 2;
  float* part = nullptr;
  if (absl::Status a = CudaOk(
          cudaMallocAsync(reinterpret_cast<void**>(&part), matrices * blocks * width * sizeof(float), stream), what);
      !a.ok()) {
    return a;
  }
  const int64_t stride = blocks * width;
  const absl::Status launched = launch(part, part + stride);
  const absl::Status summed =
      !launched.ok() ? launched
      : handed_sums != nullptr
          ? ColumnSumsTriple(part, blocks, width, stride, dgamma, dbeta, handed_sums, true, stream)
          : ColumnSumsPair(part, blocks, width, stride, dgamma, dbeta, true, stream);
  const absl::Status freed = CudaOk(cudaFreeAsync(part, stream), what);
  return summed.ok() ? freed : summed;
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LAYER_NORM_PARTIALS_CUH_
