// One embedding case run by an executor (the oracle, or the GPU through embed_gpu.h), and the
// byte-for-byte comparison of two runs: everything on this path is exact (integer
// logic and explicitly rounded fp32), so any differing byte fails.
#ifndef GEMTB_TOOLS_CHECK_EMBED_COMPARE_H_
#define GEMTB_TOOLS_CHECK_EMBED_COMPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/check/embed_cases.h"

namespace gemtb::check {

// What a run produced: the input error (empty when the KJT was accepted), the forward's outputs,
// and after one backward step every table (storage bytes) and its optimizer state.
struct EmbedRun {
  std::string error;
  std::vector<float> pooled;
  std::vector<std::vector<float>> sequence;
  std::vector<std::vector<uint8_t>> table_bytes;  // per table, in its storage dtype
  std::vector<std::vector<float>> state;           // per table: adagrad, adam_m, adam_v, adam b1, b2
};

// A run from an executor's forward output and its state after the step.
EmbedRun EmbedRunOf(const EmbeddingConfig& config, const reference::EmbeddingOutput& output,
                    const reference::EmbeddingState& after);

// The oracle (reference/embedding/tbe.h) on the case, its split sums partitioned by `partition`.
EmbedRun RunEmbedOracle(const EmbedCase& c, const reference::SumPartition& partition = {});

// A table's widened values in storage bytes (fp32, fp16 or bf16 bits, little-endian).
std::vector<uint8_t> StorageBytes(const std::vector<float>& widened, ElementType dtype);

struct EmbedDiff {
  int64_t forward_bytes = 0;  // pooled and sequence outputs
  int64_t table_bytes = 0;    // tables after the step
  int64_t state_bytes = 0;    // optimizer state after the step
  bool error_differs = false;
  std::vector<std::string> messages;  // the first differences, for the report
  bool Identical() const { return forward_bytes == 0 && table_bytes == 0 && state_bytes == 0 && !error_differs; }
};

EmbedDiff CompareEmbedRuns(const EmbedRun& oracle, const EmbedRun& gpu);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_EMBED_COMPARE_H_
