// The GPU trainer as ranks of a job (trainer.h, TrainerCollectives), on one GPU:
// - a one-rank NCCL job (NcclTrainerCollectives over a real TCP store) takes the one-GPU trainer's
//   steps byte for byte (every collective of one rank is a copy);
// - virtual ranks in one process (in_process_collectives.h, sums in rank order): 2D FSDP with a shard
//   group of 2 equals plain data parallelism (shard group 1) byte for byte on 2 ranks, as shard groups
//   4 and 1 do on 4 ranks (the same sums in the same order), and every rank ends with the same state;
// - a job's steps follow the one-GPU trainer's on the same global batch within a reduction's rounding
//   (losses, dense parameters and tables after the steps), with contiguous, BBS and least-load batch
//   splits alike, with the tables sharded by a TW/RW/CW plan, and with two Wukong experts run
//   expert-parallel.
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu/embedding/shard_routing.h"
#include "gpu/train/trainer.h"
#include "reference/model/trainer.h"
#include "model/description/gem_geometry.h"
#include "gtest/gtest.h"
#include "model/description/model_config.h"
#include "tests/gpu/in_process_collectives.h"
#include "tests/gpu/train_test_util.h"
#if defined(GEMTB_HAVE_NCCL_COMM)
#include "gpu/comm/nccl_trainer_collectives.h"
#include "model/launch/tcp_store.h"
#endif

