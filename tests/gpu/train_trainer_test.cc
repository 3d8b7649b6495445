// The GPU trainer's step in parts (gpu/train/trainer.h): Step equals Gradients followed by
// ApplyGradients of those gradients, byte for byte; a trainer given another's state (LoadState)
// takes the same next step as the one it came from (what resume and `gemtb check train`'s injected
// steps rely on); the semi-synchronous pipeline resumes exactly and is the synchronous run when the
// tables do not move; the timed regions are the model description's; wrong sizes are named errors.
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gpu/train/trainer.h"
#include "gtest/gtest.h"
#include "model/description/model_config.h"
#include "model/description/model_graph.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::HaveSm90;

std::unique_ptr<GpuTrainer> Tiny(gemtb::model::SparsePipeline pipeline = gemtb::model::SparsePipeline::kSync,
                                 float table_lr = 0.2f) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  TrainerOptions options;
  options.batch = 16;
  options.pipeline = pipeline;
  options.table_lr = table_lr;
  absl::StatusOr<std::unique_ptr<GpuTrainer>> t = GpuTrainer::Create(*config, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSameState(const GpuTrainer& a, const GpuTrainer& b) {
  absl::StatusOr<TrainerState> sa = a.State(), sb = b.State();
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(sa->step, sb->step);
  EXPECT_TRUE(SameBytes(sa->params, sb->params));
  EXPECT_TRUE(SameBytes(sa->adam_m, sb->adam_m));
  EXPECT_TRUE(SameBytes(sa->adam_v, sb->adam_v));
  EXPECT_EQ(sa->adam_b1, sb->adam_b1);
  EXPECT_EQ(sa->adam_b2, sb->adam_b2);
  ASSERT_EQ(sa->tables.size(), sb->tables.size());
  for (size_t t = 0; t < sa->tables.size(); ++t) {
    EXPECT_TRUE(SameBytes(sa->tables[t].weights, sb->tables[t].weights)) << "table " << t;
    EXPECT_TRUE(SameBytes(sa->tables[t].adagrad, sb->tables[t].adagrad)) << "table " << t;
  }
}

TEST(GpuTrainerTest, StepIsGradientsThenApplyGradients) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::unique_ptr<GpuTrainer> whole = Tiny(), parts = Tiny();
  ASSERT_TRUE(whole && parts);
  for (int s = 0; s < 3; ++s) {
    absl::StatusOr<TrainerStep> w = whole->Step();
    ASSERT_TRUE(w.ok()) << w.status();
    absl::StatusOr<TrainerGradients> g = parts->Gradients();
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->loss, w->loss);
    ASSERT_TRUE(parts->ApplyGradients(*g).ok());
  }
  ExpectSameState(*whole, *parts);
}

TEST(GpuTrainerTest, LoadedStateTakesTheSameSteps) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::unique_ptr<GpuTrainer> a = Tiny(), b = Tiny();
  ASSERT_TRUE(a && b);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(a->Step().ok());
  absl::StatusOr<TrainerState> state = a->State();
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(b->LoadState(*state).ok());
  for (int s = 0; s < 2; ++s) {
    absl::StatusOr<TrainerStep> ra = a->Step(), rb = b->Step();
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->loss, rb->loss);
  }
  ExpectSameState(*a, *b);
}

