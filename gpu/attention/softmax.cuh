// Online softmax of one warp's 16 query rows (FlashAttention order): the
// running row max m, the running sum l of the unnormalised exp(S - m) in fp32, the rescale factor
// for the output accumulator when m grows, and the final normalisation and LSE. Each lane holds
// two rows (g and g+8 of the mma C layout); a row's 4 lanes (one quad) agree on m after a
// two-step shuffle, while l stays a per-lane partial sum until Finish.
#ifndef GEMTB_GPU_ATTENTION_SOFTMAX_CUH_
#define GEMTB_GPU_ATTENTION_SOFTMAX_CUH_

#include <cmath>

namespace gemtb::gpu {

__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One online-softmax step of a lane's two rows over kColTiles 8-key column tiles, in the domain of
// `exp` (natural: expf; log2-scaled scores: ex2). `s` holds scaled scores with masked pairs at -inf;
// they are replaced by the unnormalised probabilities exp(s - m_new) (0 where masked), the running
// max `m` and partial sums `l` advance, and `rescale` returns the factor by which the output
// accumulator rows must shrink: exp(m_old - m_new), or 0 while a row has seen no key.
template <int kColTiles, typename Exp>
__device__ __forceinline__ void OnlineSoftmaxStep(Exp exp, float (&m)[2], float (&l)[2], float (&s)[kColTiles][4],
                                                  float (&rescale)[2]) {
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kColTiles; ++n) {
    tile_max[0] = fmaxf(tile_max[0], fmaxf(s[n][0], s[n][1]));
    tile_max[1] = fmaxf(tile_max[1], fmaxf(s[n][2], s[n][3]));
  }
  float m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], QuadMax(tile_max[r]));
    rescale[r] = m[r] == -INFINITY ? 0.f : exp(m[r] - m_new);
    m_use[r] = m_new == -INFINITY ? 0.f : m_new;  // an all-masked row: exp(-inf - 0) = 0
    m[r] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < kColTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      s[n][e] = exp(s[n][e] - m_use[r]);
      sum[r] += s[n][e];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * rescale[r] + sum[r];
}

template <int kColTiles>  // 8-key column tiles per step
struct OnlineSoftmax {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};  // this lane's partial row sums

  // OnlineSoftmaxStep with expf.
  __device__ __forceinline__ void Step(float (&s)[kColTiles][4], float (&rescale)[2]) {
    OnlineSoftmaxStep<kColTiles>([](float x) { return expf(x); }, m, l, s, rescale);
  }

  // Full row sums (every lane of the quad gets them); 0 marks a row without any valid key.
  __device__ __forceinline__ void Finish(float (&row_sum)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[r] = QuadSum(l[r]);
      lse[r] = row_sum[r] > 0.f ? m[r] + logf(row_sum[r]) : -INFINITY;
    }
  }
};

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_SOFTMAX_CUH_
