// The launches of the backward fused with the optimizers (launch.h); the algorithm and its kernels
// are backward_kernels.cuh's.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "gpu/common/device_buffer.h"
#include "gpu/common/sm_count.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/backward_kernels.cuh"
#include "gpu/embedding/launch.h"
#include "model/common/status_macros.h"

namespace gemtb::gpu::embedding {
namespace {

using namespace backward_kernels;  // the kernels this file launches

// Records phase boundary `i` when the caller times the phases.
void MarkPhase(const BackwardBuffers& b, int i) {
  if (b.phase_events != nullptr) cudaEventRecord(b.phase_events[i]);
}

unsigned Blocks(int64_t items, int64_t per_block) { return static_cast<unsigned>((items + per_block - 1) / per_block); }

}  // namespace

absl::StatusOr<size_t> BackwardTempBytes(int64_t num_values) {
  const int n = static_cast<int>(num_values);
  size_t sort_bytes = 0, scan_bytes = 0;
  GEMTB_RETURN_IF_ERROR(CudaOk(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint64_t*>(nullptr),
                                                               static_cast<uint64_t*>(nullptr),
                                                               static_cast<const int64_t*>(nullptr),
                                                               static_cast<int64_t*>(nullptr), n),
                               "cub::DeviceRadixSort::SortPairs (size query)"));
  GEMTB_RETURN_IF_ERROR(CudaOk(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<const int32_t*>(nullptr),
                                                             static_cast<int32_t*>(nullptr), n),
                               "cub::DeviceScan::ExclusiveSum (size query)"));
  return std::max(sort_bytes, scan_bytes);
}

absl::Status LaunchBackward(const LaunchParams& p, int64_t num_values, const BackwardBuffers& b) {
  const int64_t bags = p.kjt.num_keys * p.kjt.batch;
  if (bags == 0 || num_values == 0) {
    for (int i = 0; i <= kBackwardPhases; ++i) MarkPhase(b, i);
    return absl::OkStatus();
  }
  const int n = static_cast<int>(num_values);  // api.cc keeps num_values below 2^31
  MarkPhase(b, 0);
  OccurrenceKernel<<<Blocks(bags, kBagWarps), kBagWarps * 32>>>(p, b);
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the occurrence kernel"));
  MarkPhase(b, 1);
  size_t temp = b.cub_temp_bytes;
  GEMTB_RETURN_IF_ERROR(CudaOk(cub::DeviceRadixSort::SortPairs(b.cub_temp, temp, b.keys_in, b.keys_out, b.order_in,
                                                               b.order_out, n, 0, b.sort_end_bit),
                               "cub::DeviceRadixSort::SortPairs"));
  MarkPhase(b, 2);
  RunHeadKernel<<<Blocks(n, kThreads), kThreads>>>(b, n);
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the run-head kernel"));
  temp = b.cub_temp_bytes;
  GEMTB_RETURN_IF_ERROR(CudaOk(cub::DeviceScan::ExclusiveSum(b.cub_temp, temp, b.run_head, b.run_index, n),
                               "cub::DeviceScan::ExclusiveSum"));
  RunStartKernel<<<Blocks(n, kThreads), kThreads>>>(b, n);
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the run-start kernel"));
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaMemsetAsync(b.num_hot_runs, 0, sizeof(int32_t)), "reset of the hot-run count"));
  HotRunListKernel<<<Blocks(n, kThreads), kThreads>>>(b);
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the hot-run list kernel"));
  MarkPhase(b, 3);
  // At most one run per occurrence: warps past the device-side run count return at once, so the
  // host never waits for that count (nor for the hot-run count below).
  const size_t shared_bytes = static_cast<size_t>(kRowWarps) * 2 * b.max_dim * sizeof(float);
  if (b.num_batch_blocks > 1) {
    RowUpdateKernel<true><<<Blocks(Blocks(n, 32), kRowWarps), kRowWarps * 32, shared_bytes>>>(p, b);
  } else {
    RowUpdateKernel<false><<<Blocks(Blocks(n, 32), kRowWarps), kRowWarps * 32, shared_bytes>>>(p, b);
  }
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the row update kernel"));
  MarkPhase(b, 4);
  // The kernel's limit is a process-wide attribute, the same value whoever sets it, so modules
  // launching from other threads cannot lower it between another's setting and launch.
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaFuncSetAttribute(HotRowKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(kHotSharedBytes)),
                               "shared memory of the hot-row kernel"));
  // Per slice, twice the SMs' count of blocks (one block fits an SM: its shared memory) take the hot
  // runs in turn: the list's count stays on the device, and a grid of its capacity was thousands
  // of blocks that found no run.
  const auto hot_blocks = static_cast<unsigned>(std::min<int64_t>(HotRunCapacity(n), 2 * HopperSmCount()));
  const auto slices = static_cast<unsigned>((b.max_dim + kHotCols - 1) / kHotCols);
  HotRowKernel<<<dim3(hot_blocks, slices), kHotThreads, kHotSharedBytes>>>(p, b);
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the hot-row kernel"));
  HotRowApplyKernel<<<Blocks(HotRunCapacity(n), kRowWarps), kRowWarps * 32, shared_bytes>>>(p, b);
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "launch of the hot-row apply kernel"));
  MarkPhase(b, 5);
  return absl::OkStatus();
}

absl::Status LaunchApplyRows(const LaunchParams& p, int64_t num_values, const BackwardBuffers& b,
                             const float* square_sums) {
  if (p.kjt.num_keys * p.kjt.batch == 0 || num_values == 0) return absl::OkStatus();
  const size_t shared_bytes = static_cast<size_t>(kRowWarps) * 2 * b.max_dim * sizeof(float);
  ApplyRowsKernel<<<Blocks(num_values, kRowWarps), kRowWarps * 32, shared_bytes>>>(p, b, square_sums);
  return CudaOk(cudaGetLastError(), "launch of the apply-rows kernel");
}

}  // namespace gemtb::gpu::embedding
