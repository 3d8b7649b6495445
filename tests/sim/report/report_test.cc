// The report layer on hand-made results and a stand-in simulator whose
// times are simple closed forms: attribution arithmetic, deterministic bytes for any thread count,
// well-formed SVG and trace, sweeps that go on past invalid points, sensitivity and checks.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sim/report/attribution.h"
#include "sim/report/json_text.h"
#include "sim/report/report_files.h"
#include "sim/report/run_summary.h"
#include "sim/report/study.h"
#include "sim/report/sweep_plot.h"
#include "sim/report/trace.h"
#include "sim/scenario/scenario_json.h"

namespace gemtb::sim::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// ---- hand-made results -------------------------------------------------------------------------

SimResult Result(double t_mean, double t_local) {
  SimResult r;
  r.world_size = 4;
  r.step_mean_s = t_mean;
  r.step_p50_s = t_mean;
  r.step_p99_s = t_mean;
  r.step_times_s = {t_mean, t_mean};
  r.t_local_s = t_local;
  r.scaling_ratio = t_local / t_mean;
  r.local_mfu = 0.4;
  r.e2e_mfu = 0.4 * r.scaling_ratio;
  for (int k = 0; k < 4; ++k) {
    RankStats s;
    s.compute_s = 0.1 * (k + 1);
    s.work_s = s.compute_s;
    r.ranks.push_back(s);
  }
  CollectiveStats c;
  c.name = "L1.wukong.ag, \"shard\"";  // a comma and quotes: CSV must quote it
  c.group_class = GroupClass::kDenseShard;
  c.op = CollectiveOp::kAllGather;
  c.algo = "ring";
  c.members = 4;
  c.bytes = 1 << 20;
  c.duration_s = 1e-4;
  r.collectives.push_back(c);
  r.stream_names = {"compute", "dense-shard", "copy"};
  r.trace = {{1, 0, "L1 <fwd> & more", "compute", 0.5e-3, 1e-3}, {0, 1, "ag", "comm", 0.25e-3, 0.5e-3},
             {0, 0, "fwd", "compute", 0.0, 1e-3}};
  return r;
}

TEST(Attribution, DeltasAreTheDropsOfTheCumulativeReruns) {
  // T = 1.0 -> 0.9 (ideal network) -> 0.85 (SM-free) -> 0.70 (balance) -> 0.68 (no noise) -> 0.60.
  const std::vector<SimResult> runs = {Result(1.0, 0.5), Result(0.9, 0.5),  Result(0.85, 0.5),
                                       Result(0.7, 0.5), Result(0.68, 0.5), Result(0.6, 0.5)};
  absl::StatusOr<Attribution> a = Attribute(runs);
  ASSERT_TRUE(a.ok());
  EXPECT_NEAR(a->delta_s[0], 0.10, 1e-12);
  EXPECT_NEAR(a->delta_s[1], 0.05, 1e-12);
  EXPECT_NEAR(a->delta_s[2], 0.15, 1e-12);
  EXPECT_NEAR(a->delta_s[3], 0.02, 1e-12);
  EXPECT_NEAR(a->delta_s[4], 0.08, 1e-12);
  EXPECT_NEAR(a->non_layer_s, 0.10, 1e-12);
  EXPECT_EQ(a->biggest, 2);
  EXPECT_STREQ(LossCause(a->biggest), "C4 load imbalance");
}

TEST(Attribution, DeltasSumToTMinusTIdealAndWithTheResidualToOneMinusSrTimesT) {
  const std::vector<SimResult> runs = {Result(0.8123, 0.3), Result(0.7001, 0.3), Result(0.69, 0.3),
                                       Result(0.61, 0.3),   Result(0.6, 0.3),    Result(0.4517, 0.3)};
  absl::StatusOr<Attribution> a = Attribute(runs);
  ASSERT_TRUE(a.ok());
  double sum = 0;
  for (double d : a->delta_s) sum += d;
  EXPECT_NEAR(sum, 0.8123 - 0.4517, 1e-12);
  EXPECT_NEAR(sum + a->non_layer_s, (1 - runs[0].scaling_ratio) * 0.8123, 1e-12);
}

