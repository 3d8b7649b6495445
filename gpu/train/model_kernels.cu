#include "gpu/train/model_kernels.h"

#include <algorithm>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpu/common/dependent_launch.cuh"
#include "gpu/train/column_sums_kernels.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kColumnBlock = kColumnSumsBlockRows;

unsigned Blocks(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

absl::Status ValidateMatrix(const char* what, int64_t rows, int64_t cols, int64_t ld) {
  if (rows < 0 || rows >= (int64_t{1} << 31) || cols < 1 || cols >= (int64_t{1} << 31) || ld < cols) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rows=", rows, " cols=", cols, " ld=", ld,
                                                   ": want rows 0 .. 2^31-1, cols 1 .. 2^31-1, ld >= cols"));
  }
  return absl::OkStatus();
}

// Row kernels: one warp per row (kRowsPerBlock rows per block), its lanes walking the row's columns
// 32 at a time. No index division per element: a flat index split into row and column by / and %
// on 64-bit integers costs more than the memory traffic of these kernels.
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

__device__ int64_t WarpRow() { return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y; }

unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }
const dim3 kRowBlock(kWarp, kRowsPerBlock);

__global__ void BiasRowsKernel(const float* residual, const float* v, int64_t rows, int64_t cols, float* y,
                               int64_t ldy) {
  AwaitPriorGrids();
  const int64_t r = WarpRow();
  if (r >= rows) return;
  float* out = y + r * ldy;
  if (residual) {
    const float* in = residual + r * ldy;
    for (int64_t c = threadIdx.x; c < cols; c += kWarp) out[c] = __fadd_rn(in[c], v[c]);
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += kWarp) out[c] = v[c];
  }
}

// Where ColumnSums writes: matrix m (blockIdx.y) of a launch into out[m].
struct SumOutputs {
  float* out[3];
};

template <typename T>
__global__ void ColumnSumsKernel(const T* x, int64_t rows, int64_t cols, int64_t ldx, int64_t x_stride,
                                 SumOutputs outs, bool accumulate) {
  AwaitPriorGrids();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  x += blockIdx.y * x_stride;
  float* out = outs.out[blockIdx.y];
  float s = 0.0f;
  for (int64_t r = 0; r < rows; ++r) s = __fadd_rn(s, ToFloat(x[r * ldx + c]));
  out[c] = accumulate ? __fadd_rn(out[c], s) : s;
}

__global__ void GatherRowsKernel(const float* src, const int32_t* index, int64_t rows, int64_t width, float* dst,
                                 bool accumulate) {
  AwaitPriorGrids();
  const int64_t r = WarpRow();
  if (r >= rows) return;
  const int32_t from = index[r];
  float* out = dst + r * width;
  if (from < 0) {
    if (!accumulate)
      for (int64_t c = threadIdx.x; c < width; c += kWarp) out[c] = 0.0f;
    return;
  }
  const float* in = src + static_cast<int64_t>(from) * width;
  for (int64_t c = threadIdx.x; c < width; c += kWarp) out[c] = accumulate ? __fadd_rn(out[c], in[c]) : in[c];
}

__global__ void ScatterAddRowsKernel(const float* src, const int32_t* index, int64_t rows, int64_t width,
                                     float* dst) {
  AwaitPriorGrids();
  const int64_t r = WarpRow();
  if (r >= rows) return;
  const int32_t to = index[r];
  if (to < 0) return;
  float* out = dst + static_cast<int64_t>(to) * width;
  const float* in = src + r * width;
  for (int64_t c = threadIdx.x; c < width; c += kWarp) out[c] = __fadd_rn(out[c], in[c]);
}