namespace gemtb::gpu::train {
namespace {

JobOptions SplitJob(data::RankSplit split, int64_t sub_batch) {
  JobOptions job;
  job.split = split;
  job.sub_batch = sub_batch;
  return job;
}

using test::HaveSm90;

constexpr int64_t kGlobalBatch = 32;
constexpr int kSteps = 3;

gemtb::model::ModelConfig TinyConfig() {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

TrainerOptions Options(gemtb::model::SparsePipeline pipeline = gemtb::model::SparsePipeline::kSync) {
  TrainerOptions o;
  o.batch = kGlobalBatch;
  o.pipeline = pipeline;
  return o;
}

struct RankRun {
  std::vector<double> losses;
  TrainerState state;
  std::vector<CollectiveTime> last_collectives;  // a job's last step's
  std::optional<TrainerRankState> rank_state;     // JobModel::rank_states: the rank's checkpoint part
};

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSameBytes(const RankRun& a, const RankRun& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  EXPECT_TRUE(SameBytes(a.state.params, b.state.params)) << what << ": params";
  EXPECT_TRUE(SameBytes(a.state.adam_m, b.state.adam_m)) << what << ": adam m";
  EXPECT_TRUE(SameBytes(a.state.adam_v, b.state.adam_v)) << what << ": adam v";
  ASSERT_EQ(a.state.tables.size(), b.state.tables.size());
  for (size_t t = 0; t < a.state.tables.size(); ++t) {
    EXPECT_TRUE(SameBytes(a.state.tables[t].weights, b.state.tables[t].weights)) << what << ": table " << t;
    EXPECT_TRUE(SameBytes(a.state.tables[t].adagrad, b.state.tables[t].adagrad)) << what << ": table " << t;
  }
}

// At most one element in a thousand outside |a - b| <= 1e-5 + 1e-4 |b| (Adam's first steps move a
// parameter by about lr times the sign of its gradient, which a gradient at rounding level can flip).
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t outside = 0, worst = 0;
  double worst_excess = 0;  // |a - b| over its bound, the largest
  for (size_t k = 0; k < a.size(); ++k) {
    const double bound = 1e-5 + 1e-4 * std::fabs(b[k]), excess = std::fabs(a[k] - b[k]) / bound;
    if (!(excess <= 1)) ++outside;
    if (excess > worst_excess) worst_excess = excess, worst = k;
  }
  EXPECT_LE(outside, std::max<size_t>(1, a.size() / 1000))
      << what << ": " << outside << " of " << a.size() << "; worst element " << worst << ": " << a[worst] << " vs "
      << b[worst] << ", " << worst_excess << " times its bound";
}

RankRun OneGpu(const TrainerOptions& options = Options(), const gemtb::model::ModelConfig& config = TinyConfig()) {
  RankRun run;
  absl::StatusOr<std::unique_ptr<GpuTrainer>> t = GpuTrainer::Create(config, options);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return run;
  for (int s = 0; s < kSteps; ++s) {
    absl::StatusOr<TrainerStep> r = (*t)->Step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return run;
    run.losses.push_back(r->loss);
  }
  absl::StatusOr<TrainerState> st = (*t)->State();
  EXPECT_TRUE(st.ok()) << st.status();
  if (st.ok()) run.state = *std::move(st);
  return run;
}

// What a virtual job runs beyond its shard group: EP groups of `expert_degree` ranks and the model.
struct JobModel {
  int expert_degree = 1;
  int expert_shard_group = 1;
  gemtb::model::ModelConfig config = TinyConfig();
  int64_t* expert_collectives = nullptr;  // set: the EP collectives the job ran
  bool rank_states = false;               // also every rank's RankState after the steps
};

// R virtual ranks with a shard group of `shard_group`; every rank's run.
std::vector<RankRun> InProcessJob(int R, int shard_group, const JobOptions& split = {},
                                  const TrainerOptions& options = Options(), const JobModel& model = {}) {
  test::InProcessJob job(R, shard_group, model.expert_degree, model.expert_shard_group);
  std::vector<std::unique_ptr<test::InProcessCollectives>> collectives;
  std::vector<std::unique_ptr<GpuTrainer>> trainers;
  for (int r = 0; r < R; ++r) {
    collectives.push_back(std::make_unique<test::InProcessCollectives>(job, r));
    absl::StatusOr<std::unique_ptr<GpuTrainer>> t =
        GpuTrainer::Create(model.config, options, {}, collectives[r].get(), split);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return {};
    trainers.push_back(*std::move(t));
  }
  std::vector<RankRun> runs(R);
  std::vector<std::string> errors(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      for (int s = 0; s < kSteps; ++s) {
        absl::StatusOr<TrainerStep> step = trainers[r]->Step();
        if (!step.ok()) {
          errors[r] = step.status().ToString();
          std::abort();  // the other ranks would wait at the barrier forever
        }
        runs[r].losses.push_back(step->loss);
        runs[r].last_collectives = step->collectives;
      }
      absl::StatusOr<TrainerState> st = trainers[r]->State();
      if (!st.ok()) {
        errors[r] = st.status().ToString();
        std::abort();
      }
      runs[r].state = *std::move(st);
      if (model.rank_states) {
        absl::StatusOr<TrainerRankState> rs = trainers[r]->RankState();
        if (!rs.ok()) {
          errors[r] = rs.status().ToString();
          std::abort();
        }
        runs[r].rank_state = *std::move(rs);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < R; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  if (model.expert_collectives) *model.expert_collectives = job.expert_collectives.load();
  return runs;
}

TEST(GpuTrainJob, ShardGroupsThatAddTheSameTermsGiveTheSameBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const std::vector<RankRun> dp2 = InProcessJob(2, 1), fsdp2 = InProcessJob(2, 2);
  ASSERT_EQ(dp2.size(), 2u);
  ASSERT_EQ(fsdp2.size(), 2u);
  ExpectSameBytes(fsdp2[0], dp2[0], "2 ranks: shard group 2 vs 1");
  ExpectSameBytes(fsdp2[1], fsdp2[0], "2 ranks, shard group 2: rank 1 vs rank 0");
  ExpectSameBytes(dp2[1], dp2[0], "2 ranks, shard group 1: rank 1 vs rank 0");
  const std::vector<RankRun> dp4 = InProcessJob(4, 1), fsdp4 = InProcessJob(4, 4), grid4 = InProcessJob(4, 2);
  ASSERT_EQ(dp4.size(), 4u);
  ASSERT_EQ(fsdp4.size(), 4u);
  ASSERT_EQ(grid4.size(), 4u);
  ExpectSameBytes(fsdp4[0], dp4[0], "4 ranks: shard group 4 vs 1");
  for (int r = 1; r < 4; ++r) ExpectSameBytes(grid4[r], grid4[0], "4 ranks, shard group 2: rank " + std::to_string(r));
  // (g0 + g1) + (g2 + g3) against ((g0 + g1) + g2) + g3: a reduction's rounding apart.
  ExpectClose(grid4[0].state.params, dp4[0].state.params, "4 ranks: shard group 2 vs 1");
}

// Parameters gathered and gradients reduce-scattered unit by unit (JobOptions::param_prefetch) are
// the same arrays and sums: the whole collectives' bytes, on 2 and 4 ranks.
TEST(GpuTrainJob, PrefetchedUnitsGiveTheWholeGathersBytes) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  JobOptions prefetch;
  prefetch.param_prefetch = true;
  for (const auto& [R, s] : {std::pair{2, 2}, std::pair{4, 2}}) {
    const std::string what = std::to_string(R) + " ranks, shard group " + std::to_string(s) + ", units prefetched";
    const std::vector<RankRun> whole = InProcessJob(R, s), units = InProcessJob(R, s, prefetch);
    ASSERT_EQ(units.size(), static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) ExpectSameBytes(units[r], whole[r], what + ": rank " + std::to_string(r));
  }
}

TEST(GpuTrainJob, JobFollowsTheOneGpuTrainerOnTheSameGlobalBatch) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const RankRun one = OneGpu();
  for (const auto& [R, s] : {std::pair{2, 2}, std::pair{4, 2}}) {
    const std::string what = std::to_string(R) + " ranks, shard group " + std::to_string(s);
    const std::vector<RankRun> job = InProcessJob(R, s);
    ASSERT_EQ(job.size(), static_cast<size_t>(R));
    ASSERT_EQ(job[0].losses.size(), one.losses.size());
    for (size_t k = 0; k < one.losses.size(); ++k) {
      EXPECT_NEAR(job[0].losses[k], one.losses[k], 1e-5 * std::fabs(one.losses[k])) << what << " step " << k;
    }
    ExpectClose(job[0].state.params, one.state.params, what + ": params");
    ASSERT_EQ(job[0].state.tables.size(), one.state.tables.size());
    for (size_t t = 0; t < one.state.tables.size(); ++t) {
      ExpectClose(job[0].state.tables[t].weights, one.state.tables[t].weights, what + ": table " + std::to_string(t));
    }
  }
}

// Expert parallelism: tiny with two Wukong experts, each member of an EP group of 2 running one of
// them on both members' samples (activations all-gathered, outputs reduce-scattered), each expert's
// parameters on the ranks that run it (sharded over S_E of them, summed over the others), on 2
// ranks and on 4 (two EP groups, shard groups of 2, S_E of 1 and 2), follows the one GPU running
// both experts; the ranks end with the same state, and the checkpoint parts of shard group 0 are
// that state's; per-unit gathers give the same bytes; under the semi-synchronous pipeline it follows
// the one GPU's semi-synchronous steps. The EP collectives must have run (a job that ran every expert everywhere would
// pass the comparison too).
TEST(GpuTrainJob, ExpertParallelJobFollowsTheOneGpuTrainer) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  gemtb::model::ModelConfig two = TinyConfig();
  two.arch.wukong.experts.count = 2;
  const RankRun one = OneGpu(Options(), two);
  for (const auto& [R, se] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{4, 2}}) {
    const std::string what = std::to_string(R) + " ranks, 2 experts, EP degree 2, S_E " + std::to_string(se);
    int64_t calls = 0;
    const std::vector<RankRun> job = InProcessJob(R, 2, {}, Options(), JobModel{2, se, two, &calls, true});
    ASSERT_EQ(job.size(), static_cast<size_t>(R));
    // Per step and Wukong layer: 2 forward and 2 backward collectives on each rank; then State() and
    // RankState() each gather the experts' parameters, Adam m and v over the EP group (3 each).
    const int64_t layers = two.arch.layers;
    EXPECT_EQ(calls, int64_t{R} * (kSteps * layers * 4 + 2 * 3)) << what;
    // The step reports them as exposed collectives of the ep group class inside the model.
    int64_t gathers = 0, scatters = 0;
    for (const CollectiveTime& c : job[0].last_collectives) {
      if (c.group != "ep") continue;
      EXPECT_EQ(c.place, CollectivePlace::kInModel) << what << ": " << c.name;
      gathers += c.name == "experts.all_gather";
      scatters += c.name == "experts.reduce_scatter";
    }
    EXPECT_EQ(gathers, 2 * layers) << what;
    EXPECT_EQ(scatters, 2 * layers) << what;
    // The experts' parameters in their own groups, once a step each.
    for (const auto& [name, group] : {std::pair{"expert_params.all_gather", "expert-shard"},
                                      {"expert_grads.reduce_scatter", "expert-shard"},
                                      {"expert_grads.all_reduce", "dense-replica"}}) {
      int64_t n = 0;
      for (const CollectiveTime& c : job[0].last_collectives) n += c.name == name && c.group == group;
      EXPECT_EQ(n, 1) << what << ": " << name;
    }
    // Shard group 0's checkpoint parts, in order, are the whole state.
    std::vector<float> params, m, v;
    for (int r = 0; r < 2; ++r) {
      const TrainerRankState& rs = *job[static_cast<size_t>(r)].rank_state;
      ASSERT_EQ(rs.dense_part, r) << what;
      EXPECT_EQ(rs.dense_first, static_cast<int64_t>(params.size())) << what;
      params.insert(params.end(), rs.params.begin(), rs.params.end());
      m.insert(m.end(), rs.adam_m.begin(), rs.adam_m.end());
      v.insert(v.end(), rs.adam_v.begin(), rs.adam_v.end());
    }
    for (int r = 2; r < R; ++r) EXPECT_EQ(job[static_cast<size_t>(r)].rank_state->dense_part, -1) << what;
    EXPECT_TRUE(SameBytes(params, job[0].state.params)) << what << ": checkpoint params";
    EXPECT_TRUE(SameBytes(m, job[0].state.adam_m)) << what << ": checkpoint adam m";
    EXPECT_TRUE(SameBytes(v, job[0].state.adam_v)) << what << ": checkpoint adam v";
    // Unit by unit (the packed dense array's units, the experts' parameters whole ahead of them): the
    // same sums, the same bytes.
    JobOptions prefetch;
    prefetch.param_prefetch = true;
    const std::vector<RankRun> units = InProcessJob(R, 2, prefetch, Options(), JobModel{2, se, two});
    ASSERT_EQ(units.size(), static_cast<size_t>(R));
    for (int r = 0; r < R; ++r)
      ExpectSameBytes(units[static_cast<size_t>(r)], job[static_cast<size_t>(r)], what + ", units prefetched: rank " + std::to_string(r));
    for (size_t k = 0; k < one.losses.size(); ++k) {
      EXPECT_NEAR(job[0].losses[k], one.losses[k], 1e-5 * std::fabs(one.losses[k])) << what << " step " << k;
    }
    ExpectClose(job[0].state.params, one.state.params, what + ": params");
    for (size_t t = 0; t < one.state.tables.size(); ++t) {
      ExpectClose(job[0].state.tables[t].weights, one.state.tables[t].weights, what + ": table " + std::to_string(t));
    }
    for (int r = 1; r < R; ++r) ExpectSameBytes(job[static_cast<size_t>(r)], job[0], what + ": rank " + std::to_string(r));
  }
  // Under the semi-synchronous pipeline (the exchanges on the model's stream beside the next
  // lookups): the one GPU's semi-synchronous steps.
  const TrainerOptions semi = Options(gemtb::model::SparsePipeline::kSemiSync);
  const RankRun one_semi = OneGpu(semi, two);
  const std::vector<RankRun> job = InProcessJob(2, 2, {}, semi, JobModel{2, 1, two});
  ASSERT_EQ(job.size(), 2u);
  for (size_t k = 0; k < one_semi.losses.size(); ++k) {
    EXPECT_NEAR(job[0].losses[k], one_semi.losses[k], 1e-5 * std::fabs(one_semi.losses[k]))
        << "semi-sync, EP, step " << k;
  }
  ExpectClose(job[0].state.params, one_semi.state.params, "semi-sync, EP: params");
  ExpectSameBytes(job[1], job[0], "semi-sync, EP: rank 1 vs rank 0");
}