TEST(Attribution, NeedsSixRuns) {
  EXPECT_FALSE(Attribute(std::vector<SimResult>(5)).ok());
  EXPECT_TRUE(CumulativeCounterfactuals(3).perfect_balance);
  EXPECT_FALSE(CumulativeCounterfactuals(3).no_noise);
  EXPECT_TRUE(CumulativeCounterfactuals(5).no_recompute && CumulativeCounterfactuals(5).ideal_network);
}

// A game with one cause that never acts (contention), three additive ones and an overlap of
// communication and imbalance (0.2 that either switch alone removes): Shapley gives the dummy
// exactly 0 and splits the overlap evenly, where the ordered reruns hand it all to communication.
double OverlapGame(int mask) {
  const bool comm = (mask & 1) == 0, imbalance = (mask & 4) == 0;
  return 1.0 + (comm ? 0.3 : 0) + (imbalance ? 0.1 : 0) + ((mask & 8) == 0 ? 0.05 : 0) + ((mask & 16) == 0 ? 0.02 : 0) +
         (comm && imbalance ? 0.2 : 0);
}

TEST(Attribution, ShapleySharesSumToTheOrderedTotalAndADummyCauseGetsZero) {
  std::vector<double> t(kShapleyRuns);
  std::vector<SimResult> runs;
  for (int m = 0; m < kShapleyRuns; ++m) {
    t[static_cast<size_t>(m)] = OverlapGame(m);
    runs.push_back(Result(t[static_cast<size_t>(m)], 0.5));
  }
  absl::StatusOr<std::array<double, kLossCauses>> shares = ShapleyShares(t);
  ASSERT_TRUE(shares.ok()) << shares.status();
  EXPECT_EQ((*shares)[1], 0.0);  // exactly: every drop of the dummy is 0 - 0
  EXPECT_NEAR((*shares)[0], 0.3 + 0.1, 1e-12);
  EXPECT_NEAR((*shares)[2], 0.1 + 0.1, 1e-12);
  EXPECT_NEAR((*shares)[3], 0.05, 1e-12);
  EXPECT_NEAR((*shares)[4], 0.02, 1e-12);
  // The ordered attribution on the cumulative subsets (masks 0, 1, 3, 7, 15, 31) has the same total.
  std::vector<SimResult> cumulative;
  for (int k = 0; k <= kLossCauses; ++k) cumulative.push_back(runs[static_cast<size_t>((1 << k) - 1)]);
  absl::StatusOr<Attribution> ordered = Attribute(cumulative);
  absl::StatusOr<Attribution> shapley = AttributeShapley(runs);
  ASSERT_TRUE(ordered.ok() && shapley.ok());
  EXPECT_NEAR(ordered->delta_s[0], 0.5, 1e-12);  // the order hands the overlap to the first cause
  double sum_ordered = 0, sum_shapley = 0;
  for (int k = 0; k < kLossCauses; ++k) {
    sum_ordered += ordered->delta_s[static_cast<size_t>(k)];
    sum_shapley += shapley->delta_s[static_cast<size_t>(k)];
  }
  EXPECT_NEAR(sum_shapley, sum_ordered, 1e-12);
  EXPECT_NEAR(sum_shapley, t.front() - t.back(), 1e-12);
  EXPECT_EQ(shapley->non_layer_s, ordered->non_layer_s);
  // The non-layer line (T_ideal 1.0 - T_local 0.5) is larger than any cause's share: the biggest loss.
  EXPECT_EQ(shapley->biggest, kNonLayerLoss);
  EXPECT_STREQ(LossKey(shapley->biggest), "non_layer");
  EXPECT_FALSE(ShapleyShares(std::vector<double>(31)).ok());
  EXPECT_TRUE(MaskCounterfactuals(4).perfect_balance && !MaskCounterfactuals(4).ideal_network);
}