__device__ __forceinline__ float4 AddRn4(float4 a, float4 b) {
  return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

// A warp per row; kVec: every row and array 16-byte aligned, so a lane moves 4 values per access (at
// width 128 a row is one float4 of each array a lane, its loads issued together).
template <bool kVec>
__global__ void AssembleSequenceRowsKernel(const float* cls_src, const int32_t* cls, EventRows events,
                                           const int32_t* event, int64_t rows, int64_t width, float* dst) {
  AwaitPriorGrids();
  const int64_t r = WarpRow();
  if (r >= rows) return;
  const int32_t c = cls[r], e = event[r];
  float* out = dst + r * width;
  const float* a = nullptr;
  const float *b = nullptr, *t = nullptr;
  if (c >= 0) {
    a = cls_src + static_cast<int64_t>(c) * width;
  } else if (e >= 0) {
    const int64_t at = static_cast<int64_t>(e) * width;
    a = events.item + at;
    if (events.action != nullptr) b = events.action + at;
    if (events.dt != nullptr) t = events.dt + at;
  }
  if constexpr (kVec) {
    for (int64_t col = 4 * static_cast<int64_t>(threadIdx.x); col < width; col += 4 * kWarp) {
      float4 y = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (a != nullptr) y = *reinterpret_cast<const float4*>(a + col);
      if (b != nullptr) y = AddRn4(y, *reinterpret_cast<const float4*>(b + col));
      if (t != nullptr) y = AddRn4(y, *reinterpret_cast<const float4*>(t + col));
      *reinterpret_cast<float4*>(out + col) = y;
    }
  } else {
    for (int64_t col = threadIdx.x; col < width; col += kWarp) {
      float y = a != nullptr ? a[col] : 0.0f;
      if (b != nullptr) y = __fadd_rn(y, b[col]);
      if (t != nullptr) y = __fadd_rn(y, t[col]);
      out[col] = y;
    }
  }
}

// A block per sample, its threads over the sample's rows.
__global__ void SequenceRowIndexKernel(const int32_t* row_off, const int32_t* event_off, int n_cls, int32_t* cls,
                                       int32_t* event, int32_t* event_row) {
  AwaitPriorGrids();
  const int64_t b = blockIdx.x;
  const int32_t first = row_off[b], n = row_off[b + 1] - first, e0 = event_off[b];
  for (int32_t r = static_cast<int32_t>(threadIdx.x); r < n; r += static_cast<int32_t>(blockDim.x)) {
    const bool is_cls = r < n_cls;
    cls[first + r] = is_cls ? static_cast<int32_t>(b * n_cls + r) : -1;
    event[first + r] = is_cls ? -1 : e0 + (r - n_cls);
    if (!is_cls) event_row[e0 + (r - n_cls)] = first + r;
  }
}

}  // namespace

