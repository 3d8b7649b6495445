#include "reference/model/pipeline_arrays.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace gemtb::reference::model {
namespace {

const io::NpyArray* Find(const NamedArrays& arrays, const std::string& name) {
  for (const auto& [n, a] : arrays)
    if (n == name) return &a;
  return nullptr;
}

absl::StatusOr<std::vector<float>> Floats(const NamedArrays& arrays, const std::string& name) {
  const io::NpyArray* a = Find(arrays, name);
  if (a == nullptr) return absl::FailedPreconditionError(absl::StrCat("state: array '", name, "' is missing"));
  if (a->dtype != io::NpyDType::kFloat32)
    return absl::FailedPreconditionError(
        absl::StrCat("state: array '", name, "' is ", io::NpyDTypeName(a->dtype), ", not float32"));
  std::vector<float> v(static_cast<size_t>(a->NumElements()));
  std::memcpy(v.data(), a->data.data(), v.size() * sizeof(float));
  return v;
}

std::string SequenceName(const FeatureConfig& f) { return absl::StrCat("pipeline.sequence.", f.key); }

}  // namespace

void AppendPipelineArrays(const EmbeddingConfig& emb, int64_t batch, const PipelineLookups& lookups,
                          NamedArrays* out) {
  out->emplace_back("pipeline.pooled", io::EncodeFloat32(lookups.pooled, {batch, static_cast<int64_t>(
                                                                                     lookups.pooled.size()) / batch}));
  size_t k = 0;
  for (const FeatureConfig& f : emb.features) {
    if (f.pooling != Pooling::kNone || k >= lookups.sequence.size()) continue;
    const int64_t D = emb.tables[f.table].dim;
    const std::vector<float>& v = lookups.sequence[k++];
    out->emplace_back(SequenceName(f), io::EncodeFloat32(v, {static_cast<int64_t>(v.size()) / D, D}));
  }
}

absl::StatusOr<std::optional<PipelineLookups>> ReadPipelineArrays(const NamedArrays& arrays, const EmbeddingConfig& emb,
                                                                  bool semi_sync, int64_t step) {
  const bool present = Find(arrays, "pipeline.pooled") != nullptr;
  if (present && !semi_sync)
    return absl::FailedPreconditionError(
        "state: holds the semi-synchronous pipeline's next lookups (pipeline.*); this run is synchronous (resume it "
        "with the semi-synchronous pipeline, --pipeline semi-sync)");
  if (!semi_sync || step == 0) return std::optional<PipelineLookups>();
  if (!present)
    return absl::FailedPreconditionError(absl::StrCat(
        "state: array 'pipeline.pooled' is missing: step ", step,
        " of a semi-synchronous run needs the lookups made before its last update (a synchronous run's checkpoint?)"));
  PipelineLookups l;
  absl::StatusOr<std::vector<float>> pooled = Floats(arrays, "pipeline.pooled");
  if (!pooled.ok()) return pooled.status();
  l.pooled = *std::move(pooled);
  for (const FeatureConfig& f : emb.features) {
    if (f.pooling != Pooling::kNone) continue;
    absl::StatusOr<std::vector<float>> v = Floats(arrays, SequenceName(f));
    if (!v.ok()) return v.status();
    l.sequence.push_back(*std::move(v));
  }
  return std::optional<PipelineLookups>(std::move(l));
}

}  // namespace gemtb::reference::model
