// embed_forward_probe: times the embedding forward kernel (gpu/embedding/forward_kernel.cuh) at
// several launch parameters (loads in flight, blocks per SM, warps per block, the row load's cache
// hints, 32- or 64-bit rows) on `gemtb bench embed`'s sum_fp32_uniform and sum_bf16_uniform shapes
// (their ids, their byte count, its timing), over a table whose rows all differ; checks that every
// variant writes the bytes of the shape's first (forward.cu's own parameters), and, for sum fp32,
// times a gather without the pooling (the same bytes, for comparison). It is how forward.cu's
// parameters were chosen; a line of JSON per variant:
//   embed_forward_probe [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/common/device_buffer.h"
#include "gpu/embedding/embed_bench.h"
#include "gpu/embedding/forward_kernel.cuh"

namespace gemtb::gpu::embedding {
namespace {

// Exits with the message when `s` is not OK (a probe, not a library).
void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "embed_forward_probe: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

// The gather alone, as a reference for the pooling kernel: the same bags, ids, rows and output
// bytes (fp32, D = 128: a lane's 16 bytes of each row), the same warps and loads in flight, but no
// id checks, weights or ordered sums (the words are xor-ed): the gap between the two is what the
// pooling costs over the bare gather.
__global__ void __launch_bounds__(64, 18) GatherCeilingKernel(const LaunchParams p) {
  const int64_t total = p.kjt.batch;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * 2;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint32_t* table = static_cast<const uint32_t*>(p.tables[0].weights);
  for (int64_t bag = static_cast<int64_t>(blockIdx.x) * 2 + threadIdx.x / 32; bag < total; bag += stride) {
    const int64_t begin = p.kjt.offsets[bag];
    const int64_t my_row = p.kjt.values[begin + lane];  // the shape's bags hold 32 ids
    uint32_t x[4] = {0, 0, 0, 0};
    for (int k0 = 0; k0 < 32; k0 += 4) {
      uint32_t w[4][4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint32_t* a = table + __shfl_sync(kForwardFullMask, my_row, k0 + u) * 128 + lane * 4;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(w[u][0]), "=r"(w[u][1]), "=r"(w[u][2]), "=r"(w[u][3]) : "l"(a));
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] ^= w[u][i];
      }
    }
    *reinterpret_cast<uint4*>(p.pooled + bag * 128 + lane * 4) = make_uint4(x[0], x[1], x[2], x[3]);
  }
}

// Word i of the table: two halves, each a normal bf16 (sign, exponent 2^-8..2^7, mantissa from a
// hash of i and the half), so that every row differs and sums depend on their order: a variant that
// reads another row or adds in another order writes other bytes. As fp32 a word is a normal float
// of the same range (its low half more mantissa bits).
__global__ void FillDistinctKernel(uint32_t* words, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
    uint32_t w = 0;
    for (int half = 0; half < 2; ++half) {
      const uint32_t r = static_cast<uint32_t>(h >> (20 * half));
      const uint32_t bits = (r & 0x8000u) | (0x77u + (r >> 16) % 16u) << 7 | (r & 0x7Fu);
      w |= bits << (16 * half);
    }
    words[i] = w;
  }
}

// Times `kernel` (blocks of `warps` warps, as many as fit at once) after filling the output with
// NaN bits, so a variant that leaves bags unwritten cannot pass for the first one's bytes.
template <typename Kernel>
EmbedTiming TimeKernel(Kernel kernel, int warps, const LaunchParams& p, int64_t bags, const EmbedBenchOptions& options,
                       double bytes, int* regs) {
  cudaFuncAttributes attr{};
  Check(CudaOk(cudaFuncGetAttributes(&attr, kernel), "cudaFuncGetAttributes"));
  *regs = attr.numRegs;
  const absl::StatusOr<int64_t> resident = ResidentBlocks(kernel, warps);
  Check(resident.status());
  const unsigned blocks = PoolGrid(bags, warps, *resident);
  Check(CudaOk(cudaMemset(p.pooled, 0xFF, static_cast<size_t>(bags * p.pooled_width) * sizeof(float)), "output fill"));
  absl::StatusOr<EmbedTiming> t = TimeEmbedRuns(options, bytes, [&] {
    kernel<<<blocks, warps * 32>>>(p);
    return CudaOk(cudaGetLastError(), "probe launch");
  });
  Check(t.status());
  return *t;
}

