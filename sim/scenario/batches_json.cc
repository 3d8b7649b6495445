// The `batches` (length laws, assignment policy, step counts) and `noise` sections.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_graph.h"
#include "model/json/json_reader.h"
#include "sim/scenario/plan_json.h"

namespace gemtb::sim {

using namespace ::gemtb::json;  // the strict reader: ObjectReader, BadValue, JoinPath, ...
namespace {

// Bounds [min, max] of a law: min >= 0 (zero-length sequences exist), max <= the sequence's Lmax.
absl::Status ReadBounds(const ObjectReader& r, int64_t lmax, int64_t default_min, LengthLaw* law) {
  law->min = default_min;
  law->max = lmax;
  GEMTB_RETURN_IF_ERROR(r.Int64("min", &law->min, 0, lmax));
  GEMTB_RETURN_IF_ERROR(r.Int64("max", &law->max, 0, int64_t{1} << 40));
  if (law->max > lmax) {
    return BadField(JoinPath(r.path(), "max"), absl::StrCat(law->max, " exceeds the model sequence's Lmax ", lmax));
  }
  if (law->min > law->max) {
    return BadField(JoinPath(r.path(), "min"), absl::StrCat(law->min, " must be <= max ", law->max));
  }
  return absl::OkStatus();
}

absl::StatusOr<LengthLaw> ParseLognormal(const nlohmann::json& json, const std::string& path, int64_t lmax) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, path, {"mu", "median", "sigma", "min", "max", "corr"});
  if (!r.ok()) return r.status();
  LengthLaw law;
  law.kind = LengthLaw::Kind::kLognormal;
  if (r->Has("mu") == r->Has("median")) return BadField(path, "needs exactly one of mu and median");
  GEMTB_RETURN_IF_ERROR(r->Range("mu", &law.mu, -50, 50));
  if (r->Has("median")) {
    double median = 0;
    GEMTB_RETURN_IF_ERROR(r->Positive("median", &median));
    law.mu = std::log(median);
  }
  GEMTB_RETURN_IF_ERROR(r->Require("sigma"));
  GEMTB_RETURN_IF_ERROR(r->Range("sigma", &law.sigma, 0, 10));
  GEMTB_RETURN_IF_ERROR(r->Range("corr", &law.corr, 0, 1));
  GEMTB_RETURN_IF_ERROR(ReadBounds(*r, lmax, 1, &law));
  return law;
}

absl::StatusOr<LengthLaw> ParseHistogram(const nlohmann::json& json, const std::string& path, int64_t lmax) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, path, {"bins"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Require("bins"));
  const nlohmann::json& bins = *r->Get("bins");
  const std::string bins_path = JoinPath(path, "bins");
  if (!bins.is_array() || bins.empty()) return BadValue(bins_path, bins, "is not a non-empty array of [length, weight]");
  LengthLaw law;
  law.kind = LengthLaw::Kind::kHistogram;
  double total = 0;
  for (size_t i = 0; i < bins.size(); ++i) {
    const std::string bin_path = IndexPath(bins_path, i);
    const nlohmann::json& bin = bins[i];
    if (!bin.is_array() || bin.size() != 2) return BadValue(bin_path, bin, "is not a [length, weight] pair");
    absl::StatusOr<int64_t> length = ReadInteger(bin[0], IndexPath(bin_path, 0), 0, lmax);
    if (!length.ok()) return length.status();
    absl::StatusOr<double> weight = ReadNumber(bin[1], IndexPath(bin_path, 1));
    if (!weight.ok()) return weight.status();
    if (*weight < 0) return BadValue(IndexPath(bin_path, 1), bin[1], "must be >= 0 (a weight)");
    if (!law.bins.empty() && static_cast<double>(*length) <= law.bins.back().first) {
      return BadValue(IndexPath(bin_path, 0), bin[0], "must be greater than the previous bin's length");
    }
    law.bins.emplace_back(static_cast<double>(*length), *weight);
    total += *weight;
  }
  if (!(total > 0)) return BadField(bins_path, "weights sum to 0, must be > 0");
  law.min = static_cast<int64_t>(law.bins.front().first);
  law.max = static_cast<int64_t>(law.bins.back().first);
  return law;
}

absl::StatusOr<LengthLaw> ParseZipf(const nlohmann::json& json, const std::string& path, int64_t lmax) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, path, {"s", "min", "max"});
  if (!r.ok()) return r.status();
  LengthLaw law;
  law.kind = LengthLaw::Kind::kZipf;
  GEMTB_RETURN_IF_ERROR(r->Require("s"));
  GEMTB_RETURN_IF_ERROR(r->Positive("s", &law.s));
  GEMTB_RETURN_IF_ERROR(ReadBounds(*r, lmax, 1, &law));
  if (law.min < 1) return BadField(JoinPath(path, "min"), absl::StrCat(law.min, " must be >= 1 (zipf ranks start at 1)"));
  return law;
}

