#include "gpu/train/gdpa.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/common/dependent_launch.cuh"
#include "gpu/train/gdpa_rows.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

using gdpa::LoadSample;
using gdpa::Mask;
using gdpa::Sample;

// A block takes one (sample, head, tile of kTile rows) and walks the other side in steps of kTile
// rows through shared memory, so that in a step lane l owns the score of the step's row l; each
// warp takes every kWarps-th row of the tile and adds the step's terms into its rows in order.
constexpr int kWarp = 32;
constexpr int kTile = kWarp;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kMaxRows = 1 << 20;       // per sample: kMaxRows / kTile tiles fit a grid's z (65535)
constexpr int kMaxMask = 1 << 30;       // window / block: i + window + 1 stays an int
constexpr int64_t kMaxBatch = (int64_t{1} << 31) - 1;  // a grid's x
constexpr int kMaxHeads = 65535;        // a grid's y

struct Params {
  const int32_t* q_offsets;
  const int32_t* k_offsets;
  int heads;
  Mask mask;
  float post_scale;
};


// q . k summed over c = 0 .. kDh-1 in order from 0, as the reference's Scores.
template <int kDh>
__device__ float Dot(const float* a, const float* b) {
  float z = 0.0f;
#pragma unroll
  for (int c = 0; c < kDh; ++c) z = __fadd_rn(z, __fmul_rn(a[c], b[c]));
  return z;
}

// reference/model/ops.h's overflow-safe sigmoid: exp of a non-positive argument only.
__device__ float Sigmoid(float x) {
  if (x >= 0.0f) return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
  const float e = expf(x);
  return __fdiv_rn(e, __fadd_rn(1.0f, e));
}

// post * silu(z), written as the reference's backward writes it around one sigmoid.
__device__ float Weight(float z, float sg, float post) { return __fmul_rn(post, __fmul_rn(z, sg)); }
// dL/dz = post * silu'(z) * dp, silu'(z) = sg (1 + z (1 - sg)).
__device__ float ScoreGrad(float z, float sg, float dp, float post) {
  const float grad = __fmul_rn(sg, __fadd_rn(1.0f, __fmul_rn(z, __fsub_rn(1.0f, sg))));
  return __fmul_rn(__fmul_rn(post, grad), dp);
}

// Rows [row0, row0 + n) of head h of x (rows of `width` floats) into s, row r at s + r * kStride.
template <int kDh, int kStride>
__device__ void LoadRows(const float* x, int64_t row0, int n, int width, int h, float* s) {
  for (int e = threadIdx.x; e < n * kDh; e += kThreads) {
    const int r = e / kDh, c = e % kDh;
    s[r * kStride + c] = x[(row0 + r) * width + h * kDh + c];
  }
}

// Lane l owns elements l, l + 32, ... of an output row.
template <int kDh>
constexpr int kPerLane = (kDh + kWarp - 1) / kWarp;

// Rows [first, first + n) of head h of `out` from the warps' accumulators (row warp + kWarps * w).
template <int kDh>
__device__ void StoreRows(const float (&acc)[kRowsPerWarp][kPerLane<kDh>], int64_t first, int n, int width, int h,
                          float* out) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int w = 0; w < kRowsPerWarp; ++w) {
    const int r = warp + kWarps * w;
    if (r >= n) break;
#pragma unroll
    for (int t = 0; t < kPerLane<kDh>; ++t) {
      const int c = lane + kWarp * t;
      if (c < kDh) out[(first + r) * width + h * kDh + c] = acc[w][t];
    }
  }
}

