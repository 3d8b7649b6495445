// The golden-vector producers: every frozen oracle answer in golden/ comes from one entry here.
//
// A producer is data: a name (its folder under golden/, e.g. "attention/silu_causal"), a kind (which
// family runs it) and parameters (JSON that fully describes the case: shapes, options, seeds). The
// family's runner turns the parameters into files, inputs and outputs alike, generated from seeds with
// integer arithmetic only, so regenerating a set is a pure function of the code. `gemtb golden
// verify` reruns every producer and compares the bytes; `gemtb golden regen --force` rewrites them.
//
// Adding a case = adding an entry in its family's Add*Producers; adding a family = one more row of
// the kind table in registry.cc.
#ifndef GEMTB_GOLDEN_REGISTRY_H_
#define GEMTB_GOLDEN_REGISTRY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "reference/io/npy.h"

namespace gemtb::golden {

// One file a producer writes: a .npy array or a small JSON text (case.json, spec.json) that makes
// the folder runnable with `gemtb ref attention --case` / `gemtb ref embed --spec`.
struct GoldenFile {
  std::string name;  // relative to the producer's folder: "q.npy", "grads/pooled.npy", "case.json"
  bool is_input = false;  // generated input (true) or oracle output (false); for the manifest only
  std::optional<io::NpyArray> array;
  std::string text;  // the contents when `array` is empty

  std::vector<uint8_t> Bytes() const;
};

GoldenFile NpyFile(std::string name, io::NpyArray array, bool is_input);
GoldenFile InputFile(std::string name, io::NpyArray array);
GoldenFile OutputFile(std::string name, io::NpyArray array);
GoldenFile JsonFile(std::string name, const nlohmann::json& j);

struct GoldenProducer {
  std::string name;
  std::string kind;
  nlohmann::json params;
};

// Every registered producer, in a fixed order (the manifest's order).
const std::vector<GoldenProducer>& GoldenProducers();

// Runs the producer's family on its parameters. Errors name the producer.
absl::StatusOr<std::vector<GoldenFile>> RunGoldenProducer(const GoldenProducer& producer);

// Whether `kind` names a family.
bool IsGoldenKind(const std::string& kind);

// The families (<family>_producers.cc): each adds its entries and runs one entry's parameters.
void AddAttentionProducers(std::vector<GoldenProducer>& out);
absl::StatusOr<std::vector<GoldenFile>> RunAttentionProducer(const nlohmann::json& params);
void AddEmbeddingProducers(std::vector<GoldenProducer>& out);
absl::StatusOr<std::vector<GoldenFile>> RunEmbeddingProducer(const nlohmann::json& params);
void AddQuantizeProducers(std::vector<GoldenProducer>& out);
absl::StatusOr<std::vector<GoldenFile>> RunQuantizeInputProducer(const nlohmann::json& params);
absl::StatusOr<std::vector<GoldenFile>> RunQuantizeProducer(const nlohmann::json& params);
void AddTrainingProducers(std::vector<GoldenProducer>& out);
absl::StatusOr<std::vector<GoldenFile>> RunTrainingProducer(const nlohmann::json& params);

}  // namespace gemtb::golden

#endif  // GEMTB_GOLDEN_REGISTRY_H_
