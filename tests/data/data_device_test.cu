// The generator's draws and the deterministic math give the same bits on the GPU as on the host
// (spec/embeddings-and-model.md §2 "GPU vs oracle": data and metrics bit-exact). Exit 77 = no GPU.
#include <cstdio>
#include <cstring>
#include "model/data/draws.h"
#include "model/data/teacher.h"
#include "model/numerics/det_math.h"
using namespace gemtb;
__host__ __device__ void Compute(int i, const data::IdLaw* law, double* out) {
  const double x = -40.0 + 0.01 * i;
  out[0] = numerics::DetExp(x);
  out[1] = numerics::DetLog(1e-300 * (i + 1) * 1e290);
  out[2] = numerics::DetLog1p(x / 41.0);
  out[3] = numerics::DetSigmoid(x / 4);
  out[4] = static_cast<double>(data::DrawId(*law, numerics::PhiloxBlock(1, 77, i)));
  out[5] = data::TeacherBeta(9, 3, i);
  data::LengthLaw ll{64, 3.37, 0.55, 0.02};
  out[6] = static_cast<double>(data::DrawLength(ll, 5, data::DataStream(data::FieldId(data::FieldKind::kSequence, 1), i), 0));
  out[7] = numerics::DetLog2(0.001 * (i + 1));
}
__global__ void Kernel(int n, data::IdLaw law, double* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) Compute(i, &law, out + 8 * i);
}
int main() {
  const int n = 8000;
  data::IdLaw law;
  law.vocab = 8192; law.zipf_s = 1.1; law.zipf_a = numerics::DetPow(8193.0, -0.1) - 1.0; law.inv_one_minus_s = 1.0 / -0.1;
  law.heavy_prob = 0.02; law.heavy_count = 8; law.salt = 1234; law.mul = 2001; law.add = 77;
  double* d = nullptr;
  if (cudaMalloc(&d, n * 8 * sizeof(double)) != cudaSuccess) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  Kernel<<<(n + 127) / 128, 128>>>(n, law, d);
  static double dev[8000 * 8], host[8000 * 8];
  if (cudaMemcpy(dev, d, sizeof(dev), cudaMemcpyDeviceToHost) != cudaSuccess) { std::printf("no CUDA device: skipped\n"); return 77; }
  for (int i = 0; i < n; ++i) Compute(i, &law, host + 8 * i);
  int bad = 0;
  for (int k = 0; k < n * 8; ++k) bad += std::memcmp(&dev[k], &host[k], 8) != 0;
  std::printf("host vs device: %d of %d values differ\n", bad, n * 8);
  return bad != 0;
}