// o for the queries of tile blockIdx.z of sample blockIdx.x, head blockIdx.y.
template <int kDh>
__global__ void __launch_bounds__(kThreads)
    GdpaForwardKernel(Params p, const float* q, const float* k, const float* v, float* o) {
  AwaitPriorGrids();
  constexpr int kPad = kDh + 1;  // lanes read different K rows: odd stride, no bank conflicts
  __shared__ float qs[kTile * kDh], ks[kTile * kPad], vs[kTile * kDh];
  const Sample s = LoadSample(p, blockIdx.x);
  const int h = blockIdx.y, width = p.heads * kDh;
  const int i0 = blockIdx.z * kTile;
  if (i0 >= s.lq) return;
  const int nq = min(kTile, s.lq - i0);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  LoadRows<kDh, kDh>(q, s.q_row + i0, nq, width, h, qs);
  // The tile's kept keys: the ranges' bounds grow with i.
  int klo = 0, khi = 0, unused = 0;
  p.mask.Range(i0, s.lk, &klo, &unused);
  p.mask.Range(i0 + nq - 1, s.lk, &unused, &khi);
  float acc[kRowsPerWarp][kPerLane<kDh>] = {};
  for (int j0 = klo; j0 < khi; j0 += kTile) {
    const int nk = min(kTile, khi - j0);
    __syncthreads();  // the previous step is read
    LoadRows<kDh, kPad>(k, s.k_row + j0, nk, width, h, ks);
    LoadRows<kDh, kDh>(v, s.k_row + j0, nk, width, h, vs);
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kRowsPerWarp; ++w) {
      const int r = warp + kWarps * w;
      if (r >= nq) break;
      int lo = 0, hi = 0;
      p.mask.Range(i0 + r, s.lk, &lo, &hi);
      lo = max(lo, j0) - j0;
      hi = min(hi, j0 + nk) - j0;
      float weight = 0.0f;
      if (lane >= lo && lane < hi) {
        const float z = Dot<kDh>(qs + r * kDh, ks + lane * kPad);
        weight = Weight(z, Sigmoid(z), p.post_scale);
      }
      for (int jj = lo; jj < hi; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, weight, jj);
#pragma unroll
        for (int t = 0; t < kPerLane<kDh>; ++t) {
          const int c = lane + kWarp * t;
          if (c < kDh) acc[w][t] = __fadd_rn(acc[w][t], __fmul_rn(pj, vs[jj * kDh + c]));
        }
      }
    }
  }
  StoreRows<kDh>(acc, s.q_row + i0, nq, width, h, o);
}

// dq for the queries of tile blockIdx.z: the forward's walk over keys with dz_ij k_j as the terms.
template <int kDh>
__global__ void __launch_bounds__(kThreads) GdpaBackwardDqKernel(Params p, const float* q, const float* k,
                                                                 const float* v, const float* d_o, float* dq) {
  AwaitPriorGrids();
  constexpr int kPad = kDh + 1;
  __shared__ float qs[kTile * kDh], dos[kTile * kDh], ks[kTile * kPad], vs[kTile * kPad];
  const Sample s = LoadSample(p, blockIdx.x);
  const int h = blockIdx.y, width = p.heads * kDh;
  const int i0 = blockIdx.z * kTile;
  if (i0 >= s.lq) return;
  const int nq = min(kTile, s.lq - i0);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  LoadRows<kDh, kDh>(q, s.q_row + i0, nq, width, h, qs);
  LoadRows<kDh, kDh>(d_o, s.q_row + i0, nq, width, h, dos);
  int klo = 0, khi = 0, unused = 0;
  p.mask.Range(i0, s.lk, &klo, &unused);
  p.mask.Range(i0 + nq - 1, s.lk, &unused, &khi);
  float acc[kRowsPerWarp][kPerLane<kDh>] = {};
  for (int j0 = klo; j0 < khi; j0 += kTile) {
    const int nk = min(kTile, khi - j0);
    __syncthreads();
    LoadRows<kDh, kPad>(k, s.k_row + j0, nk, width, h, ks);
    LoadRows<kDh, kPad>(v, s.k_row + j0, nk, width, h, vs);
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kRowsPerWarp; ++w) {
      const int r = warp + kWarps * w;
      if (r >= nq) break;
      int lo = 0, hi = 0;
      p.mask.Range(i0 + r, s.lk, &lo, &hi);
      lo = max(lo, j0) - j0;
      hi = min(hi, j0 + nk) - j0;
      float dz = 0.0f;
      if (lane >= lo && lane < hi) {
        const float z = Dot<kDh>(qs + r * kDh, ks + lane * kPad);
        const float dp = Dot<kDh>(dos + r * kDh, vs + lane * kPad);
        dz = ScoreGrad(z, Sigmoid(z), dp, p.post_scale);
      }
      for (int jj = lo; jj < hi; ++jj) {
        const float dzj = __shfl_sync(0xffffffffu, dz, jj);
#pragma unroll
        for (int t = 0; t < kPerLane<kDh>; ++t) {
          const int c = lane + kWarp * t;
          if (c < kDh) acc[w][t] = __fadd_rn(acc[w][t], __fmul_rn(dzj, ks[jj * kPad + c]));
        }
      }
    }
  }
  StoreRows<kDh>(acc, s.q_row + i0, nq, width, h, dq);
}

