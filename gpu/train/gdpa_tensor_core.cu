#include "gpu/train/gdpa_tensor_core.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

// A CTA takes one (sample, head, tile of kTile rows of its own side: queries for o and dq, keys for
// dk and dv) and walks the other side's kept rows in steps of kTile rows staged in shared memory as
// bf16. Its 16-row strips and each step's 16-row chunks cut the step's scores into 16x16 regions; a
// region's scores go from a WMMA accumulator through the fp32 score tile to the threads, which apply
// the mask and the pointwise function and write the bf16 result back over the region, the A operand of
// the WMMA that adds the region's terms to the warp's strip of the output.
//
// Warp roles: with n real rows in the own tile, `strips` = 1, 2 or 4 warps (n <= 16, <= 32, else) take
// one strip each, and the kWarps / strips groups of them split every step's chunks (group g takes
// chunks g, g + groups, ...), so that a tile of a few rows (PMA's 4 queries, cross-attention's 4 keys)
// still keeps every warp busy. Each warp sums its chunks in increasing order; the groups' partial
// strips are added in increasing group order at the end: no atomics, a fixed order of every sum.
constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTile = 64;
constexpr int kFrag = 16;                    // WMMA's m = n = k
constexpr int kChunks = kTile / kFrag;       // 16-row strips (chunks) of a tile
constexpr int kPerLane = kFrag * kFrag / kWarp;  // a region's elements per lane
constexpr int kRowStep = kWarp / kFrag;      // lane l owns rows l / 16 + 2t, column l % 16 of a region
constexpr int kLdS = kTile + 4;              // fp32 row stride of the score tile (a multiple of 4, as WMMA wants)
constexpr int kLdP = 2 * kLdS;               // the same rows read as bf16: a region's bf16 result over its fp32 scores

static_assert(kChunks == kWarps, "the warp roles assume one strip per warp in a full tile");

// The shared memory of a kernel: kOperands staged tiles of kTile rows of bf16, then the fp32 score
// tile (which ends as the warps' partial output strips, kDh <= kLdS columns).
template <int kDh>
struct Layout {
  // bf16 row stride: rows 16 bytes apart modulo 128, so that WMMA's 8-row loads hit distinct banks.
  static constexpr int kLd = kDh + 8;
  static constexpr size_t kOperandElems = static_cast<size_t>(kTile) * kLd;
  static constexpr size_t Bytes(int operands) {
    return sizeof(bf16) * kOperandElems * operands + sizeof(float) * kTile * kLdS;
  }
  static_assert(kDh % kFrag == 0 && kDh <= kLdS, "dh: a multiple of 16 that fits the score tile's rows");
  static_assert(sizeof(bf16) * kOperandElems % 128 == 0, "every staged tile 128-byte aligned");
};

using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major>;
// B = X^T read from rows of X: X's row-major rows are B's columns.
using FragBT = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// gdpa.cu's mask: GdpaShape::KeyRange of the reference with the sample's key count n, every bound
// clamped to [0, n]. Both masks are symmetric in i and j, so the queries that keep key j are
// Range(j, lq). lo and hi are nondecreasing in i.
struct Mask {
  int window = -1, block = 0;
  __device__ void Range(int i, int n, int* lo, int* hi) const {
    if (block > 0) {
      *lo = min(n, i / block * block);
      *hi = min(n, (i / block + 1) * block);
    } else if (window >= 0) {
      *lo = min(n, max(0, i - window));
      *hi = max(*lo, min(n, i + window + 1));
    } else {
      *lo = 0;
      *hi = n;
    }
  }
};

struct Params {
  const int32_t* q_offsets;
  const int32_t* k_offsets;
  int heads;
  Mask mask;
  float post_scale;
  bool vec;  // every tensor 16-byte aligned: rows move as float4
};

struct Sample {
  int64_t q_row, k_row;  // first rows
  int lq, lk;
};

