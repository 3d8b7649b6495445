// Host models of layer_norm_kernels.cuh's LayerNorm rows, fp32 operations in the kernels' order, for
// the emulated tests of the kernels that run them (the fused LayerNorm backward, the fused
// feed-forward block): a warp's row as lanes l = 0..31 each taking columns l, l + 32, ... in order,
// their sums met by the butterfly (offsets 16, 8, 4, 2, 1), as lane 0 ends with them.
#ifndef GEMTB_TESTS_GPU_EMULATION_LAYER_NORM_HOST_MODEL_H_
#define GEMTB_TESTS_GPU_EMULATION_LAYER_NORM_HOST_MODEL_H_

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "gpu/train/layer_norm_kernels.cuh"

namespace gemtb::gpu::train::ln::host {

// The 32 lanes' partial sums by the kernels' butterfly: lane 0's result.
inline float Butterfly(std::vector<float> p) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    std::vector<float> next(kWarp);
    for (int l = 0; l < kWarp; ++l) next[l] = p[l] + p[l ^ offset];
    p = next;
  }
  return p[0];
}

struct Forward {
  std::vector<float> y, mean, rstd;
};

// RowStats and Normalized over n rows of `width`.
inline Forward LayerNormForward(const std::vector<float>& x, const std::vector<float>& gamma,
                                const std::vector<float>& beta, int64_t n, int width) {
  Forward f;
  f.y.resize(x.size());
  f.mean.resize(static_cast<size_t>(n));
  f.rstd.resize(static_cast<size_t>(n));
  for (int64_t row = 0; row < n; ++row) {
    const float* xr = x.data() + row * width;
    std::vector<float> s(kWarp, 0.0f), sq(kWarp, 0.0f);
    for (int l = 0; l < kWarp; ++l)
      for (int i = l; i < width; i += kWarp) s[l] = s[l] + xr[i];
    const float mean = Butterfly(s) / static_cast<float>(width);
    for (int l = 0; l < kWarp; ++l) {
      for (int i = l; i < width; i += kWarp) {
        const float d = xr[i] - mean;
        sq[l] = sq[l] + d * d;
      }
    }
    const float var = Butterfly(sq) / static_cast<float>(width);
    const float rstd = 1.0f / std::sqrt(var + kEps);
    for (int i = 0; i < width; ++i)
      f.y[static_cast<size_t>(row * width + i)] = ((xr[i] - mean) * rstd) * gamma[i] + beta[i];
    f.mean[static_cast<size_t>(row)] = mean;
    f.rstd[static_cast<size_t>(row)] = rstd;
  }
  return f;
}

struct Backward {
  std::vector<float> dx, g_part, b_part;
  std::vector<float> e_part;  // the new dx's partial rows (the handoff's), summed as b_part is
};

// BackwardRowOf over every row (dx written, or added to the given dx with accumulate) and BlockPartials'
// rows per block of kBlockRows rows: kWarps warps' sums of kRowsPerWarp rows each, added in warp order.
inline Backward LayerNormBackward(const std::vector<float>& x, const std::vector<float>& gamma,
                                  const std::vector<float>& mean, const std::vector<float>& rstd,
                                  const std::vector<float>& dy, int64_t n, int width, std::vector<float> dx,
                                  bool accumulate) {
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  Backward h;
  h.g_part.assign(static_cast<size_t>(blocks * width), 0.0f);
  h.b_part = h.g_part;
  for (int64_t row = 0; row < n; ++row) {
    const float* xr = x.data() + row * width;
    const float* dyr = dy.data() + row * width;
    std::vector<float> lane_sum(kWarp, 0.0f), lane_sum_h(kWarp, 0.0f);
    for (int l = 0; l < kWarp; ++l) {
      for (int i = l; i < width; i += kWarp) {
        const float hv = (xr[i] - mean[row]) * rstd[row];
        const float dh = dyr[i] * gamma[i];
        lane_sum[l] = lane_sum[l] + dh;
        lane_sum_h[l] = lane_sum_h[l] + dh * hv;
      }
    }
    const float sum = Butterfly(lane_sum) / static_cast<float>(width);
    const float sum_h = Butterfly(lane_sum_h) / static_cast<float>(width);
    for (int i = 0; i < width; ++i) {
      const float hv = (xr[i] - mean[row]) * rstd[row];
      const float dh = dyr[i] * gamma[i];
      const float g = rstd[row] * ((dh - sum) - hv * sum_h);
      float& out = dx[static_cast<size_t>(row * width + i)];
      out = accumulate ? out + g : g;
    }
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < width; ++i) {
      float g = 0.0f, bs = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        float gw = 0.0f, bw = 0.0f;
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const int64_t row = b * kBlockRows + w * kRowsPerWarp + r;
          if (row >= n) break;
          const float d = dy[static_cast<size_t>(row * width + i)];
          const float hv = (x[static_cast<size_t>(row * width + i)] - mean[row]) * rstd[row];
          gw = gw + d * hv;
          bw = bw + d;
        }
        g = w == 0 ? gw : g + gw;
        bs = w == 0 ? bw : bs + bw;
      }
      h.g_part[static_cast<size_t>(b * width + i)] = g;
      h.b_part[static_cast<size_t>(b * width + i)] = bs;
    }
  }
  h.e_part.assign(static_cast<size_t>(blocks * width), 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < width; ++i) {
      float e = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        float ew = 0.0f;
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const int64_t row = b * kBlockRows + w * kRowsPerWarp + r;
          if (row >= n) break;
          ew = ew + dx[static_cast<size_t>(row * width + i)];
        }
        e = w == 0 ? ew : e + ew;
      }
      h.e_part[static_cast<size_t>(b * width + i)] = e;
    }
  }
  h.dx = std::move(dx);
  return h;
}

}  // namespace gemtb::gpu::train::ln::host

#endif  // GEMTB_TESTS_GPU_EMULATION_LAYER_NORM_HOST_MODEL_H_
