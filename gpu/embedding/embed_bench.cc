#include "gpu/embedding/embed_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/copy_ceiling.h"
#include "model/common/status_macros.h"
#include "model/random/splitmix64.h"

namespace gemtb::gpu::embedding {
namespace {

EmbeddingConfig ConfigOf(const EmbedBenchShape& s, uint64_t seed) {
  EmbeddingConfig c;
  c.seed = seed;
  TableConfig t;
  t.name = "t0";
  t.rows = s.rows;
  t.dim = s.dim;
  t.dtype = s.dtype;
  t.hashing = Hashing::kIdentity;
  t.bounds = BoundsMode::kError;
  t.optimizer.kind = s.optimizer;
  t.optimizer.lr = 0.01f;
  c.tables.push_back(t);
  FeatureConfig f;
  f.key = "f0";
  f.pooling = s.pooling;
  c.features.push_back(f);
  return c;
}

struct BenchInput {
  std::vector<std::string> keys = {"f0"};
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
  KjtView View() const {
    KjtView v;
    v.keys = keys;
    v.batch = static_cast<int64_t>(lengths.size());
    v.lengths = lengths;
    v.values = ids;
    v.weights = weights;
    v.has_weights = !weights.empty();
    return v;
  }
};

BenchInput InputOf(const EmbedBenchShape& s, uint64_t seed) {
  BenchInput in;
  in.lengths.assign(static_cast<size_t>(s.bags), static_cast<int32_t>(s.ids_per_bag));
  in.ids = DrawBenchIds(s, seed);
  if (s.pooling == Pooling::kWeightedSum) {
    std::mt19937_64 rng(seed ^ 0x77);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    in.weights.resize(in.ids.size());
    for (float& w : in.weights) w = u(rng);
  }
  return in;
}

size_t ElementBytes(ElementType t) { return t == ElementType::kFloat32 ? 4 : 2; }

}  // namespace

absl::StatusOr<EmbedTiming> TimeEmbedRuns(const EmbedBenchOptions& o, double bytes,
                                          absl::FunctionRef<absl::Status()> run) {
  for (int64_t i = 0; i < o.warmup; ++i) GEMTB_RETURN_IF_ERROR(run());
  // Before each timed run a memset of kL2FlushBytes (several times L2) evicts what the previous
  // run left in L2, and keeps the GPU busy while the host enqueues the events and the run, so the
  // window holds the run alone, not the host's launch latency (Triton's do_bench does the same).
  DeviceArray<unsigned char> flush;
  GEMTB_RETURN_IF_ERROR(flush.Allocate(kL2FlushBytes, "L2 flush buffer"));
  cudaEvent_t start, stop;
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaEventCreate(&start), "cudaEventCreate"));
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaEventCreate(&stop), "cudaEventCreate"));
  std::vector<double> ms;
  absl::Status status;
  for (int64_t i = 0; i < o.reps && status.ok(); ++i) {
    status = CudaOk(cudaMemsetAsync(flush.get(), static_cast<int>(i & 0xff), kL2FlushBytes), "L2 flush");
    if (!status.ok()) break;
    cudaEventRecord(start);
    status = run();
    cudaEventRecord(stop);
    if (status.ok()) status = CudaOk(cudaEventSynchronize(stop), "timed run");
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  GEMTB_RETURN_IF_ERROR(status);
  std::sort(ms.begin(), ms.end());
  EmbedTiming r;
  r.median_ms = ms[ms.size() / 2];
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  r.bytes = bytes;
  r.tbps = r.median_ms > 0 ? bytes / (r.median_ms * 1e9) : 0;
  return r;
}

double EmbedForwardBytes(const EmbedBenchShape& s) {
  const double ids = static_cast<double>(s.bags * s.ids_per_bag);
  const double d = static_cast<double>(s.dim);
  return ids * 8 + ids * d * static_cast<double>(ElementBytes(s.dtype)) + static_cast<double>(s.bags) * d * 4 +
         (s.pooling == Pooling::kWeightedSum ? ids * 4 : 0);
}

