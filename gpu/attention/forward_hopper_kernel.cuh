// Hopper forward kernel (sm_90a, head dim 128): the same function as forward_kernel.cuh (spec §3,
// casts of §7), on warpgroup MMAs.
//
//   CTA = 2 warpgroups x 64 query rows (a 128-row tile of the host list), K/V in steps of 64 or 128
//   keys (template argument).
//   Q, K, V tiles in shared memory in the 128-byte swizzled layout (gpu/common/wgmma.cuh), loaded
//   with cp.async (zero-filled past the tile's rows), three K/V stages.
//   S = Q Kᵀ: 8 wgmma m64nBNk16, both operands from shared memory (K-major).
//   P = act(S) (or the online-softmax exp) in registers, rounded to the input type, and used as the
//   register A operand of O += P V: 8 wgmma m64n128k16 with V MN-major (transposed) from shared
//   memory. No shared-memory round trip for P.
//   Masks: a step whose keys lie inside every row's valid range (the intersection, computed once per
//   CTA) runs without any per-element test; only boundary steps test each (row, key) pair.
//   Grid: one CTA per (tile, head), tile-major, so the host's heavy-first order holds across heads.
#ifndef GEMTB_GPU_ATTENTION_FORWARD_HOPPER_KERNEL_CUH_
#define GEMTB_GPU_ATTENTION_FORWARD_HOPPER_KERNEL_CUH_

#include <climits>
#include <type_traits>

#include "gpu/attention/activation.cuh"
#include "gpu/attention/mask.cuh"
#include "gpu/attention/params.h"
#include "gpu/attention/softmax.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/common/quad_transpose.cuh"
#include "gpu/common/sm_count.h"
#include "gpu/common/wgmma.cuh"

namespace gemtb::gpu {

// Shared memory of the Hopper forward for kBlockN keys per step: Q, then kStages K/V stages.
template <int kBlockN>
struct HopperForwardSmem {
  static constexpr uint32_t kQBytes = kHopperBlockM * kHopperHeadDim * 2;
  static constexpr uint32_t kKvBytes = kBlockN * kHopperHeadDim * 2;
  static constexpr int kStages = 3;
  // 1024 bytes of slack to align the tiles to the swizzle pattern's 1024-byte period.
  static constexpr size_t kBytes = 1024 + kQBytes + kStages * 2 * kKvBytes;
};

// silu on the fast paths of the special-function unit: x / (1 + e^-x) with __expf and __fdividef
// (a few fp32 ulps from ActValue's exact-division form; P is then rounded to 16 bits). For x below
// about -87, e^-x exceeds 2^126 and the quotient is 0 (the exact value is below 1e-36).
__device__ __forceinline__ float FastSilu(float x) { return __fdividef(x, 1.f + __expf(-x)); }

// Rows [0, valid_rows) of a [tile_rows, 128] tile from global memory (rows src_stride elements
// apart) into the swizzled tile at shared address `dst`, zero-filling the rest (`any_valid` is a
// readable address for the zero-filled copies, which read nothing).
__device__ __forceinline__ void HopperLoadRows(uint32_t dst, int tile_rows, const uint16_t* src,
                                               int64_t src_stride, int valid_rows, const uint16_t* any_valid) {
  constexpr int kChunks = kHopperHeadDim / 8;  // 16-byte chunks per row
  for (int idx = static_cast<int>(threadIdx.x); idx < tile_rows * kChunks; idx += kHopperThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const bool ok = r < valid_rows;
    wgmma::CpAsync16(dst + wgmma::SwizzledOffset(tile_rows, r, c * 8), ok ? src + r * src_stride + c * 8 : any_valid,
                     ok ? 16u : 0u);
  }
}

// Online softmax in the log2 domain for one thread's two rows (g, g+8) of a 64-key step: scores
// are scaled by pre*log2(e) once, so each probability is one ex2 (the SFU's native exp). Same
// FlashAttention order as softmax.cuh (max, unnormalised exp, fp32 row sums, rescale factor).
struct Log2Softmax {
  float m[2] = {-INFINITY, -INFINITY};  // running max of the log2-scaled scores
  float l[2] = {0.f, 0.f};              // this lane's partial row sums

