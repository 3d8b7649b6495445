// gpu/bench/kernel_timer.h: CUPTI activity records of what a stretch of host code launched. Needs an
// sm_90 GPU and a build with CUPTI; skipped otherwise (GTEST_SKIP, reported as skipped by ctest).
#include "gpu/bench/kernel_timer.h"

#include <gtest/gtest.h>

#include <memory>

#include "gpu/attention/api.h"
#include "gpu/bench/device_random.h"
#include "gpu/common/device_buffer.h"

namespace gemtb::gpu::bench {
namespace {

bool Usable() { return DeviceAvailable().ok() && KernelTimer::Available(); }

TEST(KernelTimer, RecordsEachLaunchOnceWithItsDuration) {
  if (!Usable()) GTEST_SKIP() << "needs an sm_90 GPU and a build with CUPTI";
  DeviceArray<uint16_t> x;
  ASSERT_TRUE(x.Allocate(1 << 24, "x").ok());
  absl::StatusOr<std::unique_ptr<KernelTimer>> timer = KernelTimer::Start();
  ASSERT_TRUE(timer.ok()) << timer.status();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    ASSERT_TRUE(FillUniform(x.get(), 1 << 24, ElementType::kBFloat16, seed).ok());
  }
  absl::StatusOr<std::vector<DeviceActivity>> acts = (*timer)->Stop();
  ASSERT_TRUE(acts.ok()) << acts.status();
  ASSERT_EQ(acts->size(), 3u);  // FillUniform is one kernel
  for (size_t i = 0; i < acts->size(); ++i) {
    const DeviceActivity& a = (*acts)[i];
    EXPECT_EQ(a.kind, DeviceActivity::Kind::kKernel);
    EXPECT_GT(a.end_ns, a.start_ns);
    EXPECT_FALSE(a.name.empty());
    if (i > 0) {
      EXPECT_GE(a.start_ns, (*acts)[i - 1].end_ns);  // one stream, in order
    }
  }
  // Nothing is recorded after Stop, and Stop twice is refused.
  EXPECT_EQ((*timer)->Stop().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KernelTimer, OneTimerAtATime) {
  if (!Usable()) GTEST_SKIP() << "needs an sm_90 GPU and a build with CUPTI";
  absl::StatusOr<std::unique_ptr<KernelTimer>> first = KernelTimer::Start();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(KernelTimer::Start().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*first)->Stop().ok());
  absl::StatusOr<std::unique_ptr<KernelTimer>> second = KernelTimer::Start();
  EXPECT_TRUE(second.ok()) << second.status();
}

}  // namespace
}  // namespace gemtb::gpu::bench