absl::Status BiasRows(const float* residual, const float* v, int64_t rows, int64_t cols, float* y, int64_t ldy,
                      cudaStream_t stream) {
  if (absl::Status s = ValidateMatrix("BiasRows", rows, cols, ldy); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  LaunchDependent(BiasRowsKernel, RowBlocks(rows), kRowBlock, 0, stream, residual, v, rows, cols, y, ldy);
  return Launched("BiasRows");
}

namespace {

static_assert(colsum::kBlockRows == kColumnBlock, "column_sums_kernels.cuh's blocks are ColumnSums' blocks");

template <typename T>
absl::Status ColumnSumsOf(const T* x, int64_t rows, int64_t cols, int64_t ldx, SumOutputs outs, int count,
                          int64_t x_stride, bool accumulate, cudaStream_t stream, __nv_bfloat16* rounded = nullptr);

// The tree of ColumnSums from its first level on, for `count` matrices of [rows, cols]: scratch for
// the 64-row blocks' sums, first(grid, threads, partial, per_matrix) launching the first level's
// kernel (a thread a column, block y a 64-row block, z a matrix; matrix z's sums at partial + z
// per_matrix), then the same sums over the block sums (the upper levels), the scratch freed. `what`
// names the first level in errors.
template <typename First>
absl::Status FromFirstLevel(int64_t rows, int64_t cols, SumOutputs outs, int count, bool accumulate,
                            cudaStream_t stream, const char* what, First first) {
  const int64_t blocks = (rows + kColumnBlock - 1) / kColumnBlock;
  if (blocks > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rows=", rows, ": want <= 65535 * ", kColumnBlock));
  }
  const int64_t per_matrix = blocks * cols;  // block sums of one matrix
  float* partial = nullptr;
  if (absl::Status a = CudaOk(cudaMallocAsync(reinterpret_cast<void**>(&partial), count * per_matrix * sizeof(float),
                                              stream),
                              "ColumnSums scratch");
      !a.ok())
    return a;
  // A block as wide as the columns (whole warps, at most kThreads): at d = 128 a 256-thread block would
  // idle half its threads and halve the loads an SM keeps in flight.
  const int threads = static_cast<int>(std::min<int64_t>(kThreads, (cols + kWarp - 1) / kWarp * kWarp));
  const dim3 grid(static_cast<unsigned>((cols + threads - 1) / threads), static_cast<unsigned>(blocks),
                  static_cast<unsigned>(count));
  first(grid, threads, partial, per_matrix);
  const absl::Status launched = Launched(what);
  const absl::Status upper =
      launched.ok() ? ColumnSumsOf<float>(partial, blocks, cols, cols, outs, count, per_matrix, accumulate, stream)
                    : launched;
  const absl::Status freed = CudaOk(cudaFreeAsync(partial, stream), "ColumnSums scratch");
  return upper.ok() ? freed : upper;
}

// The grid of a first-level kernel taking kVec adjacent columns a thread, from FromFirstLevel's grid of
// one column a thread: blocks as wide as the columns' lanes (whole warps, at most `threads`), the same
// rows (y) and matrices (z).
struct VectorLaunch {
  dim3 grid;
  int threads;
};
VectorLaunch VectorGrid(dim3 grid, int threads, int64_t cols, int vec) {
  const int64_t lanes = cols / vec;
  const int lane_threads = static_cast<int>(std::min<int64_t>(threads, (lanes + kWarp - 1) / kWarp * kWarp));
  return {dim3(static_cast<unsigned>((lanes + lane_threads - 1) / lane_threads), grid.y, grid.z), lane_threads};
}

// ColumnSums for fp32 or bf16 rows (the tree's upper levels are fp32 block sums), of `count` (1 to 3)
// matrices of the same shape at once: matrix m at x + m x_stride into outs.out[m], each by its own
// tree, one launch a level for all. With `rounded` (one fp32 matrix with ldx = cols), the first level
// also writes the rows rounded to bf16; a single level then goes through the block kernel too, whose
// one block sum is the sum the direct kernel forms (both start from +0 and add in row order, so the
// second level's 0 + sum is that sum, bit for bit).
template <typename T>
absl::Status ColumnSumsOf(const T* x, int64_t rows, int64_t cols, int64_t ldx, SumOutputs outs, int count,
                          int64_t x_stride, bool accumulate, cudaStream_t stream, __nv_bfloat16* rounded) {
  if (absl::Status s = ValidateMatrix("ColumnSums", rows, cols, ldx); !s.ok()) return s;
  if (rows <= kColumnBlock && (rounded == nullptr || rows == 0)) {
    LaunchDependent(ColumnSumsKernel<T>, dim3(Blocks(cols), static_cast<unsigned>(count)), kThreads, 0, stream, x, rows,
                    cols, ldx, x_stride, outs, accumulate);
    return Launched("ColumnSums");
  }
  using Rows = typename BitsOf<T>::type;  // bf16 rows as their bits
  // 16 bytes a thread a row (4 fp32 columns, 8 bf16 ones) where every matrix's rows start 16-byte
  // aligned (and the rounded rows 8-byte aligned) and there are thousands of 64-row blocks: the same
  // sums, a quarter or an eighth of the loads. With fewer blocks the wide form measured slower (a
  // quarter of the threads; tools/bench/NOTES.md, session 33).
  constexpr int kVec = std::is_same_v<T, float> ? 4 : 8;
  constexpr int64_t kWideRows = 2048 * kColumnBlock;
  const bool wide = rows >= kWideRows && cols % kVec == 0 && ldx % kVec == 0 && x_stride % kVec == 0 &&
                    reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(rounded) % 8 == 0;
  return FromFirstLevel(rows, cols, outs, count, accumulate, stream, "ColumnSums (blocks)",
                        [&](dim3 grid, int threads, float* partial, int64_t per_matrix) {
                          const auto* xr = reinterpret_cast<const Rows*>(x);
                          auto* rr = reinterpret_cast<uint16_t*>(rounded);
                          if (!wide) {
                            LaunchDependent(colsum::ColumnBlockSumsKernel<Rows>, grid, threads, 0, stream, xr, rows,
                                            cols, ldx, partial, rr, x_stride, per_matrix);
                            return;
                          }
                          const VectorLaunch v = VectorGrid(grid, threads, cols, kVec);
                          LaunchDependent(colsum::ColumnBlockSumsKernel<Rows, kVec>, v.grid, v.threads, 0, stream, xr,
                                          rows, cols, ldx, partial, rr, x_stride, per_matrix);
                        });
}

// One matrix into `out`.
template <typename T>
absl::Status ColumnSumsOf(const T* x, int64_t rows, int64_t cols, int64_t ldx, float* out, bool accumulate,
                          cudaStream_t stream, __nv_bfloat16* rounded = nullptr) {
  return ColumnSumsOf(x, rows, cols, ldx, SumOutputs{{out}}, 1, 0, accumulate, stream, rounded);
}

// Four values a thread where x and y allow 16- and 8-byte accesses (one load and one store instead
// of four each), else one; the same rounding either way.
__global__ void ToBf16Kernel(const float* x, int64_t count, __nv_bfloat16* y) {
  AwaitPriorGrids();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 8 == 0) {
    const int64_t quads = count / 4;
    for (int64_t q = first; q < quads; q += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[q];
      __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
      uint2 packed;
      packed.x = *reinterpret_cast<uint32_t*>(&lo);
      packed.y = *reinterpret_cast<uint32_t*>(&hi);
      reinterpret_cast<uint2*>(y)[q] = packed;
    }
    for (int64_t e = quads * 4 + first; e < count; e += stride) y[e] = __float2bfloat16_rn(x[e]);
    return;
  }
  for (int64_t e = first; e < count; e += stride) y[e] = __float2bfloat16_rn(x[e]);
}

// Element e of the [rows, total] side-by-side matrix: its block and the element's index in the block.
template <typename P>
__device__ __forceinline__ int64_t BlockElement(const ColumnBlocks<P>& b, int64_t total, int64_t e, int* block) {
  const int64_t r = e / total;
  int64_t c = e % total;
  int i = 0;
  while (i + 1 < b.count && c >= b.cols[i]) c -= b.cols[i++];
  *block = i;
  return r * b.cols[i] + c;
}

__global__ void PackColumnsToBf16Kernel(ColumnBlocks<const float*> b, int64_t rows, int64_t total,
                                        __nv_bfloat16* packed) {
  AwaitPriorGrids();
  const int64_t count = rows * total;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int i = 0;
    const int64_t at = BlockElement(b, total, e, &i);
    packed[e] = __float2bfloat16_rn(b.at[i][at]);
  }
}