// ---- text formats ------------------------------------------------------------------------------

TEST(JsonText, DoublesAreShortestRoundTrip) {
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(FormatDouble(4096), "4096");
  EXPECT_EQ(FormatDouble(1e-300), "1e-300");
  for (double v : {0.1 + 0.2, 1.0 / 3.0, 123456789.125, 6.02214076e23, -2.5e-7}) {
    EXPECT_EQ(std::stod(FormatDouble(v)), v) << FormatDouble(v);
  }
  nlohmann::ordered_json j;
  j["b"] = 1.5;
  j["a"] = std::nan("");
  j["list"] = {1, 2.25, "x"};
  EXPECT_EQ(JsonText(j), "{\n  \"b\": 1.5,\n  \"a\": null,\n  \"list\": [1, 2.25, \"x\"]\n}\n");
}

TEST(RunFiles, CsvHasOneRowPerRankAndQuotesOddNames) {
  const SimResult r = Result(1.0, 0.5);
  const std::string ranks = RanksCsv(r);
  EXPECT_EQ(std::count(ranks.begin(), ranks.end(), '\n'), 5);
  EXPECT_THAT(ranks, HasSubstr("\n3,0.4,"));
  const std::string colls = CollectivesCsv(r);
  EXPECT_THAT(colls, HasSubstr("\"L1.wukong.ag, \"\"shard\"\"\",dense-shard,all_gather,ring,4,1048576,1e-04,"));
}

TEST(RunFiles, TraceIsChromeJsonWithNamedStreams) {
  const nlohmann::json trace = nlohmann::json::parse(TraceJson(Result(1.0, 0.5)));
  int x = 0;
  std::map<std::pair<int, int>, std::string> thread_names;
  double last_rank0_ts = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++x;
      EXPECT_TRUE(e.contains("pid") && e.contains("tid") && e.contains("ts") && e.contains("dur"));
      if (e["pid"] == 0 && e["tid"] == 0) last_rank0_ts = e["ts"].get<double>();
    } else if (e["name"] == "thread_name") {
      thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
    }
  }
  EXPECT_EQ(x, 3);
  EXPECT_EQ(last_rank0_ts, 0);  // microseconds
  EXPECT_EQ((thread_names[{0, 1}]), "dense-shard");
  EXPECT_EQ((thread_names[{1, 0}]), "compute");
}

// ---- a minimal XML well-formedness check (tags balance, attributes quoted, entities escaped) -----

bool WellFormedXml(const std::string& xml, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  bool root_seen = false;
  while (i < xml.size()) {
    if (xml[i] == '<') {
      const size_t end = xml.find('>', i);
      if (end == std::string::npos) return *why = "unterminated tag", false;
      std::string tag = xml.substr(i + 1, end - i - 1);
      i = end + 1;
      if (!tag.empty() && tag[0] == '/') {
        if (stack.empty() || stack.back() != tag.substr(1)) return *why = "mismatched </" + tag.substr(1) + ">", false;
        stack.pop_back();
        continue;
      }
      const bool self_closing = !tag.empty() && tag.back() == '/';
      if (self_closing) tag.pop_back();
      const std::string name = tag.substr(0, tag.find_first_of(" \n\t"));
      if (name.empty()) return *why = "empty tag", false;
      if (stack.empty() && root_seen) return *why = "two root elements", false;
      root_seen = true;
      // Attributes: name="value" with no '<' or raw '&' in values.
      size_t a = name.size();
      while (a < tag.size()) {
        while (a < tag.size() && std::isspace(static_cast<unsigned char>(tag[a]))) ++a;
        if (a >= tag.size()) break;
        const size_t eq = tag.find('=', a);
        if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"') return *why = "unquoted attribute in <" + name + ">", false;
        const size_t close = tag.find('"', eq + 2);
        if (close == std::string::npos) return *why = "unterminated attribute", false;
        const std::string value = tag.substr(eq + 2, close - eq - 2);
        if (value.find('<') != std::string::npos) return *why = "'<' in attribute", false;
        a = close + 1;
      }
      if (!self_closing) stack.push_back(name);
    } else {
      const size_t next = xml.find('<', i);
      const std::string text = xml.substr(i, next == std::string::npos ? std::string::npos : next - i);
      for (size_t k = 0; k < text.size(); ++k) {
        if (text[k] == '&') {
          const size_t semi = text.find(';', k);
          const std::string entity = semi == std::string::npos ? "" : text.substr(k, semi - k + 1);
          if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;") {
            return *why = "raw '&' in text", false;
          }
        }
      }
      if (stack.empty() && text.find_first_not_of(" \n\t") != std::string::npos) return *why = "text outside the root", false;
      i = next == std::string::npos ? xml.size() : next;
    }
  }
  if (!stack.empty()) return *why = "unclosed <" + stack.back() + ">", false;
  return root_seen;
}