__device__ Sample LoadSample(const Params& p, int64_t b) {
  Sample s;
  s.q_row = p.q_offsets[b];
  s.k_row = p.k_offsets[b];
  s.lq = static_cast<int>(p.q_offsets[b + 1] - s.q_row);
  s.lk = static_cast<int>(p.k_offsets[b + 1] - s.k_row);
  return s;
}

// The overflow-safe sigmoid of reference/model/ops.h: exp of a non-positive argument only.
__device__ float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + __expf(-x));
  const float e = __expf(x);
  return e / (1.0f + e);
}

// post * silu(z).
__device__ float Weight(float z, float post) { return post * z * Sigmoid(z); }
// dL/dz = post * silu'(z) * dp, silu'(z) = sg (1 + z (1 - sg)).
__device__ float ScoreGrad(float z, float dp, float post) {
  const float sg = Sigmoid(z);
  return post * sg * (1.0f + z * (1.0f - sg)) * dp;
}

// The warp's part of a CTA whose own tile has n (1 .. kTile) real rows: own rows [row0, row0 + 16)
// (strip `strip`), chunks group, group + groups, ... of every step; inactive when the strip holds
// no real row (n = 33 .. 48 leaves the fourth strip empty).
struct Role {
  int strips, groups, strip, group, row0;
  bool active;
};

__device__ Role WarpRole(int n) {
  Role r;
  r.strips = n <= kFrag ? 1 : n <= 2 * kFrag ? 2 : kWarps;
  r.groups = kWarps / r.strips;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  r.strip = warp % r.strips;
  r.group = warp / r.strips;
  r.row0 = r.strip * kFrag;
  r.active = r.row0 < n;
  return r;
}

// Rows [row0, row0 + n) of head h of x (rows of `width` floats) rounded to bf16 into rows 0 .. n-1 of
// the staged tile s, rows n .. kTile-1 zero: a partial tile's padding adds nothing and is never NaN.
template <int kDh>
__device__ void StageRows(const float* x, int64_t row0, int n, int width, int h, bool vec, bf16* s) {
  constexpr int kLd = Layout<kDh>::kLd;
  if (vec) {
    constexpr int kQuads = kDh / 4;
    for (int e = threadIdx.x; e < kTile * kQuads; e += kThreads) {
      const int r = e / kQuads, c = e % kQuads * 4;
      float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < n) f = *reinterpret_cast<const float4*>(x + (row0 + r) * width + h * kDh + c);
      auto* d = reinterpret_cast<__nv_bfloat162*>(s + r * kLd + c);
      d[0] = __floats2bfloat162_rn(f.x, f.y);
      d[1] = __floats2bfloat162_rn(f.z, f.w);
    }
  } else {
    for (int e = threadIdx.x; e < kTile * kDh; e += kThreads) {
      const int r = e / kDh, c = e % kDh;
      s[r * kLd + c] = __float2bfloat16_rn(r < n ? x[(row0 + r) * width + h * kDh + c] : 0.0f);
    }
  }
}

// The A operands of rows [row0, row0 + 16) of the staged tile s, one per 16 columns.
template <int kDh>
__device__ void LoadStrip(const bf16* s, int row0, FragA (&a)[kDh / kFrag]) {
#pragma unroll
  for (int kk = 0; kk < kDh / kFrag; ++kk) {
    wmma::load_matrix_sync(a[kk], s + row0 * Layout<kDh>::kLd + kk * kFrag, Layout<kDh>::kLd);
  }
}

// acc = A X^T: A the strip's rows (a), X rows [r0, r0 + 16) of the staged tile s.
template <int kDh>
__device__ void TimesRowsT(const FragA (&a)[kDh / kFrag], const bf16* s, int r0, FragC& acc) {
  wmma::fill_fragment(acc, 0.0f);
#pragma unroll
  for (int kk = 0; kk < kDh / kFrag; ++kk) {
    FragBT b;
    wmma::load_matrix_sync(b, s + r0 * Layout<kDh>::kLd + kk * kFrag, Layout<kDh>::kLd);
    wmma::mma_sync(acc, a[kk], b, acc);
  }
}