// dk, dv for the keys of tile blockIdx.z: a walk over the queries that keep them, in increasing order,
// with dz_ij q_i and p_ij do_i as the terms.
template <int kDh>
__global__ void __launch_bounds__(kThreads) GdpaBackwardDkDvKernel(Params p, const float* q, const float* k,
                                                                   const float* v, const float* d_o, float* dk,
                                                                   float* dv) {
  AwaitPriorGrids();
  constexpr int kPad = kDh + 1;  // lanes read different Q / dO rows
  __shared__ float ks[kTile * kDh], vs[kTile * kDh], qs[kTile * kPad], dos[kTile * kPad];
  const Sample s = LoadSample(p, blockIdx.x);
  const int h = blockIdx.y, width = p.heads * kDh;
  const int j0 = blockIdx.z * kTile;
  if (j0 >= s.lk) return;
  const int nk = min(kTile, s.lk - j0);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  LoadRows<kDh, kDh>(k, s.k_row + j0, nk, width, h, ks);
  LoadRows<kDh, kDh>(v, s.k_row + j0, nk, width, h, vs);
  int qlo = 0, qhi = 0, unused = 0;
  p.mask.Range(j0, s.lq, &qlo, &unused);
  p.mask.Range(j0 + nk - 1, s.lq, &unused, &qhi);
  float acc_k[kRowsPerWarp][kPerLane<kDh>] = {}, acc_v[kRowsPerWarp][kPerLane<kDh>] = {};
  for (int i0 = qlo; i0 < qhi; i0 += kTile) {
    const int nq = min(kTile, qhi - i0);
    __syncthreads();
    LoadRows<kDh, kPad>(q, s.q_row + i0, nq, width, h, qs);
    LoadRows<kDh, kPad>(d_o, s.q_row + i0, nq, width, h, dos);
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kRowsPerWarp; ++w) {
      const int r = warp + kWarps * w;
      if (r >= nk) break;
      int lo = 0, hi = 0;
      p.mask.Range(j0 + r, s.lq, &lo, &hi);
      lo = max(lo, i0) - i0;
      hi = min(hi, i0 + nq) - i0;
      float weight = 0.0f, dz = 0.0f;
      if (lane >= lo && lane < hi) {
        const float z = Dot<kDh>(qs + lane * kPad, ks + r * kDh);
        const float dp = Dot<kDh>(dos + lane * kPad, vs + r * kDh);
        const float sg = Sigmoid(z);
        weight = Weight(z, sg, p.post_scale);
        dz = ScoreGrad(z, sg, dp, p.post_scale);
      }
      for (int ii = lo; ii < hi; ++ii) {
        const float pi = __shfl_sync(0xffffffffu, weight, ii);
        const float dzi = __shfl_sync(0xffffffffu, dz, ii);
#pragma unroll
        for (int t = 0; t < kPerLane<kDh>; ++t) {
          const int c = lane + kWarp * t;
          if (c < kDh) {
            acc_k[w][t] = __fadd_rn(acc_k[w][t], __fmul_rn(dzi, qs[ii * kPad + c]));
            acc_v[w][t] = __fadd_rn(acc_v[w][t], __fmul_rn(pi, dos[ii * kPad + c]));
          }
        }
      }
    }
  }
  StoreRows<kDh>(acc_k, s.k_row + j0, nk, width, h, dk);
  StoreRows<kDh>(acc_v, s.k_row + j0, nk, width, h, dv);
}

absl::Status ValidateRows(const char* name, int64_t rows) {
  if (rows < 0 || rows > kMaxRows) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=", rows, ": want 0 .. ", kMaxRows));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchAndHeads(int64_t batch, int heads) {
  if (batch < 0 || batch > kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrCat("batch=", batch, ": want 0 .. ", kMaxBatch));
  }
  if (heads < 1 || heads > kMaxHeads) {
    return absl::InvalidArgumentError(absl::StrCat("heads=", heads, ": want 1 .. ", kMaxHeads));
  }
  return absl::OkStatus();
}

Params MakeParams(const GdpaBatch& b) {
  return Params{b.q_offsets, b.k_offsets, b.heads, Mask{b.window, b.block}, b.post_scale};
}

dim3 Grid(const GdpaBatch& b, int32_t rows) {
  return dim3(static_cast<unsigned>(b.batch), static_cast<unsigned>(b.heads),
              static_cast<unsigned>((rows + kTile - 1) / kTile));
}

template <int kDh>
void LaunchForward(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o, cudaStream_t stream) {
  LaunchDependent(GdpaForwardKernel<kDh>, Grid(b, b.max_q), kThreads, 0, stream, MakeParams(b), q, k, v, o);
}

template <int kDh>
void LaunchBackward(const GdpaBatch& b, const float* q, const float* k, const float* v, const float* d_o, float* dq,
                    float* dk, float* dv, cudaStream_t stream) {
  if (b.max_q > 0) {
    LaunchDependent(GdpaBackwardDqKernel<kDh>, Grid(b, b.max_q), kThreads, 0, stream, MakeParams(b), q, k, v, d_o, dq);
  }
  if (b.max_k > 0) {
    LaunchDependent(GdpaBackwardDkDvKernel<kDh>, Grid(b, b.max_k), kThreads, 0, stream, MakeParams(b), q, k, v, d_o, dk,
                    dv);
  }
}