TEST(XmlCheck, RejectsBrokenDocuments) {
  std::string why;
  EXPECT_TRUE(WellFormedXml("<svg a=\"1\"><g><rect/></g><text>x &amp; y</text></svg>", &why)) << why;
  EXPECT_FALSE(WellFormedXml("<svg><g></svg>", &why));
  EXPECT_FALSE(WellFormedXml("<svg><text>a & b</text></svg>", &why));
  EXPECT_FALSE(WellFormedXml("<svg a=1></svg>", &why));
}

// ---- studies with a stand-in simulator ---------------------------------------------------------

const std::string kGemDefault = std::string(GEMTB_SOURCE_DIR) + "/sim/scenarios/gem-default.json";

const ScenarioDocument& GemDefault() {
  static const ScenarioDocument* doc = [] {
    absl::StatusOr<ScenarioDocument> d = LoadScenarioDocument(kGemDefault);
    EXPECT_TRUE(d.ok()) << d.status();
    return new ScenarioDocument(d.ok() ? *d : ScenarioDocument{});
  }();
  return *doc;
}

// Closed-form step times: T = T_local (1 + imbalance + noise + recompute) + comm + contention + 0.1,
// with comm growing with log2(world) and, when the world spans zones, the oversubscription;
// imbalance with the policy.
absl::StatusOr<SimResult> StandIn(const Scenario& s, const Counterfactuals& c, const SimOptions& o) {
  const double world = s.cluster.world_size;
  const double t_local = 1.0;
  const double oversubscription = world > s.cluster.zone_size ? s.cluster.tiers.back().oversubscription : 7;
  const double comm = c.ideal_network ? 0 : 0.01 * std::log2(world) * oversubscription / 7 *
                                                 (2048.0 / std::min<double>(s.cluster.zone_size, world));
  const double contention = (c.sm_free || s.plan.collectives.library == "sm_free") ? 0 : 0.06;
  const double imbalance = s.batches.assignment.policy == "random" ? 0.15 : 0.05;
  const double noise = s.noise.step_sigma;
  const double t = t_local * (1 + (c.perfect_balance ? 0 : imbalance) + (c.no_noise ? 0 : noise) +
                              (c.no_recompute ? 0 : 0.02)) +
                   comm + contention + 0.1;
  SimResult r = Result(t, t_local);
  r.world_size = s.cluster.world_size;
  // Per-rank recompute amplifies the batches' imbalance (as the real simulator's does).
  r.imbalance = c.perfect_balance ? 0 : imbalance + (c.no_recompute ? 0 : 0.04);
  r.memory.fits = s.cluster.world_size != 128;  // one size "does not fit"
  r.memory.needed_bytes = 150e9;
  r.memory.available_bytes = 136e9;
  r.events = static_cast<uint64_t>(world) * 100;
  if (!o.trace) r.trace.clear();
  return r;
}

StudyOptions SmallSweep(int threads) {
  StudyOptions o;
  o.gpus = {64, 128, 4096};
  o.threads = threads;
  return o;
}

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  return h;
}