// acc += W X: W the 16x16 bf16 region at w (row stride kLdP), X rows [r0, r0 + 16) of the staged tile s.
template <int kDh>
__device__ void AddTimesRows(const bf16* w, const bf16* s, int r0, FragC (&acc)[kDh / kFrag]) {
  FragA a;
  wmma::load_matrix_sync(a, w, kLdP);
#pragma unroll
  for (int n = 0; n < kDh / kFrag; ++n) {
    FragB b;
    wmma::load_matrix_sync(b, s + r0 * Layout<kDh>::kLd + n * kFrag, Layout<kDh>::kLd);
    wmma::mma_sync(acc[n], a, b, acc[n]);
  }
}

// acc through the warp's region of the score tile into the lane's values (rows lane / 16 + 2t,
// column lane % 16). The region is free again on return.
__device__ void RegionValues(const FragC& acc, float* region, float (&x)[kPerLane]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  wmma::store_matrix_sync(region, acc, kLdS, wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) x[t] = region[(lane / kFrag + kRowStep * t) * kLdS + lane % kFrag];
  __syncwarp();
}

// The CTA's output rows [first, first + n) of head h: own row r is the sum of the groups' partial
// rows g * strips * 16 + r of `part` (warp g * strips + s wrote its strip s at rows 16 * warp), in
// increasing g.
template <int kDh>
__device__ void StoreOutput(const float* part, int strips, int64_t first, int n, int width, int h, bool vec,
                            float* out) {
  const int groups = kWarps / strips, group_rows = strips * kFrag;
  if (vec) {
    constexpr int kQuads = kDh / 4;
    for (int e = threadIdx.x; e < n * kQuads; e += kThreads) {
      const int r = e / kQuads, c = e % kQuads * 4;
      float4 sum = *reinterpret_cast<const float4*>(part + r * kLdS + c);
      for (int g = 1; g < groups; ++g) {
        const float4 x = *reinterpret_cast<const float4*>(part + (g * group_rows + r) * kLdS + c);
        sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
      }
      *reinterpret_cast<float4*>(out + (first + r) * width + h * kDh + c) = sum;
    }
  } else {
    for (int e = threadIdx.x; e < n * kDh; e += kThreads) {
      const int r = e / kDh, c = e % kDh;
      float sum = part[r * kLdS + c];
      for (int g = 1; g < groups; ++g) sum += part[(g * group_rows + r) * kLdS + c];
      out[(first + r) * width + h * kDh + c] = sum;
    }
  }
}

// The warp's accumulators as its partial strip (rows 16 * warp of the score tile), then the CTA's
// rows [first, first + n) of out. Starts and ends with a barrier: the score tile is free on return.
template <int kDh>
__device__ void FinishOutput(const FragC (&acc)[kDh / kFrag], float* ss, const Role& role, int64_t first, int n,
                             int width, int h, bool vec, float* out) {
  __syncthreads();
  float* part = ss + static_cast<int>(threadIdx.x) / kWarp * kFrag * kLdS;
#pragma unroll
  for (int c = 0; c < kDh / kFrag; ++c) wmma::store_matrix_sync(part + c * kFrag, acc[c], kLdS, wmma::mem_row_major);
  __syncthreads();
  StoreOutput<kDh>(ss, role.strips, first, n, width, h, vec, out);
  __syncthreads();
}

