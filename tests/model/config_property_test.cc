// Properties of the loader and the expansion on randomly mutated configs: every input is either
// rejected with an error naming a JSON path, or accepted and expanded into a graph whose parameter
// count is the counting rules (re-derived here) and whose JSON round-trips.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/description/graph_costs.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "rapidcheck.h"
#include "rapidcheck/gtest.h"

namespace gemtb::model {
namespace {

using nlohmann::json;

// counting rules, written from the config struct (not from the graph).
int64_t RuleDenseParams(const ModelConfig& c) {
  const int64_t d = c.d, J = c.NumSequences(), F = static_cast<int64_t>(c.features.size());
  const ArchSpec& a = c.arch;
  const int64_t n_z = a.n_x + J * (a.n_s + a.k_p + a.k_r);
  const int64_t attn = 4 * (d * d + d), gate = d * d + d;
  const int64_t embed = (c.dense.m * c.dense.n_d * d + c.dense.n_d * d) + (F + c.dense.n_d) * a.n_x;
  const int64_t cross = a.n_x * a.n_s + gate + J * (a.k_p * d + attn + gate);
  const WukongSpec& w = a.wukong;
  const int64_t wukong = 3 * n_z * w.k + (n_z * w.k * w.hidden + w.hidden) + (w.hidden * w.n_f * d + w.n_f * d) +
                         w.n_l * n_z + a.n_x * n_z + 2 * d;
  const int64_t seq = 2 * (attn + 2 * d) + (2 * a.f * d * d + a.f * d + d) + 2 * d;
  int64_t head = 0;
  for (size_t i = 0; i + 1 < c.head.widths.size(); ++i) head += c.head.widths[i] * c.head.widths[i + 1] + c.head.widths[i + 1];
  return embed + a.layers * (cross + wukong + J * seq) + cross + head;
}

json SmallBase() {
  // A small valid config, built here so the property does not depend on the committed files.
  return json::parse(R"({
    "version": 1, "name": "prop", "d": 16, "heads": 2,
    "tables": [{"name": "a", "rows": 10, "pooling": "mean"}, {"name": "items", "rows": 50, "pooling": "none"},
               {"name": "act", "rows": 4, "pooling": "none"}, {"name": "dt", "rows": 8, "pooling": "none"}],
    "features": [{"name": "a", "table": "a", "max_len": 3}],
    "dense": {"m": 4, "n_d": 1},
    "sequences": [{"name": "s", "Lmax": 20, "item_table": "items", "action_table": "act", "dt_table": "dt",
                   "attention": {"window": 4}}],
    "arch": {"n_x": 4, "n_s": 2, "k_p": 1, "K_r": 1,
             "wukong": {"k": 2, "n_F": 2, "n_L": 2, "H": 8, "experts": {"count": 1}},
             "f": 2, "L": 1},
    "head": {"widths": [128, 8, 1]},
    "surfaces": 1,
    "tasks": [{"name": "ctr", "objective": "ctr", "surfaces": [0]}]})");
}

RC_GTEST_PROP(ConfigProperty, MutatedConfigsAreRejectedOrConsistent, ()) {
  json j = SmallBase();
  // Consistent re-sizing: pick sizes, then fix the derived head width (so many cases are valid).
  const int64_t n_s = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t k_p = *rc::gen::inRange<int64_t>(0, 4);
  const int64_t k_r = *rc::gen::inRange<int64_t>(0, 4);
  const int64_t heads = *rc::gen::element<int64_t>(1, 2, 4);
  const int64_t d = heads * 4 * *rc::gen::inRange<int64_t>(1, 4);
  const int64_t experts = *rc::gen::element<int64_t>(1, 2);
  const int64_t seqs = *rc::gen::inRange<int64_t>(0, 3);
  j["d"] = d;
  j["heads"] = heads;
  j["arch"]["n_s"] = n_s;
  j["arch"]["k_p"] = k_p;
  j["arch"]["K_r"] = k_r;
  j["arch"]["wukong"]["experts"]["count"] = experts;
  j["arch"]["compskip"] = *rc::gen::arbitrary<bool>();
  if (seqs == 0) {
    j["sequences"] = json::array();
  } else {
    j["sequences"][0]["count"] = seqs;
  }
  j["head"]["widths"][0] = (n_s + seqs * (n_s + k_p + k_r)) * d;
  // Then, sometimes, one corrupting mutation.
  const int mutation = *rc::gen::inRange(0, 8);
  if (mutation == 1) j["arch"]["n_x"] = *rc::gen::inRange<int64_t>(-3, 9);
  if (mutation == 2) j["tables"][0]["rows"] = *rc::gen::inRange<int64_t>(-2, 3);
  if (mutation == 3) j["head"]["widths"][1] = *rc::gen::inRange<int64_t>(-1, 3);
  if (mutation == 4) j["arch"]["wukong"]["H"] = *rc::gen::inRange<int64_t>(1, 10);
  if (mutation == 5) j["features"][0]["table"] = "items";  // pooling 'none' on a non-sequence feature
  if (mutation == 6) j["arch"]["f"] = "two";

  auto config = ParseModelConfig(j);
  if (!config.ok()) {
    const std::string message(config.status().message());
    RC_ASSERT(message.find(": ") != std::string::npos);  // "<path>: <what>"
    RC_LOG() << message << "\n";
    RC_ASSERT(mutation != 0);
    return;
  }
  auto graph = ExpandModel(*config);
  RC_ASSERT(graph.ok());
  if (!config->arch.compskip && config->arch.k_p > 0 &&
      (config->arch.wukong.experts.count == 1)) {
    RC_ASSERT(DenseParamCount(*graph) == RuleDenseParams(*config));
  }
  auto back = ParseModelJsonText(ToJsonText(*graph));
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == *graph);
  const GraphTotals t = EvaluateGraph(*graph, 3, LengthsAtSparsity(*graph, 0.5));
  RC_ASSERT(t.model.flops_fwd > 0.0);
  RC_ASSERT(t.all.saved_bytes > 0.0);
}

// model.json with one leaf replaced by a value of another type or range: parsed, or rejected with
// an error under the "model" path; never a crash (the suite also runs under ASan/UBSan).
RC_GTEST_PROP(ModelJsonProperty, CorruptedLeavesAreRejectedOrParsed, ()) {
  static const json base = [] {
    auto config = LoadModelConfig("tiny");
    auto graph = ExpandModel(*config);
    return ToJson(*graph);
  }();
  static const json flat = base.flatten();
  std::vector<std::string> pointers;
  for (const auto& item : flat.items()) pointers.push_back(item.key());
  const std::string pointer = *rc::gen::elementOf(pointers);
  const std::vector<json> values = {json(-1),      json(0),          json(1e300),    json("x"),
                                    json(nullptr), json::array(),    json::object(), json(true),
                                    json(2.5),     json(UINT64_MAX), json(INT64_MIN)};
  json corrupt = base;
  corrupt[json::json_pointer(pointer)] = *rc::gen::elementOf(values);
  auto graph = ParseModelJson(corrupt);
  if (!graph.ok()) {
    RC_ASSERT(std::string(graph.status().message()).rfind("model", 0) == 0);
    return;
  }
  // Accepted: it must evaluate and re-emit without trouble.
  (void)EvaluateGraph(*graph, 2, LengthsAtSparsity(*graph, 0.5));
  RC_ASSERT(ParseModelJsonText(ToJsonText(*graph)).ok());
}

}  // namespace
}  // namespace gemtb::model