TEST(Study, OutputsAreByteIdenticalForAnyThreadCountExceptPerf) {
  absl::StatusOr<Study> one = RunStudy(GemDefault(), SmallSweep(1), StandIn);
  absl::StatusOr<Study> two = RunStudy(GemDefault(), SmallSweep(2), StandIn);
  absl::StatusOr<Study> again = RunStudy(GemDefault(), SmallSweep(2), StandIn);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok() && again.ok());
  const auto a = RenderReport(*one), b = RenderReport(*two), c = RenderReport(*again);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 7u);
  for (size_t f = 0; f < a.size(); ++f) {
    ASSERT_EQ(a[f].first, b[f].first);
    if (a[f].first == "perf.json") continue;
    EXPECT_EQ(Fnv1a(a[f].second), Fnv1a(b[f].second)) << a[f].first;
    EXPECT_EQ(a[f].second, c[f].second) << a[f].first;
  }
}

TEST(Study, EveryPointHasItsAttributionAndTheSweepIsInOrder) {
  absl::StatusOr<Study> study = RunStudy(GemDefault(), SmallSweep(2), StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  ASSERT_EQ(study->points.size(), 3u);
  EXPECT_EQ(study->points[0].gpus, 64);
  EXPECT_EQ(study->points[2].gpus, 4096);
  EXPECT_EQ(study->reference, 2);
  for (const SweepPoint& p : study->points) {
    ASSERT_TRUE(p.attribution.has_value());
    // gem-default is SM-free already: its contention loss is zero; noise 0.03 T_local is stragglers.
    EXPECT_EQ(p.attribution->delta_s[1], 0);
    EXPECT_NEAR(p.attribution->delta_s[3], 0.03, 1e-12);
    EXPECT_NEAR(p.attribution->delta_s[2], 0.05, 1e-12);
    EXPECT_NEAR(p.attribution->non_layer_s, 0.1, 1e-12);
  }
  const std::string csv = SweepCsv(*study);
  EXPECT_THAT(csv, HasSubstr("\n128,does_not_fit,false,1.5e+11,1.36e+11,"));
  EXPECT_THAT(ConsoleReport(*study), HasSubstr("does_not_fit: needs 150 GB, 136 GB available"));
}

TEST(Study, InvalidPointsAreReportedAndTheSweepGoesOn) {
  StudyOptions o = SmallSweep(2);
  o.gpus = {64, 72};  // 72: 2-way EP x 16-way expert FSDP = 32 does not divide it
  o.sensitivity = false;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_TRUE(study->points[0].status.ok());
  EXPECT_THAT(study->points[1].status.message(), HasSubstr("= 32 does not divide world_size 72"));
  EXPECT_THAT(SweepCsv(*study), HasSubstr("\n72,invalid: plan.dense.expert_shard_group"));
  EXPECT_EQ(study->reference, 0);
  o.gpus = {72};
  EXPECT_FALSE(RunStudy(GemDefault(), o, StandIn).ok());
}

TEST(Study, SetSweepsAPlanFieldTimesTheGpuCounts) {
  StudyOptions o;
  o.gpus = {64, 4096};
  o.sets = {{"plan.collectives.library", {"sm_based", "sm_free"}}};
  o.sensitivity = false;
  o.checks = false;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  ASSERT_EQ(study->points.size(), 4u);
  EXPECT_EQ(study->points[1].settings[0].second, "sm_based");
  EXPECT_EQ(study->points[1].gpus, 4096);
  EXPECT_NEAR(study->points[0].attribution->delta_s[1], 0.06, 1e-12);  // SM-based: contention is a loss
  EXPECT_EQ(study->points[2].attribution->delta_s[1], 0);
  EXPECT_THAT(SweepCsv(*study), HasSubstr("gpus,plan.collectives.library,status"));
}

TEST(Study, SensitivityRanksAssumptionsAndGridsTheTopTwo) {
  StudyOptions o;
  o.gpus = {4096};
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  ASSERT_EQ(study->sensitivity.size(), 12u);
  // In the stand-in, zone size and oversubscription move comm; noise moves T; the rest nothing.
  EXPECT_GT(study->sensitivity[0].swing, 0);
  EXPECT_GT(study->sensitivity[1].swing, 0);
  EXPECT_EQ(study->sensitivity[3].swing, 0);
  ASSERT_TRUE(study->grid.has_value());
  const std::vector<int> top = {study->grid->a, study->grid->b};
  EXPECT_THAT(top, ::testing::UnorderedElementsAre(0, 1));  // zone size and oversubscription swing most
  EXPECT_EQ(study->grid->scaling_ratio[1][1], study->points[0].base->scaling_ratio);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_TRUE(study->grid->ok[i][j]);
  }
  // The grid's edges are the one-at-a-time cases.
  const SensitivityRow& ra = study->sensitivity[static_cast<size_t>(study->grid->a)];
  EXPECT_EQ(study->grid->scaling_ratio[0][1], ra.low.scaling_ratio);
  EXPECT_EQ(study->grid->scaling_ratio[2][1], ra.high.scaling_ratio);
}