// o for the queries of tile blockIdx.z of sample blockIdx.x, head blockIdx.y: the steps walk the
// tile's kept keys; a region's result is post * silu(q . k) where kept (else 0), times the chunk's v.
template <int kDh>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(Params p, const float* q, const float* k, const float* v, float* o) {
  using L = Layout<kDh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + L::kOperandElems;
  bf16* vs = ks + L::kOperandElems;
  float* ss = reinterpret_cast<float*>(vs + L::kOperandElems);
  const Sample s = LoadSample(p, blockIdx.x);
  const int h = blockIdx.y, width = p.heads * kDh;
  const int i0 = blockIdx.z * kTile;
  if (i0 >= s.lq) return;
  const int nq = min(kTile, s.lq - i0);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  StageRows<kDh>(q, s.q_row + i0, nq, width, h, p.vec, qs);
  // The tile's kept keys, and the warp's strip's: the ranges' bounds grow with i.
  int klo = 0, khi = 0, slo = 0, shi = 0, unused = 0;
  p.mask.Range(i0, s.lk, &klo, &unused);
  p.mask.Range(i0 + nq - 1, s.lk, &unused, &khi);
  const Role role = WarpRole(nq);
  p.mask.Range(i0 + role.row0, s.lk, &slo, &unused);
  p.mask.Range(i0 + min(role.row0 + kFrag, nq) - 1, s.lk, &unused, &shi);
  __syncthreads();
  FragA qf[kDh / kFrag];
  LoadStrip<kDh>(qs, role.row0, qf);
  FragC acc[kDh / kFrag];
#pragma unroll
  for (FragC& a : acc) wmma::fill_fragment(a, 0.0f);
  for (int j0 = klo; j0 < khi; j0 += kTile) {
    const int nk = min(kTile, khi - j0);
    __syncthreads();  // the previous step's tiles and regions are read
    StageRows<kDh>(k, s.k_row + j0, nk, width, h, p.vec, ks);
    StageRows<kDh>(v, s.k_row + j0, nk, width, h, p.vec, vs);
    __syncthreads();
    if (!role.active) continue;
    for (int c = role.group; c < kChunks; c += role.groups) {
      const int jc = j0 + c * kFrag;
      if (jc >= shi || jc + kFrag <= slo) continue;  // no key of the chunk kept by the strip
      float* region = ss + role.row0 * kLdS + c * kFrag;
      FragC sf;
      TimesRowsT<kDh>(qf, ks, c * kFrag, sf);
      float z[kPerLane];
      RegionValues(sf, region, z);
      bf16* w = reinterpret_cast<bf16*>(region);
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int r = lane / kFrag + kRowStep * t, j = jc + lane % kFrag;
        int lo = 0, hi = 0;
        p.mask.Range(i0 + role.row0 + r, s.lk, &lo, &hi);
        const bool keep = role.row0 + r < nq && j >= lo && j < hi;
        w[r * kLdP + lane % kFrag] = __float2bfloat16_rn(keep ? Weight(z[t], p.post_scale) : 0.0f);
      }
      __syncwarp();
      AddTimesRows<kDh>(w, vs, c * kFrag, acc);
    }
  }
  FinishOutput<kDh>(acc, ss, role, s.q_row + i0, nq, width, h, p.vec, o);
}

