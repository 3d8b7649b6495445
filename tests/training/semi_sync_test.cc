// The oracle trainer under the semi-synchronous pipeline (TrainOptions::pipeline): a step's lookups
// are those of the tables before the previous step's update, computed here independently with the
// TBE oracle on the generator's batch; nothing else changes (without table updates it is the
// synchronous run bit for bit); a checkpoint carries the pending lookups, so resume equals the
// uninterrupted run, and a checkpoint of the other pipeline is refused by name.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/data/batch.h"
#include "model/data/shape_from_config.h"
#include "model/description/model_config.h"
#include "reference/embedding/tbe.h"
#include "reference/model/batch.h"
#include "reference/model/checkpoint.h"
#include "reference/model/trainer.h"
#include "tests/testing/builtin_graph.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::reference::model {
namespace {

using ::gemtb::model::SparsePipeline;
using ::gemtb::testing::BuiltinConfig;
using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

TrainOptions Options(SparsePipeline pipeline) {
  TrainOptions o;
  o.batch = 8;
  o.threads = 2;
  o.seed = 3;
  o.data_seed = 5;
  o.table_lr = 0.5f;  // large enough that one update moves every touched row's lookup
  o.pipeline = pipeline;
  return o;
}

std::unique_ptr<Trainer> Make(const TrainOptions& o) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(BuiltinConfig("tiny"), o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

std::vector<double> Losses(Trainer& t, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepResult> r = t.Step();
    EXPECT_TRUE(r.ok()) << r.status();
    losses.push_back(r.ok() ? r->loss : -1);
  }
  return losses;
}

const io::NpyArray* Find(const NamedArrays& arrays, const std::string& name) {
  for (const auto& [n, a] : arrays)
    if (n == name) return &a;
  return nullptr;
}

std::vector<float> Floats(const io::NpyArray& a) {
  std::vector<float> v(static_cast<size_t>(a.NumElements()));
  std::memcpy(v.data(), a.data.data(), v.size() * sizeof(float));
  return v;
}

TEST(SemiSync, LookupsReadTheTablesBeforeTheLastUpdate) {
  const TrainOptions o = Options(SparsePipeline::kSemiSync);
  std::unique_ptr<Trainer> t = Make(o);
  ASSERT_NE(t, nullptr);
  absl::StatusOr<data::Generator> gen = data::MakeGenerator("tiny");
  ASSERT_TRUE(gen.ok()) << gen.status();
  const EmbeddingConfig emb = ModelEmbeddingConfig(BuiltinConfig("tiny"), o.table_lr, o.seed);
  for (int s = 0; s < 3; ++s) {
    // The tables after s updates; step s + 1's lookups are made during step s, before its update.
    const EmbeddingState before = t->state().tables;
    ASSERT_TRUE(t->Step().ok());
    const data::Batch next = data::GenerateBatch(*gen, o.data_seed, (s + 1) * o.batch, o.batch);
    const KeyedJaggedTensor kjt = KjtOfBatch(next);
    absl::StatusOr<EmbeddingOutput> want = EmbeddingForward(emb, before, kjt, {}, 1);
    ASSERT_TRUE(want.ok()) << want.status();
    absl::StatusOr<EmbeddingOutput> after = EmbeddingForward(emb, t->state().tables, kjt, {}, 1);
    ASSERT_TRUE(after.ok()) << after.status();
    // Not vacuous: the update changed what the next batch reads.
    ASSERT_NE(after->pooled, want->pooled) << "step " << s;
    const NamedArrays arrays = t->StateArrays();
    const io::NpyArray* pooled = Find(arrays, "pipeline.pooled");
    ASSERT_NE(pooled, nullptr);
    EXPECT_EQ(Floats(*pooled), want->pooled) << "step " << s;
    for (size_t k = 0; k < want->sequence.size(); ++k) {
      const std::string name = absl::StrCat("pipeline.sequence.", next.keys[want->sequence_keys[k]]);
      const io::NpyArray* a = Find(arrays, name);
      ASSERT_NE(a, nullptr) << name;
      EXPECT_EQ(Floats(*a), want->sequence[k]) << name << " step " << s;
    }
  }
}

TEST(SemiSync, StepZeroIsTheSynchronousStepAndLaterStepsDiffer) {
  std::unique_ptr<Trainer> sync = Make(Options(SparsePipeline::kSync));
  std::unique_ptr<Trainer> semi = Make(Options(SparsePipeline::kSemiSync));
  ASSERT_TRUE(sync && semi);
  const std::vector<double> a = Losses(*sync, 3), b = Losses(*semi, 3);
  EXPECT_EQ(a[0], b[0]);  // both read the initial tables
  EXPECT_NE(a[1], b[1]);  // step 1 reads the init under the pipeline, the updated tables without it
  EXPECT_NE(a[2], b[2]);
}

TEST(SemiSync, WithoutTableUpdatesItIsTheSynchronousRunBitForBit) {
  TrainOptions o = Options(SparsePipeline::kSync);
  o.table_lr = 0;
  std::unique_ptr<Trainer> sync = Make(o);
  o.pipeline = SparsePipeline::kSemiSync;
  std::unique_ptr<Trainer> semi = Make(o);
  ASSERT_TRUE(sync && semi);
  EXPECT_EQ(Losses(*sync, 4), Losses(*semi, 4));
  EXPECT_EQ(sync->state().params, semi->state().params);
  EXPECT_EQ(sync->state().adam_v, semi->state().adam_v);
}

TEST(SemiSync, ResumeContinuesBitExactly) {
  const TrainOptions o = Options(SparsePipeline::kSemiSync);
  std::unique_ptr<Trainer> straight = Make(o);
  ASSERT_NE(straight, nullptr);
  const std::vector<double> all = Losses(*straight, 5);
  std::unique_ptr<Trainer> first = Make(o);
  ASSERT_NE(first, nullptr);
  Losses(*first, 2);
  const std::vector<uint8_t> bytes = SerializeCheckpoint(first->StateArrays());
  absl::StatusOr<NamedArrays> arrays = ParseCheckpoint(bytes, "semi-sync checkpoint");
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  std::unique_ptr<Trainer> resumed = Make(o);
  ASSERT_NE(resumed, nullptr);
  ASSERT_TRUE(resumed->LoadStateArrays(*arrays).ok());
  const std::vector<double> rest = Losses(*resumed, 3);
  EXPECT_EQ(rest, std::vector<double>(all.begin() + 2, all.end()));
  EXPECT_TRUE(SerializeCheckpoint(resumed->StateArrays()) == SerializeCheckpoint(straight->StateArrays()));
}

TEST(SemiSync, ACheckpointOfTheOtherPipelineIsNamed) {
  std::unique_ptr<Trainer> sync = Make(Options(SparsePipeline::kSync));
  std::unique_ptr<Trainer> semi = Make(Options(SparsePipeline::kSemiSync));
  ASSERT_TRUE(sync && semi);
  Losses(*sync, 1);
  Losses(*semi, 1);
  std::unique_ptr<Trainer> semi_fresh = Make(Options(SparsePipeline::kSemiSync));
  std::unique_ptr<Trainer> sync_fresh = Make(Options(SparsePipeline::kSync));
  ASSERT_TRUE(semi_fresh && sync_fresh);
  EXPECT_THAT(semi_fresh->LoadStateArrays(sync->StateArrays()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'pipeline.pooled' is missing")));
  EXPECT_THAT(sync_fresh->LoadStateArrays(semi->StateArrays()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("this run is synchronous")));
}

}  // namespace
}  // namespace gemtb::reference::model