  // `s` holds log2-scaled scores (-inf where masked); replaces them by exp2(s - m_new).
  template <int kTiles>
  __device__ __forceinline__ void Step(float (&s)[kTiles][4], float (&rescale)[2]) {
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[n][0], s[n][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[n][2], s[n][3]));
    }
    float m_use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], QuadMax(tile_max[r]));
      rescale[r] = m[r] == -INFINITY ? 0.f : Exp2(m[r] - m_new);
      m_use[r] = m_new == -INFINITY ? 0.f : m_new;
      m[r] = m_new;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = Exp2(s[n][e] - m_use[e >> 1]);
        sum[e >> 1] += s[n][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * rescale[r] + sum[r];
  }

  // Row sums (0: no valid key) and LSE = ln(2) * (m + log2(l)) in natural-log units.
  __device__ __forceinline__ void Finish(float (&row_sum)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[r] = QuadSum(l[r]);
      lse[r] = row_sum[r] > 0.f ? (m[r] + log2f(row_sum[r])) * 0.69314718055994530942f : -INFINITY;
    }
  }

  static __device__ __forceinline__ float Exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }
};

// gelu_tanh(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), the identity
// 0.5 (1 + tanh(u)) = sigmoid(2u) with the SFU's exp and reciprocal (tanhf is far slower).
__device__ __forceinline__ float FastGeluTanh(float x) {
  const float u = kSqrt2OverPi * (x + kGeluTanhA * x * x * x);
  return __fdividef(x, 1.f + __expf(-2.f * u));
}

// The activation is a template argument: each kernel holds one straight-line elementwise path (a
// per-element switch over every activation made the code large enough to miss the instruction
// cache and kept the SFU operations of neighbouring elements from overlapping).
// kSiluTanhApprox and kGeluTanhApprox evaluate the act through tanh.approx (AttentionOptions::tanh_approx);
// only the kernels whose launchers use DispatchHopperActTanhApprox below have them.
enum class HopperAct { kSoftmax, kSilu, kGeluTanh, kOther, kSiluTanhApprox, kGeluTanhApprox };

// Calls fn.template operator()<A>() with the HopperAct that runs `act` (kOther for the acts without
// a kernel of their own): the one place where the launchers map an Activation to a kernel.
template <typename Fn>
auto DispatchHopperAct(Activation act, Fn&& fn) {
  switch (act) {
    case Activation::kSoftmax: return fn.template operator()<HopperAct::kSoftmax>();
    case Activation::kSilu: return fn.template operator()<HopperAct::kSilu>();
    case Activation::kGeluTanh: return fn.template operator()<HopperAct::kGeluTanh>();
    default: return fn.template operator()<HopperAct::kOther>();
  }
}

// As DispatchHopperAct, but silu and gelu_tanh take their tanh.approx kernels when the call permits
// it (options.tanh_approx). For the launchers of kernels that have those paths (the persistent TMA
// forward v6/v7, the split forward and the Hopper backward).
template <typename Fn>
auto DispatchHopperActTanhApprox(const AttentionOptions& options, Fn&& fn) {
  if (options.tanh_approx && options.act == Activation::kSilu) {
    return fn.template operator()<HopperAct::kSiluTanhApprox>();
  }
  if (options.tanh_approx && options.act == Activation::kGeluTanh) {
    return fn.template operator()<HopperAct::kGeluTanhApprox>();
  }
  return DispatchHopperAct(options.act, static_cast<Fn&&>(fn));
}

// The special-function unit's tanh (MUFU.TANH). PTX ISA §9.7.3.22: maximum relative error 2^-11 over
// the whole range, ±1 at ±inf.
__device__ __forceinline__ float TanhApprox(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// P = act(S) of one step of BN keys starting at key j0, in place (post_scale applied, 0 outside the
// row's keys), or for softmax the log2-scaled scores (-inf outside) fed to the online softmax, which
// replaces them by their exp2 and sets `rescale`, its factor for O. `masked`: some key of the step
// may lie outside a row's range (only then are the ranges tested). Shared by the v3, v4 and v5
// forwards.
template <HopperAct kAct, int BN>
__device__ __forceinline__ void ScoresToP(float (&s4)[BN / 8][4], int j0, bool masked, int lane_t,
                                          const RowKeyRange (&keys)[2], float score_scale,
                                          const ProblemParams& pr, Log2Softmax& online, float (&rescale)[2]) {
  if constexpr (kAct == HopperAct::kSoftmax) {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = s4[n][e] * score_scale;
        const int j = j0 + n * 8 + 2 * lane_t + (e & 1);
        s4[n][e] = (masked && !Contains(keys[e >> 1], j)) ? -INFINITY : x;
      }
    }
    online.Step(s4, rescale);
  } else {
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = s4[n][e] * score_scale;
        float y;
        if constexpr (kAct == HopperAct::kSilu) {
          y = FastSilu(x);
        } else if constexpr (kAct == HopperAct::kGeluTanh) {
          y = FastGeluTanh(x);
        } else {
          y = ActValue(pr.options.act, x);
        }
        y *= pr.post_scale;
        const int j = j0 + n * 8 + 2 * lane_t + (e & 1);
        s4[n][e] = (masked && !Contains(keys[e >> 1], j)) ? 0.f : y;
      }
    }
  }
}

