// The fp64 reference of what GDPA's normed sides write (gpu/train/gdpa_tensor_core.h, GdpaHeadNorm):
// for one row's head, the gradient g that GDPA would otherwise write, rounded to bf16 as its output
// holds it, then (with RoPE) RoPE's transpose at the row's position, then the head RMS norm's backward
// dx = inv (g - y mean(g y)), y = x * inv as the norm's forward forms it (an fp32 product). Shared by
// the fiber-emulated test of the kernels' epilogue and the device test of the launcher.
#ifndef GEMTB_TESTS_GPU_HEAD_NORM_BACKWARD_REFERENCE_H_
#define GEMTB_TESTS_GPU_HEAD_NORM_BACKWARD_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/numerics/float_formats.h"

namespace gemtb::gpu::train::test {

struct HeadNormBackward {
  std::vector<double> dx;  // the reference values, dh of them
  // inv (max |g| + max |y| |mean(g y)|): the size of the terms an fp32 evaluation rounds, for bounds.
  double scale = 0;
};

// sums: GDPA's fp32 gradient of the head (dh values, before rounding); x: the norm's input (bf16
// values, widened); inv: the row's inverse RMS for the head; rope: the RoPE table's row at the row's
// position (sin in [0, dh / 2), cos in [dh / 2, dh)), or null.
inline HeadNormBackward HeadNormBackwardOf(const float* sums, const float* x, float inv, int dh, const float* rope) {
  std::vector<double> g(dh), y(dh);
  for (int i = 0; i < dh; ++i) g[i] = ::gemtb::numerics::Bf16BitsToFloat(::gemtb::numerics::FloatToBf16BitsRne(sums[i]));
  if (rope != nullptr) {  // RoPE's transpose: the pair (a, b) -> (a cs + b sn, b cs - a sn)
    for (int m = 0; m < dh / 2; ++m) {
      const double a = g[2 * m], b = g[2 * m + 1], sn = rope[m], cs = rope[dh / 2 + m];
      g[2 * m] = a * cs + b * sn, g[2 * m + 1] = b * cs - a * sn;
    }
  }
  double dot = 0, g_max = 0, y_max = 0;
  for (int i = 0; i < dh; ++i) {
    y[i] = x[i] * inv;  // the fp32 product
    dot += g[i] * y[i];
    g_max = std::max(g_max, std::fabs(g[i])), y_max = std::max(y_max, std::fabs(y[i]));
  }
  const double mean = dot / dh;
  HeadNormBackward out;
  out.dx.resize(dh);
  for (int i = 0; i < dh; ++i) out.dx[i] = inv * (g[i] - y[i] * mean);
  out.scale = inv * (g_max + y_max * std::fabs(mean));
  return out;
}

}  // namespace gemtb::gpu::train::test

#endif  // GEMTB_TESTS_GPU_HEAD_NORM_BACKWARD_REFERENCE_H_
