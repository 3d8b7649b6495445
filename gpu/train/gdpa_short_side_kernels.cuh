// GDPA where one side of every sample has at most kMaxShort rows: cross-attention's few keys a sample
// (the summaries), PMA's few queries (the seeds). There the tensor-core kernels' 64-row tiles hold a
// few real rows of the short side, and its walks over the long side run in series. These kernels
// give a CTA one 64-row tile of the long side and one head instead (GDPA's tile list of the long
// side, or every sample's tiles), and compute every term with gdpa_exact.cuh's fp32 arithmetic on
// CUDA cores:
//
//  - a long row's outputs (cross-attention's o and dq, PMA's dk and dv) are short sums over the
//    sample's short rows, written by the tile's CTA;
//  - a short row's outputs (cross-attention's dk and dv, PMA's o and dq) are long sums: each CTA
//    writes its tile's partial sums (fp32) to a workspace, and SumTilesKernel adds a sample's tiles'
//    partials in tile order.
//
// Every short sum, and every tile's partial long sum, adds its terms in increasing order of the other
// side's rows, each product and sum rounded on its own, as gdpa.cu's fp32 kernels do; a long sum is
// then 0 + partial_0 + partial_1 + ... in tile order (a partitioned sum where gdpa.cu sums in one
// run). The values are the tensors' own for bf16 tensors and fp32 ones rounded to bf16 (as the
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
constexpr int kTile = 64;     // the long side's rows a CTA: the rows of a GDPA tile list's entry
constexpr int kTileInts = 8;  // int32 a tile list's entry (gdpa_tensor_core.h's kGdpaTileInts)

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
  bool vec;        // every tensor and row stride 16-byte aligned: long rows move as 16-byte units
  bool long_keys;  // the long side is the keys (PMA), else the queries (cross-attention)
  // The long side's tile list (GdpaTiles entries: blockIdx.x an entry), or null: blockIdx.x = sample *
  // long_tiles + tile.
  const int32_t* tiles;
  int long_tiles;  // (max_long + kTile - 1) / kTile: the tiles a sample's partial sums have room for
  int heads;
  // The partial long sums of sum0 and sum1 (null where that output is), fp32:
  // [batch][long_tiles][heads][max_short][kDh], element PartAt(...).
  float *part0, *part1;
};

__device__ __forceinline__ int64_t PartAt(const Params& p, int64_t b, int tile, int h, int s, int c, int dh) {
  return (((b * p.long_tiles + tile) * p.heads + h) * p.max_short + s) * static_cast<int64_t>(dh) + c;
}

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

// The shared memory of a CTA, in floats: the short side's two operands [kMaxShort][kDh], the tile's
// long rows' two [kTile][kLd] (odd stride: a pair's dot product reads a row a lane, conflict-free),
// and the tile's pair coefficients w and dz [kMaxShort][kTile].
template <int kDh>
struct Layout {
  static constexpr int kLd = kDh + 1;
  static constexpr int kShort = kMaxShort * kDh;
  static constexpr int kLong = kTile * kLd;
  static constexpr int kCoef = kMaxShort * kTile;
  static constexpr size_t kBytes = sizeof(float) * (2 * kShort + 2 * kLong + 2 * kCoef);
  static __device__ float* Sa(float* s) { return s; }
  static __device__ float* Sb(float* s) { return s + kShort; }
  static __device__ float* La(float* s) { return s + 2 * kShort; }
  static __device__ float* Lb(float* s) { return s + 2 * kShort + kLong; }
  static __device__ float* W(float* s) { return s + 2 * kShort + 2 * kLong; }
  static __device__ float* Dz(float* s) { return s + 2 * kShort + 2 * kLong + kCoef; }
};

