// The arithmetic of gpu/train/qk_norm_rope.h for one head row in host fp32, operation for operation
// (head_rms_norm_kernels.cuh's 8-lane sums and butterfly, then the reference's RoPE): every operation rounds
// once as the device's explicitly rounded ones do (the build contracts no FMA), so its bytes are the
// kernel's. Shared by the device test and the fiber emulation's test.
#ifndef GEMTB_TESTS_GPU_QK_NORM_ROPE_HOST_MODEL_H_
#define GEMTB_TESTS_GPU_QK_NORM_ROPE_HOST_MODEL_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace gemtb::gpu::train::test {

// The 8-lane butterfly of head_rms_norm.cu over the lanes' partial sums: offsets 4, 2, 1.
inline float Butterfly(std::vector<float> p) {
  for (int offset = 4; offset > 0; offset /= 2) {
    std::vector<float> next(8);
    for (int g = 0; g < 8; ++g) next[g] = p[g] + p[g ^ offset];
    p = next;
  }
  return p[0];
}

// The host model of one head row: forward y, inv; backward dx from dy.
inline void HostForward(const float* x, int dh, const float* trow, float* y, float* inv) {
  std::vector<float> part(8, 0.0f);
  for (int g = 0; g < 8; ++g)
    for (int i = g; i < dh; i += 8) part[g] = part[g] + x[i] * x[i];
  const float r = 1.0f / std::sqrt(Butterfly(part) / static_cast<float>(dh) + 1e-6f);
  *inv = r;
  const int half = dh / 2;
  std::vector<float> n(dh);
  for (int i = 0; i < dh; ++i) n[i] = x[i] * r;
  for (int m = 0; m < half; ++m) {
    const float a = n[2 * m], b = n[2 * m + 1], sn = trow[m], cs = trow[half + m];
    y[2 * m] = a * cs - b * sn;
    y[2 * m + 1] = b * cs + a * sn;
  }
}

inline void HostBackward(const float* x, float r, const float* dy, int dh, const float* trow, float* dx) {
  const int half = dh / 2;
  std::vector<float> gr(dh);
  for (int m = 0; m < half; ++m) {
    const float a = dy[2 * m], b = dy[2 * m + 1], sn = trow[m], cs = trow[half + m];
    gr[2 * m] = a * cs + b * sn;
    gr[2 * m + 1] = b * cs - a * sn;
  }
  std::vector<float> part(8, 0.0f);
  for (int g = 0; g < 8; ++g)
    for (int i = g; i < dh; i += 8) part[g] = part[g] + gr[i] * (x[i] * r);
  const float s = Butterfly(part) / static_cast<float>(dh);
  for (int i = 0; i < dh; ++i) dx[i] = r * (gr[i] - (x[i] * r) * s);
}

// The host model over jagged samples (sample b's rows [off[b], off[b + 1]), heads x dh values each,
// row t of a sample rotated by table row t): y, inv and dx (from dy) of every head row of the samples;
// the arrays' other elements are left as they are.
inline void HostRows(const std::vector<int32_t>& off, int heads, int dh, const std::vector<float>& table,
                     const std::vector<float>& x, const std::vector<float>& dy, std::vector<float>& y,
                     std::vector<float>& inv, std::vector<float>& dx) {
  for (size_t b = 0; b + 1 < off.size(); ++b) {
    for (int32_t t = 0; t < off[b + 1] - off[b]; ++t) {
      for (int h = 0; h < heads; ++h) {
        const int64_t hr = (off[b] + t) * int64_t{heads} + h;
        const float* trow = table.data() + static_cast<size_t>(t) * dh;
        HostForward(x.data() + hr * dh, dh, trow, y.data() + hr * dh, &inv[hr]);
        HostBackward(x.data() + hr * dh, inv[hr], dy.data() + hr * dh, dh, trow, dx.data() + hr * dh);
      }
    }
  }
}

}  // namespace gemtb::gpu::train::test

#endif  // GEMTB_TESTS_GPU_QK_NORM_ROPE_HOST_MODEL_H_
