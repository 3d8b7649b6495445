// The brief's full-size determinism check (spec §8 row 9): two 50-step runs of tiny at the default
// batch (64) give byte-identical checkpoints with 1, 2, 7 and 16 threads. About a minute: label "slow".
#include "gtest/gtest.h"
#include "model/description/model_config.h"
#include "oneapi/tbb/global_control.h"
#include "reference/model/checkpoint.h"
#include "reference/model/trainer.h"

namespace gemtb::reference::model {
namespace {

std::vector<uint8_t> FiftySteps(int threads) {
  absl::StatusOr<gemtb::model::ModelConfig> c = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(c.ok()) << c.status();
  TrainOptions o;
  o.threads = threads;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(*c, o);
  EXPECT_TRUE(t.ok()) << t.status();
  for (int s = 0; s < 50; ++s) EXPECT_TRUE((*t)->Step().ok());
  return SerializeCheckpoint((*t)->StateArrays());
}

TEST(TrainerSlow, FiftyStepCheckpointsBitIdenticalForThreads1_2_7_16) {
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, 16);
  const std::vector<uint8_t> one = FiftySteps(1);
  EXPECT_TRUE(FiftySteps(1) == one) << "rerun with 1 thread";
  for (int threads : {2, 7, 16}) EXPECT_TRUE(FiftySteps(threads) == one) << threads << " threads";
}

}  // namespace
}  // namespace gemtb::reference::model