// Rows [row0, row0 + n) (n <= kTile) of head h of x (row stride ld) into s (row stride
// Layout<kDh>::kLd) as Value()s: with `vec`, 16-byte units, a row's units on consecutive threads
// (whole sectors), every unit's load issued before any is stored; else element by element.
template <int kDh, typename T>
__device__ void LoadTileRows(const T* x, int64_t row0, int n, int64_t ld, int h, bool vec, float* s) {
  constexpr int kLd = Layout<kDh>::kLd;
  constexpr int kPerUnit = 16 / static_cast<int>(sizeof(T));
  constexpr int kUnitsPerRow = kDh / kPerUnit;
  constexpr int kUnits = kTile * kUnitsPerRow / kThreads;
  static_assert(kDh % kPerUnit == 0 && kTile * kUnitsPerRow % kThreads == 0, "a tile's units split evenly");
  if (vec) {
    Unit<T> u[kUnits] = {};
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads;
      const int r = e / kUnitsPerRow, c = e % kUnitsPerRow;
      if (r < n) u[i] = *reinterpret_cast<const Unit<T>*>(x + (row0 + r) * ld + h * kDh + c * kPerUnit);
    }
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

// Where a CTA works: sample b's long rows [l0, l0 + n) (n <= 0: none) against its n_short short rows.
struct TilePlace {
  int64_t b, long_row, short_row;
  int tile, l0, n, n_long, n_short;
};

__device__ __forceinline__ TilePlace PlaceTile(const Params& p) {
  TilePlace c;
  int lq, lk;
  int64_t q_row, k_row;
  if (p.tiles != nullptr) {
    const uint4* entry = reinterpret_cast<const uint4*>(p.tiles + static_cast<int64_t>(blockIdx.x) * kTileInts);
    const uint4 rows = entry[0], at = entry[1];
    q_row = static_cast<int32_t>(rows.x), lq = static_cast<int32_t>(rows.y);
    k_row = static_cast<int32_t>(rows.z), lk = static_cast<int32_t>(rows.w);
    c.tile = static_cast<int32_t>(at.x), c.b = static_cast<int32_t>(at.y);
    c.long_row = p.long_keys ? k_row : q_row, c.short_row = p.long_keys ? q_row : k_row;
    c.n_long = p.long_keys ? lk : lq, c.n_short = p.long_keys ? lq : lk;
  } else {
    c.b = blockIdx.x / p.long_tiles, c.tile = static_cast<int>(blockIdx.x % p.long_tiles);
    c.long_row = p.long_offsets[c.b], c.short_row = p.short_offsets[c.b];
    c.n_long = static_cast<int>(p.long_offsets[c.b + 1] - c.long_row);
    c.n_short = static_cast<int>(p.short_offsets[c.b + 1] - c.short_row);
  }
  c.n_long = min(p.max_long, c.n_long), c.n_short = min(p.max_short, c.n_short);
  c.l0 = c.tile * kTile;
  c.n = min(kTile, c.n_long - c.l0);  // a tile at or past long_tiles has none
  return c;
}

// Long tile blockIdx.x (see PlaceTile), head blockIdx.y: the tile's long rows' outputs, and its
// partial sums of the short rows' outputs into p.part0 / p.part1. kBackward: the pairs' dp and dz too
// (row0, sum0 and, with lb, dp). Rows outside every sample are not touched.
template <int kDh, typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads) TileKernel(Params p, Tensors<T> t) {
  AwaitPriorGrids();
  using L = Layout<kDh>;
  extern __shared__ __align__(16) float smem_f[];
  float *sa = L::Sa(smem_f), *sb = L::Sb(smem_f), *la = L::La(smem_f), *lb = L::Lb(smem_f);
  float *w = L::W(smem_f), *dz = L::Dz(smem_f);
  const TilePlace at = PlaceTile(p);
  if (at.n <= 0) return;
  const int h = static_cast<int>(blockIdx.y), tid = static_cast<int>(threadIdx.x), n = at.n, n_short = at.n_short;
  for (int e = tid; e < n_short * kDh; e += kThreads) {
    const int s = e / kDh, c = e % kDh;
    sa[e] = Value(t.sa[(at.short_row + s) * t.ld_sa + h * kDh + c]);
    if (t.sb != nullptr) sb[e] = Value(t.sb[(at.short_row + s) * t.ld_sb + h * kDh + c]);
  }
  LoadTileRows<kDh>(t.la, at.long_row + at.l0, n, t.ld_la, h, p.vec, la);
  if (kBackward || t.sum1 != nullptr) LoadTileRows<kDh>(t.lb, at.long_row + at.l0, n, t.ld_lb, h, p.vec, lb);
  __syncthreads();
  // The tile's pairs: (r, s) = (e % kTile, e / kTile), a long row a lane.
  for (int e = tid; e < n_short * kTile; e += kThreads) {
    const int r = e % kTile, s = e / kTile;
    if (r >= n || !Keeps(p.mask, at.l0 + r, s)) continue;
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
        if (!Keeps(p.mask, at.l0 + r, s)) continue;
        if constexpr (kBackward) x0 = __fadd_rn(x0, __fmul_rn(dz[s * kTile + r], sa[s * kDh + c]));
        x1 = __fadd_rn(x1, __fmul_rn(w[s * kTile + r], sb[s * kDh + c]));
      }
      const int64_t row = at.long_row + at.l0 + r;
      if (t.row0 != nullptr) Store(t.row0 + row * t.ld_row0 + h * kDh + c, x0);
      if (t.row1 != nullptr) Store(t.row1 + row * t.ld_row1 + h * kDh + c, x1);
    }
  }
  // The short rows' partial sums over this tile's long rows, in increasing order.
  if (p.part0 == nullptr && p.part1 == nullptr) return;
  for (int o = tid; o < n_short * kDh; o += kThreads) {
    const int s = o / kDh, c = o % kDh;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int r = 0; r < n; ++r) {
      if (!Keeps(p.mask, at.l0 + r, s)) continue;
      if constexpr (kBackward) acc0 = __fadd_rn(acc0, __fmul_rn(dz[s * kTile + r], la[r * L::kLd + c]));
      if (p.part1 != nullptr) acc1 = __fadd_rn(acc1, __fmul_rn(w[s * kTile + r], lb[r * L::kLd + c]));
    }
    const int64_t i = PartAt(p, at.b, at.tile, h, s, c, kDh);
    if (p.part0 != nullptr) p.part0[i] = acc0;
    if (p.part1 != nullptr) p.part1[i] = acc1;
  }
}