// dq for the queries of tile blockIdx.z: the forward's walk with dz = post silu'(q . k) (do . v) where
// kept (else 0) as a region's result, times the chunk's k.
template <int kDh>
__global__ void __launch_bounds__(kThreads)
    BackwardDqKernel(Params p, const float* q, const float* k, const float* v, const float* d_o, float* dq) {
  using L = Layout<kDh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + L::kOperandElems;
  bf16* ks = dos + L::kOperandElems;
  bf16* vs = ks + L::kOperandElems;
  float* ss = reinterpret_cast<float*>(vs + L::kOperandElems);
  const Sample s = LoadSample(p, blockIdx.x);
  const int h = blockIdx.y, width = p.heads * kDh;
  const int i0 = blockIdx.z * kTile;
  if (i0 >= s.lq) return;
  const int nq = min(kTile, s.lq - i0);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  StageRows<kDh>(q, s.q_row + i0, nq, width, h, p.vec, qs);
  StageRows<kDh>(d_o, s.q_row + i0, nq, width, h, p.vec, dos);
  int klo = 0, khi = 0, slo = 0, shi = 0, unused = 0;
  p.mask.Range(i0, s.lk, &klo, &unused);
  p.mask.Range(i0 + nq - 1, s.lk, &unused, &khi);
  const Role role = WarpRole(nq);
  p.mask.Range(i0 + role.row0, s.lk, &slo, &unused);
  p.mask.Range(i0 + min(role.row0 + kFrag, nq) - 1, s.lk, &unused, &shi);
  __syncthreads();
  FragA qf[kDh / kFrag], dof[kDh / kFrag];
  LoadStrip<kDh>(qs, role.row0, qf);
  LoadStrip<kDh>(dos, role.row0, dof);
  FragC acc[kDh / kFrag];
#pragma unroll
  for (FragC& a : acc) wmma::fill_fragment(a, 0.0f);
  for (int j0 = klo; j0 < khi; j0 += kTile) {
    const int nk = min(kTile, khi - j0);
    __syncthreads();
    StageRows<kDh>(k, s.k_row + j0, nk, width, h, p.vec, ks);
    StageRows<kDh>(v, s.k_row + j0, nk, width, h, p.vec, vs);
    __syncthreads();
    if (!role.active) continue;
    for (int c = role.group; c < kChunks; c += role.groups) {
      const int jc = j0 + c * kFrag;
      if (jc >= shi || jc + kFrag <= slo) continue;
      float* region = ss + role.row0 * kLdS + c * kFrag;
      FragC f;
      float z[kPerLane], dp[kPerLane];
      TimesRowsT<kDh>(qf, ks, c * kFrag, f);
      RegionValues(f, region, z);
      TimesRowsT<kDh>(dof, vs, c * kFrag, f);
      RegionValues(f, region, dp);
      bf16* w = reinterpret_cast<bf16*>(region);
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int r = lane / kFrag + kRowStep * t, j = jc + lane % kFrag;
        int lo = 0, hi = 0;
        p.mask.Range(i0 + role.row0 + r, s.lk, &lo, &hi);
        const bool keep = role.row0 + r < nq && j >= lo && j < hi;
        w[r * kLdP + lane % kFrag] = __float2bfloat16_rn(keep ? ScoreGrad(z[t], dp[t], p.post_scale) : 0.0f);
      }
      __syncwarp();
      AddTimesRows<kDh>(w, ks, c * kFrag, acc);
    }
  }
  FinishOutput<kDh>(acc, ss, role, s.q_row + i0, nq, width, h, p.vec, dq);
}

