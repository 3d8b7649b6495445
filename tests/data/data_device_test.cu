// The generator's draws and the deterministic math give the same bits on the GPU as on the host
// (data and metrics bit-exact). Exit 77 = no GPU.
#include <cstdio>
#include <cstring>
#include <vector>

#include "model/data/draws.h"
#include "model/data/teacher.h"
#include "model/numerics/det_math.h"

namespace {

using namespace gemtb;

constexpr int kValues = 8;

// Value group i: every routine the generator runs per draw, on inputs spread over their ranges.
// The inputs are formed with the explicitly rounded operations too: written as -40.0 + 0.01 * i, nvcc
// fuses the device's expression into one FMA and the host's (-ffp-contract=off) rounds twice, so the
// two sides fed different x to the routines under test (the first GPU run: 9,258 of 64,000 values
// differed).
__host__ __device__ void Compute(int i, const data::IdLaw& law, double* out) {
  const double x = numerics::DAdd(-40.0, numerics::DMul(0.01, static_cast<double>(i)));
  out[0] = numerics::DetExp(x);
  out[1] = numerics::DetLog(1e-10 * (i + 1));
  out[2] = numerics::DetLog1p(x / 41.0);
  out[3] = numerics::DetSigmoid(x / 4);
  out[4] = static_cast<double>(data::DrawId(law, numerics::PhiloxBlock(1, 77, i)));
  out[5] = data::TeacherBeta(9, 3, i);
  const data::LengthLaw length{64, 3.37, 0.55, 0.02};
  const uint64_t stream = data::DataStream(data::FieldId(data::FieldKind::kSequence, 1), i);
  out[6] = static_cast<double>(data::DrawLength(length, 5, stream, 0));
  out[7] = numerics::DetLog2(0.001 * (i + 1));
}

__global__ void ComputeAll(int n, data::IdLaw law, double* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) Compute(i, law, out + kValues * i);
}

}  // namespace

int main() {
  const int n = 8000;
  data::IdLaw law;  // Zipf(1.1) over 8192 ids with heavy hitters, as the tiny items
  law.vocab = 8192;
  law.zipf_s = 1.1;
  law.zipf_a = numerics::DetPow(8193.0, -0.1) - 1.0;
  law.inv_one_minus_s = 1.0 / -0.1;
  law.heavy_prob = 0.02;
  law.heavy_count = 8;
  law.salt = 1234;
  law.mul = 2001;
  law.add = 77;
  double* d = nullptr;
  if (cudaMalloc(&d, n * kValues * sizeof(double)) != cudaSuccess) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  ComputeAll<<<(n + 127) / 128, 128>>>(n, law, d);
  std::vector<double> device(n * kValues), host(n * kValues);
  if (cudaMemcpy(device.data(), d, device.size() * sizeof(double), cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::printf("kernel failed\n");
    return 1;
  }
  cudaFree(d);
  for (int i = 0; i < n; ++i) Compute(i, law, host.data() + kValues * i);
  // Per value group: how many differ, and the first that does, so that a failure names its routine.
  int differ = 0;
  for (int g = 0; g < kValues; ++g) {
    int group_differ = 0, first = -1;
    for (int i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(kValues) * i + g;
      if (std::memcmp(&device[k], &host[k], sizeof(double)) != 0) {
        if (group_differ++ == 0) first = i;
      }
    }
    differ += group_differ;
    if (group_differ > 0) {
      const size_t k = static_cast<size_t>(kValues) * first + g;
      std::printf("value group %d: %d of %d differ; first at i = %d: host %.17g device %.17g\n", g, group_differ, n,
                  first, host[k], device[k]);
    }
  }
  std::printf("host vs device: %d of %zu values differ\n", differ, host.size());
  return differ != 0;
}