__global__ void AddColumnBlocksKernel(const float* packed, int64_t rows, int64_t total, ColumnBlocks<float*> b) {
  AwaitPriorGrids();
  const int64_t count = rows * total;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int i = 0;
    const int64_t at = BlockElement(b, total, e, &i);
    b.at[i][at] += packed[e];
  }
}

}  // namespace

absl::Status ColumnSums(const float* x, int64_t rows, int64_t cols, int64_t ldx, float* out, bool accumulate,
                        cudaStream_t stream) {
  return ColumnSumsOf(x, rows, cols, ldx, out, accumulate, stream);
}

absl::Status ColumnSums(const __nv_bfloat16* x, int64_t rows, int64_t cols, int64_t ldx, float* out, bool accumulate,
                        cudaStream_t stream) {
  return ColumnSumsOf(x, rows, cols, ldx, out, accumulate, stream);
}

absl::Status ColumnSumsPair(const float* x, int64_t rows, int64_t cols, int64_t x_stride, float* out0, float* out1,
                            bool accumulate, cudaStream_t stream) {
  return ColumnSumsOf(x, rows, cols, cols, SumOutputs{{out0, out1}}, 2, x_stride, accumulate, stream);
}

absl::Status ColumnSumsTriple(const float* x, int64_t rows, int64_t cols, int64_t x_stride, float* out0, float* out1,
                              float* out2, bool accumulate, cudaStream_t stream) {
  return ColumnSumsOf(x, rows, cols, cols, SumOutputs{{out0, out1, out2}}, 3, x_stride, accumulate, stream);
}

