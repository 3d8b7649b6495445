#include "tools/check/embed_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/common/enum_names.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::check {
namespace {

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool Chance(std::mt19937_64& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
float Real(std::mt19937_64& rng, float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

// A gradient or weight value: mostly uniform, sometimes exactly 0, -0 or a tiny or large value.
float Value(std::mt19937_64& rng) {
  switch (Uniform(rng, 0, 19)) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return Real(rng, -1e-30f, 1e-30f);
    case 3: return Real(rng, -300.0f, 300.0f);
    default: return Real(rng, -2.0f, 2.0f);
  }
}

// An id that is valid (or, with `invalid`, invalid) for the table's hashing rule.
int64_t DrawId(std::mt19937_64& rng, const TableConfig& t, bool invalid) {
  switch (t.hashing) {
    case Hashing::kIdentity:
      if (invalid) return Chance(rng, 0.5) ? -Uniform(rng, 1, 1000) : t.rows + Uniform(rng, 0, 1000);
      return Uniform(rng, 0, t.rows - 1);
    case Hashing::kMod:
      if (invalid) return Chance(rng, 0.1) ? std::numeric_limits<int64_t>::min() : -Uniform(rng, 1, 1 << 30);
      return Chance(rng, 0.5) ? Uniform(rng, 0, 3 * t.rows) : Uniform(rng, 0, std::numeric_limits<int64_t>::max());
    case Hashing::kSplitMix64:
      return Chance(rng, 0.5) ? Uniform(rng, -3 * t.rows, 3 * t.rows)
                              : Uniform(rng, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  return 0;
}

}  // namespace

std::string EmbedFamily::Name() const {
  return std::string(NameIn(kPoolingNames, pooling)) + "/" + std::string(NameIn(kOptimizerKindNames, optimizer)) +
         "/" + std::string(NameIn(kTableDtypeNames, dtype)) + "/" + std::string(NameIn(kHashingNames, hashing)) + "/" +
         std::string(NameIn(kBoundsModeNames, bounds));
}

std::vector<EmbedFamily> AllEmbedFamilies() {
  std::vector<EmbedFamily> out;
  for (const auto& p : kPoolingNames) {
    for (const auto& o : kOptimizerKindNames) {
      for (const auto& d : kTableDtypeNames) {
        for (const auto& h : kHashingNames) {
          for (const auto& b : kBoundsModeNames) out.push_back({p.value, o.value, d.value, h.value, b.value});
        }
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<EmbedFamily>> ParseEmbedFamilies(const std::string& text) {
  const std::vector<EmbedFamily> all = AllEmbedFamilies();
  if (text == "all") return all;
  std::vector<EmbedFamily> out;
  for (absl::string_view name : absl::StrSplit(text, ',')) {
    auto it = std::find_if(all.begin(), all.end(), [&](const EmbedFamily& f) { return f.Name() == name; });
    if (it == all.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--family: '", name, "' is not a family (pooling/optimizer/dtype/",
                                                     "hashing/bounds, e.g. ", all[0].Name(), ")"));
    }
    out.push_back(*it);
  }
  return out;
}

int64_t EmbedCaseSeed(int64_t seed, size_t family_index, int64_t index) {
  const uint64_t h = SplitMix64(SplitMix64(static_cast<uint64_t>(seed)) ^ (static_cast<uint64_t>(family_index) << 32) ^
                                static_cast<uint64_t>(index));
  return static_cast<int64_t>(h >> 1);
}

EmbedCase DrawEmbedCase(int64_t case_seed, const EmbedFamily& family) {
  std::mt19937_64 rng(static_cast<uint64_t>(case_seed));
  EmbedCase c;
  EmbeddingConfig& config = c.config;
  config.seed = rng();
  static constexpr int64_t kDims[] = {4, 8, 12, 16, 36, 64, 128, 132, 260};
  const int num_tables = static_cast<int>(Uniform(rng, 1, 3));
  for (int t = 0; t < num_tables; ++t) {
    TableConfig tc;
    tc.name = absl::StrCat("t", t);
    // Few rows: duplicates in a bag and across bags are the point.
    tc.rows = Chance(rng, 0.2) ? 1 : Uniform(rng, 2, Chance(rng, 0.7) ? 24 : 600);
    tc.dim = kDims[Uniform(rng, 0, std::size(kDims) - 1)];
    tc.dtype = family.dtype;
    tc.hashing = family.hashing;
    tc.bounds = family.bounds;
    tc.hash_seed = Chance(rng, 0.5) ? gemtb::embedding::DefaultHashSeed(t) : rng();
    tc.stochastic_rounding = Chance(rng, 0.75);
    OptimizerConfig& o = tc.optimizer;
    o.kind = family.optimizer;
    o.lr = Real(rng, 1e-3f, 0.5f);
    o.eps = Chance(rng, 0.5) ? 1e-8f : Real(rng, 1e-8f, 1e-2f);
    if (o.kind != OptimizerKind::kSgd) {
      const int64_t mode = Uniform(rng, 0, o.kind == OptimizerKind::kAdam ? 1 : 2);
      o.decay_mode = mode == 0 ? WeightDecayMode::kNone : (mode == 1 && o.kind == OptimizerKind::kAdam)
                                                              ? WeightDecayMode::kDecoupled
                                                              : static_cast<WeightDecayMode>(mode);
      o.weight_decay = o.decay_mode == WeightDecayMode::kNone ? 0.0f : Real(rng, 0.0f, 0.1f);
    }
    if (o.kind == OptimizerKind::kAdam && Chance(rng, 0.3)) {
      o.beta1 = Real(rng, 0.5f, 0.99f);
      o.beta2 = Real(rng, 0.9f, 0.9999f);
    }
    config.tables.push_back(tc);
  }
  const int num_features = static_cast<int>(Uniform(rng, 1, 4));
  for (int f = 0; f < num_features; ++f) {
    FeatureConfig fc;
    fc.key = absl::StrCat("f", f);
    fc.table = f < num_tables ? f : static_cast<int>(Uniform(rng, 0, num_tables - 1));  // the rest share
    fc.pooling = family.pooling;
    config.features.push_back(fc);
  }
  // KJT keys: every feature, in config order or a permutation of a subset.
  reference::KeyedJaggedTensor& kjt = c.kjt;
  std::vector<int> order(static_cast<size_t>(num_features));
  for (int f = 0; f < num_features; ++f) order[f] = f;
  if (Chance(rng, 0.3)) std::shuffle(order.begin(), order.end(), rng);
  if (num_features > 1 && Chance(rng, 0.2)) order.pop_back();
  for (int f : order) kjt.keys.push_back(config.features[f].key);
  kjt.stride = Chance(rng, 0.05) ? 0 : Uniform(rng, 1, 9);
  const bool invalid_ids = family.bounds != BoundsMode::kError;
  for (int f : order) {
    const TableConfig& t = config.tables[config.features[f].table];
    for (int64_t b = 0; b < kjt.stride; ++b) {
      // Long bags, a few of them long enough that a row with few ids takes a block on the GPU.
      const int64_t len = !Chance(rng, 0.08) ? Uniform(rng, 0, 6)
                          : Chance(rng, 0.15) ? Uniform(rng, 256, 1100) : Uniform(rng, 33, 90);
      kjt.lengths.push_back(static_cast<int32_t>(len));
      for (int64_t p = 0; p < len; ++p) kjt.values.push_back(DrawId(rng, t, invalid_ids && Chance(rng, 0.25)));
    }
  }
  kjt.has_weights = family.pooling == Pooling::kWeightedSum || Chance(rng, 0.2);
  if (kjt.has_weights) {
    for (size_t v = 0; v < kjt.values.size(); ++v) kjt.weights.push_back(Value(rng));
  }
  if (Chance(rng, 0.3)) {
    kjt.offsets.assign(1, 0);
    for (int32_t l : kjt.lengths) kjt.offsets.push_back(kjt.offsets.back() + l);
  }
  // Prior state: the Philox init, a few earlier steps' worth of optimizer state.
  c.state = reference::InitEmbeddingState(config);
  c.state.step = Uniform(rng, 0, 5);
  for (size_t t = 0; t < config.tables.size(); ++t) {
    reference::TableState& ts = c.state.tables[t];
    if (Chance(rng, 0.3)) {
      for (float& w : ts.weights) w = gemtb::embedding::StoreRne(Value(rng), config.tables[t].dtype);
    }
    for (float& m : ts.adagrad) m = Chance(rng, 0.5) ? 0.0f : Real(rng, 0.0f, 4.0f);
    for (float& m : ts.adam_m) m = Chance(rng, 0.5) ? 0.0f : Real(rng, -1.0f, 1.0f);
    for (float& v : ts.adam_v) v = Chance(rng, 0.5) ? 0.0f : Real(rng, 0.0f, 1.0f);
    for (int64_t s = 0; s < c.state.step; ++s) {
      ts.adam_step = gemtb::embedding::NextAdamStep(ts.adam_step, config.tables[t].optimizer);
    }
  }
  // Upstream gradients in the forward's shapes.
  int64_t width = 0;
  for (int f : order) {
    const FeatureConfig& fc = config.features[f];
    if (fc.pooling != Pooling::kNone) width += config.tables[fc.table].dim;
  }
  for (int64_t i = 0; i < kjt.stride * width; ++i) c.grads.pooled.push_back(Value(rng));
  int64_t value_begin = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const FeatureConfig& fc = config.features[order[k]];
    int64_t n = 0;
    for (int64_t b = 0; b < kjt.stride; ++b) n += kjt.lengths[k * kjt.stride + b];
    if (fc.pooling == Pooling::kNone) {
      std::vector<float> g(static_cast<size_t>(n * config.tables[fc.table].dim));
      for (float& x : g) x = Value(rng);
      c.grads.sequence.push_back(std::move(g));
    }
    value_begin += n;
  }
  c.description = absl::StrCat(family.Name(), ": T=", num_tables, " F=", kjt.keys.size(), " B=", kjt.stride,
                               " ids=", kjt.values.size(), " step=", c.state.step);
  for (const TableConfig& t : config.tables) absl::StrAppend(&c.description, " ", t.name, "[", t.rows, "x", t.dim, "]");
  return c;
}

int64_t LongestRowRun(const EmbedCase& c) {
  std::map<std::pair<int, int64_t>, int64_t> count;
  int64_t longest = 0;
  const int64_t batch = c.kjt.stride;
  size_t v = 0;
  for (size_t k = 0; k < c.kjt.keys.size(); ++k) {
    auto f = std::find_if(c.config.features.begin(), c.config.features.end(),
                          [&](const FeatureConfig& fc) { return fc.key == c.kjt.keys[k]; });
    for (int64_t b = 0; b < batch; ++b) {
      for (int32_t p = 0; p < c.kjt.lengths[k * batch + b]; ++p, ++v) {
        if (f == c.config.features.end()) continue;
        const TableConfig& t = c.config.tables[f->table];
        int64_t row = 0;
        if (!gemtb::embedding::IdToRow(c.kjt.values[v], t.hashing, t.rows, t.hash_seed, &row)) {
          if (t.bounds != BoundsMode::kRemap0) continue;
          row = 0;
        }
        longest = std::max(longest, ++count[{f->table, row}]);
      }
    }
  }
  return longest;
}

EmbedCase DrawMalformedEmbedCase(int64_t case_seed) {
  std::mt19937_64 rng(static_cast<uint64_t>(case_seed));
  static const std::vector<EmbedFamily> kAll = AllEmbedFamilies();
  EmbedFamily family = kAll[Uniform(rng, 0, static_cast<int64_t>(kAll.size()) - 1)];
  family.bounds = BoundsMode::kError;
  EmbedCase c = DrawEmbedCase(static_cast<int64_t>(rng() >> 1), family);
  reference::KeyedJaggedTensor& k = c.kjt;
  if (k.lengths.empty()) {
    k.lengths.push_back(1);  // F*B = 0 but one length: a shape error
    return c;
  }
  const size_t i = static_cast<size_t>(Uniform(rng, 0, static_cast<int64_t>(k.lengths.size()) - 1));
  switch (Uniform(rng, 0, 6)) {
    case 0: k.lengths[i] = -static_cast<int32_t>(Uniform(rng, 1, 5)); break;
    case 1: c.config.features[0].max_len = 0; k.lengths[i] += 1; k.values.push_back(0); break;
    case 2:
      k.offsets.assign(1, 0);
      for (int32_t l : k.lengths) k.offsets.push_back(k.offsets.back() + l);
      k.offsets[i + 1] += Chance(rng, 0.5) ? 1 : -1;
      break;
    case 3:
      if (k.values.empty()) { k.lengths[i] = 1 << 30; break; }  // lengths summing past |values|
      k.has_weights = true;
      k.weights.resize(k.values.size(), 1.0f);
      k.weights[Uniform(rng, 0, static_cast<int64_t>(k.weights.size()) - 1)] =
          Chance(rng, 0.5) ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
      break;
    case 4:
      if (k.values.empty() || family.hashing == Hashing::kSplitMix64) { k.lengths[i] += 3; break; }
      k.values[Uniform(rng, 0, static_cast<int64_t>(k.values.size()) - 1)] = -7;
      break;
    case 5: k.keys[0] = "no_such_key"; break;
    default:
      if (k.keys.size() > 1) k.keys[1] = k.keys[0];
      else k.stride += 1;
      break;
  }
  c.description = absl::StrCat("malformed KJT from ", c.description);
  return c;
}

}  // namespace gemtb::check