// The semi-synchronous pipeline in a job: each rank looks ahead at its own samples, and the steps
// are the one GPU's semi-synchronous ones (not its synchronous ones: the test is not vacuous).
TEST(GpuTrainJob, SemiSyncJobFollowsTheOneGpuSemiSyncTrainer) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const TrainerOptions semi = Options(gemtb::model::SparsePipeline::kSemiSync);
  const RankRun one = OneGpu(semi), sync = OneGpu();
  const std::vector<RankRun> job = InProcessJob(2, 2, {}, semi);
  ASSERT_EQ(job.size(), 2u);
  ASSERT_EQ(job[0].losses.size(), one.losses.size());
  for (size_t k = 0; k < one.losses.size(); ++k) {
    EXPECT_NEAR(job[0].losses[k], one.losses[k], 1e-5 * std::fabs(one.losses[k])) << "step " << k;
  }
  EXPECT_NE(one.losses.back(), sync.losses.back());
  ExpectClose(job[0].state.params, one.state.params, "semi-sync, 2 ranks: params");
  for (size_t t = 0; t < one.state.tables.size(); ++t) {
    ExpectClose(job[0].state.tables[t].weights, one.state.tables[t].weights, "semi-sync: table " + std::to_string(t));
  }
  ExpectSameBytes(job[1], job[0], "semi-sync: rank 1 vs rank 0");
}