absl::Status ToBf16WithColumnSums(const float* x, int64_t rows, int64_t cols, __nv_bfloat16* y, float* out,
                                  bool accumulate, cudaStream_t stream) {
  return ColumnSumsOf(x, rows, cols, cols, out, accumulate, stream, y);
}

absl::Status GeluBackwardWithColumnSums(const __nv_bfloat16* u, const __nv_bfloat16* dg, int64_t rows, int64_t cols,
                                        __nv_bfloat16* du, float* out, bool accumulate, cudaStream_t stream) {
  if (absl::Status s = ValidateMatrix("GeluBackwardWithColumnSums", rows, cols, cols); !s.ok()) return s;
  if (rows == 0) return ColumnSumsOf(du, rows, cols, cols, out, accumulate, stream);  // out as ColumnSums leaves it
  // Eight columns a thread where every row starts 16-byte aligned: 16-byte accesses instead of 2-byte
  // ones, the same bytes.
  const bool wide = cols % 8 == 0 && reinterpret_cast<uintptr_t>(u) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dg) % 16 == 0 && reinterpret_cast<uintptr_t>(du) % 16 == 0;
  return FromFirstLevel(rows, cols, SumOutputs{{out}}, 1, accumulate, stream, "GeluBackwardWithColumnSums",
                        [&](dim3 grid, int threads, float* partial, int64_t) {
                          const auto* ub = reinterpret_cast<const uint16_t*>(u);
                          const auto* gb = reinterpret_cast<const uint16_t*>(dg);
                          auto* db = reinterpret_cast<uint16_t*>(du);
                          if (!wide) {
                            LaunchDependent(colsum::GeluBackwardBlockSumsKernel<1>, grid, threads, 0, stream, ub, gb,
                                            rows, cols, db, partial);
                            return;
                          }
                          const VectorLaunch v = VectorGrid(grid, threads, cols, 8);
                          LaunchDependent(colsum::GeluBackwardBlockSumsKernel<8>, v.grid, v.threads, 0, stream, ub, gb,
                                          rows, cols, db, partial);
                        });
}

absl::Status ToBf16(const float* x, int64_t count, __nv_bfloat16* y, cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("ToBf16: count=", count, ": want >= 0"));
  const int64_t blocks = std::min<int64_t>((count / 4 + kThreads) / kThreads, 65535);
  LaunchDependent(ToBf16Kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, x, count, y);
  return Launched("ToBf16");
}

namespace {

// The blocks' total width, after checking them (the error names `what` and the field).
template <typename P>
absl::StatusOr<int64_t> ColumnBlocksWidth(const char* what, const ColumnBlocks<P>& b, int64_t rows) {
  if (b.count < 1 || b.count > kMaxColumnBlocks) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": count=", b.count, ": want 1 .. ", kMaxColumnBlocks));
  }
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": rows=", rows, ": want >= 0"));
  int64_t total = 0;
  for (int i = 0; i < b.count; ++i) {
    if (b.cols[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": cols[", i, "]=", b.cols[i], ": want >= 1"));
    }
    if (b.at[i] == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": at[", i, "] is null"));
    total += b.cols[i];
  }
  return total;
}

}  // namespace