// The semi-synchronous pipeline: the model on its own stream beside the next step's lookups. A
// loaded state (with the pending lookups) takes the same steps; without table updates the steps are
// the synchronous ones byte for byte (the lookups of either pipeline read the same tables), and with
// them they are not (step 1 on reads the tables before the last update).
TEST(GpuTrainerTest, SemiSyncLoadedStateTakesTheSameSteps) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  const auto semi = gemtb::model::SparsePipeline::kSemiSync;
  std::unique_ptr<GpuTrainer> a = Tiny(semi), b = Tiny(semi);
  ASSERT_TRUE(a && b);
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(a->Step().ok());
  absl::StatusOr<TrainerState> state = a->State();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->pipeline_pooled.empty());
  ASSERT_TRUE(b->LoadState(*state).ok());
  for (int s = 0; s < 3; ++s) {
    absl::StatusOr<TrainerStep> ra = a->Step(), rb = b->Step();
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(ra->loss, rb->loss);
  }
  ExpectSameState(*a, *b);
  std::unique_ptr<GpuTrainer> sync = Tiny();
  ASSERT_NE(sync, nullptr);
  EXPECT_EQ(sync->LoadState(*state).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Gradients().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GpuTrainerTest, SemiSyncWithoutTableUpdatesIsTheSynchronousRun) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  const auto semi = gemtb::model::SparsePipeline::kSemiSync, sync = gemtb::model::SparsePipeline::kSync;
  std::unique_ptr<GpuTrainer> a = Tiny(sync, 0.0f), b = Tiny(semi, 0.0f), c = Tiny(sync), d = Tiny(semi);
  ASSERT_TRUE(a && b && c && d);
  std::vector<double> moved_sync, moved_semi;
  for (int s = 0; s < 4; ++s) {
    absl::StatusOr<TrainerStep> ra = a->Step(), rb = b->Step(), rc = c->Step(), rd = d->Step();
    ASSERT_TRUE(ra.ok() && rb.ok() && rc.ok() && rd.ok());
    EXPECT_EQ(ra->loss, rb->loss) << "step " << s;
    moved_sync.push_back(rc->loss);
    moved_semi.push_back(rd->loss);
  }
  ExpectSameState(*a, *b);
  EXPECT_EQ(moved_sync[0], moved_semi[0]);
  EXPECT_NE(moved_sync[2], moved_semi[2]);
}

// The timed regions are the model description's dense regions (its embedding regions E.sparse and
// E.seq<j> are the TBE's, outside the model), each forward then backward, in increasing time.
TEST(GpuTrainerTest, TimesTheDescriptionsRegions) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::unique_ptr<GpuTrainer> t = Tiny();
  ASSERT_TRUE(t);
  t->TimeRegions(true);
  absl::StatusOr<TrainerStep> r = t->Step();
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  absl::StatusOr<gemtb::model::ModelGraph> graph = gemtb::model::ExpandModel(*config);
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::set<std::string> described;
  for (const auto& op : graph->ops)
    if (op.region.rfind("E.s", 0) != 0) described.insert(op.region);
  std::set<std::string> fwd, bwd;
  double last_end = 0;
  for (const RegionTime& rt : r->regions) {
    (rt.backward ? bwd : fwd).insert(rt.region);
    EXPECT_GE(rt.start_ms, last_end - 1e-3) << rt.region;
    EXPECT_GE(rt.end_ms, rt.start_ms) << rt.region;
    last_end = rt.end_ms;
  }
  EXPECT_EQ(fwd, described);
  EXPECT_EQ(bwd, described);
}

TEST(GpuTrainerTest, WrongSizesAreNamed) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  std::unique_ptr<GpuTrainer> t = Tiny();
  ASSERT_TRUE(t);
  absl::StatusOr<TrainerGradients> g = t->Gradients();
  ASSERT_TRUE(g.ok());
  TrainerGradients bad = *g;
  bad.dense.pop_back();
  EXPECT_NE(t->ApplyGradients(bad).message().find("grads.dense"), std::string::npos);
  bad = *g;
  bad.pooled.push_back(0);
  EXPECT_NE(t->ApplyGradients(bad).message().find("grads.pooled"), std::string::npos);
  bad = *g;
  bad.events.at(0).push_back(0);
  EXPECT_NE(t->ApplyGradients(bad).message().find("grads.events[0]"), std::string::npos);
  EXPECT_EQ(t->step(), 0);  // nothing was applied
  absl::StatusOr<TrainerState> s = t->State();
  ASSERT_TRUE(s.ok());
  TrainerState wrong = *s;
  wrong.adam_v.resize(3);
  EXPECT_NE(t->LoadState(wrong).message().find("state.adam_v"), std::string::npos);
  wrong = *s;
  wrong.tables.at(1).adagrad.clear();
  EXPECT_NE(t->LoadState(wrong).message().find("state.tables[1]"), std::string::npos);
  wrong = *s;
  wrong.step = -1;
  EXPECT_NE(t->LoadState(wrong).message().find("state.step"), std::string::npos);
}

}  // namespace
}  // namespace gemtb::gpu::train
