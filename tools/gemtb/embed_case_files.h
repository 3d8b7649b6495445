// The case folder of `gemtb ref embed` read into the oracle's types, and the outputs written in
// its layout: one reader and writer for `gemtb ref embed` and the commands that run another
// executor on the same files (`gemtb gpu embed`).
#ifndef GEMTB_TOOLS_GEMTB_EMBED_CASE_FILES_H_
#define GEMTB_TOOLS_GEMTB_EMBED_CASE_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "reference/embedding/embedding_json.h"
#include "tools/check/embed_cases.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {

struct EmbedCasePaths {
  std::string spec, lengths, ids, weights, offsets, tables, grads;
};

// The module spec (without a sharding plan), then ReadEmbedCaseInputs.
absl::StatusOr<check::EmbedCase> ReadEmbedCaseFiles(const EmbedCasePaths& paths, int64_t step_index);

// For an already read `spec`: the KJT, and the tables and state (--tables, else the Philox init)
// with the step index. Errors name the file and field. The KJT is not validated here: the executor
// does that.
absl::StatusOr<check::EmbedCase> ReadEmbedCaseInputs(const reference::EmbeddingSpec& spec,
                                                     const EmbedCasePaths& paths, int64_t step_index);

// The upstream gradients from `dir` (pooled.npy [B, W], seq_<key>.npy [sum len, D] per NONE key),
// for a case whose KJT has been validated.
absl::Status ReadEmbedGrads(const std::string& dir, check::EmbedCase& c);

// pooled.npy, seq_<key>.npy and, with `step`, table_<name>.npy (storage dtype) and its optimizer
// state files, as `gemtb ref embed` writes them, committed as one set (tools/gemtb/output_set.h).
absl::Status WriteEmbedOutputs(const check::EmbedCase& c, const reference::EmbeddingOutput& output,
                               const reference::EmbeddingState* after, OutputSet& out);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_EMBED_CASE_FILES_H_
