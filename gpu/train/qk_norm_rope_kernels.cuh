// The kernel of qk_norm_rope.h, device code only: qk_norm_rope.cu launches it, and the CPU fiber
// emulation (tests/gpu/emulation/) builds it too, where the explicitly rounded operations are the
// host's own IEEE fp32 operations, so the emulated bytes are the device's. Rows are fp32 or bf16 (T:
// float, or uint16_t holding bf16 bits): bf16 values widen exactly, every operation is fp32 as for
// fp32 rows, and the outputs round (RNE) once as they are stored.
#ifndef GEMTB_GPU_TRAIN_QK_NORM_ROPE_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_QK_NORM_ROPE_KERNELS_CUH_

#include <cstdint>

#include "gpu/common/mma.cuh"
#include "gpu/train/block_copy.cuh"

namespace gemtb::gpu::train::qkr {

// head_rms_norm_kernels.cuh's layout for head dims up to 64: a head's row to a group of 8 lanes, lane
// g holding elements g, g + 8, ... (at most 8 of them). A RoPE pair (2m, 2m + 1) then sits in lanes g and g ^ 1
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

// A block stages its head rows in shared memory in passes of whole groups' rows, at most kStageElems
// elements a tensor, and its rows' RoPE table rows once: the global reads and writes are then
// contiguous 16-byte moves (block_copy.cuh), where lane g reading elements g, g + 8, ... of its row
// in global memory made 2-byte loads scattered over four rows a warp. The arithmetic is as it was.
constexpr int kMaxDh = kLanes * kMaxPerLane;
constexpr int kStageElems = 4096;

// The dynamic shared memory QkNormRopeKernel<kBackward, T> takes: the staged x (and dy, backward),
// then the block's table rows.
template <bool kBackward, typename T>
constexpr int SharedBytes() {
  return (kBackward ? 2 : 1) * kStageElems * static_cast<int>(sizeof(T)) +
         kRowsPerBlock * kMaxDh * static_cast<int>(sizeof(float));
}

// The head rows of rows [blockIdx.y * kRowsPerBlock, + kRowsPerBlock) of sample blockIdx.x. Every lane
// of a warp runs the same steps (head rows past the end compute on zeros and write nothing), so the
// shuffles always see the whole warp. Outputs are written over their own staged inputs (x forward, dy
// backward: a lane writes only the elements it read), then copied out.
template <bool kBackward, typename T>
__global__ void __launch_bounds__(kThreads)
    QkNormRopeKernel(const int32_t* offsets, int heads, int dh, const float* table, const T* x, const T* dy,
                     const float* inv_in, T* out, float* inv_out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t row0 = offsets[blockIdx.x];
  const int n = static_cast<int>(offsets[blockIdx.x + 1] - row0);
  const int t0 = blockIdx.y * kRowsPerBlock;
  if (t0 >= n) return;  // the whole block leaves together
  const int tokens = min(kRowsPerBlock, n - t0);
  const int head_rows = tokens * heads, half = dh / 2;
  const int g = threadIdx.x % kLanes;
  T* x_tile = reinterpret_cast<T*>(smem);
  T* d_tile = x_tile + (kBackward ? kStageElems : 0);  // backward's dy, then dx
  float* table_tile = reinterpret_cast<float*>(smem + (kBackward ? 2 : 1) * kStageElems * sizeof(T));
  BlockCopy<kThreads>(table_tile, table + static_cast<int64_t>(t0) * dh, tokens * dh);
  const int64_t first = (row0 + t0) * heads;  // the block's first head row
  const int pass_rows = kStageElems / dh / kGroups * kGroups;
  for (int p0 = 0; p0 < head_rows; p0 += pass_rows) {
    const int rows = min(pass_rows, head_rows - p0);
    const int64_t span = (first + p0) * dh;
    BlockCopy<kThreads>(x_tile, x + span, rows * dh);
    if (kBackward) BlockCopy<kThreads>(d_tile, dy + span, rows * dh);
    __syncthreads();
    for (int base = 0; base < rows; base += kGroups) {
      const int hl = base + static_cast<int>(threadIdx.x) / kLanes;  // head row within the pass
      const bool real = hl < rows;
      const int hr = p0 + (real ? hl : 0);
      const int t = (real ? hr : p0) / heads;  // token within the block
      const int at = hl * dh;                  // the head row in the stage
      const float* trow = table_tile + t * dh;
      float xs[kMaxPerLane];
#pragma unroll
      for (int k = 0; k < kMaxPerLane; ++k) {
        const int i = g + kLanes * k;
        xs[k] = real && i < dh ? Load(x_tile + at + i) : 0.0f;
      }
      if (!kBackward) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxPerLane; ++k) {
          if (g + kLanes * k < dh) ss = __fadd_rn(ss, __fmul_rn(xs[k], xs[k]));
        }
        const float r =
            __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(GroupSum(ss), static_cast<float>(dh)), kEps)));
#pragma unroll
        for (int k = 0; k < kMaxPerLane; ++k) {
          const int i = g + kLanes * k;
          const float y = __fmul_rn(xs[k], r);
          const float partner = __shfl_xor_sync(0xffffffffu, y, 1);
          if (!real || i >= dh) continue;
          const int m = i / 2;
          const float sn = trow[m], cs = trow[half + m];
          Store(x_tile + at + i, (i % 2 == 0) ? __fsub_rn(__fmul_rn(y, cs), __fmul_rn(partner, sn))
                                              : __fadd_rn(__fmul_rn(y, cs), __fmul_rn(partner, sn)));
        }
        if (real && g == 0) inv_out[first + hr] = r;
      } else {
        const float r = inv_in[first + hr];
        float gs[kMaxPerLane];
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxPerLane; ++k) {
          const int i = g + kLanes * k;
          const float d = real && i < dh ? Load(d_tile + at + i) : 0.0f;
          const float partner = __shfl_xor_sync(0xffffffffu, d, 1);
          // RoPE's transpose, as the reference's RopeBackward: (a cs + b sn, b cs - a sn).
          const int m = i / 2;
          const float sn = i < dh ? trow[m] : 0.0f, cs = i < dh ? trow[half + m] : 0.0f;
          gs[k] = (i % 2 == 0) ? __fadd_rn(__fmul_rn(d, cs), __fmul_rn(partner, sn))
                               : __fsub_rn(__fmul_rn(d, cs), __fmul_rn(partner, sn));
          if (i < dh) s = __fadd_rn(s, __fmul_rn(gs[k], __fmul_rn(xs[k], r)));
        }
        s = __fdiv_rn(GroupSum(s), static_cast<float>(dh));
        if (!real) continue;
#pragma unroll
        for (int k = 0; k < kMaxPerLane; ++k) {
          const int i = g + kLanes * k;
          if (i >= dh) continue;
          const float yv = __fmul_rn(xs[k], r);
          Store(d_tile + at + i, __fmul_rn(r, __fsub_rn(gs[k], __fmul_rn(yv, s))));
        }
      }
    }
    __syncthreads();
    BlockCopy<kThreads>(out + span, kBackward ? d_tile : x_tile, rows * dh);
    __syncthreads();  // the next pass stages over these rows
  }
}

}  // namespace gemtb::gpu::train::qkr

#endif  // GEMTB_GPU_TRAIN_QK_NORM_ROPE_KERNELS_CUH_