TEST(Study, GridShowsLowAndHighOnlyWhereTheyDifferFromTheScenariosValue) {
  // No hot-id skew is both the scenario's value and the low case: its row would repeat the centre.
  EXPECT_THAT(SensitivityGrid::Shown({0, 0, 1.05}), ::testing::ElementsAre(1, 2));
  EXPECT_THAT(SensitivityGrid::Shown({25, 50, 100}), ::testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(SensitivityGrid::Shown({1, 2, 2}), ::testing::ElementsAre(0, 1));
}

TEST(Study, ChecksCompareRandomWithBbsAndSmBasedWithSmFree) {
  StudyOptions o;
  o.gpus = {4096};
  o.sensitivity = false;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  ASSERT_TRUE(study->checks.has_value());
  EXPECT_EQ(study->checks->imbalance_random, 0.15);
  EXPECT_EQ(study->checks->imbalance_bbs, 0.05);
  // The verdict lines read the batches alone (recompute off); the recompute variants sit beside them.
  EXPECT_EQ(study->checks->imbalance_random_recompute, 0.15 + 0.04);
  EXPECT_EQ(study->checks->imbalance_bbs_recompute, 0.05 + 0.04);
  EXPECT_NEAR(study->checks->step_sm_based_s - study->checks->step_sm_free_s, 0.06, 1e-12);
  EXPECT_THAT(ConsoleReport(*study), HasSubstr("random assignment: 15%"));
}

// The lever table: each of the article's levers switched off alone at the reference size, as the
// scenario runs; the stand-in makes random batches cost 0.10 and SM-based collectives 0.06 of T.
TEST(Study, LeverTableSwitchesEachLeverOffAlone) {
  StudyOptions o;
  o.gpus = {64, 4096};
  o.sensitivity = false;
  o.checks = false;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  ASSERT_TRUE(study->levers.has_value());
  const LeverTable& t = *study->levers;
  EXPECT_EQ(t.gpus, 4096);
  ASSERT_EQ(t.rows.size(), 7u);
  const double base = t.base_step_s;
  for (const LeverRow& row : t.rows) {
    ASSERT_TRUE(row.status.ok()) << row.lever.name << ": " << row.status;
    EXPECT_FALSE(row.lever.published.empty()) << row.lever.name;
    if (row.lever.name == "BBS -> random batches") {
      EXPECT_NEAR(row.step_s - base, 0.10, 1e-12);
    } else if (row.lever.name == "SM-free -> SM-based collectives") {
      EXPECT_NEAR(row.step_s - base, 0.06, 1e-12);
    } else {
      EXPECT_EQ(row.step_s, base) << row.lever.name;  // the stand-in ignores the other fields
    }
    EXPECT_NEAR(row.qps_gain, row.step_s / base - 1, 1e-15);
  }
  // 1D FSDP and V1 take the world as their group.
  EXPECT_EQ(t.rows[0].lever.settings[0].second, "4096");
  EXPECT_EQ(t.rows[2].lever.settings[1], std::make_pair(std::string("plan.sparse.mp_group"), std::string("4096")));
  const std::string report = ConsoleReport(*study);
  EXPECT_THAT(report, HasSubstr("levers of the GEM article at 4096 GPUs"));
  EXPECT_THAT(report, HasSubstr("+4% QPS and -4% peak memory"));
  EXPECT_THAT(JsonText(SummaryJson(*study)), HasSubstr("\"lever_off\": \"FP8 -> bf16 saved activations\""));
}

// Runs that cannot differ run once (no redundant reruns). At 4,096 GPUs on gem-default
// (SM-free, BBS, noise on, zone 2,048): 6 attribution runs (the SM-free one, every kappa 0, differs
// from the SM-free plan: the copy engine's kappa is 0.06) = 6; 14 sensitivity cases less the
// pipeline's high case (sparse_ahead 1, the baseline) = 13; checks random and BBS with recompute off,
// random, BBS and SM-based (SM-free is the baseline) less BBS without noise = "noise low" (sigma 0) =
// 4; grid 8 cells less the 4 one-at-a-time edges less (oversubscription low/high, zone 4,096): one
// zone, the cross-zone tier unused, = the zone-high case = 2; the lever table's 7 less SM-based (the
// check's run) = 6; the four added assumptions' 8 cases less hot-id skew low (0, the baseline's
// value) and the SM-based kappa's low and high (no SM-based collective runs on an SM-free plan) = 5;
// the sparse layout's low and high (F = 4 and 16 against the baseline's 8) = 2. Total 38.
TEST(Study, RunsThatCannotDifferRunOnce) {
  std::atomic<int> calls{0};
  const SimulateFn counting = [&](const Scenario& s, const Counterfactuals& c, const SimOptions& o) {
    ++calls;
    return StandIn(s, c, o);
  };
  StudyOptions o;
  o.gpus = {4096};
  o.threads = 2;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, counting);
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_EQ(calls.load(), 38);
  EXPECT_EQ(study->perf.size(), 38u);
  ASSERT_TRUE(study->grid.has_value() && study->checks.has_value());
  // zone size (row 0) and oversubscription (row 1) span the grid, in either order.
  const int zone = study->grid->a == 0 ? 0 : 1;
  const SensitivityRow& zone_row = study->sensitivity[0];
  for (int k = 0; k < 3; ++k) {
    // Zone 4,096 = the whole world: every oversubscription gives the zone-high case.
    const double cell = zone == 0 ? study->grid->scaling_ratio[2][k] : study->grid->scaling_ratio[k][2];
    EXPECT_EQ(cell, zone_row.high.scaling_ratio) << k;
  }
  // Zone 1,024 spans zones: oversubscription matters there.
  const double low_low = study->grid->scaling_ratio[0][0], low_high = zone == 0 ? study->grid->scaling_ratio[0][2]
                                                                               : study->grid->scaling_ratio[2][0];
  EXPECT_NE(low_low, low_high);
  // Noise low (sigma 0) shares the BBS check's run: the same T as the no-noise switch.
  const SensitivityRow& noise = study->sensitivity[11];
  EXPECT_NEAR(noise.low.step_s, 1.0 * (1 + 0.05 + 0.02) + 0.01 * 12 + 0.1, 1e-12);
}

