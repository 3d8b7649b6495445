// model_kernels.h's ColumnSums tree in one launch, device code only: model_kernels.cu launches it, and
// the CPU fiber emulation (tests/gpu/emulation/) builds it too, where the explicitly rounded operations
// are the host's IEEE fp32 operations, so the emulated bytes are the device's. Rows are fp32 or bf16
// (T: float, or uint16_t holding bf16 bits, widened exactly). The tree: level 0's rows are the sums of
// the rows' 64-row blocks, level l + 1's row g the sum of level l's rows [64 g, 64 g + 64), and the last
// level (at most 64 rows) is summed into the output; every sum adds in row order from +0. A block forms
// one level-0 row; the last block of each 64-row group to finish forms the group's row of the next
// level, and so on up (a counter a group, zero before and after the launch), so the levels above the
// first cost no launches of their own. Given `rounded`, the same pass over fp32 rows also writes them
// rounded to bf16 (to nearest, ties to even): a gradient that a bf16 product reads and whose column sums
// are a bias's gradient is then read once, not twice; so is GELU's backward result
// (GeluBackwardBlockSumsKernel).
#ifndef GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/mma.cuh"
#include "gpu/train/gelu.cuh"

namespace gemtb::gpu::train::colsum {

// Rows of one block of the tree (model_kernels.h's kColumnSumsBlockRows).
constexpr int64_t kBlockRows = 64;

__device__ __forceinline__ float Load(const float* at) { return *at; }
__device__ __forceinline__ float Load(const uint16_t* at) { return Storage<ElementType::kBFloat16>::ToFloat(*at); }

// The most levels a tree has: 64^6 rows exceed a grid's 65,535 x 64.
constexpr int kMaxLevels = 6;

// The tree of `count` (blockIdx.z) matrices of the same shape, `cols` columns each.
struct Tree {
  int levels;                  // rows[levels - 1] <= kBlockRows < rows[levels - 2]
  int64_t rows[kMaxLevels];    // level l's rows: rows[0] the first level's blocks
  float* partial[kMaxLevels];  // level l's rows of matrix z at partial[l] + z rows[l] cols
  unsigned* counters;          // a counter a group of a level, matrix and column block: zero at launch
  float* out[2];               // matrix z's sums, added to out[z] with accumulate
  bool accumulate;
};

__host__ __device__ constexpr int64_t Groups(int64_t rows) { return (rows + kBlockRows - 1) / kBlockRows; }

// Counters a matrix and column block of a tree takes: one a group of every level.
__host__ __device__ inline int64_t TreeCounters(const Tree& t) {
  int64_t n = 0;
  for (int l = 0; l < t.levels; ++l) n += Groups(t.rows[l]);
  return n;
}

// The block's level-0 row `first` (kVec columns a thread from column c, for active threads) carried up
// the tree: stored, counted into its group, and by the group's last block summed into the next level,
// until the last level's sum reaches the output. Every thread of the block calls it. Reads of other
// blocks' rows bypass L1 (__ldcg): a line cached there before they were written would be stale.
template <int kVec>
__device__ inline void FinishTree(const Tree& t, int64_t cols, int64_t c, bool active, float (&s)[kVec]) {
  const int64_t z = blockIdx.z;
  unsigned* counters = t.counters + (z * gridDim.x + blockIdx.x) * TreeCounters(t);
  int64_t row = blockIdx.y;
  for (int l = 0; l < t.levels; ++l) {
    const int64_t n = t.rows[l];
    float* level = t.partial[l] + z * n * cols;
    if (active) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) level[row * cols + c + i] = s[i];
    }
    __threadfence();  // the row before the count that lets another block read it
    __syncthreads();
    const int64_t g = row / kBlockRows, first = g * kBlockRows;
    const int64_t size = n - first < kBlockRows ? n - first : kBlockRows;
    bool last = false;
    if (threadIdx.x == 0) {
      last = atomicAdd(counters + g, 1u) == static_cast<unsigned>(size - 1);
      if (last) counters[g] = 0;  // every block of the group has counted: zero for the next launch
    }
    if (!__syncthreads_or(last)) return;
    if (active) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) s[i] = 0.0f;
      for (int64_t r = first; r < first + size; ++r) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) s[i] = __fadd_rn(s[i], __ldcg(level + r * cols + c + i));
      }
    }
    if (l == t.levels - 1) {  // one group: the sums
      if (active) {
        float* out = t.out[z];
#pragma unroll
        for (int i = 0; i < kVec; ++i) out[c + i] = t.accumulate ? __fadd_rn(out[c + i], s[i]) : s[i];
      }
      return;
    }
    counters += Groups(n);
    row = g;
  }
}

