#include "golden/registry.h"

#include "absl/strings/str_cat.h"

namespace gemtb::golden {
namespace {

using Runner = absl::StatusOr<std::vector<GoldenFile>> (*)(const nlohmann::json&);

struct Family {
  const char* kind;
  Runner run;
};

// The kind table: one row per family.
constexpr Family kFamilies[] = {
    {"attention", RunAttentionProducer},
    {"embedding", RunEmbeddingProducer},
    {"quantize_input", RunQuantizeInputProducer},
    {"quantize", RunQuantizeProducer},
    {"training", RunTrainingProducer},
};

std::vector<GoldenProducer> BuildRegistry() {
  std::vector<GoldenProducer> all;
  AddAttentionProducers(all);
  AddEmbeddingProducers(all);
  AddQuantizeProducers(all);
  AddTrainingProducers(all);
  return all;
}

}  // namespace

std::vector<uint8_t> GoldenFile::Bytes() const {
  if (array) return io::SerializeNpy(*array);
  return std::vector<uint8_t>(text.begin(), text.end());
}

GoldenFile NpyFile(std::string name, io::NpyArray array, bool is_input) {
  GoldenFile f;
  f.name = std::move(name);
  f.is_input = is_input;
  f.array = std::move(array);
  return f;
}

GoldenFile InputFile(std::string name, io::NpyArray array) { return NpyFile(std::move(name), std::move(array), true); }
GoldenFile OutputFile(std::string name, io::NpyArray array) { return NpyFile(std::move(name), std::move(array), false); }

GoldenFile JsonFile(std::string name, const nlohmann::json& j) {
  GoldenFile f;
  f.name = std::move(name);
  f.is_input = true;
  f.text = j.dump(2) + "\n";
  return f;
}

const std::vector<GoldenProducer>& GoldenProducers() {
  // Built once; never destroyed (no exit-time destructor order to think about).
  static const std::vector<GoldenProducer>* registry = new std::vector<GoldenProducer>(BuildRegistry());
  return *registry;
}

bool IsGoldenKind(const std::string& kind) {
  for (const Family& f : kFamilies) {
    if (kind == f.kind) return true;
  }
  return false;
}

absl::StatusOr<std::vector<GoldenFile>> RunGoldenProducer(const GoldenProducer& producer) {
  for (const Family& f : kFamilies) {
    if (producer.kind != f.kind) continue;
    absl::StatusOr<std::vector<GoldenFile>> files = f.run(producer.params);
    if (!files.ok()) {
      return absl::Status(files.status().code(),
                          absl::StrCat("producer '", producer.name, "': ", files.status().message()));
    }
    return files;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("producer '", producer.name, "': unknown kind '", producer.kind, "'"));
}

}  // namespace gemtb::golden
