// `gemtb bench embed`: effective bandwidth of the embedding kernels on the benchmark shapes
// (a 10M x 128 table, 32 ids per bag, 64k bags; uniform and Zipf-skewed ids), forward and
// backward + optimizer, with a copy-ceiling kernel timed in the same process. CUDA events, median
// of `reps` runs after `warmup`, each after an L2-evicting memset. Effective bytes count what the
// operation must move at least:
//   forward:  ids (8 B each) + rows read (ids x D x e_w) + pooled output (B x D x 4);
//   backward: ids + upstream gradient (B x D x 4) + each touched row read and written
//             (2 x D x e_w) + its optimizer state read and written (rowwise Adagrad 2 x 4 B,
//             Adam 4 x D x 4 B, SGD none).
#ifndef GEMTB_GPU_EMBEDDING_EMBED_BENCH_H_
#define GEMTB_GPU_EMBEDDING_EMBED_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gpu/embedding/api.h"
#include "model/embedding/embedding_config.h"

namespace gemtb::gpu::embedding {

struct EmbedBenchShape {
  std::string name;
  int64_t rows = 10'000'000;
  int64_t dim = 128;
  int64_t bags = 65536;
  int64_t ids_per_bag = 32;
  double zipf_s = 0.0;  // 0: uniform ids; else Zipf(s) ranks spread by splitmix64
  ElementType dtype = ElementType::kFloat32;
  Pooling pooling = Pooling::kSum;
  OptimizerKind optimizer = OptimizerKind::kRowwiseAdagrad;
};

// The default shapes: sum / mean / weighted sum, fp32 and bf16, uniform and Zipf(1.05).
std::vector<EmbedBenchShape> DefaultEmbedBenchShapes();

struct EmbedTiming {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double bytes = 0;
  double tbps = 0;  // bytes / median
};

struct EmbedBenchResult {
  EmbedBenchShape shape;
  int64_t unique_rows = 0;
  EmbedTiming forward, backward;
  BackwardPhaseTimes backward_phases;  // each phase's median over `reps` separately timed steps
};

struct EmbedBenchOptions {
  int64_t warmup = 3;
  int64_t reps = 20;
  uint64_t seed = 1;
};

absl::StatusOr<EmbedBenchResult> RunEmbedBench(const EmbedBenchShape& shape, const EmbedBenchOptions& options);

// The copy ceiling: `bytes` read and written per run.
absl::StatusOr<EmbedTiming> RunCopyCeiling(int64_t bytes, const EmbedBenchOptions& options);

// Two backward steps from the same Philox-initialised tables on `shape`'s input: the number of
// bytes in which the resulting tables and optimizer states differ (0 = deterministic).
absl::StatusOr<int64_t> BackwardDeterminismDiff(const EmbedBenchShape& shape, const EmbedBenchOptions& options);

// The ids the bench draws for `shape` (host; the same for every executor, e.g. the peers).
std::vector<int64_t> DrawBenchIds(const EmbedBenchShape& shape, uint64_t seed);

// The forward's effective bytes on `shape` (see the top of this file).
double EmbedForwardBytes(const EmbedBenchShape& shape);

// The bytes written before each timed run to evict L2 (H200: 50 MB of L2).
inline constexpr size_t kL2FlushBytes = size_t{256} << 20;

// `run` timed with CUDA events: `options.warmup` untimed runs, then the median of `options.reps`,
// each after a kL2FlushBytes memset (a cold L2, and no launch latency inside the window);
// tbps counts `bytes` per run.
absl::StatusOr<EmbedTiming> TimeEmbedRuns(const EmbedBenchOptions& options, double bytes,
                                          absl::FunctionRef<absl::Status()> run);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_EMBED_BENCH_H_