absl::Status ParseFeatures(const nlohmann::json& json, const model::ModelGraph& model, std::vector<LengthLaw>* laws) {
  const std::string path = "batches.features";
  if (!json.is_array()) return BadValue(path, json, "is not an array of length laws");
  laws->clear();
  const size_t sequences = model.sequences.size();
  for (size_t i = 0; i < json.size(); ++i) {
    const std::string entry_path = IndexPath(path, i);
    absl::StatusOr<ObjectReader> r = ObjectReader::Open(json[i], entry_path, {"count", "lognormal", "histogram", "zipf"});
    if (!r.ok()) return r.status();
    int count = 1;
    GEMTB_RETURN_IF_ERROR(r->Int("count", &count, 1, 1 << 16));
    const int kinds = int{r->Has("lognormal")} + int{r->Has("histogram")} + int{r->Has("zipf")};
    if (kinds != 1) return BadField(entry_path, "needs exactly one of lognormal, histogram, zipf");
    for (int c = 0; c < count; ++c) {
      const size_t j = laws->size();
      if (j >= sequences) {
        return BadField(path, absl::StrCat("more length laws than the model's ", sequences, " sequences"));
      }
      const int64_t lmax = model.sequences[j].lmax;
      absl::StatusOr<LengthLaw> law;
      if (r->Has("lognormal")) law = ParseLognormal(*r->Get("lognormal"), JoinPath(entry_path, "lognormal"), lmax);
      if (r->Has("histogram")) law = ParseHistogram(*r->Get("histogram"), JoinPath(entry_path, "histogram"), lmax);
      if (r->Has("zipf")) law = ParseZipf(*r->Get("zipf"), JoinPath(entry_path, "zipf"), lmax);
      if (!law.ok()) {
        if (count == 1) return law.status();
        return absl::InvalidArgumentError(absl::StrCat(law.status().message(), " (sequence ", j, ")"));
      }
      laws->push_back(*law);
    }
  }
  if (laws->size() != sequences) {
    return BadField(path, absl::StrCat(laws->size(), " length laws for the model's ", sequences, " sequences"));
  }
  return absl::OkStatus();
}

absl::Status ParseAssignment(const nlohmann::json& json, int64_t local_batch, Assignment* a) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(json, "batches.assignment", {"policy", "sub_batch", "pool_factor", "max_len"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Enum("policy", &a->policy, {"random", "bbs", "global", "padded", "none"}));
  if (a->policy == "none") a->policy = "padded";
  GEMTB_RETURN_IF_ERROR(r->Int("sub_batch", &a->sub_batch, 1, 1 << 24));
  GEMTB_RETURN_IF_ERROR(r->Int("pool_factor", &a->pool_factor, 1, 4096));
  GEMTB_RETURN_IF_ERROR(r->Int64("max_len", &a->max_len, 0, int64_t{1} << 40));
  if ((a->policy == "bbs" || a->policy == "global") && local_batch % a->sub_batch != 0) {
    return BadField("batches.assignment.sub_batch",
                    absl::StrCat(a->sub_batch, " does not divide local_batch ", local_batch, " (policy ", a->policy, ")"));
  }
  return absl::OkStatus();
}

