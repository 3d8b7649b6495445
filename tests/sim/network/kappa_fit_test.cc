// κ from `gemtb bench comm --gemm` records (sim/network/kappa_fit.h), on made-up records: the values
// below are chosen by hand, not measured.
#include "sim/network/kappa_fit.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/network/cluster_json.h"
#include "tests/testing/status_matchers.h"

namespace gemtb::sim {
namespace {

using ::gemtb::testing::StatusIs;
using ::testing::HasSubstr;
using nlohmann::json;

json Record(int gpus, double alone, double sm, double ce) {
  return {{"gpus", gpus},
          {"device", "NVIDIA H200"},
          {"gemm",
           {{"dim", 8192},
            {"alone_ms", alone},
            {"sm_based", {{"how", gpus >= 2 ? "NCCL all_gather on 2 GPUs" : "cuBLAS copy kernel"}, {"ms", sm}}},
            {"copy_engine", {{"how", "cudaMemcpyAsync device-to-device on GPU 0"}, {"ms", ce}}}}}};
}

TEST(KappaFit, SlowdownMinusOne) {
  absl::StatusOr<KappaFit> fit = FitKappa(Record(1, 2.0, 2.5, 2.16));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_DOUBLE_EQ(fit->sm_based.kappa, 0.25);
  EXPECT_NEAR(fit->copy_engine.kappa, 0.08, 1e-12);
  EXPECT_EQ(fit->gpus, 1);
  // tools/bench_comm.sh wraps the record as runs.auto.
  json wrapped = {{"runs", {{"auto", Record(2, 2.0, 2.4, 2.1)}}}};
  fit = FitKappa(wrapped);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_DOUBLE_EQ(fit->sm_based.kappa, 0.2);
}

TEST(KappaFit, OneGpuWritesOnlyTheCopyEnginesKappa) {
  const json base = json::parse(DefaultCalibrationJsonText());
  const json out = ApplyKappaFit(base, *FitKappa(Record(1, 2.0, 2.5, 2.16)), "bench.json");
  EXPECT_NEAR(out.at("kappa_copy_engine").get<double>(), 0.08, 1e-12);
  EXPECT_EQ(out.at("kappa"), base.at("kappa"));  // a copy kernel is not a collective
  EXPECT_THAT(out.at("kappa_measured").at("sm_copy_kernel").get<std::string>(), HasSubstr("not applied"));
  EXPECT_FALSE(out.at("assumed").contains("kappa_copy_engine"));
  absl::StatusOr<Calibration> parsed = ParseCalibration(out, "calibration", ".");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_NEAR(*parsed->kappa_copy_engine, 0.08, 1e-12);
}

TEST(KappaFit, TwoGpusWriteTheAllGathersKappaToo) {
  const json out = ApplyKappaFit(json::parse(DefaultCalibrationJsonText()), *FitKappa(Record(2, 2.0, 2.4, 1.9)),
                                 "bench.json");
  EXPECT_DOUBLE_EQ(out.at("kappa").get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(out.at("kappa_copy_engine").get<double>(), 0.0);  // faster beside: noise, clamped
  EXPECT_THAT(out.at("kappa_measured").at("kappa").get<std::string>(), HasSubstr("NCCL all_gather"));
}

TEST(KappaFit, ErrorsNameTheField) {
  EXPECT_THAT(FitKappa(json{{"gpus", 1}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gemm: missing (run gemtb bench comm --gemm)")));
  json bad = Record(1, 2.0, 2.5, 2.16);
  bad["gemm"]["copy_engine"]["ms"] = -1;
  EXPECT_THAT(FitKappa(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gemm.copy_engine.ms: -1 must be a number > 0")));
  bad = Record(1, 2.0, 2.5, 2.16);
  bad["gemm"].erase("sm_based");
  EXPECT_THAT(FitKappa(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gemm.sm_based: missing")));
  bad = Record(1, 0, 2.5, 2.16);
  EXPECT_THAT(FitKappa(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gemm.alone_ms: 0")));
  bad = Record(1, 2.0, 2.5, 2.16);
  bad["gpus"] = 0;
  EXPECT_THAT(FitKappa(bad).status(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpus: 0 must be")));
}

}  // namespace
}  // namespace gemtb::sim
