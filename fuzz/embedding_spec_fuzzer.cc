// The embedding spec JSON loader (reference/embedding/embedding_json.h), on arbitrary text.
//
// Promises checked:
//  * Any text gives a spec or InvalidArgument, never a crash or an exception.
//  * Nothing is accepted silently different from what the JSON says: every integer field the spec
//    kept equals the JSON number (no wrap-around of 2^32 + 1 into 1), every float field is the
//    JSON number rounded once to fp32, and finite.
//  * An accepted spec's config passes ValidateEmbeddingConfig, and (for small tables) an empty
//    batch over its KJT keys either fails KJT validation with an E_* code or runs forward.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/byte_reader.h"
#include "nlohmann/json.hpp"
#include "reference/embedding/embedding_json.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"

namespace {

using gemtb::fuzz::Check;
using gemtb::fuzz::Fail;
using nlohmann::json;

constexpr int64_t kMaxTableElements = 1 << 12;
constexpr int64_t kMaxBatch = 64;

// The JSON integer at j[key] equals `kept` (absent keys are not checked). The loader reads a float
// literal with an integral value (1e4, 2048.0) as that integer, so such a literal must equal `kept`
// exactly; 1.5 must not have been accepted at all.
template <typename T>
void SameInteger(const json& j, const char* key, T kept, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) return;
  const json& v = j[key];
  bool same = false;
  if (v.is_number_unsigned()) {
    same = kept >= 0 && static_cast<uint64_t>(kept) == v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    same = static_cast<int64_t>(kept) == v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    same = d == std::floor(d) && std::fabs(d) <= 9.0e15 && static_cast<double>(kept) == d;
  }
  if (!same) Fail(absl::StrCat(path, ".", key, ": JSON ", v.dump(), " was accepted as ", kept));
}

void SameFloat(const json& j, const char* key, float kept, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) return;
  const double v = j[key].get<double>();
  const bool same = std::isfinite(kept) && kept == static_cast<float>(v);
  if (!same) Fail(absl::StrCat(path, ".", key, ": JSON ", j[key].dump(), " was accepted as ", kept));
}

void CheckFaithful(const json& j, const gemtb::reference::EmbeddingSpec& s) {
  SameInteger(j, "batch", s.batch, "spec");
  SameInteger(j, "world_size", s.world_size, "spec");
  SameInteger(j, "gpus_per_host", s.gpus_per_host, "spec");
  SameInteger(j, "seed", static_cast<int64_t>(s.config.seed), "spec");
  for (size_t t = 0; t < s.config.tables.size(); ++t) {
    const json& tj = j["tables"][t];
    const std::string path = absl::StrCat("spec.tables[", t, "]");
    const gemtb::TableConfig& tc = s.config.tables[t];
    SameInteger(tj, "rows", tc.rows, path);
    SameInteger(tj, "dim", tc.dim, path);
    if (tj.contains("optimizer")) {
      const json& oj = tj["optimizer"];
      const gemtb::OptimizerConfig& o = tc.optimizer;
      const std::string op = path + ".optimizer";
      SameFloat(oj, "lr", o.lr, op);
      SameFloat(oj, "weight_decay", o.weight_decay, op);
      SameFloat(oj, "eps", o.eps, op);
      SameFloat(oj, "beta1", o.beta1, op);
      SameFloat(oj, "beta2", o.beta2, op);
    }
  }
  for (size_t f = 0; f < s.config.features.size(); ++f) {
    SameInteger(j["features"][f], "max_len", s.config.features[f].max_len,
                absl::StrCat("spec.features[", f, "]"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  absl::StatusOr<gemtb::reference::EmbeddingSpec> spec = gemtb::reference::ParseEmbeddingSpec(j);
  if (!spec.ok()) {
    Check(absl::IsInvalidArgument(spec.status()) && absl::StartsWith(spec.status().message(), "spec"),
          absl::StrCat("spec error is not InvalidArgument naming the JSON path: ",
                       spec.status().ToString()));
    return 0;
  }
  CheckFaithful(j, *spec);
  const gemtb::EmbeddingConfig& config = spec->config;
  const absl::Status valid = gemtb::reference::ValidateEmbeddingConfig(config);
  Check(valid.ok(), absl::StrCat("accepted spec fails config validation: ", valid.ToString()));

  for (const gemtb::TableConfig& t : config.tables) {
    int64_t elements = 0;
    if (__builtin_mul_overflow(t.rows, t.dim, &elements) || elements > kMaxTableElements) return 0;
  }
  if (spec->batch > kMaxBatch) return 0;
  gemtb::reference::KeyedJaggedTensor kjt;
  kjt.keys = spec->keys;
  kjt.stride = spec->batch;
  kjt.lengths.assign(static_cast<size_t>(kjt.NumKeys() * kjt.stride), 0);
  kjt.has_weights = true;  // empty weights for the empty batch: weighted features accept it
  const gemtb::reference::EmbeddingState state = gemtb::reference::InitEmbeddingState(config);
  const absl::Status kjt_ok = gemtb::reference::ValidateKjt(kjt, config, nullptr);
  auto out = gemtb::reference::EmbeddingForward(config, state, kjt, {}, 1);
  if (!kjt_ok.ok()) {
    Check(absl::StartsWith(kjt_ok.message(), "E_KJT_SHAPE"),
          absl::StrCat("spec keys: unexpected KJT error ", kjt_ok.ToString()));
    Check(!out.ok(), "forward accepted keys that validation refused");
    return 0;
  }
  if (!out.ok()) Fail(absl::StrCat("empty batch over the spec's keys failed: ", out.status().ToString()));
  return 0;
}
