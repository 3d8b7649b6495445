// GDPA (gpu/train/gdpa.h's contract: the same GdpaBatch, jagged layout, masks and math) on tensor
// cores. The tensors are fp32 or bf16 in global memory (one overload each): fp32 q, k, v, d_o are
// rounded to bf16 as they are staged in shared memory, bf16 ones staged as they are, so bf16 inputs
// holding the fp32 inputs rounded (RNE) give the fp32 outputs rounded (RNE), bit for bit, from half
// the bytes. The score-side tiles (post * silu(s), and its gradient) that multiply v, k or q are
// rounded to bf16 too; every product is summed in fp32 (mma.sync m16n8k16, bf16 operands, fp32
// accumulators). Faster than GdpaForward / GdpaBackward, and less exact: bf16 operands give relative
// errors of order 1e-3 to 1e-2 where those give 1e-6. No atomics and a fixed order of every sum:
// every run on the same GPU gives the same bytes.
// Device pointers, asynchronous on `stream`; the host fields are checked first by ValidateGdpaBatch.
// Where one side has at most 64 rows per sample and the other may have more than 256 (PMA's queries,
// cross-attention's keys), the walks over the long side are split across CTAs, their fp32 partial sums
// kept in a stream-ordered workspace (cudaMallocAsync / cudaFreeAsync on `stream`, at most 512 MiB)
// and added in a fixed order by a second kernel.
#ifndef GEMTB_GPU_TRAIN_GDPA_TENSOR_CORE_H_
#define GEMTB_GPU_TRAIN_GDPA_TENSOR_CORE_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gpu/train/gdpa.h"

namespace gemtb::gpu::train {

// The entries of a GdpaTiles list for the own side `own_keys` (keys: for dk and dv; else queries: for o
// and dq) of a batch whose host offsets are q_offsets and k_offsets [batch + 1]: one entry of
// kGdpaTileInts int32 for each 64-row tile of the own side that holds rows, sample by sample. The
// caller copies them to 16-byte aligned device memory.
inline constexpr int kGdpaTileInts = 8;
std::vector<int32_t> GdpaTilesOf(const std::vector<int32_t>& q_offsets, const std::vector<int32_t>& k_offsets,
                                 bool own_keys);
// The same entries written on the device from the device offsets, without a copy of the list: the
// own side's tiles per sample counted by `tile_offsets` (device, [batch + 1]: GdpaTileOffsets of the
// own side's host offsets), into `entries` (device, 16-byte aligned, kGdpaTileInts x
// tile_offsets[batch] int32).
std::vector<int32_t> GdpaTileOffsets(const std::vector<int32_t>& own_offsets);
absl::Status GdpaWriteTiles(int64_t batch, const int32_t* q_offsets, const int32_t* k_offsets,
                            const int32_t* tile_offsets, int32_t* entries, cudaStream_t stream);

// o (written) for every query row of every sample; a query with no kept key gets zeros. Rows outside
// every sample are not touched.
absl::Status GdpaForwardTensorCore(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o,
                                   cudaStream_t stream);
// With query_norm, the bf16 forward's q is a head RMS norm's input x (rows ld apart: ld >= heads * dh,
// even; x 4-byte aligned): the kernel norms the queries (then applies RoPE_t, t the row's position in
// its sample, where rope is given: qk_norm_rope.h's table [positions, dh] on the device) as it stages
// them, attends with them, and writes them to y (dense [rows, heads * dh], 4-byte aligned) and their
// inverse RMS to inv ([rows, heads]): HeadRmsNormForward's (QkNormRopeForward's) bytes, and o the bytes
// of this call on y, without the norm's pass over x. The backward then takes y as q and {x, inv, ld,
// rope} as its GdpaHeadNorm.
struct GdpaQueryNorm {
  int64_t ld = 0;
  const float* rope = nullptr;
  __nv_bfloat16* y = nullptr;
  float* inv = nullptr;
};
absl::Status GdpaForwardTensorCore(const GdpaBatch& b, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                   const __nv_bfloat16* v, __nv_bfloat16* o, cudaStream_t stream,
                                   const GdpaQueryNorm* query_norm = nullptr);

// dq, dk, dv are WRITTEN (not accumulated); scores recomputed. They must not overlap each other or
// the inputs. A query (key) that keeps no key (is kept by no query) gets zeros.
absl::Status GdpaBackwardTensorCore(const GdpaBatch& b, const float* q, const float* k, const float* v,
                                    const float* d_o, float* dq, float* dk, float* dv, cudaStream_t stream);
// A side given to the bf16 backward as a head RMS norm's output (head_rms_norm.h: rows = x * inv per
// row and head, x [rows, ld] bf16 with row stride ld, inv [rows, heads] fp32): key_norm for the keys,
// query_norm for the queries. That side's gradient is then written as dL/dx, rows ld apart (ld >=
// heads * dh, even; x 4-byte aligned): HeadRmsNormBackward's values on the gradient this call would
// otherwise write (rounded to bf16; up to the order of a row's fp32 dot product), without that array's
// write and read. The side's walks are then never split. With `rope` (qk_norm_rope.h's table
// [positions, dh] on the device, positions at least the side's longest sample) the side is RoPE_t of the
// norm's output, t the row's position in its sample, and the gradient is QkNormRopeBackward's.
struct GdpaHeadNorm {
  const __nv_bfloat16* x = nullptr;
  const float* inv = nullptr;
  int64_t ld = 0;
  const float* rope = nullptr;
};
absl::Status GdpaBackwardTensorCore(const GdpaBatch& b, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                    const __nv_bfloat16* v, const __nv_bfloat16* d_o, __nv_bfloat16* dq,
                                    __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t stream,
                                    const GdpaHeadNorm* key_norm = nullptr,
                                    const GdpaHeadNorm* query_norm = nullptr);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GDPA_TENSOR_CORE_H_