// The exact kernels read v and write dv dense.
absl::Status DenseValues(const GdpaBatch& b) {
  if (b.v_ld == 0 || b.v_ld == int64_t{b.heads} * b.dh) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("v_ld=", b.v_ld, ": the fp32 GDPA takes dense v only (0 or heads*dh=",
                                                 int64_t{b.heads} * b.dh, ")"));
}

}  // namespace

absl::Status ValidateGdpaBatch(const GdpaBatch& b) {
  if (absl::Status s = ValidateBatchAndHeads(b.batch, b.heads); !s.ok()) return s;
  if (b.dh != 16 && b.dh != 32 && b.dh != 64) {
    return absl::InvalidArgumentError(absl::StrCat("dh=", b.dh, ": want 16, 32 or 64"));
  }
  if (b.window < -1 || b.window > kMaxMask) {
    return absl::InvalidArgumentError(absl::StrCat("window=", b.window, ": want -1 (none) .. ", kMaxMask));
  }
  if (b.block < 0 || b.block > kMaxMask) {
    return absl::InvalidArgumentError(absl::StrCat("block=", b.block, ": want 0 (none) .. ", kMaxMask));
  }
  if (!std::isfinite(b.post_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("post_scale=", b.post_scale, ": want a finite number"));
  }
  if (absl::Status s = ValidateRows("max_q", b.max_q); !s.ok()) return s;
  if (absl::Status s = ValidateRows("max_k", b.max_k); !s.ok()) return s;
  if (b.v_ld != 0 && (b.v_ld < int64_t{b.heads} * b.dh || b.v_ld >= (int64_t{1} << 31))) {
    return absl::InvalidArgumentError(
        absl::StrCat("v_ld=", b.v_ld, ": want 0 (dense) or heads*dh=", int64_t{b.heads} * b.dh, " .. 2^31-1"));
  }
  for (const auto& [tiles, name] : {std::pair{b.q_tiles, "q_tiles"}, std::pair{b.k_tiles, "k_tiles"}}) {
    if (tiles.entries == nullptr) continue;
    if (tiles.count < 0 || tiles.count >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".count=", tiles.count, ": want 0 .. 2^31-1"));
    }
    if (reinterpret_cast<uintptr_t>(tiles.entries) % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ".entries: want 16-byte aligned"));
    }
  }
  if (b.batch == 0) return absl::OkStatus();
  return NotNull({{b.q_offsets, "q_offsets"}, {b.k_offsets, "k_offsets"}});
}

absl::Status GdpaForward(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o,
                         cudaStream_t stream) {
  if (absl::Status s = ValidateGdpaBatch(b); !s.ok()) return s;
  if (absl::Status s = DenseValues(b); !s.ok()) return s;
  if (b.batch == 0 || b.max_q == 0) return absl::OkStatus();
  // Keys are read only where some sample has one.
  if (absl::Status s = NotNull({{q, "q"}, {o, "o"}}); !s.ok()) return s;
  if (b.max_k > 0) {
    if (absl::Status s = NotNull({{k, "k"}, {v, "v"}}); !s.ok()) return s;
  }
  switch (b.dh) {
    case 16: LaunchForward<16>(b, q, k, v, o, stream); break;
    case 32: LaunchForward<32>(b, q, k, v, o, stream); break;
    default: LaunchForward<64>(b, q, k, v, o, stream); break;
  }
  return Launched("GdpaForward");
}

absl::Status GdpaBackward(const GdpaBatch& b, const float* q, const float* k, const float* v, const float* d_o,
                          float* dq, float* dk, float* dv, cudaStream_t stream) {
  if (absl::Status s = ValidateGdpaBatch(b); !s.ok()) return s;
  if (absl::Status s = DenseValues(b); !s.ok()) return s;
  if (b.batch == 0 || (b.max_q == 0 && b.max_k == 0)) return absl::OkStatus();
  // q, d_o, dq are used only where some sample has queries; k, v, dk, dv only where some has keys.
  if (b.max_q > 0) {
    if (absl::Status s = NotNull({{q, "q"}, {d_o, "d_o"}, {dq, "dq"}}); !s.ok()) return s;
  }
  if (b.max_k > 0) {
    if (absl::Status s = NotNull({{k, "k"}, {v, "v"}, {dk, "dk"}, {dv, "dv"}}); !s.ok()) return s;
  }
  switch (b.dh) {
    case 16: LaunchBackward<16>(b, q, k, v, d_o, dq, dk, dv, stream); break;
    case 32: LaunchBackward<32>(b, q, k, v, d_o, dq, dk, dv, stream); break;
    default: LaunchBackward<64>(b, q, k, v, d_o, dq, dk, dv, stream); break;
  }
  return Launched("GdpaBackward");
}



}  // namespace gemtb::gpu::train