// Sub-batches of 4 dealt by BBS or by least load: the ranks' samples change, the step's do not.
TEST(GpuTrainJob, BalancedSplitsFollowTheOneGpuTrainer) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const RankRun one = OneGpu();
  for (const data::RankSplit split : {data::RankSplit::kBbs, data::RankSplit::kBalance}) {
    const std::string what = std::string("4 ranks, ") + data::RankSplitName(split);
    const std::vector<RankRun> job = InProcessJob(4, 2, SplitJob(split, 4));
    ASSERT_EQ(job.size(), 4u);
    for (size_t k = 0; k < one.losses.size(); ++k) {
      EXPECT_NEAR(job[0].losses[k], one.losses[k], 1e-5 * std::fabs(one.losses[k])) << what << " step " << k;
    }
    ExpectClose(job[0].state.params, one.state.params, what + ": params");
    for (size_t t = 0; t < one.state.tables.size(); ++t) {
      ExpectClose(job[0].state.tables[t].weights, one.state.tables[t].weights, what + ": table " + std::to_string(t));
    }
    for (int r = 1; r < 4; ++r) ExpectSameBytes(job[r], job[0], what + ": rank " + std::to_string(r));
  }
}

// The tiny config's tables under a 1D plan: TW, RW and CW (shared Adagrad state) by turns.
ShardingPlanSpec MixedPlan() {
  ShardingPlanSpec plan;
  const gemtb::model::ModelConfig config = TinyConfig();
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(config, Options().table_lr, Options().seed);
  for (size_t t = 0; t < emb.tables.size(); ++t) {
    TableSharding ts;
    ts.type = t % 3 == 0 ? ShardingType::kTableWise : t % 3 == 1 ? ShardingType::kRowWise : ShardingType::kColumnWise;
    if (ts.type == ShardingType::kColumnWise) ts.shards = 2;
    plan.tables.push_back(ts);
  }
  return plan;
}

