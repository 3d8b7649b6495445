// The Philox table init on the device: the same
// InitValue as the oracle, then RNE to storage, one thread per 4-column chunk.
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_row_ops.h"

namespace gemtb::gpu::embedding {
namespace {

__global__ void InitTableKernel(const TableParams t, uint64_t seed) {
  const int64_t chunks = t.rows * (t.dim / kChunk);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < chunks;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / (t.dim / kChunk);
    const int64_t c = (i % (t.dim / kChunk)) * kChunk;
    float w[kChunk];
    for (int k = 0; k < kChunk; ++k) {
      w[k] = em::StoreRne(em::InitValue(seed, t.table, t.global_rows, t.global_dim, t.row_base + row, t.col_base + c + k), t.dtype);
    }
    StoreChunk(t, row, c, w);
  }
}

}  // namespace

absl::Status LaunchInitTable(const TableParams& table, uint64_t seed) {
  const int64_t chunks = table.rows * (table.dim / kChunk);
  if (chunks == 0) return absl::OkStatus();
  const int64_t blocks = std::min<int64_t>((chunks + 255) / 256, 132 * 32);
  InitTableKernel<<<static_cast<unsigned>(blocks), 256>>>(table, seed);
  return CudaOk(cudaGetLastError(), "launch of the table init kernel");
}

}  // namespace gemtb::gpu::embedding