std::vector<EmbedBenchShape> DefaultEmbedBenchShapes() {
  std::vector<EmbedBenchShape> v;
  auto add = [&](std::string name, Pooling p, ElementType d, double zipf) {
    EmbedBenchShape s;
    s.name = std::move(name);
    s.pooling = p;
    s.dtype = d;
    s.zipf_s = zipf;
    v.push_back(s);
  };
  add("sum_fp32_uniform", Pooling::kSum, ElementType::kFloat32, 0.0);
  add("sum_fp32_zipf1.05", Pooling::kSum, ElementType::kFloat32, 1.05);
  add("mean_fp32_uniform", Pooling::kMean, ElementType::kFloat32, 0.0);
  add("wsum_fp32_uniform", Pooling::kWeightedSum, ElementType::kFloat32, 0.0);
  add("sum_bf16_uniform", Pooling::kSum, ElementType::kBFloat16, 0.0);
  return v;
}

std::vector<int64_t> DrawBenchIds(const EmbedBenchShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int64_t> ids(static_cast<size_t>(s.bags * s.ids_per_bag));
  const double n = static_cast<double>(s.rows);
  for (int64_t& id : ids) {
    if (s.zipf_s <= 0) {
      id = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.rows));
      continue;
    }
    // Rank k ~ the continuous power law of exponent s on [1, N+1) (inverse CDF), then spread over
    // the table by splitmix64, as the data generator spreads hot ids.
    const double a = 1.0 - s.zipf_s;
    const double k = std::pow(1.0 + u(rng) * (std::pow(n + 1.0, a) - 1.0), 1.0 / a);
    const uint64_t rank = std::min<uint64_t>(static_cast<uint64_t>(k) - 1, static_cast<uint64_t>(s.rows) - 1);
    id = static_cast<int64_t>(SplitMix64(rank) % static_cast<uint64_t>(s.rows));
  }
  return ids;
}

