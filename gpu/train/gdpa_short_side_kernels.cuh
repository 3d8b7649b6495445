// GDPA where one side of every sample has at most kMaxShort rows: cross-attention's few keys a sample
// (the summaries), PMA's few queries (the seeds). There the tensor-core kernels' 64-row tiles hold a
// few real rows, and a CTA whose own side is that short walks the whole long side in series; these
// kernels instead give a CTA one (sample, head) and stream the long side through it once, in chunks of
// kChunk rows, computing every term with gdpa_exact.cuh's fp32 arithmetic on CUDA cores:
//
//  - a long row's outputs (cross-attention's o and dq, PMA's dk and dv) are short sums over the
//    sample's short rows, written as each chunk is done;
//  - a short row's outputs (cross-attention's dk and dv, PMA's o and dq) are long sums over the
//    sample's long rows, kept in registers across the chunks and written at the end.
//
// Every output element sums its terms in increasing order of the other side's rows, each product and
// sum rounded on its own, as gdpa.cu's fp32 kernels do: from the same input values the two give the
// same bytes. The values are the tensors' own for bf16 tensors and fp32 ones rounded to bf16 (as the
// tensor-core kernels stage them), so a bf16 tensor's result is the fp32 tensor's rounded, bit for bit.
// Device code, built by nvcc (gdpa_tensor_core.cu launches it) and by a host compiler for the CPU
// emulation (tests/gpu/emulation/cuda_shim.h).
#ifndef GEMTB_GPU_TRAIN_GDPA_SHORT_SIDE_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_GDPA_SHORT_SIDE_KERNELS_CUH_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/train/gdpa_exact.cuh"
#include "gpu/train/gdpa_rows.cuh"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::ss {

using bf16 = uint16_t;  // bf16 tensors hold bf16 bit patterns

constexpr int kThreads = 128;
constexpr int kMaxShort = 8;  // the short side's rows a sample, at most
constexpr int kChunk = 64;    // the long side's rows a step

// The short side's rows of a sample are the keys (cross-attention) or the queries (PMA). A pair's
// score is z = la . sa (q . k either way), its gradient's dp = lb . sb (d_o . v); w = post silu(z) and
// dz = dL/dz. A long row gets row0 = sum_s dz sa_s (dq; PMA's dk) and row1 = sum_s w sb_s (o; PMA's
// dv); a short row gets sum0 = sum_l dz la_l (dk; PMA's dq) and sum1 = sum_l w lb_l (dv; PMA's o).
// Null outputs are not computed; lb is read only where dp or sum1 needs it.
template <typename T>
struct Tensors {
  const T *la = nullptr, *lb = nullptr, *sa = nullptr, *sb = nullptr;
  int64_t ld_la = 0, ld_lb = 0, ld_sa = 0, ld_sb = 0;  // row strides, elements
  T *row0 = nullptr, *row1 = nullptr, *sum0 = nullptr, *sum1 = nullptr;
  int64_t ld_row0 = 0, ld_row1 = 0, ld_sum0 = 0, ld_sum1 = 0;
};

struct Params {
  const int32_t* long_offsets;   // device [batch + 1]
  const int32_t* short_offsets;  // device [batch + 1]
  int max_long, max_short;       // rows a sample beyond these are not computed (GdpaBatch's max_q, max_k)
  gdpa::Mask mask;
  float post_scale;
  bool vec;  // every tensor and row stride 16-byte aligned: long rows move as 16-byte units
};

// Whether long row l and short row s of a sample form a kept pair: GdpaBatch's masks are symmetric in
// query and key, so the roles do not matter.
__device__ __forceinline__ bool Keeps(const gdpa::Mask& m, int l, int s) {
  if (m.block > 0) return l / m.block == s / m.block;
  if (m.window >= 0) return l - s <= m.window && s - l <= m.window;
  return true;
}

// A value as the kernels compute with it: bf16 widened; fp32 rounded to bf16 first.
__device__ __forceinline__ float Value(bf16 x) { return numerics::Bf16BitsToFloat(x); }
__device__ __forceinline__ float Value(float x) { return numerics::Bf16BitsToFloat(numerics::FloatToBf16BitsRne(x)); }
__device__ __forceinline__ void Store(float* at, float v) { *at = v; }
__device__ __forceinline__ void Store(bf16* at, float v) { *at = numerics::FloatToBf16BitsRne(v); }

// 16 bytes of a row: four fp32 or eight bf16.
template <typename T>
using Unit = std::conditional_t<std::is_same_v<T, float>, float4, uint4>;

__device__ __forceinline__ void Unpack(const float4& u, float (&x)[4]) {
  x[0] = Value(u.x), x[1] = Value(u.y), x[2] = Value(u.z), x[3] = Value(u.w);
}
__device__ __forceinline__ void Unpack(const uint4& u, float (&x)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = Value(static_cast<bf16>(w[i] & 0xFFFFu));
    x[2 * i + 1] = Value(static_cast<bf16>(w[i] >> 16));
  }
}

