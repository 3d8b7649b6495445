// The CPU trainer over a data-parallel group of ranks (threads here, each with its own trainer and
// store connection) ends every step with the single-process trainer's state, bit for bit.
#include "reference/model/data_parallel.h"


#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/description/model_config.h"
#include "reference/dist/store_group.h"
#include "reference/model/trainer.h"
#include "tests/dist/dist_test_util.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::reference::dist {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

model::TrainOptions Options() {
  model::TrainOptions o;
  o.batch = 24;
  o.grad_blocks = 8;
  o.total_steps = 10;
  o.threads = 1;
  return o;
}

// The state after `steps` steps on each of `world` ranks.
std::vector<model::NamedArrays> TrainOnRanks(int world, int steps) {
  auto config = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  return testutil::ArraysOrEmpty(testutil::RunOnRanks<model::NamedArrays>(
      world, [&](launch::TcpStoreClient& store, int) -> absl::StatusOr<model::NamedArrays> {
        auto trainer = model::Trainer::Create(*config, Options());
        if (!trainer.ok()) return trainer.status();
        StoreDataParallelGroup group(store);
        if (absl::Status s = (*trainer)->UseDataParallel(&group); !s.ok()) return s;
        for (int s = 0; s < steps; ++s)
          if (auto step = (*trainer)->Step(); !step.ok()) return step.status();
        return (*trainer)->StateArrays();
      }));
}

TEST(DataParallel, EveryRanksStateEqualsTheSingleProcessTrainersBitForBit) {
  auto config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  auto single = model::TrainStepsArrays(*config, Options(), 3);
  ASSERT_TRUE(single.ok()) << single.status();
  for (int world : {2, 4}) {
    std::vector<model::NamedArrays> ranks = TrainOnRanks(world, 3);
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(testutil::SameArrays(ranks[r], *single)) << "world " << world << " rank " << r;
  }
}

TEST(DataParallel, AWorldSizeThatDoesNotFitTheBlocksIsNamed) {
  EXPECT_THAT(model::CheckDataParallel(8, 24, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--grad-blocks: 8 is not a multiple of the world size 3")));
  EXPECT_THAT(model::CheckDataParallel(16, 8, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--grad-blocks: 16 > --batch 8")));
}

}  // namespace
}  // namespace gemtb::reference::dist
