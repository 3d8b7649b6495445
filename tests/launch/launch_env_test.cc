// The launcher environment: each launcher's variables, their precedence, and a named error for
// every missing, malformed or contradictory value.
#include "model/launch/launch_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace gemtb::launch {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;

TEST(LaunchEnv, NoLauncherIsASingleProcess) {
  auto info = ParseLaunchEnvironment({{"HOME", "/root"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->launcher, Launcher::kSingleProcess);
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->world_size, 1);
  EXPECT_FALSE(info->rendezvous.has_value());
  EXPECT_THAT(RequireRendezvous(*info), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("MASTER_ADDR")));
}

TEST(LaunchEnv, TorchrunGivesRankWorldLocalRankAndRendezvous) {
  auto info = ParseLaunchEnvironment({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                                      {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->launcher, Launcher::kTorchrun);
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  ASSERT_TRUE(info->rendezvous.has_value());
  EXPECT_EQ(info->rendezvous->host, "node0");
  EXPECT_EQ(info->rendezvous->port, 29501) << "torchrun's agent serves its own store on MASTER_PORT";
}

TEST(LaunchEnv, OpenMpiAndSlurmTakeTheRendezvousFromMasterAddrWhenSet) {
  auto mpi = ParseLaunchEnvironment({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->launcher, Launcher::kOpenMpi);
  EXPECT_EQ(mpi->rank, 3);
  EXPECT_FALSE(mpi->rendezvous.has_value());
  auto slurm = ParseLaunchEnvironment({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "0"},
                                       {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->launcher, Launcher::kSlurm);
  EXPECT_EQ(slurm->world_size, 16);
  ASSERT_TRUE(slurm->rendezvous.has_value());
  EXPECT_EQ(slurm->rendezvous->port, 1234);
}

TEST(LaunchEnv, TorchrunUnderSlurmAndMpiUnderSlurmUseTheInnerLauncher) {
  auto torch = ParseLaunchEnvironment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                                       {"RANK", "6"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "6"},
                                       {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  ASSERT_TRUE(torch.ok()) << torch.status();
  EXPECT_EQ(torch->launcher, Launcher::kTorchrun);
  EXPECT_EQ(torch->rank, 6);
  auto mpi = ParseLaunchEnvironment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"},
                                     {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}});
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  EXPECT_EQ(mpi->launcher, Launcher::kOpenMpi);
  EXPECT_EQ(mpi->world_size, 4);
}

TEST(LaunchEnv, MissingValuesAreNamed) {
  EXPECT_THAT(ParseLaunchEnvironment({{"RANK", "0"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("WORLD_SIZE: not set (torchrun")));
  EXPECT_THAT(ParseLaunchEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOCAL_RANK: not set")));
  EXPECT_THAT(ParseLaunchEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MASTER_ADDR: not set")));
  EXPECT_THAT(ParseLaunchEnvironment({{"OMPI_COMM_WORLD_SIZE", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("OMPI_COMM_WORLD_RANK: not set (Open MPI")));
  EXPECT_THAT(ParseLaunchEnvironment({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("SLURM_LOCALID: not set")));
  EXPECT_THAT(ParseLaunchEnvironment({{"MASTER_PORT", "29500"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MASTER_ADDR: not set")));
}

TEST(LaunchEnv, MalformedAndContradictoryValuesAreNamed) {
  const Environment base = {{"LOCAL_RANK", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "29500"}};
  auto with = [&](Environment extra) {
    Environment env = base;
    for (auto& [k, v] : extra) env[k] = v;
    return ParseLaunchEnvironment(env);
  };
  EXPECT_THAT(with({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RANK=\"x1\": must be a decimal integer")));
  EXPECT_THAT(with({{"RANK", "1 "}, {"WORLD_SIZE", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RANK=\"1 \"")));
  EXPECT_THAT(with({{"RANK", "4"}, {"WORLD_SIZE", "4"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RANK=4: must be < WORLD_SIZE=4")));
  EXPECT_THAT(with({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("WORLD_SIZE=0: must be in [1,")));
  EXPECT_THAT(with({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOCAL_RANK=2: must be <= RANK=1")));
  EXPECT_THAT(with({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOCAL_RANK=3: must be < LOCAL_WORLD_SIZE=2")));
  EXPECT_THAT(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MASTER_PORT=70000: must be in [1, 65535]")));
  EXPECT_THAT(with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65535"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MASTER_PORT=65535: must be < 65535 under torchrun")));
}

}  // namespace
}  // namespace gemtb::launch