// A per-table number: one value for every table, or {"default": v, "tables": {"<table>": v, ...}};
// each in [lo, hi] (`positive`: > 0 as well).
absl::Status ParsePerTable(const nlohmann::json& json, const std::string& path, const model::ModelGraph& model,
                           double lo, double hi, bool positive, double* default_value,
                           std::map<std::string, double>* by_table) {
  auto check = [&](double v, const std::string& at) -> absl::Status {
    if (v < lo || v > hi || (positive && !(v > 0))) {
      return BadField(at, absl::StrCat(v, " must be in ", positive ? "(" : "[", lo, ", ", hi, "]"));
    }
    return absl::OkStatus();
  };
  if (json.is_number()) {
    absl::StatusOr<double> v = ReadNumber(json, path);
    if (!v.ok()) return v.status();
    GEMTB_RETURN_IF_ERROR(check(*v, path));
    *default_value = *v;
    return absl::OkStatus();
  }
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, path, {"default", "tables"});
  if (!r.ok()) return r.status();
  if (const nlohmann::json* d = r->Get("default"); d != nullptr) {
    absl::StatusOr<double> v = ReadNumber(*d, path + ".default");
    if (!v.ok()) return v.status();
    GEMTB_RETURN_IF_ERROR(check(*v, path + ".default"));
    *default_value = *v;
  }
  if (const nlohmann::json* tables = r->Get("tables"); tables != nullptr) {
    if (!tables->is_object()) return BadField(path + ".tables", "must be an object of table name -> number");
    for (const auto& [name, value] : tables->items()) {
      const std::string at = absl::StrCat(path, ".tables.", name);
      const std::string& table_name = name;  // clang before 16 cannot capture a structured binding
      const bool known = std::any_of(model.tables.begin(), model.tables.end(),
                                     [&](const model::GraphTable& t) { return t.name == table_name; });
      if (!known) return BadField(at, "is not a table of the model");
      absl::StatusOr<double> v = ReadNumber(value, at);
      if (!v.ok()) return v.status();
      GEMTB_RETURN_IF_ERROR(check(*v, at));
      (*by_table)[name] = *v;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Batches> ParseBatches(const nlohmann::json& json, const Cluster& cluster,
                                     const model::ModelGraph& model) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      json, "batches",
      {"local_batch", "global_batch", "features", "assignment", "warmup_steps", "measured_steps", "id_zipf", "pooling"});
  if (!r.ok()) return r.status();
  Batches b;
  if (r->Has("local_batch") == r->Has("global_batch")) {
    return BadField("batches", "needs exactly one of local_batch and global_batch");
  }
  constexpr int64_t kMaxBatch = int64_t{1} << 24;
  GEMTB_RETURN_IF_ERROR(r->Int64("local_batch", &b.local_batch, 1, kMaxBatch));
  if (r->Has("global_batch")) {
    int64_t global = 0;
    GEMTB_RETURN_IF_ERROR(r->Int64("global_batch", &global, 1, kMaxBatch * (int64_t{1} << 20)));
    if (global % cluster.world_size != 0) {
      return BadField("batches.global_batch",
                      absl::StrCat(global, " does not split evenly over world_size ", cluster.world_size));
    }
    b.local_batch = global / cluster.world_size;
    if (b.local_batch > kMaxBatch) {
      return BadField("batches.global_batch", absl::StrCat(global, " gives ", b.local_batch, " samples per rank, over ", kMaxBatch));
    }
  }
  GEMTB_RETURN_IF_ERROR(r->Require("features"));
  GEMTB_RETURN_IF_ERROR(ParseFeatures(*r->Get("features"), model, &b.features));
  if (const nlohmann::json* a = r->Get("assignment"); a != nullptr) {
    GEMTB_RETURN_IF_ERROR(ParseAssignment(*a, b.local_batch, &b.assignment));
  }
  GEMTB_RETURN_IF_ERROR(r->Int("warmup_steps", &b.warmup_steps, 0, 1000));
  GEMTB_RETURN_IF_ERROR(r->Int("measured_steps", &b.measured_steps, 1, 100000));
  // Exponents in [0, 4] (the data generator's range); pooling factors in (0, 10,000].
  if (const nlohmann::json* z = r->Get("id_zipf"); z != nullptr) {
    GEMTB_RETURN_IF_ERROR(ParsePerTable(*z, "batches.id_zipf", model, 0, 4, false, &b.id_zipf_default, &b.id_zipf));
  }
  if (const nlohmann::json* p = r->Get("pooling"); p != nullptr) {
    GEMTB_RETURN_IF_ERROR(ParsePerTable(*p, "batches.pooling", model, 0, 10000, true, &b.pooling_default, &b.pooling));
  }
  return b;
}

absl::StatusOr<Noise> ParseNoise(const nlohmann::json& json, const Cluster& cluster) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(json, "noise", {"step_sigma", "slow_ranks", "collective_jitter_sigma"});
  if (!r.ok()) return r.status();
  Noise n;
  GEMTB_RETURN_IF_ERROR(r->Range("step_sigma", &n.step_sigma, 0, 5));
  GEMTB_RETURN_IF_ERROR(r->Range("collective_jitter_sigma", &n.collective_jitter_sigma, 0, 5));
  if (const nlohmann::json* slow = r->Get("slow_ranks"); slow != nullptr) {
    absl::StatusOr<ObjectReader> s = ObjectReader::Open(*slow, "noise.slow_ranks", {"ranks", "fraction", "factor"});
    if (!s.ok()) return s.status();
    if (s->Has("ranks") == s->Has("fraction")) return BadField("noise.slow_ranks", "needs exactly one of ranks and fraction");
    GEMTB_RETURN_IF_ERROR(s->Require("factor"));
    GEMTB_RETURN_IF_ERROR(s->Positive("factor", &n.slow_factor));
    GEMTB_RETURN_IF_ERROR(s->Range("fraction", &n.slow_fraction, 0, 1));
    if (const nlohmann::json* ranks = s->Get("ranks"); ranks != nullptr) {
      if (!ranks->is_array()) return BadValue("noise.slow_ranks.ranks", *ranks, "is not an array of ranks");
      std::set<int64_t> seen;
      for (size_t i = 0; i < ranks->size(); ++i) {
        const std::string path = IndexPath("noise.slow_ranks.ranks", i);
        absl::StatusOr<int64_t> rank = ReadInteger((*ranks)[i], path, 0, int64_t{1} << 30);
        if (!rank.ok()) return rank.status();
        if (*rank >= cluster.world_size) {
          return BadField(path, absl::StrCat(*rank, " is not a rank of world_size ", cluster.world_size));
        }
        if (!seen.insert(*rank).second) return BadField(path, absl::StrCat(*rank, " appears twice"));
        n.slow_ranks.push_back(static_cast<int>(*rank));
      }
    }
  }
  return n;
}

}  // namespace gemtb::sim
