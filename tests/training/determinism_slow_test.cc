// The full-size determinism check: 50 steps of tiny at the default batch
// (64) give byte-identical checkpoints with 1, 2, 7 and 16 oneTBB threads. Label "slow".
//
// The four runs go side by side, one std::thread each, in one process: each trainer has its own
// oneTBB arena of its thread count, so every run still uses its own count, and on CI's two cores the
// wall time is about half of running them one after another (each run is ~5 s of CPU). Running
// them concurrently also checks that trainers share no mutable state. Repeatability at one thread
// count is trainer_test's TwoRunsGiveIdenticalCheckpoints; here all four must equal the 1-thread run.
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/description/model_config.h"
#include "oneapi/tbb/global_control.h"
#include "reference/model/checkpoint.h"
#include "reference/model/trainer.h"

namespace gemtb::reference::model {
namespace {

constexpr int kThreadCounts[] = {1, 2, 7, 16};
constexpr int kSteps = 50;

absl::StatusOr<std::vector<uint8_t>> FiftySteps(const gemtb::model::ModelConfig& config, int threads) {
  TrainOptions o;
  o.threads = threads;
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config, o);
  if (!t.ok()) return t.status();
  for (int s = 0; s < kSteps; ++s) {
    if (absl::StatusOr<StepResult> r = (*t)->Step(); !r.ok()) {
      return absl::InternalError(absl::StrCat("step ", s, ": ", r.status().message()));
    }
  }
  return SerializeCheckpoint((*t)->StateArrays());
}

TEST(TrainerSlow, FiftyStepCheckpointsBitIdenticalForThreads1_2_7_16) {
  // Room for every arena at once (1 + 2 + 7 + 16 threads), so no run gets fewer than its count.
  tbb::global_control allow(tbb::global_control::max_allowed_parallelism, 1 + 2 + 7 + 16);
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  constexpr size_t kRuns = std::size(kThreadCounts);
  std::vector<absl::StatusOr<std::vector<uint8_t>>> checkpoints(kRuns, absl::UnknownError("not run"));
  {
    std::vector<std::thread> runs;
    for (size_t i = 0; i < kRuns; ++i) {
      runs.emplace_back([&, i] { checkpoints[i] = FiftySteps(*config, kThreadCounts[i]); });
    }
    for (std::thread& r : runs) r.join();
  }
  for (size_t i = 0; i < kRuns; ++i) {
    ASSERT_TRUE(checkpoints[i].ok()) << kThreadCounts[i] << " threads: " << checkpoints[i].status();
  }
  ASSERT_FALSE(checkpoints[0]->empty());
  for (size_t i = 1; i < kRuns; ++i) {
    EXPECT_TRUE(*checkpoints[i] == *checkpoints[0]) << kThreadCounts[i] << " threads differ from 1 thread";
  }
}

}  // namespace
}  // namespace gemtb::reference::model