// dk, dv for the keys of tile blockIdx.z: a walk over the queries that keep them, in increasing order.
// A region is transposed (keys as rows): s^T = k q^T and dp^T = v do^T; its first 16 bf16 columns get
// p^T = post silu(s^T) (times the chunk's do into dv), the next 16 dz^T (times the chunk's q into dk).
template <int kDh>
__global__ void __launch_bounds__(kThreads) BackwardDkDvKernel(Params p, const float* q, const float* k,
                                                               const float* v, const float* d_o, float* dk,
                                                               float* dv) {
  using L = Layout<kDh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + L::kOperandElems;
  bf16* qs = vs + L::kOperandElems;
  bf16* dos = qs + L::kOperandElems;
  float* ss = reinterpret_cast<float*>(dos + L::kOperandElems);
  const Sample s = LoadSample(p, blockIdx.x);
  const int h = blockIdx.y, width = p.heads * kDh;
  const int j0 = blockIdx.z * kTile;
  if (j0 >= s.lk) return;
  const int nk = min(kTile, s.lk - j0);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  StageRows<kDh>(k, s.k_row + j0, nk, width, h, p.vec, ks);
  StageRows<kDh>(v, s.k_row + j0, nk, width, h, p.vec, vs);
  int qlo = 0, qhi = 0, slo = 0, shi = 0, unused = 0;
  p.mask.Range(j0, s.lq, &qlo, &unused);
  p.mask.Range(j0 + nk - 1, s.lq, &unused, &qhi);
  const Role role = WarpRole(nk);
  p.mask.Range(j0 + role.row0, s.lq, &slo, &unused);
  p.mask.Range(j0 + min(role.row0 + kFrag, nk) - 1, s.lq, &unused, &shi);
  __syncthreads();
  FragA kf[kDh / kFrag], vf[kDh / kFrag];
  LoadStrip<kDh>(ks, role.row0, kf);
  LoadStrip<kDh>(vs, role.row0, vf);
  FragC acc_k[kDh / kFrag], acc_v[kDh / kFrag];
#pragma unroll
  for (int n = 0; n < kDh / kFrag; ++n) {
    wmma::fill_fragment(acc_k[n], 0.0f);
    wmma::fill_fragment(acc_v[n], 0.0f);
  }
  for (int i0 = qlo; i0 < qhi; i0 += kTile) {
    const int nq = min(kTile, qhi - i0);
    __syncthreads();
    StageRows<kDh>(q, s.q_row + i0, nq, width, h, p.vec, qs);
    StageRows<kDh>(d_o, s.q_row + i0, nq, width, h, p.vec, dos);
    __syncthreads();
    if (!role.active) continue;
    for (int c = role.group; c < kChunks; c += role.groups) {
      const int ic = i0 + c * kFrag;
      if (ic >= shi || ic + kFrag <= slo) continue;  // no query of the chunk keeps a key of the strip
      float* region = ss + role.row0 * kLdS + c * kFrag;
      FragC f;
      float z[kPerLane], dp[kPerLane];
      TimesRowsT<kDh>(kf, qs, c * kFrag, f);
      RegionValues(f, region, z);
      TimesRowsT<kDh>(vf, dos, c * kFrag, f);
      RegionValues(f, region, dp);
      bf16* w = reinterpret_cast<bf16*>(region);  // p^T in columns 0 .. 15, dz^T in 16 .. 31
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int r = lane / kFrag + kRowStep * t, i = ic + lane % kFrag;
        int lo = 0, hi = 0;
        p.mask.Range(j0 + role.row0 + r, s.lq, &lo, &hi);
        const bool keep = role.row0 + r < nk && i >= lo && i < hi;
        w[r * kLdP + lane % kFrag] = __float2bfloat16_rn(keep ? Weight(z[t], p.post_scale) : 0.0f);
        w[r * kLdP + kFrag + lane % kFrag] =
            __float2bfloat16_rn(keep ? ScoreGrad(z[t], dp[t], p.post_scale) : 0.0f);
      }
      __syncwarp();
      AddTimesRows<kDh>(w, dos, c * kFrag, acc_v);
      AddTimesRows<kDh>(w + kFrag, qs, c * kFrag, acc_k);
    }
  }
  FinishOutput<kDh>(acc_k, ss, role, s.k_row + j0, nk, width, h, p.vec, dk);
  FinishOutput<kDh>(acc_v, ss, role, s.k_row + j0, nk, width, h, p.vec, dv);
}

// The first null pointer of `pointers`, by name.
absl::Status NotNull(std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [ptr, name] : pointers) {
    if (ptr == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, "=null: want a device pointer"));
  }
  return absl::OkStatus();
}

// Whether every pointer is 16-byte aligned (null counts as aligned): then, rows being multiples of 16
// floats, every row of every head starts on a float4.
bool Aligned16(std::initializer_list<const void*> pointers) {
  for (const void* ptr : pointers) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  }
  return true;
}

Params MakeParams(const GdpaBatch& b, bool vec) {
  return Params{b.q_offsets, b.k_offsets, b.heads, Mask{b.window, b.block}, b.post_scale, vec};
}

dim3 Grid(const GdpaBatch& b, int32_t rows) {
  return dim3(static_cast<unsigned>(b.batch), static_cast<unsigned>(b.heads),
              static_cast<unsigned>((rows + kTile - 1) / kTile));
}

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default 48 KB where needed).
template <typename Kernel>
absl::Status AllowSharedMemory(Kernel* kernel, size_t bytes, const char* what) {
  return CudaOk(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                what);
}