// Sample blockIdx.x, elements (h, s, c) of its short rows' sums from blockIdx.y * kThreads on (a stride
// of gridDim.y * kThreads): 0 plus the sample's tiles' partials in tile order, stored into sum0 / sum1
// (short rows up to the sample's n_short; a sample without long rows gets zeros).
template <int kDh, typename T>
__global__ void __launch_bounds__(kThreads) SumTilesKernel(Params p, Tensors<T> t) {
  AwaitPriorGrids();
  const int64_t b = blockIdx.x;
  const int64_t long_row = p.long_offsets[b], short_row = p.short_offsets[b];
  const int n_long = min(p.max_long, static_cast<int>(p.long_offsets[b + 1] - long_row));
  const int n_short = min(p.max_short, static_cast<int>(p.short_offsets[b + 1] - short_row));
  const int tiles = (n_long + kTile - 1) / kTile;
  const int64_t elements = static_cast<int64_t>(p.heads) * p.max_short * kDh;
  for (int64_t o = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x; o < elements;
       o += static_cast<int64_t>(gridDim.y) * kThreads) {
    const int h = static_cast<int>(o / (p.max_short * kDh)), s = static_cast<int>(o / kDh % p.max_short);
    const int c = static_cast<int>(o % kDh);
    if (s >= n_short) continue;
    float x0 = 0.0f, x1 = 0.0f;
    for (int tile = 0; tile < tiles; ++tile) {
      const int64_t i = PartAt(p, b, tile, h, s, c, kDh);
      if (p.part0 != nullptr) x0 = __fadd_rn(x0, p.part0[i]);
      if (p.part1 != nullptr) x1 = __fadd_rn(x1, p.part1[i]);
    }
    const int64_t row = short_row + s;
    if (t.sum0 != nullptr) Store(t.sum0 + row * t.ld_sum0 + h * kDh + c, x0);
    if (t.sum1 != nullptr) Store(t.sum1 + row * t.ld_sum1 + h * kDh + c, x1);
  }
}

}  // namespace gemtb::gpu::train::ss

#endif  // GEMTB_GPU_TRAIN_GDPA_SHORT_SIDE_KERNELS_CUH_