// O (one warpgroup's 64 x 128 fp32 accumulator) times the online softmax's factor of each of this
// thread's two rows (rescale[0]: c0/c1, rescale[1]: c2/c3), before P V adds the step's terms.
__device__ __forceinline__ void RescaleHopperRows(float (&acc)[64], const float (&rescale)[2]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    acc[4 * i + 0] *= rescale[0];
    acc[4 * i + 1] *= rescale[0];
    acc[4 * i + 2] *= rescale[1];
    acc[4 * i + 3] *= rescale[1];
  }
}

// P (fp32 accumulator layout) rounded to the input type as the register A operand of O += P V.
template <ElementType E, int BN>
__device__ __forceinline__ void PToOperand(float (&s4)[BN / 8][4], uint32_t (&pa)[BN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) CToA<E>(s4[2 * kk], s4[2 * kk + 1], pa[kk]);
}

// The epilogue of one warp's 2 x 16 rows: O = acc (softmax: / row sum, then post_scale; an empty row
// (no valid key) has O = 0 and LSE = -inf, spec §3) rounded to the output type, and the softmax's
// LSE. `row`: this thread's two rows in the tile; rows >= q_rows lie past the sequence's end.
// kRcp ("v7", the default since bc34b64, checked with 12,000 cases at bf022de): softmax's
// normalisation as one multiply per element by post / row_sum, formed once per row: v5 and v6
// divide each of a thread's 64 outputs (an IEEE division with its slow-path check, ~9
// instructions each, as many as a K/V step's elementwise work on cross attention's two-step
// tiles). Two roundings either way (v / l, then * post; or post / l, then * v), before O is
// rounded to 16 bits.
template <ElementType E, HopperAct kAct, bool kRcp = false>
__device__ __forceinline__ void StoreHopperRows(const float (&acc)[64], Log2Softmax& online, const int (&row)[2],
                                                int q_rows, int64_t first_out_row, const ForwardParams& p, int h,
                                                int lane_t) {
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  constexpr int D = kHopperHeadDim;
  const ProblemParams& pr = p.problem;
  float row_sum[2] = {1.f, 1.f};
  float lse[2] = {-INFINITY, -INFINITY};
  float scale[2] = {1.f, 1.f};  // kRcp: post / row_sum
  if constexpr (softmax) {
    online.Finish(row_sum, lse);
    if constexpr (kRcp) {
#pragma unroll
      for (int r = 0; r < 2; ++r) scale[r] = row_sum[r] > 0.f ? pr.post_scale / row_sum[r] : 0.f;
    }
  }
  // The thread's outputs, rounded and packed in pairs: w[r][i] holds columns 8i + 2t, 8i + 2t + 1
  // of its row r.
  uint32_t w[2][D / 8];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      float v0 = acc[4 * i + 2 * r];
      float v1 = acc[4 * i + 2 * r + 1];
      if constexpr (softmax && kRcp) {
        v0 *= scale[r];
        v1 *= scale[r];
      } else if constexpr (softmax) {
        v0 = row_sum[r] > 0.f ? (v0 / row_sum[r]) * pr.post_scale : 0.f;
        v1 = row_sum[r] > 0.f ? (v1 / row_sum[r]) * pr.post_scale : 0.f;
      }
      w[r][i] = PackRounded<E>(v0, v1);
    }
  }
  // Whole 16-byte blocks per thread (QuadTranspose4) where the launch allows 16-byte stores
  // (ForwardParams::wide_o_stores): a warp's store instruction then writes whole 32-byte sectors (64
  // contiguous bytes of each of 8 rows), where 4-byte stores wrote half sectors and took four times
  // as many instructions, whose queue the next item's first loads waited behind (Nsight Compute on
  // cross_gdpa_gelu, tools/bench/NOTES.md "Session 12"). A launch-uniform branch; the shuffles run in
  // every lane, the stores only in valid rows.
  if (p.wide_o_stores != 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        uint32_t block[4] = {w[r][4 * k], w[r][4 * k + 1], w[r][4 * k + 2], w[r][4 * k + 3]};
        QuadTranspose4(block, lane_t);  // block: columns 8 (4k + t) .. 8 (4k + t) + 7 of row r
        if (row[r] < q_rows) {
          uint16_t* o = p.o + ((first_out_row + row[r]) * pr.heads + h) * D + (4 * k + lane_t) * 8;
          *reinterpret_cast<uint4*>(o) = make_uint4(block[0], block[1], block[2], block[3]);
        }
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] >= q_rows) continue;
      uint16_t* o = p.o + ((first_out_row + row[r]) * pr.heads + h) * D + 2 * lane_t;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) *reinterpret_cast<uint32_t*>(o + i * 8) = w[r][i];
    }
  }
  if (softmax && lane_t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] < q_rows) p.lse[h * pr.out_rows + first_out_row + row[r]] = lse[r];
    }
  }
}