// Replica 0's shards put back into whole tables (weights only).
std::vector<std::vector<float>> WholeTables(const std::vector<RankRun>& job, const ShardingPlanSpec& plan, int R) {
  const EmbeddingConfig emb = gemtb::model::GemEmbeddingConfig(TinyConfig(), Options().table_lr, Options().seed);
  std::vector<std::vector<float>> whole;
  for (const TableConfig& tc : emb.tables) whole.emplace_back(static_cast<size_t>(tc.rows * tc.dim), std::nanf(""));
  const int n = R / MpGroupSize(plan, R);
  for (int r = 0; r < R; r += n) {
    absl::StatusOr<embedding::ShardRouting> routing =
        embedding::ShardRouting::Create(emb, plan, R, 8, r / n, kGlobalBatch / R);
    EXPECT_TRUE(routing.ok()) << routing.status();
    if (!routing.ok()) return whole;
    for (size_t i = 0; i < routing->held().size(); ++i) {
      const Shard& s = routing->layout().shards[static_cast<size_t>(routing->held()[i].shard)];
      const int64_t dim = emb.tables[static_cast<size_t>(s.table)].dim;
      for (int64_t row = 0; row < s.rows(); ++row) {
        for (int64_t c = 0; c < s.cols(); ++c) {
          whole[static_cast<size_t>(s.table)][static_cast<size_t>((s.row_begin + row) * dim + s.col_begin + c)] =
              job[static_cast<size_t>(r)].state.table_shards[i].weights[static_cast<size_t>(row * s.cols() + c)];
        }
      }
    }
  }
  return whole;
}

