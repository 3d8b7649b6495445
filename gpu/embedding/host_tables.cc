#include "gpu/embedding/host_tables.h"

#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu::embedding {

size_t ElementBytes(ElementType t) { return t == ElementType::kFloat32 ? 4 : 2; }

std::vector<uint8_t> ToStorage(const std::vector<float>& w, ElementType t) {
  std::vector<uint8_t> bytes(w.size() * ElementBytes(t));
  for (size_t i = 0; i < w.size(); ++i) {
    if (t == ElementType::kFloat32) {
      const uint32_t u = std::bit_cast<uint32_t>(w[i]);
      std::memcpy(bytes.data() + 4 * i, &u, 4);
    } else {
      const uint16_t u = t == ElementType::kBFloat16 ? numerics::FloatToBf16BitsRne(w[i]) : numerics::FloatToFp16BitsRne(w[i]);
      std::memcpy(bytes.data() + 2 * i, &u, 2);
    }
  }
  return bytes;
}

std::vector<float> FromStorage(const std::vector<uint8_t>& bytes, ElementType t) {
  std::vector<float> w(bytes.size() / ElementBytes(t));
  for (size_t i = 0; i < w.size(); ++i) {
    if (t == ElementType::kFloat32) {
      uint32_t u;
      std::memcpy(&u, bytes.data() + 4 * i, 4);
      w[i] = std::bit_cast<float>(u);
    } else {
      uint16_t u;
      std::memcpy(&u, bytes.data() + 2 * i, 2);
      w[i] = t == ElementType::kBFloat16 ? numerics::Bf16BitsToFloat(u) : numerics::Fp16BitsToFloat(u);
    }
  }
  return w;
}

bool KeepsAdagrad(const TableConfig& c) { return c.optimizer.kind == OptimizerKind::kRowwiseAdagrad; }
bool KeepsAdam(const TableConfig& c) { return c.optimizer.kind == OptimizerKind::kAdam; }

absl::StatusOr<TableParams> TableParamsOf(const TableConfig& c, int table, int64_t row_offset, const HostTable* prior) {
  TableParams p;
  p.rows = c.rows;
  p.dim = c.dim;
  p.row_offset = row_offset;
  p.dtype = c.dtype;
  p.hashing = c.hashing;
  p.bounds = c.bounds;
  p.hash_seed = c.hash_seed;
  p.stochastic_rounding = c.stochastic_rounding && c.dtype != ElementType::kFloat32;
  p.table = table;
  p.optimizer = c.optimizer;
  p.global_rows = c.rows;
  p.global_dim = c.dim;
  p.norm_dim = c.dim;
  if (prior == nullptr) return p;
  const std::string name = absl::StrCat("table '", c.name, "'");
  const size_t elements = static_cast<size_t>(c.rows * c.dim);
  if (prior->weights.size() != elements) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", prior->weights.size(), " weights, expected rows*dim=", elements));
  }
  if (KeepsAdagrad(c) && prior->adagrad.size() != static_cast<size_t>(c.rows)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", prior->adagrad.size(), " Adagrad states, expected rows=", c.rows));
  }
  if (KeepsAdam(c) && (prior->adam_m.size() != elements || prior->adam_v.size() != elements)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": Adam m, v need rows*dim=", elements, " values each"));
  }
  p.adam_step = prior->adam_step;
  return p;
}

std::vector<FeatureParams> FeatureParamsOf(const EmbeddingConfig& config, const KjtLayout& layout, int64_t batch,
                                           int64_t* pooled_width) {
  std::vector<FeatureParams> features;
  *pooled_width = 0;
  const size_t num_keys = layout.feature.size();
  for (size_t f = 0; f < num_keys; ++f) {
    const FeatureConfig& fc = config.features[static_cast<size_t>(layout.feature[f])];
    FeatureParams p;
    p.table = fc.table;
    p.pooling = fc.pooling;
    p.value_begin = layout.offsets[f * static_cast<size_t>(batch)];
    if (fc.pooling != Pooling::kNone) {
      p.out_col = *pooled_width;
      *pooled_width += config.tables[static_cast<size_t>(fc.table)].dim;
    }
    features.push_back(p);
  }
  return features;
}

bool AdvanceAdamSteps(const EmbeddingConfig& config, std::vector<TableParams>& tables) {
  bool changed = false;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!KeepsAdam(config.tables[t])) continue;
    tables[t].adam_step = gemtb::embedding::NextAdamStep(tables[t].adam_step, config.tables[t].optimizer);
    changed = true;
  }
  return changed;
}

HostTable HostTableOf(const TableParams& p, const std::vector<uint8_t>& weight_bytes, std::vector<float> adagrad,
                      std::vector<float> adam_m, std::vector<float> adam_v) {
  HostTable h;
  h.weights = FromStorage(weight_bytes, p.dtype);
  h.adagrad = std::move(adagrad);
  h.adam_m = std::move(adam_m);
  h.adam_v = std::move(adam_v);
  h.adam_step = p.adam_step;
  return h;
}

}  // namespace gemtb::gpu::embedding
