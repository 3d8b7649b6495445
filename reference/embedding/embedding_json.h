// The JSON description of an embedding module for `gemtb ref embed` (and tests): tables, features,
// KJT key order, batch, and optionally a sharding plan with its world. Every field is validated;
// errors name the JSON path and the value.
#ifndef GEMTB_REFERENCE_EMBEDDING_EMBEDDING_JSON_H_
#define GEMTB_REFERENCE_EMBEDDING_EMBEDDING_JSON_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/embedding/embedding_config.h"
#include "nlohmann/json.hpp"

namespace gemtb::reference {

struct EmbeddingSpec {
  EmbeddingConfig config;
  int64_t batch = 0;
  std::vector<std::string> keys;    // KJT key order (default: every feature in config order)
  std::optional<nlohmann::json> plan;  // plan.sparse of the simulator, when sharded
  int world_size = 1;
  int gpus_per_host = 8;
};

absl::StatusOr<EmbeddingSpec> ParseEmbeddingSpec(const nlohmann::json& j);
absl::StatusOr<EmbeddingSpec> ReadEmbeddingSpec(const std::string& path);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_EMBEDDING_EMBEDDING_JSON_H_