// The shared memory of a CTA, in floats: the short side's two operands [kMaxShort][kDh], the chunk's
// long rows' two [kChunk][kLd] (odd stride: a pair's dot product reads a row a lane, conflict-free),
// and the chunk's pair coefficients w and dz [kMaxShort][kChunk].
template <int kDh>
struct Layout {
  static constexpr int kLd = kDh + 1;
  static constexpr int kShort = kMaxShort * kDh;
  static constexpr int kLong = kChunk * kLd;
  static constexpr int kCoef = kMaxShort * kChunk;
  static constexpr size_t kBytes = sizeof(float) * (2 * kShort + 2 * kLong + 2 * kCoef);
  static __device__ float* Sa(float* s) { return s; }
  static __device__ float* Sb(float* s) { return s + kShort; }
  static __device__ float* La(float* s) { return s + 2 * kShort; }
  static __device__ float* Lb(float* s) { return s + 2 * kShort + kLong; }
  static __device__ float* W(float* s) { return s + 2 * kShort + 2 * kLong; }
  static __device__ float* Dz(float* s) { return s + 2 * kShort + 2 * kLong + kCoef; }
};

// One thread's share of a chunk of long rows of one tensor (head h): with `vec`, its 16-byte units
// are loaded into registers by Fetch and stored to shared memory by Put, so that the next chunk's
// loads are in flight while the CTA computes on this one; without, Put loads element by element.
template <int kDh, typename T>
struct ChunkRows {
  static constexpr int kPerUnit = 16 / static_cast<int>(sizeof(T));
  static constexpr int kUnitsPerRow = kDh / kPerUnit;
  static constexpr int kUnits = kChunk * kUnitsPerRow / kThreads;
  static_assert(kDh % kPerUnit == 0 && kChunk * kUnitsPerRow % kThreads == 0, "a chunk's units split evenly");
  Unit<T> u[kUnits] = {};
  const T* x = nullptr;
  int64_t row0 = 0, ld = 0;
  int n = 0, h = 0;

  __device__ void Fetch(const T* src, int64_t first, int rows, int64_t stride, int head, bool vec) {
    x = src, row0 = first, n = rows, ld = stride, h = head;
    if (!vec || src == nullptr) return;
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads;
      const int r = e / kUnitsPerRow, c = e % kUnitsPerRow;
      if (r < n) u[i] = *reinterpret_cast<const Unit<T>*>(x + (row0 + r) * ld + h * kDh + c * kPerUnit);
    }
  }

  // Rows [0, n) into s (row stride Layout<kDh>::kLd).
  __device__ void Put(float* s, bool vec) const {
    if (x == nullptr) return;
    constexpr int kLd = Layout<kDh>::kLd;
    if (vec) {
#pragma unroll
      for (int i = 0; i < kUnits; ++i) {
        const int e = static_cast<int>(threadIdx.x) + i * kThreads;
        const int r = e / kUnitsPerRow, c = e % kUnitsPerRow;
        if (r >= n) continue;
        float v[kPerUnit];
        Unpack(u[i], v);
#pragma unroll
        for (int t = 0; t < kPerUnit; ++t) s[r * kLd + c * kPerUnit + t] = v[t];
      }
      return;
    }
    for (int e = static_cast<int>(threadIdx.x); e < n * kDh; e += kThreads) {
      const int r = e / kDh, c = e % kDh;
      s[r * kLd + c] = Value(x[(row0 + r) * ld + h * kDh + c]);
    }
  }
};