// The oracle's trainer with its tables sharded by `plan` over R virtual ranks (its sharded
// executor): losses per step, the dense parameters and replica 0's tables.
RankRun OracleSharded(const ShardingPlanSpec& plan, int R, const TrainerOptions& options = Options()) {
  RankRun run;
  reference::model::TrainOptions o;
  static_cast<gemtb::model::TrainOptions&>(o) = options;
  absl::StatusOr<std::unique_ptr<reference::model::Trainer>> t = reference::model::Trainer::Create(TinyConfig(), o);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return run;
  EXPECT_TRUE((*t)->UseShardedTables(plan, R, 8, nullptr).ok());
  for (int s = 0; s < kSteps; ++s) {
    absl::StatusOr<reference::model::StepResult> r = (*t)->Step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return run;
    run.losses.push_back(r->loss);
  }
  EXPECT_TRUE((*t)->GatherTables().ok());
  run.state.params = (*t)->state().params;
  for (const reference::TableState& ts : (*t)->state().tables.tables) {
    embedding::HostTable h;
    h.weights = ts.weights;
    h.adagrad = ts.adagrad;
    run.state.tables.push_back(std::move(h));
  }
  return run;
}

// Sharded tables (1D, and fully sharded 2D on 4 ranks): each rank's ids go to the shards' holders,
// which sum a row's gradient per source rank's samples first; every rank sees the same loss, and
// the shards together cover every table. 1D plans follow the one-GPU trainer within a reduction's
// rounding. Fully sharded 2D is not one model (each replica group updates its copy of the rows with
// its own samples' gradients, and the copies are averaged): it follows the oracle's trainer sharded
// by the same plan over the same ranks.
TEST(GpuTrainJob, ShardedTablesFollowTheOneGpuTrainer) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const RankRun one = OneGpu();
  for (const auto& [R, v3] : {std::pair{2, false}, std::pair{4, false}, std::pair{4, true}}) {
    const std::string what = std::to_string(R) + " ranks, TW/RW/CW tables" + (v3 ? ", fully sharded 2D (M = 2)" : "");
    JobOptions options;
    options.sparse_plan = MixedPlan();
    if (v3) {
      options.sparse_plan->mp_group = 2;
      options.sparse_plan->fully_sharded = true;
    }
    const RankRun want = v3 ? OracleSharded(*options.sparse_plan, R) : one;
    const std::vector<RankRun> job = InProcessJob(R, 2, options);
    ASSERT_EQ(job.size(), static_cast<size_t>(R));
    ASSERT_EQ(want.losses.size(), one.losses.size()) << what;
    for (size_t k = 0; k < want.losses.size(); ++k) {
      EXPECT_NEAR(job[0].losses[k], want.losses[k], 1e-5 * std::fabs(want.losses[k])) << what << " step " << k;
      for (int r = 1; r < R; ++r) EXPECT_EQ(job[static_cast<size_t>(r)].losses[k], job[0].losses[k]) << what;
    }
    ExpectClose(job[0].state.params, want.state.params, what + ": params");
    EXPECT_TRUE(job[0].state.tables.empty()) << what << ": a rank of sharded tables holds its shards only";
    const std::vector<std::vector<float>> whole = WholeTables(job, *options.sparse_plan, R);
    for (size_t t = 0; t < want.state.tables.size(); ++t) {
      ExpectClose(whole[t], want.state.tables[t].weights, what + ": table " + std::to_string(t));
    }
  }
  // Not vacuous: the fully sharded replicas' mean is not the one-GPU trainer's step.
  JobOptions v3;
  v3.sparse_plan = MixedPlan();
  v3.sparse_plan->mp_group = 2;
  v3.sparse_plan->fully_sharded = true;
  EXPECT_NE(OracleSharded(*v3.sparse_plan, 4).losses.back(), one.losses.back());
}

