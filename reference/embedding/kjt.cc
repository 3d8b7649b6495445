#include "reference/embedding/kjt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::reference {

const char* KjtErrorName(KjtErrorCode code) {
  switch (code) {
    case KjtErrorCode::kShape: return "E_KJT_SHAPE";
    case KjtErrorCode::kNegativeLength: return "E_KJT_NEG_LENGTH";
    case KjtErrorCode::kLengthCap: return "E_KJT_LENGTH_CAP";
    case KjtErrorCode::kOffsets: return "E_KJT_OFFSETS";
    case KjtErrorCode::kWeight: return "E_KJT_WEIGHT";
    case KjtErrorCode::kIdOutOfRange: return "E_ID_OUT_OF_RANGE";
  }
  return "?";
}

std::optional<InputError> FindKjtError(const KeyedJaggedTensor& kjt, const EmbeddingConfig& config,
                                       KjtLayout* layout) {
  const int64_t num_keys = kjt.NumKeys();
  const int64_t batch = kjt.stride;
  auto error = [&](KjtErrorCode code, int64_t index, std::string detail) {
    return InputError{code, index, "", -1, -1, std::move(detail)};
  };
  // 1. Shapes, keys.
  if (batch < 0) return error(KjtErrorCode::kShape, -1, absl::StrCat("stride B=", batch, " is negative"));
  // F*B overflows int64 for a hostile stride; such a product can never equal |lengths|.
  if ((num_keys != 0 && batch > std::numeric_limits<int64_t>::max() / num_keys) ||
      static_cast<int64_t>(kjt.lengths.size()) != num_keys * batch) {
    return error(KjtErrorCode::kShape, -1, absl::StrCat("|lengths|=", kjt.lengths.size(), " but F*B=", num_keys, "*", batch));
  }
  const bool has_weights = kjt.has_weights || !kjt.weights.empty();
  if (has_weights && kjt.weights.size() != kjt.values.size()) {
    return error(KjtErrorCode::kShape, -1, absl::StrCat("|weights|=", kjt.weights.size(), " but |values|=", kjt.values.size()));
  }
  std::map<std::string, int> by_key;
  for (int i = 0; i < static_cast<int>(config.features.size()); ++i) by_key[config.features[i].key] = i;
  std::vector<int> feature(static_cast<size_t>(num_keys));
  std::map<std::string, int64_t> seen;
  for (int64_t f = 0; f < num_keys; ++f) {
    auto it = by_key.find(kjt.keys[f]);
    if (it == by_key.end()) {
      InputError e = error(KjtErrorCode::kShape, f, "unknown key");
      e.key = kjt.keys[f];
      return e;
    }
    if (!seen.emplace(kjt.keys[f], f).second) {
      InputError e = error(KjtErrorCode::kShape, f, "duplicate key");
      e.key = kjt.keys[f];
      return e;
    }
    feature[f] = it->second;
    if (config.features[it->second].pooling == Pooling::kWeightedSum && !has_weights) {
      InputError e = error(KjtErrorCode::kShape, f, "weighted pooling needs weights");
      e.key = kjt.keys[f];
      return e;
    }
  }
  auto at = [&](KjtErrorCode code, int64_t i, std::string detail) {
    InputError e = error(code, i, std::move(detail));
    e.key = kjt.keys[i / std::max<int64_t>(batch, 1)];
    e.b = i % std::max<int64_t>(batch, 1);
    return e;
  };
  // 2. Negative lengths, 3. length caps.
  for (int64_t i = 0; i < num_keys * batch; ++i) {
    if (kjt.lengths[i] < 0) return at(KjtErrorCode::kNegativeLength, i, absl::StrCat("lengths[", i, "]=", kjt.lengths[i]));
  }
  for (int64_t i = 0; i < num_keys * batch; ++i) {
    const int64_t cap = config.features[feature[i / batch]].max_len;
    if (kjt.lengths[i] > cap) {
      return at(KjtErrorCode::kLengthCap, i, absl::StrCat("lengths[", i, "]=", kjt.lengths[i], " > max_len ", cap));
    }
  }
  // 4. Offsets.
  std::vector<int64_t> offsets(static_cast<size_t>(num_keys * batch + 1), 0);
  for (int64_t i = 0; i < num_keys * batch; ++i) offsets[i + 1] = offsets[i] + kjt.lengths[i];
  if (!kjt.offsets.empty()) {
    if (kjt.offsets.size() != offsets.size()) {
      return error(KjtErrorCode::kOffsets, -1, absl::StrCat("|offsets|=", kjt.offsets.size(), " but F*B+1=", offsets.size()));
    }
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (kjt.offsets[i] != offsets[i]) {
        return error(KjtErrorCode::kOffsets, static_cast<int64_t>(i),
                     absl::StrCat("offsets[", i, "]=", kjt.offsets[i], " but the lengths give ", offsets[i]));
      }
    }
  }
  if (offsets.back() != static_cast<int64_t>(kjt.values.size())) {
    return error(KjtErrorCode::kOffsets, -1, absl::StrCat("sum of lengths ", offsets.back(), " but |values|=", kjt.values.size()));
  }
  // Value index -> (key, b, p) for the value-indexed errors below.
  auto at_value = [&](KjtErrorCode code, int64_t v, std::string detail) {
    InputError e = error(code, v, std::move(detail));
    const int64_t bag = static_cast<int64_t>(std::upper_bound(offsets.begin(), offsets.end(), v) - offsets.begin()) - 1;
    e.key = kjt.keys[bag / batch];
    e.b = bag % batch;
    e.p = v - offsets[bag];
    return e;
  };
  // 5. Weights.
  for (size_t v = 0; v < kjt.weights.size(); ++v) {
    if (!std::isfinite(kjt.weights[v])) {
      return at_value(KjtErrorCode::kWeight, static_cast<int64_t>(v), absl::StrCat("weights[", v, "]=", kjt.weights[v]));
    }
  }
  // 6. Ids under the hashing rule, bounds mode error.
  for (int64_t f = 0; f < num_keys; ++f) {
    const TableConfig& t = config.tables[config.features[feature[f]].table];
    if (t.bounds != BoundsMode::kError) continue;
    for (int64_t v = offsets[f * batch]; v < offsets[(f + 1) * batch]; ++v) {
      int64_t row = 0;
      if (!embedding::IdToRow(kjt.values[v], t.hashing, t.rows, t.hash_seed, &row)) {
        // Keys are key-major in values, so the first bad value of the first bad key is the smallest.
        return at_value(KjtErrorCode::kIdOutOfRange, v,
                        absl::StrCat("values[", v, "]=", kjt.values[v], " is not a valid id of table '", t.name,
                                     "' (", t.rows, " rows)"));
      }
    }
  }
  if (layout) *layout = KjtLayout{std::move(feature), std::move(offsets)};
  return std::nullopt;
}

absl::Status ValidateKjt(const KeyedJaggedTensor& kjt, const EmbeddingConfig& config, KjtLayout* layout) {
  std::optional<InputError> e = FindKjtError(kjt, config, layout);
  if (!e) return absl::OkStatus();
  std::string where = e->index >= 0 ? absl::StrCat(" at index ", e->index) : "";
  if (!e->key.empty()) absl::StrAppend(&where, " (key '", e->key, "'", e->b >= 0 ? absl::StrCat(", b ", e->b) : "",
                                       e->p >= 0 ? absl::StrCat(", p ", e->p) : "", ")");
  return absl::InvalidArgumentError(absl::StrCat(KjtErrorName(e->code), where, ": ", e->detail));
}

}  // namespace gemtb::reference
