// Byte sizes and sweeps as nccl-tests writes them (sim/network/byte_size.h).
#include "sim/network/byte_size.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteSweep, MinMaxFactorAsNcclTests) {
  absl::StatusOr<std::vector<int64_t>> s = ParseByteSweep("--sweep", "1K:16K:2");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre(1024, 2048, 4096, 8192, 16384));
  s = ParseByteSweep("--sweep", "1K:100K:4");  // stops before passing MAX
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre(1024, 4096, 16384, 65536));
  s = ParseByteSweep("--sweep", "64M:64M:2");
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre(int64_t{64} << 20));
  s = ParseByteSweep("--sweep", "1:8T:2");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->size(), 44u);
}

TEST(ByteSweep, NamedErrors) {
  EXPECT_THAT(ParseByteSweep("--sweep", "1K:1G").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep: \"1K:1G\" is not MIN:MAX:FACTOR")));
  EXPECT_THAT(ParseByteSweep("--sweep", "1G:1K:2").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep: MIN 1073741824 is above MAX 1024")));
  EXPECT_THAT(ParseByteSweep("--sweep", "1K:1G:1").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep FACTOR: \"1\" must be an integer >= 2")));
  EXPECT_THAT(ParseByteSweep("--sweep", "1K:1G:x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep FACTOR")));
  EXPECT_THAT(ParseByteSweep("--sweep", "0:1G:2").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep MIN: 0 must be >= 1")));
  EXPECT_THAT(ParseByteSweep("--sweep", "1Q:1G:2").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--sweep MIN: \"1Q\" is not a byte size")));
}

}  // namespace
}  // namespace gemtb::sim