// The semi-synchronous pipeline with sharded tables: the next batch's exchanges and lookups run
// beside the model while this batch's stay aside in the module for its backward; the steps follow
// the oracle's semi-synchronous trainer sharded by the same plan.
TEST(GpuTrainJob, SemiSyncShardedTablesFollowTheOraclesSemiSyncTrainer) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  const TrainerOptions semi = Options(gemtb::model::SparsePipeline::kSemiSync);
  JobOptions options;
  options.sparse_plan = MixedPlan();
  const RankRun want = OracleSharded(*options.sparse_plan, 2, semi);
  std::vector<RankRun> job = InProcessJob(2, 2, options, semi);
  ASSERT_EQ(job.size(), 2u);
  ASSERT_EQ(job[0].losses.size(), want.losses.size());
  for (size_t k = 0; k < want.losses.size(); ++k) {
    EXPECT_NEAR(job[0].losses[k], want.losses[k], 1e-5 * std::fabs(want.losses[k])) << "step " << k;
    EXPECT_EQ(job[1].losses[k], job[0].losses[k]);
  }
  EXPECT_NE(want.losses.back(), OracleSharded(*options.sparse_plan, 2).losses.back());  // not the synchronous run
  ExpectClose(job[0].state.params, want.state.params, "semi-sync sharded: params");
  const std::vector<std::vector<float>> whole = WholeTables(job, *options.sparse_plan, 2);
  for (size_t t = 0; t < want.state.tables.size(); ++t) {
    ExpectClose(whole[t], want.state.tables[t].weights, "semi-sync sharded: table " + std::to_string(t));
  }
  JobOptions v3 = options;
  v3.sparse_plan->mp_group = 2;
  v3.sparse_plan->fully_sharded = true;
  test::InProcessJob refused(4, 2);
  test::InProcessCollectives c(refused, 0);
  EXPECT_EQ(GpuTrainer::Create(TinyConfig(), semi, {}, &c, v3).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GpuTrainJob, RefusesABatchThatDoesNotSplit) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  test::InProcessJob job(3, 1);
  test::InProcessCollectives c(job, 0);
  absl::StatusOr<std::unique_ptr<GpuTrainer>> t = GpuTrainer::Create(TinyConfig(), Options(), {}, &c);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("batch: 32"), std::string::npos) << t.status();
  test::InProcessJob two(2, 1);
  test::InProcessCollectives c2(two, 0);
  absl::StatusOr<std::unique_ptr<GpuTrainer>> u =
      GpuTrainer::Create(TinyConfig(), Options(), {}, &c2, SplitJob(data::RankSplit::kBbs, 5));
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("sub_batch: 5"), std::string::npos) << u.status();
}

#if defined(GEMTB_HAVE_NCCL_COMM)
// One rank through NCCL, its parameters gathered whole or unit by unit on their own stream (each
// region's forward waiting for its unit's event): the one GPU's bytes either way.
void ExpectOneRankNcclJobTakesTheOneGpuSteps(bool param_prefetch) {
  cudaSetDevice(0);
  auto server = launch::TcpStoreServer::Start(0, 1);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = launch::TcpStoreClient::Connect({"127.0.0.1", (*server)->port()}, 0, 1, launch::Millis(60000));
  ASSERT_TRUE(store.ok()) << store.status();
  RankRun nccl;
  {
    absl::StatusOr<std::unique_ptr<comm::NcclTrainerCollectives>> c =
        comm::NcclTrainerCollectives::Create(**store, comm::TrainerCollectivesOptions{});
    ASSERT_TRUE(c.ok()) << c.status();
    JobOptions job;
    job.param_prefetch = param_prefetch;
    absl::StatusOr<std::unique_ptr<GpuTrainer>> t = GpuTrainer::Create(TinyConfig(), Options(), {}, c->get(), job);
    ASSERT_TRUE(t.ok()) << t.status();
    for (int s = 0; s < kSteps; ++s) {
      absl::StatusOr<TrainerStep> r = (*t)->Step();
      ASSERT_TRUE(r.ok()) << r.status();
      nccl.losses.push_back(r->loss);
    }
    absl::StatusOr<TrainerState> st = (*t)->State();
    ASSERT_TRUE(st.ok()) << st.status();
    nccl.state = *std::move(st);
    EXPECT_EQ((*t)->Gradients().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  ExpectSameBytes(nccl, OneGpu(), param_prefetch ? "one-rank NCCL job, units prefetched, vs one GPU"
                                                 : "one-rank NCCL job vs one GPU");
  ASSERT_TRUE((*store)->Close().ok());
  ASSERT_TRUE((*server)->Shutdown(launch::Millis(5000)).ok());
}

TEST(GpuTrainJob, OneRankNcclJobTakesTheOneGpuSteps) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  ExpectOneRankNcclJobTakesTheOneGpuSteps(false);
}
TEST(GpuTrainJob, OneRankNcclJobWithPrefetchedUnitsTakesTheOneGpuSteps) {
  if (!HaveSm90()) GTEST_SKIP() << "needs an sm_90 GPU";
  ExpectOneRankNcclJobTakesTheOneGpuSteps(true);
}
#endif

}  // namespace
}  // namespace gemtb::gpu::train
