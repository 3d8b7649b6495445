// What both GDPA implementations (gdpa.cu's fp32 kernels, gdpa_tensor_core.cu's) read the same way:
// the mask as the reference defines it, and a sample's rows from the jagged offsets (gdpa.h).
#ifndef GEMTB_GPU_TRAIN_GDPA_ROWS_CUH_
#define GEMTB_GPU_TRAIN_GDPA_ROWS_CUH_

#include <cstdint>

namespace gemtb::gpu::train::gdpa {

// GdpaShape::KeyRange of the reference with the sample's key count n, every bound clamped to
// [0, n]. Both masks are symmetric in i and j, so the queries that keep key j are Range(j, lq).
// lo and hi are nondecreasing in i.
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

// Sample b's first query and key rows and its counts.
struct Sample {
  int64_t q_row, k_row;
  int lq, lk;
};

// `p`: any launch parameters with the device offsets q_offsets and k_offsets [batch + 1].
template <typename P>
__device__ Sample LoadSample(const P& p, int64_t b) {
  Sample s;
  s.q_row = p.q_offsets[b];
  s.k_row = p.k_offsets[b];
  s.lq = static_cast<int>(p.q_offsets[b + 1] - s.q_row);
  s.lk = static_cast<int>(p.k_offsets[b + 1] - s.k_row);
  return s;
}

}  // namespace gemtb::gpu::train::gdpa

#endif  // GEMTB_GPU_TRAIN_GDPA_ROWS_CUH_