template <int kDh>
absl::Status LaunchForward(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o,
                           cudaStream_t stream) {
  constexpr size_t kBytes = Layout<kDh>::Bytes(3);
  if (absl::Status s = AllowSharedMemory(ForwardKernel<kDh>, kBytes, "GdpaForwardTensorCore"); !s.ok()) return s;
  const Params p = MakeParams(b, Aligned16({q, k, v, o}));
  ForwardKernel<kDh><<<Grid(b, b.max_q), kThreads, kBytes, stream>>>(p, q, k, v, o);
  return Launched("GdpaForwardTensorCore");
}

template <int kDh>
absl::Status LaunchBackward(const GdpaBatch& b, const float* q, const float* k, const float* v, const float* d_o,
                            float* dq, float* dk, float* dv, cudaStream_t stream) {
  constexpr size_t kBytes = Layout<kDh>::Bytes(4);
  const Params p = MakeParams(b, Aligned16({q, k, v, d_o, dq, dk, dv}));
  if (b.max_q > 0) {
    if (absl::Status s = AllowSharedMemory(BackwardDqKernel<kDh>, kBytes, "GdpaBackwardTensorCore dq"); !s.ok()) {
      return s;
    }
    BackwardDqKernel<kDh><<<Grid(b, b.max_q), kThreads, kBytes, stream>>>(p, q, k, v, d_o, dq);
    if (absl::Status s = Launched("GdpaBackwardTensorCore dq"); !s.ok()) return s;
  }
  if (b.max_k > 0) {
    if (absl::Status s = AllowSharedMemory(BackwardDkDvKernel<kDh>, kBytes, "GdpaBackwardTensorCore dk dv");
        !s.ok()) {
      return s;
    }
    BackwardDkDvKernel<kDh><<<Grid(b, b.max_k), kThreads, kBytes, stream>>>(p, q, k, v, d_o, dk, dv);
    if (absl::Status s = Launched("GdpaBackwardTensorCore dk dv"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GdpaForwardTensorCore(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o,
                                   cudaStream_t stream) {
  if (absl::Status s = ValidateGdpaBatch(b); !s.ok()) return s;
  if (b.batch == 0 || b.max_q == 0) return absl::OkStatus();
  // Keys are read only where some sample has one.
  if (absl::Status s = NotNull({{q, "q"}, {o, "o"}}); !s.ok()) return s;
  if (b.max_k > 0) {
    if (absl::Status s = NotNull({{k, "k"}, {v, "v"}}); !s.ok()) return s;
  }
  switch (b.dh) {
    case 16: return LaunchForward<16>(b, q, k, v, o, stream);
    case 32: return LaunchForward<32>(b, q, k, v, o, stream);
    default: return LaunchForward<64>(b, q, k, v, o, stream);
  }
}

absl::Status GdpaBackwardTensorCore(const GdpaBatch& b, const float* q, const float* k, const float* v,
                                    const float* d_o, float* dq, float* dk, float* dv, cudaStream_t stream) {
  if (absl::Status s = ValidateGdpaBatch(b); !s.ok()) return s;
  if (b.batch == 0 || (b.max_q == 0 && b.max_k == 0)) return absl::OkStatus();
  // q, d_o, dq are used only where some sample has queries; k, v, dk, dv only where some has keys.
  if (b.max_q > 0) {
    if (absl::Status s = NotNull({{q, "q"}, {d_o, "d_o"}, {dq, "dq"}}); !s.ok()) return s;
  }
  if (b.max_k > 0) {
    if (absl::Status s = NotNull({{k, "k"}, {v, "v"}, {dk, "dk"}, {dv, "dv"}}); !s.ok()) return s;
  }
  switch (b.dh) {
    case 16: return LaunchBackward<16>(b, q, k, v, d_o, dq, dk, dv, stream);
    case 32: return LaunchBackward<32>(b, q, k, v, d_o, dq, dk, dv, stream);
    default: return LaunchBackward<64>(b, q, k, v, d_o, dq, dk, dv, stream);
  }
}

}  // namespace gemtb::gpu::train