// Sample blockIdx.x, head blockIdx.y. kBackward: the pairs' dp and dz too (row0, sum0 and, with lb,
// dp). Rows outside every sample are not touched.
template <int kDh, typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads) ShortSideKernel(Params p, Tensors<T> t) {
  AwaitPriorGrids();
  using L = Layout<kDh>;
  extern __shared__ __align__(16) float smem_f[];
  float *sa = L::Sa(smem_f), *sb = L::Sb(smem_f), *la = L::La(smem_f), *lb = L::Lb(smem_f);
  float *w = L::W(smem_f), *dz = L::Dz(smem_f);
  const int64_t b = blockIdx.x;
  const int h = static_cast<int>(blockIdx.y), tid = static_cast<int>(threadIdx.x);
  const int64_t long_row = p.long_offsets[b], short_row = p.short_offsets[b];
  const int n_long = min(p.max_long, static_cast<int>(p.long_offsets[b + 1] - long_row));
  const int n_short = min(p.max_short, static_cast<int>(p.short_offsets[b + 1] - short_row));
  // The short rows, once (rows beyond n_short are never read).
  for (int e = tid; e < n_short * kDh; e += kThreads) {
    const int s = e / kDh, c = e % kDh;
    sa[e] = Value(t.sa[(short_row + s) * t.ld_sa + h * kDh + c]);
    if (t.sb != nullptr) sb[e] = Value(t.sb[(short_row + s) * t.ld_sb + h * kDh + c]);
  }
  // Each thread's long sums: elements (s, c) = o / kDh, o % kDh for o = tid + i * kThreads.
  constexpr int kSums = (kMaxShort * kDh + kThreads - 1) / kThreads;
  float acc0[kSums] = {}, acc1[kSums] = {};
  ChunkRows<kDh, T> next_a, next_b;
  const T* lb_src = kBackward || t.sum1 != nullptr ? t.lb : nullptr;
  next_a.Fetch(t.la, long_row, min(kChunk, n_long), t.ld_la, h, p.vec);
  next_b.Fetch(lb_src, long_row, min(kChunk, n_long), t.ld_lb, h, p.vec);
  for (int l0 = 0; l0 < n_long; l0 += kChunk) {
    const int n = min(kChunk, n_long - l0);
    __syncthreads();  // the previous chunk (and the short rows' first reads) done with
    next_a.Put(la, p.vec);
    next_b.Put(lb, p.vec);
    if (l0 + kChunk < n_long) {
      const int n_next = min(kChunk, n_long - l0 - kChunk);
      next_a.Fetch(t.la, long_row + l0 + kChunk, n_next, t.ld_la, h, p.vec);
      next_b.Fetch(lb_src, long_row + l0 + kChunk, n_next, t.ld_lb, h, p.vec);
    }
    __syncthreads();
    // The chunk's pairs: (r, s) = (e % kChunk, e / kChunk), a long row a lane.
    for (int e = tid; e < n_short * kChunk; e += kThreads) {
      const int r = e % kChunk, s = e / kChunk;
      if (r >= n || !Keeps(p.mask, l0 + r, s)) continue;
      const float z = gdpa::Dot<kDh>(la + r * L::kLd, sa + s * kDh);
      const float sg = gdpa::Sigmoid(z);
      w[e] = gdpa::Weight(z, sg, p.post_scale);
      if constexpr (kBackward) {
        const float dp = gdpa::Dot<kDh>(lb + r * L::kLd, sb + s * kDh);
        dz[e] = gdpa::ScoreGrad(z, sg, dp, p.post_scale);
      }
    }
    __syncthreads();
    // The long rows' outputs: sums over the short rows in increasing order.
    if (t.row0 != nullptr || t.row1 != nullptr) {
      for (int e = tid; e < n * kDh; e += kThreads) {
        const int r = e / kDh, c = e % kDh;
        float x0 = 0.0f, x1 = 0.0f;
        for (int s = 0; s < n_short; ++s) {
          if (!Keeps(p.mask, l0 + r, s)) continue;
          if constexpr (kBackward) x0 = __fadd_rn(x0, __fmul_rn(dz[s * kChunk + r], sa[s * kDh + c]));
          x1 = __fadd_rn(x1, __fmul_rn(w[s * kChunk + r], sb[s * kDh + c]));
        }
        const int64_t row = long_row + l0 + r;
        if (t.row0 != nullptr) Store(t.row0 + row * t.ld_row0 + h * kDh + c, x0);
        if (t.row1 != nullptr) Store(t.row1 + row * t.ld_row1 + h * kDh + c, x1);
      }
    }
    // The short rows' sums over this chunk's long rows, in increasing order.
#pragma unroll
    for (int i = 0; i < kSums; ++i) {
      const int o = tid + i * kThreads, s = o / kDh, c = o % kDh;
      if (s >= n_short) continue;
      for (int r = 0; r < n; ++r) {
        if (!Keeps(p.mask, l0 + r, s)) continue;
        if constexpr (kBackward) acc0[i] = __fadd_rn(acc0[i], __fmul_rn(dz[s * kChunk + r], la[r * L::kLd + c]));
        if (t.sum1 != nullptr) acc1[i] = __fadd_rn(acc1[i], __fmul_rn(w[s * kChunk + r], lb[r * L::kLd + c]));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kSums; ++i) {
    const int o = tid + i * kThreads, s = o / kDh, c = o % kDh;
    if (s >= n_short) continue;
    const int64_t row = short_row + s;
    if (t.sum0 != nullptr) Store(t.sum0 + row * t.ld_sum0 + h * kDh + c, acc0[i]);
    if (t.sum1 != nullptr) Store(t.sum1 + row * t.ld_sum1 + h * kDh + c, acc1[i]);
  }
}

}  // namespace gemtb::gpu::train::ss

#endif  // GEMTB_GPU_TRAIN_GDPA_SHORT_SIDE_KERNELS_CUH_