// --shapley through a study: each point's shares sum to its ordered total; all 32 subsets differ (the
// SM-free switch sets the copy engine's kappa of the SM-free gem-default to 0).
TEST(Study, ShapleyPerPointSumsToTheOrderedTotal) {
  std::atomic<int> calls{0};
  const SimulateFn counting = [&](const Scenario& s, const Counterfactuals& c, const SimOptions& o) {
    ++calls;
    return StandIn(s, c, o);
  };
  StudyOptions o;
  o.gpus = {64, 4096};
  o.shapley = true;
  o.sensitivity = false;
  o.checks = false;
  o.levers = false;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, counting);
  ASSERT_TRUE(study.ok()) << study.status();
  EXPECT_EQ(calls.load(), 2 * 32);  // 2^5 subsets per point: the SM-free switch acts (copy engine kappa 0.06)
  for (const SweepPoint& p : study->points) {
    ASSERT_TRUE(p.attribution.has_value() && p.shapley.has_value()) << p.gpus;
    double ordered = 0, shapley = 0;
    for (int k = 0; k < kLossCauses; ++k) {
      ordered += p.attribution->delta_s[static_cast<size_t>(k)];
      shapley += p.shapley->delta_s[static_cast<size_t>(k)];
    }
    EXPECT_NEAR(shapley, ordered, 1e-12) << p.gpus;
  }
  EXPECT_THAT(ConsoleReport(*study), HasSubstr("loss split order-free (Shapley"));
  EXPECT_THAT(SweepCsv(*study), HasSubstr(",shapley_recompute_s\n"));
  const nlohmann::json summary = nlohmann::json::parse(SummaryJson(*study).dump());
  EXPECT_TRUE(summary.at("reference").contains("shapley"));
  EXPECT_TRUE(summary.at("sweep")[0].contains("shapley_losses_s"));
}

