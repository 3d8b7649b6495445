// The kernel of qk_norm_rope.h, device code only: qk_norm_rope.cu launches it, and the CPU fiber
// emulation (tests/gpu/emulation/) builds it too, where the explicitly rounded operations are the
// host's own IEEE fp32 operations, so the emulated bytes are the device's. Rows are fp32 or bf16 (T:
// float, or uint16_t holding bf16 bits): bf16 values widen exactly, every operation is fp32 as for
// fp32 rows, and the outputs round (RNE) once as they are stored.
#ifndef GEMTB_GPU_TRAIN_QK_NORM_ROPE_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_QK_NORM_ROPE_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/train/row_divisor.cuh"

namespace gemtb::gpu::train::qkr {

// head_rms_norm_kernels.cuh's layout for head dims up to 64: a head's row to a group of 8 lanes, lane g holding
// elements g, g + 8, ... (at most 8 of them). A RoPE pair (2m, 2m + 1) then sits in lanes g and g ^ 1
// of the same group at the same step, one shuffle apart.
constexpr int kLanes = 8;
constexpr int kMaxPerLane = 8;
constexpr int kThreads = 256;
constexpr int kGroups = kThreads / kLanes;  // head rows a block takes at a time
constexpr int kRowsPerBlock = 32;           // rows of one sample per block
constexpr float kEps = 1e-6f;

__device__ __forceinline__ float Load(const float* at) { return *at; }
__device__ __forceinline__ float Load(const uint16_t* at) { return Storage<ElementType::kBFloat16>::ToFloat(*at); }
__device__ __forceinline__ void Store(float* at, float v) { *at = v; }
__device__ __forceinline__ void Store(uint16_t* at, float v) { *at = Storage<ElementType::kBFloat16>::FromFloat(v); }

__device__ inline float GroupSum(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The head rows of rows [blockIdx.y * kRowsPerBlock, + kRowsPerBlock) of sample blockIdx.x: x (and,
// backward, out: dx) in rows ld apart, the forward's out (y), dy and the inverse RMS dense. Every lane
// of a warp runs the same steps (head rows past the end compute on the block's first and write
// nothing), so the shuffles always see the whole warp. kPerLane > 0: dh is kPerLane * kLanes, and a
// lane's loops run exactly kPerLane steps with no bounds tests (the kernel issues instructions at
// about 60% of the slots, so the ones it need not run are its time); 0: any even dh up to 64.
template <bool kBackward, typename T, int kPerLane = 0>
__global__ void __launch_bounds__(kThreads)
    QkNormRopeKernel(const int32_t* offsets, int heads, int dh_in, int64_t ld, const float* table, const T* x,
                     const T* dy, const float* inv_in, T* out, float* inv_out) {
  AwaitPriorGrids();
  constexpr bool kExact = kPerLane > 0;
  constexpr int kN = kExact ? kPerLane : kMaxPerLane;  // a lane's steps
  const int dh = kExact ? kPerLane * kLanes : dh_in;
  const int64_t row0 = offsets[blockIdx.x];
  const int n = static_cast<int>(offsets[blockIdx.x + 1] - row0);
  const int t0 = blockIdx.y * kRowsPerBlock;
  if (t0 >= n) return;  // the whole block leaves together
  const int head_rows = min(kRowsPerBlock, n - t0) * heads, half = dh / 2;
  const int g = threadIdx.x % kLanes;
  const RowDivisor per_value(dh);
  for (int base = 0; base < head_rows; base += kGroups) {
    const int hr = base + threadIdx.x / kLanes;
    const bool real = hr < head_rows;
    const int hr_or_0 = real ? hr : 0, t = t0 + hr_or_0 / heads;
    const int64_t at = ((row0 + t0) * heads + hr_or_0) * dh;                   // dense: y, dy, inv
    const int64_t ax = (row0 + t) * ld + (hr_or_0 - (t - t0) * heads) * dh;  // x's rows, and dx's
    const float* trow = table + static_cast<int64_t>(t) * dh;
    float xs[kN];
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int i = g + kLanes * k;
      xs[k] = kExact || i < dh ? Load(x + ax + i) : 0.0f;
    }
    if (!kBackward) {
      float ss = 0.0f;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        if (kExact || g + kLanes * k < dh) ss = __fadd_rn(ss, __fmul_rn(xs[k], xs[k]));
      }
      const float r =
          __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(per_value.Of(GroupSum(ss)), kEps)));
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const int i = g + kLanes * k;
        const float y = __fmul_rn(xs[k], r);
        const float partner = __shfl_xor_sync(0xffffffffu, y, 1);
        if (!real || (!kExact && i >= dh)) continue;
        const int m = i / 2;
        const float sn = trow[m], cs = trow[half + m];
        Store(out + at + i, (i % 2 == 0) ? __fsub_rn(__fmul_rn(y, cs), __fmul_rn(partner, sn))
                                         : __fadd_rn(__fmul_rn(y, cs), __fmul_rn(partner, sn)));
      }
      if (real && g == 0) inv_out[at / dh] = r;
    } else {
      const float r = inv_in[at / dh];
      float gs[kN];
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const int i = g + kLanes * k;
        const float d = kExact || i < dh ? Load(dy + at + i) : 0.0f;
        const float partner = __shfl_xor_sync(0xffffffffu, d, 1);
        // RoPE's transpose, as the reference's RopeBackward: (a cs + b sn, b cs - a sn).
        const int m = i / 2;
        const float sn = kExact || i < dh ? trow[m] : 0.0f, cs = kExact || i < dh ? trow[half + m] : 0.0f;
        gs[k] = (i % 2 == 0) ? __fadd_rn(__fmul_rn(d, cs), __fmul_rn(partner, sn))
                             : __fsub_rn(__fmul_rn(d, cs), __fmul_rn(partner, sn));
        if (kExact || i < dh) s = __fadd_rn(s, __fmul_rn(gs[k], __fmul_rn(xs[k], r)));
      }
      s = per_value.Of(GroupSum(s));
      if (!real) continue;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const int i = g + kLanes * k;
        if (!kExact && i >= dh) continue;
        const float yv = __fmul_rn(xs[k], r);
        Store(out + ax + i, __fmul_rn(r, __fsub_rn(gs[k], __fmul_rn(yv, s))));
      }
    }
  }
}

// The kernel for head dim dh: its exact instance at 16, 32 and 64, else the general one.
template <bool kBackward, typename T>
inline auto QkNormRopeKernelFor(int dh) -> decltype(&QkNormRopeKernel<kBackward, T, 0>) {
  switch (dh) {
    case 2 * kLanes:
      return &QkNormRopeKernel<kBackward, T, 2>;
    case 4 * kLanes:
      return &QkNormRopeKernel<kBackward, T, 4>;
    case 8 * kLanes:
      return &QkNormRopeKernel<kBackward, T, 8>;
    default:
      return &QkNormRopeKernel<kBackward, T, 0>;
  }
}

}  // namespace gemtb::gpu::train::qkr

#endif  // GEMTB_GPU_TRAIN_QK_NORM_ROPE_KERNELS_CUH_