// Level 0's row blockIdx.y: the sum of column c over rows [blockIdx.y kBlockRows, + kBlockRows), added
// in row order from 0, then the tree; one thread a column, so adjacent threads read adjacent values of a
// row. With `rounded` (not null; rows `cols` apart): rounded[r, c] = x[r, c] in bf16 for the same rows.
// A grid of several z takes as many matrices of the same shape, matrix z at x + z x_stride.
template <typename T>
__global__ void ColumnBlockSumsKernel(const T* x, int64_t rows, int64_t cols, int64_t ldx, uint16_t* rounded,
                                      int64_t x_stride, Tree tree) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = c < cols;
  x += blockIdx.z * x_stride;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = r0 + kBlockRows < rows ? r0 + kBlockRows : rows;
  float s[1] = {0.0f};
  if (!active) {
  } else if (rounded != nullptr) {
#pragma unroll 8
    for (int64_t r = r0; r < r1; ++r) {
      const float v = Load(x + r * ldx + c);
      rounded[r * cols + c] = Storage<ElementType::kBFloat16>::FromFloat(v);
      s[0] = __fadd_rn(s[0], v);
    }
  } else {
#pragma unroll 16
    for (int64_t r = r0; r < r1; ++r) s[0] = __fadd_rn(s[0], Load(x + r * ldx + c));
  }
  FinishTree<1>(tree, cols, c, active, s);
}

// kVec bf16 values (their bits) at `at`: one 16-byte access at kVec = 8 (at 16-byte aligned), else
// one 2-byte access.
template <int kVec>
__device__ __forceinline__ void LoadBf16(const uint16_t* at, uint16_t (&v)[kVec]) {
  if constexpr (kVec == 8) {
    const uint4 w = *reinterpret_cast<const uint4*>(at);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = static_cast<uint16_t>(words[i] & 0xFFFFu);  // the lower address holds the lower half
      v[2 * i + 1] = static_cast<uint16_t>(words[i] >> 16);
    }
  } else {
    static_assert(kVec == 1, "1 or 8 values");
    v[0] = *at;
  }
}

template <int kVec>
__device__ __forceinline__ void StoreBf16(uint16_t* at, const uint16_t (&v)[kVec]) {
  if constexpr (kVec == 8) {
    uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) words[i] = static_cast<uint32_t>(v[2 * i]) | static_cast<uint32_t>(v[2 * i + 1]) << 16;
    *reinterpret_cast<uint4*>(at) = make_uint4(words[0], words[1], words[2], words[3]);
  } else {
    at[0] = v[0];
  }
}

// GELU's backward with its result's column sums, for a product's input gradient du whose column sums
// are its bias's gradient: du[r, c] = dg[r, c] GELU'(u[r, c]) rounded to bf16 (the elementwise
// GeluBackward's bytes), and level 0's row blockIdx.y the sum of the block's rounded du widened, in row
// order from 0 (ColumnBlockSumsKernel's sum over du), then the tree, so du is not read again for the
// bias. bf16 rows as their bits, `cols` apart. A thread takes kVec adjacent columns: 8 (16-byte
// accesses, a sum per column; cols a multiple of 8 and the rows 16-byte aligned) or 1, with the same
// bytes either way.
template <int kVec>
__global__ void GeluBackwardBlockSumsKernel(const uint16_t* u, const uint16_t* dg, int64_t rows, int64_t cols,
                                            uint16_t* du, Tree tree) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  const bool active = c < cols;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = !active ? r0 : r0 + kBlockRows < rows ? r0 + kBlockRows : rows;
  float s[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) s[i] = 0.0f;
  [[maybe_unused]] constexpr int kUnroll = kVec == 8 ? 2 : 4;  // host compilers ignore the pragma
#pragma unroll kUnroll
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t e = r * cols + c;
    uint16_t uv[kVec], gv[kVec], d[kVec];
    LoadBf16<kVec>(u + e, uv);
    LoadBf16<kVec>(dg + e, gv);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      d[i] = Storage<ElementType::kBFloat16>::FromFloat(__fmul_rn(Load(&gv[i]), GeluGradOfBf16(Load(&uv[i]))));
      s[i] = __fadd_rn(s[i], Load(&d[i]));
    }
    StoreBf16<kVec>(du + e, d);
  }
  FinishTree<kVec>(tree, cols, c, active, s);
}

}  // namespace gemtb::gpu::train::colsum

#endif  // GEMTB_GPU_TRAIN_COLUMN_SUMS_KERNELS_CUH_