TEST(Study, SvgIsWellFormedXmlAndEscapesNames) {
  StudyOptions o = SmallSweep(2);
  o.sensitivity = false;
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok()) << study.status();
  study->scenario = "R&D <test>";
  const std::string svg = SweepSvg(*study);
  std::string why;
  EXPECT_TRUE(WellFormedXml(svg, &why)) << why;
  EXPECT_THAT(svg, HasSubstr("R&amp;D &lt;test&gt;"));
  EXPECT_THAT(svg, HasSubstr("<polyline"));
  EXPECT_EQ(svg.rfind("<svg", 100), svg.find("<svg"));
}

TEST(Study, SummaryJsonParsesAndHoldsTheReferenceInFull) {
  StudyOptions o = SmallSweep(2);
  o.published_targets = true;  // as gemtb whatif runs the default scenario
  absl::StatusOr<Study> study = RunStudy(GemDefault(), o, StandIn);
  ASSERT_TRUE(study.ok());
  const nlohmann::json summary = nlohmann::json::parse(JsonText(SummaryJson(*study)));
  EXPECT_EQ(summary["scenario"], "gem-default");
  EXPECT_EQ(summary["reference"]["gpus"], 4096);
  EXPECT_TRUE(summary["reference"].contains("attribution"));
  EXPECT_EQ(summary["reference"]["attribution"]["losses"].size(), 5u);
  EXPECT_EQ(summary["sweep"].size(), 3u);
  EXPECT_EQ(summary["assumptions"].size(), 12u);
  EXPECT_EQ(summary["sensitivity"]["one_at_a_time"].size(), 12u);
  EXPECT_TRUE(summary["checks"]["bbs_halves_excess"].get<bool>());
  EXPECT_EQ(summary["levers"]["rows"].size(), 7u);
  EXPECT_TRUE(summary["definitions"].contains("local_mfu"));
  // A user's own scenario gets its numbers, no verdicts against the article's figures.
  absl::StatusOr<Study> own = RunStudy(GemDefault(), SmallSweep(2), StandIn);
  ASSERT_TRUE(own.ok());
  const nlohmann::json own_summary = nlohmann::json::parse(JsonText(SummaryJson(*own)));
  EXPECT_TRUE(own_summary["checks"].contains("imbalance_random"));
  EXPECT_FALSE(own_summary["checks"].contains("bbs_halves_excess"));
  EXPECT_THAT(ConsoleReport(*own), Not(HasSubstr("within 10-20%")));
  EXPECT_THAT(ConsoleReport(*study), HasSubstr("within 10-20%"));
}

}  // namespace
}  // namespace gemtb::sim::report