template <ElementType E, HopperAct kAct, int BN>
__global__ void __launch_bounds__(kHopperThreads, 1) ForwardHopperKernel(const ForwardParams p) {
  constexpr int D = kHopperHeadDim;
  constexpr int BM = kHopperBlockM;
  static_assert(BN == 64 || BN == 128, "64 or 128 keys per step");
  constexpr int kStages = HopperForwardSmem<BN>::kStages;
  constexpr int kSRegs = BN / 2;  // S accumulator registers per thread (64 rows x BN / 128 threads)
  using Smem = HopperForwardSmem<BN>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ int s_full_lo, s_full_hi;
  const uint32_t raw = wgmma::SmemAddress(smem_raw);
  const uint32_t sq = (raw + 1023u) & ~1023u;
  const auto sk = [&](int stage) { return sq + Smem::kQBytes + static_cast<uint32_t>(stage) * 2u * Smem::kKvBytes; };
  const auto sv = [&](int stage) { return sk(stage) + Smem::kKvBytes; };

  const ProblemParams& pr = p.problem;
  const int tile_index = static_cast<int>(blockIdx.x) / pr.heads;
  const int h = static_cast<int>(blockIdx.x) % pr.heads;
  const int hk = h / (pr.heads / pr.kv_heads);
  const ForwardTile tile = p.tiles[tile_index];
  const SeqInfo seq = pr.seqs[tile.b];
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int warp = (tid / 32) % 4;
  const LaneCoords ln = Lane();
  const int64_t q_stride = static_cast<int64_t>(pr.heads) * D;
  const int64_t kv_stride = static_cast<int64_t>(pr.kv_heads) * D;
  constexpr bool softmax = kAct == HopperAct::kSoftmax;
  const float score_scale = softmax ? pr.pre_scale * 1.44269504088896340736f : pr.pre_scale;

  const int q_rows = min(BM, seq.lq - tile.i0);
  const int steps = KeySteps(tile.k_lo, tile.k_hi, BN);
  const auto load_kv = [&](int step) {
    const int j0 = tile.k_lo + step * BN;
    const int64_t offset = (seq.kv_begin + j0) * kv_stride + hk * D;
    const int rows = min(BN, tile.k_hi - j0);
    HopperLoadRows(sk(step % kStages), BN, pr.k + offset, kv_stride, rows, pr.k);
    HopperLoadRows(sv(step % kStages), BN, pr.v + offset, kv_stride, rows, pr.v);
  };
  HopperLoadRows(sq, BM, pr.q + (seq.q_begin + tile.i0) * q_stride + h * D, q_stride, q_rows, pr.q);
  load_kv(0);
  wgmma::CpAsyncCommit();
  if (steps > 1) load_kv(1);
  wgmma::CpAsyncCommit();

  // Rows of this thread (c0/c1 and c2/c3 of every accumulator tile) and their key ranges; the
  // intersection of the valid rows' ranges is where no step needs a mask.
  const int row[2] = {wg * 64 + warp * 16 + ln.g, wg * 64 + warp * 16 + ln.g + 8};
  RowKeyRange keys[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) keys[r] = RowKeys(pr.options, tile.i0 + row[r], seq.lq, seq.lk);
  if (tid == 0) {
    s_full_lo = INT_MIN;
    s_full_hi = INT_MAX;
  }
  __syncthreads();
  if (ln.t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] < q_rows) {
        atomicMax(&s_full_lo, keys[r].begin);
        atomicMin(&s_full_hi, keys[r].end);
      }
    }
  }
  wgmma::CpAsyncWait<1>();  // Q and K/V step 0 (step 1 may still be in flight)
  wgmma::FenceProxyAsync();
  __syncthreads();
  const int full_lo = s_full_lo;
  const int full_hi = s_full_hi;

  // S of one step for this warpgroup's 64 rows: 8 k-steps over the head dim; k-step kk reads column
  // block kk/4 of the swizzled tiles, 32 bytes per 16 elements within it.
  const auto issue_scores = [&](int step, float (&s)[kSRegs]) {
    const uint32_t k_tile = sk(step % kStages);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t a = sq + static_cast<uint32_t>((kk >> 2) * BM * 128 + wg * 64 * 128 + (kk & 3) * 32);
      const uint32_t b = k_tile + static_cast<uint32_t>((kk >> 2) * BN * 128 + (kk & 3) * 32);
      const uint64_t da = wgmma::SwizzledDescriptor(a, 16, 1024);
      const uint64_t db = wgmma::SwizzledDescriptor(b, 16, 1024);
      if constexpr (BN == 64) {
        wgmma::MmaSS64<E>(s, da, db, kk > 0 ? 1u : 0u);
      } else {
        wgmma::MmaSS<E>(s, da, db, kk > 0 ? 1u : 0u);
      }
    }
  };

  Log2Softmax online;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;

  // P = act(S) (or the softmax's exp) of one step, rounded to the input type as the register A
  // operand of O += P V; `rescale` is the softmax's factor for O (1 for pointwise acts).
  uint32_t pa[BN / 16][4];
  float rescale[2] = {1.f, 1.f};
  const auto scores_to_p = [&](int step, float (&s)[kSRegs]) {
    const int j0 = tile.k_lo + step * BN;
    ScoresToP<kAct, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), j0,
                        !(j0 >= full_lo && j0 + BN <= full_hi), ln.t, keys, score_scale, pr, online,
                        rescale);
  };
  // The register A operand of O += P V. Written only while no wgmma is in flight: a wgmma reads its
  // register operands asynchronously until it completes.
  const auto p_to_operand = [&](float (&s)[kSRegs]) {
    PToOperand<E, BN>(*reinterpret_cast<float(*)[BN / 8][4]>(&s), pa);
  };

  {
    float s0[kSRegs];
    wgmma::Fence();
    issue_scores(0, s0);
    wgmma::Commit();
    wgmma::Wait<0>();
    wgmma::FenceRegisters(s0);
    scores_to_p(0, s0);
    p_to_operand(s0);
  }

  // Step s (FA3's order): issue S(s+1); rescale O and issue O += P(s) V(s); once S(s+1) is done,
  // turn it into P(s+1) while PV(s) runs on the tensor cores; wait for PV(s). No wgmma is in flight
  // at the top of a step. Three K/V stages: step s+2 loads into the stage of step s-1, whose readers
  // every warp has waited for before this step's barrier.
  const auto run_step = [&](int step, auto has_next) {
    wgmma::CpAsyncWait<0>();  // this thread's copies of step s+1
    wgmma::FenceProxyAsync();
    __syncthreads();          // everyone's copies of step s+1; every warp is done with step s-1
    if (step + 2 < steps) load_kv(step + 2);
    wgmma::CpAsyncCommit();

    float sb[kSRegs];
    if constexpr (has_next) {
      wgmma::Fence();
      issue_scores(step + 1, sb);
      wgmma::Commit();
    }
    if constexpr (softmax) RescaleHopperRows(acc, rescale);
    wgmma::Fence();
    const uint32_t v_tile = sv(step % kStages);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t b = v_tile + static_cast<uint32_t>(kk * 16 * 128);
      wgmma::MmaRS<E>(acc, pa[kk], wgmma::SwizzledDescriptor(b, BN * 128, 1024), 1u);
    }
    wgmma::Commit();
    if constexpr (has_next) {
      wgmma::Wait<1>();  // S(s+1) is done; PV(s) may still run
      wgmma::FenceRegisters(sb);
      scores_to_p(step + 1, sb);  // fp32, in place: PV(s) still reads pa
    }
    wgmma::Wait<0>();
    wgmma::FenceRegisters(acc);
    if constexpr (has_next) p_to_operand(sb);
  };
  for (int step = 0; step + 1 < steps; ++step) run_step(step, std::true_type{});
  run_step(steps - 1, std::false_type{});

  StoreHopperRows<E, kAct>(acc, online, row, q_rows, seq.out_begin + tile.i0, p, h, ln.t);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_FORWARD_HOPPER_KERNEL_CUH_