absl::Status PackColumnsToBf16(const ColumnBlocks<const float*>& blocks, int64_t rows, __nv_bfloat16* packed,
                               cudaStream_t stream) {
  absl::StatusOr<int64_t> total = ColumnBlocksWidth("PackColumnsToBf16", blocks, rows);
  if (!total.ok()) return total.status();
  if (rows == 0) return absl::OkStatus();
  const int64_t blocks_needed = std::min<int64_t>((rows * *total + kThreads - 1) / kThreads, 65535);
  LaunchDependent(PackColumnsToBf16Kernel, static_cast<unsigned>(blocks_needed), kThreads, 0, stream, blocks, rows,
                  *total, packed);
  return Launched("PackColumnsToBf16");
}

absl::Status AddColumnBlocks(const float* packed, int64_t rows, const ColumnBlocks<float*>& blocks,
                             cudaStream_t stream) {
  absl::StatusOr<int64_t> total = ColumnBlocksWidth("AddColumnBlocks", blocks, rows);
  if (!total.ok()) return total.status();
  if (rows == 0) return absl::OkStatus();
  const int64_t blocks_needed = std::min<int64_t>((rows * *total + kThreads - 1) / kThreads, 65535);
  LaunchDependent(AddColumnBlocksKernel, static_cast<unsigned>(blocks_needed), kThreads, 0, stream, packed, rows,
                  *total, blocks);
  return Launched("AddColumnBlocks");
}

absl::Status GatherRows(const float* src, const int32_t* index, int64_t rows, int64_t width, float* dst,
                        bool accumulate, cudaStream_t stream) {
  if (absl::Status s = ValidateMatrix("GatherRows", rows, width, width); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  LaunchDependent(GatherRowsKernel, RowBlocks(rows), kRowBlock, 0, stream, src, index, rows, width, dst, accumulate);
  return Launched("GatherRows");
}

absl::Status ScatterAddRows(const float* src, const int32_t* index, int64_t rows, int64_t width, float* dst,
                            cudaStream_t stream) {
  if (absl::Status s = ValidateMatrix("ScatterAddRows", rows, width, width); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  LaunchDependent(ScatterAddRowsKernel, RowBlocks(rows), kRowBlock, 0, stream, src, index, rows, width, dst);
  return Launched("ScatterAddRows");
}

absl::Status AssembleSequenceRows(const float* cls_src, const int32_t* cls, const EventRows& events,
                                  const int32_t* event, int64_t rows, int64_t width, float* dst, cudaStream_t stream) {
  if (absl::Status s = ValidateMatrix("AssembleSequenceRows", rows, width, width); !s.ok()) return s;
  if (events.item == nullptr && (events.action != nullptr || events.dt != nullptr)) {
    return absl::InvalidArgumentError("AssembleSequenceRows: events.item is null where action or dt is given");
  }
  if (rows == 0) return absl::OkStatus();
  if (width % 4 == 0 && Aligned16({cls_src, events.item, events.action, events.dt, dst})) {
    LaunchDependent(AssembleSequenceRowsKernel<true>, RowBlocks(rows), kRowBlock, 0, stream, cls_src, cls, events,
                    event, rows, width, dst);
  } else {
    LaunchDependent(AssembleSequenceRowsKernel<false>, RowBlocks(rows), kRowBlock, 0, stream, cls_src, cls, events,
                    event, rows, width, dst);
  }
  return Launched("AssembleSequenceRows");
}

absl::Status SequenceRowIndex(const int32_t* row_off, const int32_t* event_off, int64_t batch, int n_cls, int32_t* cls,
                              int32_t* event, int32_t* event_row, cudaStream_t stream) {
  if (batch < 0 || batch >= (int64_t{1} << 31) || n_cls < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SequenceRowIndex: batch=", batch, " n_cls=", n_cls,
                                                   ": want 0 <= batch < 2^31, n_cls >= 0"));
  }
  if (batch == 0) return absl::OkStatus();
  LaunchDependent(SequenceRowIndexKernel, static_cast<unsigned>(batch), kThreads, 0, stream, row_off, event_off, n_cls,
                  cls, event, event_row);
  return Launched("SequenceRowIndex");
}

}  // namespace gemtb::gpu::train