absl::StatusOr<EmbedBenchResult> RunEmbedBench(const EmbedBenchShape& shape, const EmbedBenchOptions& options) {
  const EmbeddingConfig config = ConfigOf(shape, options.seed);
  absl::StatusOr<std::unique_ptr<DeviceTbe>> tbe = DeviceTbe::Create(config, {}, 0);
  if (!tbe.ok()) return tbe.status();
  const BenchInput in = InputOf(shape, options.seed);
  GEMTB_RETURN_IF_ERROR((*tbe)->SetInput(in.View()));
  std::vector<float> grad(static_cast<size_t>(shape.bags * shape.dim));
  std::mt19937_64 rng(options.seed ^ 0x51);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& g : grad) g = u(rng);
  GEMTB_RETURN_IF_ERROR((*tbe)->SetGrads(grad, {}));

  EmbedBenchResult r;
  r.shape = shape;
  r.unique_rows = static_cast<int64_t>(std::unordered_set<int64_t>(in.ids.begin(), in.ids.end()).size());
  const double ids = static_cast<double>(in.ids.size());
  const double ew = static_cast<double>(ElementBytes(shape.dtype));
  const double d = static_cast<double>(shape.dim);
  const double fwd_bytes = EmbedForwardBytes(shape);
  double state = 0;
  if (shape.optimizer == OptimizerKind::kRowwiseAdagrad) state = 8;
  if (shape.optimizer == OptimizerKind::kAdam) state = 16 * d;
  const double bwd_bytes = ids * 8 + static_cast<double>(shape.bags) * d * 4 +
                           static_cast<double>(r.unique_rows) * (2 * d * ew + state);
  absl::StatusOr<EmbedTiming> f = TimeEmbedRuns(options, fwd_bytes, [&] { return (*tbe)->Forward(); });
  if (!f.ok()) return f.status();
  r.forward = *f;
  absl::StatusOr<EmbedTiming> b = TimeEmbedRuns(options, bwd_bytes, [&] { return (*tbe)->BackwardStep(); });
  if (!b.ok()) return b.status();
  r.backward = *b;
  // The phases apart: events between the launches, in steps of their own (the events' own cost
  // stays out of the backward timing above).
  std::vector<BackwardPhaseTimes> phases(static_cast<size_t>(std::max<int64_t>(options.reps, 1)));
  for (BackwardPhaseTimes& t : phases) GEMTB_RETURN_IF_ERROR((*tbe)->BackwardStep(&t));
  auto median = [&](float BackwardPhaseTimes::*field) {
    std::vector<float> v;
    for (const BackwardPhaseTimes& t : phases) v.push_back(t.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  r.backward_phases = {median(&BackwardPhaseTimes::occurrences_ms), median(&BackwardPhaseTimes::sort_ms),
                       median(&BackwardPhaseTimes::runs_ms), median(&BackwardPhaseTimes::rows_ms),
                       median(&BackwardPhaseTimes::hot_rows_ms)};
  return r;
}

absl::StatusOr<EmbedTiming> RunCopyCeiling(int64_t bytes, const EmbedBenchOptions& options) {
  DeviceArray<uint8_t> src, dst;
  GEMTB_RETURN_IF_ERROR(src.Allocate(static_cast<size_t>(bytes), "copy source"));
  GEMTB_RETURN_IF_ERROR(dst.Allocate(static_cast<size_t>(bytes), "copy destination"));
  GEMTB_RETURN_IF_ERROR(src.Zero("copy source"));
  return TimeEmbedRuns(options, 2.0 * static_cast<double>(bytes), [&] { return LaunchCopy(src.get(), dst.get(), bytes); });
}

absl::StatusOr<int64_t> BackwardDeterminismDiff(const EmbedBenchShape& shape, const EmbedBenchOptions& options) {
  const EmbeddingConfig config = ConfigOf(shape, options.seed);
  const BenchInput in = InputOf(shape, options.seed);
  std::vector<float> grad(static_cast<size_t>(shape.bags * shape.dim));
  std::mt19937_64 rng(options.seed ^ 0x51);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& g : grad) g = u(rng);
  std::vector<std::vector<HostTable>> runs;
  for (int k = 0; k < 2; ++k) {
    absl::StatusOr<std::unique_ptr<DeviceTbe>> tbe = DeviceTbe::Create(config, {}, 0);
    if (!tbe.ok()) return tbe.status();
    GEMTB_RETURN_IF_ERROR((*tbe)->SetInput(in.View()));
    GEMTB_RETURN_IF_ERROR((*tbe)->SetGrads(grad, {}));
    GEMTB_RETURN_IF_ERROR((*tbe)->BackwardStep());
    absl::StatusOr<std::vector<HostTable>> t = (*tbe)->DownloadTables();
    if (!t.ok()) return t.status();
    runs.push_back(*std::move(t));
  }
  int64_t diff = 0;
  auto compare = [&](const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) {
      diff += static_cast<int64_t>(4 * std::max(a.size(), b.size()));
      return;
    }
    const auto* x = reinterpret_cast<const uint8_t*>(a.data());
    const auto* y = reinterpret_cast<const uint8_t*>(b.data());
    for (size_t i = 0; i < 4 * a.size(); ++i) diff += x[i] != y[i] ? 1 : 0;
  };
  for (size_t t = 0; t < runs[0].size(); ++t) {
    compare(runs[0][t].weights, runs[1][t].weights);
    compare(runs[0][t].adagrad, runs[1][t].adagrad);
    compare(runs[0][t].adam_m, runs[1][t].adam_m);
    compare(runs[0][t].adam_v, runs[1][t].adam_v);
  }
  return diff;
}

}  // namespace gemtb::gpu::embedding
