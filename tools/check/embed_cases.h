// Random table-batched embedding problems for `gemtb check embed` and the CPU tests of the GPU's
// shared logic: one family = pooling x optimizer x storage dtype x hashing x bounds mode; a case
// draws tables, keys (some sharing a table), a KJT with duplicate, invalid (where the bounds mode
// allows) and long-bag ids, optimizer settings, a prior optimizer state and upstream gradients,
// all from its own seed (std::mt19937_64).
#ifndef GEMTB_TOOLS_CHECK_EMBED_CASES_H_
#define GEMTB_TOOLS_CHECK_EMBED_CASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"

namespace gemtb::check {

struct EmbedFamily {
  Pooling pooling = Pooling::kSum;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  ElementType dtype = ElementType::kFloat32;
  Hashing hashing = Hashing::kIdentity;
  BoundsMode bounds = BoundsMode::kError;
  std::string Name() const;  // e.g. "sum/rowwise_adagrad/bf16/mod/zero"
};

// All 4 x 3 x 3 x 3 x 3 families in a fixed order.
std::vector<EmbedFamily> AllEmbedFamilies();
// "all", or comma-separated names as Name() writes them.
absl::StatusOr<std::vector<EmbedFamily>> ParseEmbedFamilies(const std::string& text);

struct EmbedCase {
  EmbeddingConfig config;
  reference::KeyedJaggedTensor kjt;
  reference::EmbeddingState state;  // before the step (state.step = the step index s)
  reference::EmbeddingGrads grads;  // upstream gradients in the forward's shapes
  std::string description;
};

// The seed of case `index` of family `family_index` in a run with `seed`.
int64_t EmbedCaseSeed(int64_t seed, size_t family_index, int64_t index);

// A valid case of `family` (the KJT passes validation).
EmbedCase DrawEmbedCase(int64_t case_seed, const EmbedFamily& family);

// Occurrences of the most frequent (table, row) among the case's valid ids (remap0's invalid ids
// count for row 0): the length of the longest run the GPU's backward sums.
int64_t LongestRowRun(const EmbedCase& c);

// The same case with one KJT defect (negative or capped length, wrong offsets, bad weight, id
// out of range under `error`, unknown or duplicate key), for the named-error checks.
EmbedCase DrawMalformedEmbedCase(int64_t case_seed);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_EMBED_CASES_H_
