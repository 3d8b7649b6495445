// Correctly rounded fp32 division and square root for bit-exact paths (host and device), next to
// AddRn/SubRn/MulRn in host_device.h. IEEE requires both to be correctly rounded, and so are the
// host's operator/ and std::sqrt(float); on the device the _rn intrinsics say so explicitly (the
// default device division and sqrt may be approximate under some flags).
#ifndef GEMTB_MODEL_NUMERICS_FP32_OPS_H_
#define GEMTB_MODEL_NUMERICS_FP32_OPS_H_

#include <cmath>

#include "model/numerics/host_device.h"

namespace gemtb::numerics {

GEMTB_HD inline float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

GEMTB_HD inline float SqrtRn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

}  // namespace gemtb::numerics

#endif  // GEMTB_MODEL_NUMERICS_FP32_OPS_H_
