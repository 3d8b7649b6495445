// The small fp32 data-movement kernels the GPU model needs between its layers: bias rows (with a
// residual), column sums in a fixed order (of fp32 or bf16 rows), row gathers by index, scatter-adds,
// elementwise sums, rounding to bf16. Deterministic (no atomics); each
// call is asynchronous on `stream` and validates its sizes first.
#ifndef GEMTB_GPU_TRAIN_MODEL_KERNELS_H_
#define GEMTB_GPU_TRAIN_MODEL_KERNELS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

// y[r, c] = v[c], or residual[r, c] + v[c] when residual is not null, for r < rows, c < cols;
// residual and y with row stride ldy (y may be residual).
absl::Status BiasRows(const float* residual, const float* v, int64_t rows, int64_t cols, float* y, int64_t ldy,
                      cudaStream_t stream);
// Rows of one block of the partitioned sums below.
inline constexpr int64_t kColumnSumsBlockRows = 64;
// out[c] (+)= the sum over rows of x[r * ldx + c], as a fixed tree: up to kColumnSumsBlockRows rows
// in order r = 0, 1, ...; beyond, the rows' blocks of kColumnSumsBlockRows (each summed in order)
// become the rows of the same sum, one level up, until one block is left. Deterministic; stream-
// ordered scratch for the block sums. Short blocks keep many threads' loads in flight, where one
// thread walking thousands of rows waits on every load in turn.
absl::Status ColumnSums(const float* x, int64_t rows, int64_t cols, int64_t ldx, float* out, bool accumulate,
                        cudaStream_t stream);
// The same over bf16 rows (each value widened exactly; the sums fp32, in the same tree).
absl::Status ColumnSums(const __nv_bfloat16* x, int64_t rows, int64_t cols, int64_t ldx, float* out, bool accumulate,
                        cudaStream_t stream);
// ColumnSums of two fp32 matrices of the same shape, x and x + x_stride ([rows, cols] each, rows
// contiguous), into out0 and out1: each by its own tree (two ColumnSums calls' bytes), one launch a
// level for both. For LayerNorm's dgamma and dbeta from their blocks' partial rows.
absl::Status ColumnSumsPair(const float* x, int64_t rows, int64_t cols, int64_t x_stride, float* out0, float* out1,
                            bool accumulate, cudaStream_t stream);
// The same for three matrices, x + m x_stride into out0, out1 and out2: LayerNorm's dgamma and dbeta
// and the sums of the gradient it hands on (layer_norm.h's Bf16Handoff).
absl::Status ColumnSumsTriple(const float* x, int64_t rows, int64_t cols, int64_t x_stride, float* out0, float* out1,
                              float* out2, bool accumulate, cudaStream_t stream);
// Both of the above in one read of x [rows, cols] (rows contiguous): y = x rounded to bf16 (ToBf16's
// bytes) and out (+)= x's column sums (ColumnSums' tree and bytes). For a gradient that a bf16 product
// reads and whose column sums are a bias's gradient.
absl::Status ToBf16WithColumnSums(const float* x, int64_t rows, int64_t cols, __nv_bfloat16* y, float* out,
                                  bool accumulate, cudaStream_t stream);
// GELU's backward and its result's column sums in one pass: du = dg GELU'(u) over [rows, cols] (rows
// contiguous), rounded to bf16 (GeluBackward's bytes), and out (+)= du's column sums (ColumnSums' tree
// and bytes over du). For the input gradient of a product whose bias gradient is du's column sums.
absl::Status GeluBackwardWithColumnSums(const __nv_bfloat16* u, const __nv_bfloat16* dg, int64_t rows, int64_t cols,
                                        __nv_bfloat16* du, float* out, bool accumulate, cudaStream_t stream);
// y[e] = x[e] rounded to bf16 (to nearest, ties to even), e < count.
absl::Status ToBf16(const float* x, int64_t count, __nv_bfloat16* y, cudaStream_t stream);
// Up to three fp32 matrices [rows, cols[i]] (rows contiguous) standing side by side as the column blocks
// of one [rows, cols[0] + ... + cols[count - 1]] matrix, block 0 leftmost: such as the weights (or
// biases, rows = 1) of the projections that one product computes together.
inline constexpr int kMaxColumnBlocks = 3;
template <typename P>
struct ColumnBlocks {
  int count = 0;
  P at[kMaxColumnBlocks] = {};
  int64_t cols[kMaxColumnBlocks] = {};
};
// packed [rows, sum cols] (bf16, rows contiguous) = the blocks side by side, each value rounded to bf16.
absl::Status PackColumnsToBf16(const ColumnBlocks<const float*>& blocks, int64_t rows, __nv_bfloat16* packed,
                               cudaStream_t stream);
// Each block += its columns of packed [rows, sum cols] (fp32, rows contiguous): a product's gradient of
// the side-by-side blocks added to each block's own gradient.
absl::Status AddColumnBlocks(const float* packed, int64_t rows, const ColumnBlocks<float*>& blocks,
                             cudaStream_t stream);
// dst[r] (+)= src[index[r]] for rows of `width` floats; index[r] < 0 reads zeros (and adds nothing).
// index is device memory [rows].
absl::Status GatherRows(const float* src, const int32_t* index, int64_t rows, int64_t width, float* dst,
                        bool accumulate, cudaStream_t stream);
// dst[index[r]] += src[r] for index[r] >= 0; the indices must be distinct (no two rows of src add to
// one row of dst), which is what makes the adds race-free and their result independent of order.
absl::Status ScatterAddRows(const float* src, const int32_t* index, int64_t rows, int64_t width, float* dst,
                            cudaStream_t stream);
// A sequence's event rows as embedding outputs, device arrays [events, width]: event e's row is
// (item[e] + action[e]) + dt[e] (the oracle's order of the three lookups' sum); action and dt null:
// item holds the rows themselves.
struct EventRows {
  const float* item = nullptr;
  const float* action = nullptr;
  const float* dt = nullptr;
};
// Layer 1's rows of a jagged sequence (SequenceRowIndex's cls and event, device [rows]): dst[r] =
// cls_src[cls[r]] where cls[r] >= 0, else event event[r]'s row of `events` where event[r] >= 0, else
// zeros; rows of `width` floats. One pass: the event's sum is formed as the row is written.
absl::Status AssembleSequenceRows(const float* cls_src, const int32_t* cls, const EventRows& events,
                                  const int32_t* event, int64_t rows, int64_t width, float* dst, cudaStream_t stream);
// The row indices of a jagged sequence whose sample b has rows [row_off[b], row_off[b + 1]): its first
// n_cls rows are CLS rows, the rest its events, event e of sample b the sequence's event
// event_off[b] + e. cls[row] = b n_cls + r for CLS row r (else -1), event[row] = the row's event
// (else -1), event_row[event] = its row. Device arrays: row_off, event_off [B + 1]; cls, event
// [row_off[B]]; event_row [event_off[B]].
absl::Status SequenceRowIndex(const int32_t* row_off, const int32_t* event_off, int64_t batch, int n_cls, int32_t* cls,
                              int32_t* event, int32_t* event_row, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_MODEL_KERNELS_H_
