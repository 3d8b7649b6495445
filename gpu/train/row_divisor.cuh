// A row's sum divided by its count, as __fdiv_rn(sum, count) rounds it, for the row-wise norm kernels
// (head_rms_norm_kernels.cuh, qk_norm_rope_kernels.cuh): where the count is a power of two, sum *
// (1 / count) is the same correctly rounded value (1 / count is exact, and scaling by a power of two
// rounds once, as the division does, subnormal results included), in one multiply instead of the
// division's Newton steps and range checks, which those kernels otherwise run once a row (fewer
// instructions; what that saves of their time has not been measured against the division). Other
// counts divide. Device code, also built by a host compiler for the CPU emulation
// (tests/gpu/emulation, through its cuda_shim.h).
#ifndef GEMTB_GPU_TRAIN_ROW_DIVISOR_CUH_
#define GEMTB_GPU_TRAIN_ROW_DIVISOR_CUH_

namespace gemtb::gpu::train {

class RowDivisor {
 public:
  __device__ explicit RowDivisor(int count)
      : count_(static_cast<float>(count)),
        inverse_(1.0f / static_cast<float>(count)),  // IEEE division in device code too (-prec-div)
        power_of_two_(count > 0 && (count & (count - 1)) == 0) {}
  __device__ float Of(float sum) const { return power_of_two_ ? __fmul_rn(sum, inverse_) : __fdiv_rn(sum, count_); }

 private:
  float count_, inverse_;
  bool power_of_two_;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_ROW_DIVISOR_CUH_
