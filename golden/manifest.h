// golden/manifest.json: what the golden set holds and how it was made.
//
//   {"format": "gemtb-golden-manifest-1", "command": "gemtb golden regen --force", "commit": "<git HEAD>",
//    "producers": [{"name": "attention/silu_causal", "kind": "attention", "params": {...},
//                   "files": [{"path": "attention/silu_causal/o.npy", "role": "output", "format": "npy",
//                              "dtype": "<f8", "shape": [15, 2, 4], "sha256": "...", "bytes": 1088}, ...]}]}
//
// Paths are relative to the golden folder and lie inside their producer's folder. Parsing checks
// every field and names the JSON path of the first bad one.
#ifndef GEMTB_GOLDEN_MANIFEST_H_
#define GEMTB_GOLDEN_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "golden/registry.h"

namespace gemtb::golden {

inline constexpr char kGoldenManifestFormat[] = "gemtb-golden-manifest-1";
inline constexpr char kGoldenRegenCommand[] = "gemtb golden regen --force";

struct ManifestFile {
  std::string path;    // relative to the golden folder
  std::string role;    // "input" | "output"
  std::string format;  // "npy" | "json"
  std::string dtype;   // npy descr ("<f8", "<u2", "|u1", ...); empty for json
  std::vector<int64_t> shape;
  std::string sha256;  // lower-case hex
  int64_t bytes = 0;
};

struct ManifestProducer {
  std::string name;
  std::string kind;
  nlohmann::json params;
  std::vector<ManifestFile> files;
};

struct Manifest {
  std::string command = kGoldenRegenCommand;
  std::string commit;
  std::vector<ManifestProducer> producers;
};

// InvalidArgument naming the JSON path of the first malformed field.
absl::StatusOr<Manifest> ParseManifest(const std::string& text);
std::string ManifestToText(const Manifest& manifest);

// The manifest entry of a producer's freshly computed files.
ManifestProducer DescribeProducer(const GoldenProducer& producer, const std::vector<GoldenFile>& files);

// Whether `name` is selected by `--only PREFIX` (empty prefix selects all).
bool Selected(const std::string& name, const std::string& prefix);

}  // namespace gemtb::golden

#endif  // GEMTB_GOLDEN_MANIFEST_H_
