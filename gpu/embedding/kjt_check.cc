#include "gpu/embedding/kjt_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::embedding {
namespace {

// Where an error is: key, sample b and position p where they apply (-1 otherwise).
struct Where {
  int64_t index = -1;
  std::string key;
  int64_t b = -1;
  int64_t p = -1;
};

absl::Status Fail(const char* code, const Where& w, const std::string& detail) {
  std::string at = w.index >= 0 ? absl::StrCat(" at index ", w.index) : "";
  if (!w.key.empty()) {
    absl::StrAppend(&at, " (key '", w.key, "'", w.b >= 0 ? absl::StrCat(", b ", w.b) : "",
                    w.p >= 0 ? absl::StrCat(", p ", w.p) : "", ")");
  }
  return absl::InvalidArgumentError(absl::StrCat(code, at, ": ", detail));
}

}  // namespace

absl::StatusOr<KjtLayout> CheckKjt(const EmbeddingConfig& config, const KjtView& kjt) {
  const int64_t num_keys = static_cast<int64_t>(kjt.keys.size());
  const int64_t batch = kjt.batch;
  constexpr char kShape[] = "E_KJT_SHAPE";
  // 1. Shapes and keys.
  if (batch < 0) return Fail(kShape, {}, absl::StrCat("stride B=", batch, " is negative"));
  if ((num_keys != 0 && batch > std::numeric_limits<int64_t>::max() / num_keys) ||
      static_cast<int64_t>(kjt.lengths.size()) != num_keys * batch) {
    return Fail(kShape, {}, absl::StrCat("|lengths|=", kjt.lengths.size(), " but F*B=", num_keys, "*", batch));
  }
  const bool has_weights = kjt.has_weights || !kjt.weights.empty();
  if (has_weights && kjt.weights.size() != kjt.values.size()) {
    return Fail(kShape, {}, absl::StrCat("|weights|=", kjt.weights.size(), " but |values|=", kjt.values.size()));
  }
  std::map<std::string, int> by_key;
  for (int i = 0; i < static_cast<int>(config.features.size()); ++i) by_key[config.features[i].key] = i;
  KjtLayout layout;
  layout.feature.resize(static_cast<size_t>(num_keys));
  std::map<std::string, int64_t> seen;
  for (int64_t f = 0; f < num_keys; ++f) {
    const Where at{f, kjt.keys[f], -1, -1};
    auto it = by_key.find(kjt.keys[f]);
    if (it == by_key.end()) return Fail(kShape, at, "unknown key");
    if (!seen.emplace(kjt.keys[f], f).second) return Fail(kShape, at, "duplicate key");
    layout.feature[f] = it->second;
    if (config.features[it->second].pooling == Pooling::kWeightedSum && !has_weights) {
      return Fail(kShape, at, "weighted pooling needs weights");
    }
  }
  auto bag_at = [&](int64_t i) { return Where{i, kjt.keys[i / std::max<int64_t>(batch, 1)], i % std::max<int64_t>(batch, 1), -1}; };
  // 2. Negative lengths, 3. length caps.
  for (int64_t i = 0; i < num_keys * batch; ++i) {
    if (kjt.lengths[i] < 0) return Fail("E_KJT_NEG_LENGTH", bag_at(i), absl::StrCat("lengths[", i, "]=", kjt.lengths[i]));
  }
  for (int64_t i = 0; i < num_keys * batch; ++i) {
    const int64_t cap = config.features[layout.feature[i / batch]].max_len;
    if (kjt.lengths[i] > cap) {
      return Fail("E_KJT_LENGTH_CAP", bag_at(i), absl::StrCat("lengths[", i, "]=", kjt.lengths[i], " > max_len ", cap));
    }
  }
  // 4. Offsets: int32 lengths summed in int64 cannot overflow for any |lengths| that fits in memory.
  std::vector<int64_t>& offsets = layout.offsets;
  offsets.assign(static_cast<size_t>(num_keys * batch + 1), 0);
  for (int64_t i = 0; i < num_keys * batch; ++i) offsets[i + 1] = offsets[i] + kjt.lengths[i];
  if (!kjt.offsets.empty()) {
    if (kjt.offsets.size() != offsets.size()) {
      return Fail("E_KJT_OFFSETS", {}, absl::StrCat("|offsets|=", kjt.offsets.size(), " but F*B+1=", offsets.size()));
    }
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (kjt.offsets[i] != offsets[i]) {
        return Fail("E_KJT_OFFSETS", Where{static_cast<int64_t>(i), "", -1, -1},
                    absl::StrCat("offsets[", i, "]=", kjt.offsets[i], " but the lengths give ", offsets[i]));
      }
    }
  }
  if (offsets.back() != static_cast<int64_t>(kjt.values.size())) {
    return Fail("E_KJT_OFFSETS", {}, absl::StrCat("sum of lengths ", offsets.back(), " but |values|=", kjt.values.size()));
  }
  auto value_at = [&](int64_t v) {
    const int64_t bag = static_cast<int64_t>(std::upper_bound(offsets.begin(), offsets.end(), v) - offsets.begin()) - 1;
    return Where{v, kjt.keys[bag / batch], bag % batch, v - offsets[bag]};
  };
  // 5. Weights.
  for (size_t v = 0; v < kjt.weights.size(); ++v) {
    if (!std::isfinite(kjt.weights[v])) {
      return Fail("E_KJT_WEIGHT", value_at(static_cast<int64_t>(v)), absl::StrCat("weights[", v, "]=", kjt.weights[v]));
    }
  }
  // 6. Ids under the hashing rule where the bounds mode is `error`; values are key-major, so the
  // first bad value of the first bad key has the smallest index.
  for (int64_t f = 0; f < num_keys; ++f) {
    const TableConfig& t = config.tables[config.features[layout.feature[f]].table];
    if (t.bounds != BoundsMode::kError) continue;
    for (int64_t v = offsets[f * batch]; v < offsets[(f + 1) * batch]; ++v) {
      int64_t row = 0;
      if (!gemtb::embedding::IdToRow(kjt.values[v], t.hashing, t.rows, t.hash_seed, &row)) {
        return Fail("E_ID_OUT_OF_RANGE", value_at(v),
                    absl::StrCat("values[", v, "]=", kjt.values[v], " is not a valid id of table '", t.name, "' (",
                                 t.rows, " rows)"));
      }
    }
  }
  return layout;
}

}  // namespace gemtb::gpu::embedding
