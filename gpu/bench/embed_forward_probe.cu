// embed_forward_probe: times the embedding forward kernel (gpu/embedding/forward_kernel.cuh) at
// several launch parameters on `gemtb bench embed`'s forward shape (a 10M x 128 table, 65,536 bags
// of 32 uniform ids, SUM pooling), fp32 and bf16, and checks that every variant writes the bytes of
// the first. It is how forward.cu's parameters were chosen; a line of JSON per variant:
//   embed_forward_probe [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/embedding/forward_kernel.cuh"

namespace gemtb::gpu::embedding {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "embed_forward_probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Shape {
  int64_t rows = 10'000'000, dim = 128, bags = 65536, ids_per_bag = 32;
};

template <ElementType kDtype, int kLoads, int kMinBlocks, int kWarps>
float TimeVariant(const LaunchParams& p, int64_t bags, int reps, int* regs) {
  auto kernel = PoolKernel<kDtype, kLoads, kMinBlocks, kWarps>;
  cudaFuncAttributes attr{};
  Check(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes");
  *regs = attr.numRegs;
  const unsigned blocks = static_cast<unsigned>((bags + kWarps - 1) / kWarps);
  for (int i = 0; i < 3; ++i) kernel<<<blocks, kWarps * 32>>>(p);
  Check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start);
    kernel<<<blocks, kWarps * 32>>>(p);
    cudaEventRecord(stop);
    Check(cudaEventSynchronize(stop), "timed run");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Run(int reps) {
  const Shape s;
  const int64_t n = s.bags * s.ids_per_bag;
  std::vector<int64_t> offsets(static_cast<size_t>(s.bags + 1)), ids(static_cast<size_t>(n));
  for (int64_t b = 0; b <= s.bags; ++b) offsets[static_cast<size_t>(b)] = b * s.ids_per_bag;
  std::mt19937_64 rng(1);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.rows));
  int64_t *d_offsets = nullptr, *d_ids = nullptr;
  float* d_out = nullptr;
  void* d_weights = nullptr;
  TableParams* d_table = nullptr;
  FeatureParams* d_feature = nullptr;
  Check(cudaMalloc(&d_offsets, offsets.size() * 8), "cudaMalloc offsets");
  Check(cudaMalloc(&d_ids, ids.size() * 8), "cudaMalloc ids");
  Check(cudaMalloc(&d_out, static_cast<size_t>(s.bags * s.dim) * 4), "cudaMalloc output");
  Check(cudaMalloc(&d_weights, static_cast<size_t>(s.rows * s.dim) * 4), "cudaMalloc table");
  Check(cudaMalloc(&d_table, sizeof(TableParams)), "cudaMalloc table params");
  Check(cudaMalloc(&d_feature, sizeof(FeatureParams)), "cudaMalloc feature params");
  cudaMemcpy(d_offsets, offsets.data(), offsets.size() * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(d_ids, ids.data(), ids.size() * 8, cudaMemcpyHostToDevice);
  // 0x3E: fp32 words of ~0.186, bf16 halves of ~0.186: finite, normal values of either type.
  Check(cudaMemset(d_weights, 0x3E, static_cast<size_t>(s.rows * s.dim) * 4), "cudaMemset table");
  FeatureParams f;
  f.table = 0;
  f.pooling = Pooling::kSum;
  cudaMemcpy(d_feature, &f, sizeof(f), cudaMemcpyHostToDevice);
  for (ElementType dtype : {ElementType::kFloat32, ElementType::kBFloat16}) {
    TableParams t;
    t.weights = d_weights;
    t.rows = s.rows;
    t.dim = s.dim;
    t.dtype = dtype;
    cudaMemcpy(d_table, &t, sizeof(t), cudaMemcpyHostToDevice);
    LaunchParams p;
    p.tables = d_table;
    p.features = d_feature;
    p.num_tables = 1;
    p.kjt.offsets = d_offsets;
    p.kjt.values = d_ids;
    p.kjt.batch = s.bags;
    p.kjt.num_keys = 1;
    p.pooled = d_out;
    p.pooled_width = s.dim;
    const double elem = dtype == ElementType::kFloat32 ? 4.0 : 2.0;
    const double bytes = static_cast<double>(n) * 8 + static_cast<double>(n * s.dim) * elem +
                         static_cast<double>(s.bags * s.dim) * 4;
    std::vector<float> first, out(static_cast<size_t>(s.bags * s.dim));
    auto report = [&](const char* name, float ms, int regs) {
      Check(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost), "copy output");
      if (first.empty()) first = out;
      const bool same = std::memcmp(first.data(), out.data(), out.size() * 4) == 0;
      std::printf("{\"dtype\": \"%s\", \"variant\": \"%s\", \"registers\": %d, \"median_ms\": %.4f, \"tbps\": %.3f, "
                  "\"same_bytes\": %s}\n",
                  dtype == ElementType::kFloat32 ? "fp32" : "bf16", name, regs, ms, bytes / (ms * 1e9),
                  same ? "true" : "false");
      std::fflush(stdout);
    };
    int regs = 0;
    float ms = 0;
#define GEMTB_PROBE(D, L, M, W)                                                   \
  if (dtype == ElementType::D) {                                                  \
    ms = TimeVariant<ElementType::D, L, M, W>(p, s.bags, reps, &regs);            \
    report("loads " #L ", min blocks " #M ", warps " #W, ms, regs);               \
  }
    GEMTB_PROBE(kFloat32, 4, 4, 8)
    GEMTB_PROBE(kFloat32, 8, 1, 8)
    GEMTB_PROBE(kFloat32, 4, 6, 8)
    GEMTB_PROBE(kFloat32, 4, 8, 8)
    GEMTB_PROBE(kFloat32, 2, 4, 8)
    GEMTB_PROBE(kFloat32, 2, 6, 8)
    GEMTB_PROBE(kFloat32, 2, 8, 8)
    GEMTB_PROBE(kFloat32, 4, 9, 4)
    GEMTB_PROBE(kFloat32, 4, 10, 4)
    GEMTB_PROBE(kFloat32, 2, 12, 4)
    GEMTB_PROBE(kFloat32, 4, 18, 2)
    GEMTB_PROBE(kBFloat16, 8, 4, 8)
    GEMTB_PROBE(kBFloat16, 16, 1, 8)
    GEMTB_PROBE(kBFloat16, 8, 6, 8)
    GEMTB_PROBE(kBFloat16, 4, 4, 8)
    GEMTB_PROBE(kBFloat16, 4, 6, 8)
    GEMTB_PROBE(kBFloat16, 4, 8, 8)
    GEMTB_PROBE(kBFloat16, 8, 9, 4)
    GEMTB_PROBE(kBFloat16, 4, 12, 4)
#undef GEMTB_PROBE
  }
  cudaFree(d_offsets);
  cudaFree(d_ids);
  cudaFree(d_out);
  cudaFree(d_weights);
  cudaFree(d_table);
  cudaFree(d_feature);
  return 0;
}

}  // namespace
}  // namespace gemtb::gpu::embedding

int main(int argc, char** argv) {
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  }
  return gemtb::gpu::embedding::Run(reps);
}