// The variants of one shape's storage type; each line reports its registers, time and whether it
// wrote the first variant's bytes.
void ProbeShape(const EmbedBenchShape& shape, const EmbedBenchOptions& options) {
  const std::vector<int64_t> ids = DrawBenchIds(shape, options.seed);
  std::vector<int64_t> offsets(static_cast<size_t>(shape.bags + 1));
  for (int64_t b = 0; b <= shape.bags; ++b) offsets[static_cast<size_t>(b)] = b * shape.ids_per_bag;
  const size_t elements = static_cast<size_t>(shape.rows * shape.dim);
  DeviceArray<int64_t> d_offsets, d_ids;
  DeviceArray<float> d_out;
  DeviceArray<uint32_t> d_weights;  // fp32 words, or bf16 pairs in the first half
  DeviceArray<TableParams> d_table;
  DeviceArray<FeatureParams> d_feature;
  Check(d_offsets.Upload(offsets, "offsets"));
  Check(d_ids.Upload(ids, "ids"));
  Check(d_out.Allocate(static_cast<size_t>(shape.bags * shape.dim), "output"));
  Check(d_weights.Allocate(elements, "table"));
  FillDistinctKernel<<<1024, 256>>>(d_weights.get(), static_cast<int64_t>(elements));
  Check(CudaOk(cudaGetLastError(), "table fill"));
  TableParams t;
  t.weights = d_weights.get();
  t.rows = shape.rows;
  t.dim = shape.dim;
  t.dtype = shape.dtype;
  FeatureParams f;
  f.pooling = shape.pooling;
  Check(d_table.Upload(absl::MakeConstSpan(&t, 1), "table params"));
  Check(d_feature.Upload(absl::MakeConstSpan(&f, 1), "feature params"));
  LaunchParams p;
  p.tables = d_table.get();
  p.features = d_feature.get();
  p.num_tables = 1;
  p.kjt.offsets = d_offsets.get();
  p.kjt.values = d_ids.get();
  p.kjt.batch = shape.bags;
  p.kjt.num_keys = 1;
  p.pooled = d_out.get();
  p.pooled_width = shape.dim;
  const double bytes = EmbedForwardBytes(shape);
  std::vector<float> first, out;
  auto report = [&](const char* name, const EmbedTiming& timing, int regs) {
    Check(d_out.Download(out, "output"));
    if (first.empty()) first = out;
    const bool same = first == out;
    std::printf("{\"shape\": \"%s\", \"variant\": \"%s\", \"registers\": %d, \"median_ms\": %.4f, "
                "\"tbps\": %.3f, \"same_bytes\": %s}\n",
                shape.name.c_str(), name, regs, timing.median_ms, timing.tbps, same ? "true" : "false");
    std::fflush(stdout);
  };
  int regs = 0;
#define GEMTB_PROBE(D, ROW, L, M, W, LOAD)                                                                \
  if (shape.dtype == ElementType::D) {                                                                     \
    const EmbedTiming timing = TimeKernel(PoolKernel<ElementType::D, 128, ROW, L, M, W, RowLoad::LOAD>, W, p, \
                                          shape.bags, options, bytes, &regs);                             \
    report(#ROW " rows, loads " #L ", min blocks " #M ", warps " #W ", " #LOAD, timing, regs);           \
  }
  GEMTB_PROBE(kFloat32, int32_t, 4, 18, 2, kNoL1)
  GEMTB_PROBE(kFloat32, int64_t, 4, 18, 2, kNoL1)
  GEMTB_PROBE(kFloat32, int32_t, 4, 18, 2, kCached)
  GEMTB_PROBE(kFloat32, int32_t, 4, 9, 4, kNoL1)
  GEMTB_PROBE(kFloat32, int32_t, 4, 4, 8, kNoL1)
  GEMTB_PROBE(kFloat32, int32_t, 8, 12, 2, kNoL1)
  GEMTB_PROBE(kFloat32, int32_t, 2, 6, 8, kNoL1)
  GEMTB_PROBE(kBFloat16, int32_t, 8, 18, 2, kNoL1)
  GEMTB_PROBE(kBFloat16, int64_t, 8, 18, 2, kNoL1)
  GEMTB_PROBE(kBFloat16, int32_t, 8, 18, 2, kCached)
  GEMTB_PROBE(kBFloat16, int32_t, 4, 18, 2, kNoL1)
  GEMTB_PROBE(kBFloat16, int32_t, 8, 4, 8, kNoL1)
  GEMTB_PROBE(kBFloat16, int32_t, 16, 12, 2, kNoL1)
#undef GEMTB_PROBE
  if (shape.dtype == ElementType::kFloat32 && shape.dim == 128 && shape.ids_per_bag == 32) {
    const absl::StatusOr<int64_t> resident = ResidentBlocks(GatherCeilingKernel, 2);
    Check(resident.status());
    const unsigned blocks = PoolGrid(shape.bags, 2, *resident);
    absl::StatusOr<EmbedTiming> t = TimeEmbedRuns(options, bytes, [&] {
      GatherCeilingKernel<<<blocks, 64>>>(p);
      return CudaOk(cudaGetLastError(), "gather ceiling launch");
    });
    Check(t.status());
    std::printf("{\"shape\": \"%s\", \"variant\": \"gather ceiling (xor, no checks)\", \"median_ms\": %.4f, "
                "\"tbps\": %.3f}\n", shape.name.c_str(), t->median_ms, t->tbps);
    std::fflush(stdout);
  }
}

int Run(int reps) {
  EmbedBenchOptions options;
  options.reps = reps;
  for (const EmbedBenchShape& shape : DefaultEmbedBenchShapes()) {
    if (shape.name == "sum_fp32_uniform" || shape.name == "sum_bf16_uniform") ProbeShape(shape, options);
  }
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
