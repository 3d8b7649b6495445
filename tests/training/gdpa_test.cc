// The model's own small GDPA (reference/model/gdpa.h) against the attention oracle
// (reference/attention) in fp64: SiLU, post scale, window(w,w) top_left, block(n), RoPE, and the
// backward. And the model's fp32 embedding gather against the TBE oracle, bit for bit.
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "reference/attention/attention.h"
#include "reference/embedding/tbe.h"
#include "reference/model/embedding_gather.h"
#include "reference/model/gdpa.h"
#include "tests/training/random_batch.h"

namespace gemtb::reference::model {
namespace {

double MaxRelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / std::max(den, 1e-300);
}

struct Case {
  const char* name;
  int lq, lk, window, block;
  bool rope;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GdpaVsOracle : public ::testing::TestWithParam<Case> {};

TEST_P(GdpaVsOracle, ForwardAndBackwardMatchTheOracle) {
  const Case c = GetParam();
  const int H = 2, D = 16, W = H * D;
  std::mt19937_64 rng(c.lq * 131 + c.lk);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto randn = [&](size_t n) {
    std::vector<double> v(n);
    for (double& x : v) x = normal(rng);
    return v;
  };
  const std::vector<double> q = randn(static_cast<size_t>(c.lq) * W), k = randn(static_cast<size_t>(c.lk) * W),
                            v = randn(static_cast<size_t>(c.lk) * W), d_o = randn(static_cast<size_t>(c.lq) * W);
  GdpaShape shape;
  shape.lq = c.lq, shape.lk = c.lk, shape.heads = H, shape.dh = D;
  shape.window = c.window, shape.block = c.block, shape.post_scale = 1.0 / 33.0;
  const std::vector<double> table = RopeTable<double>(std::max(c.lq, c.lk), D);
  // Ours: rotate, GDPA, un-rotate the gradients.
  std::vector<double> qr = q, kr = k;
  if (c.rope) {
    RopeForward(table.data(), c.lq, H, D, qr.data());
    RopeForward(table.data(), c.lk, H, D, kr.data());
  }
  std::vector<double> o(q.size());
  GdpaForward(shape, qr.data(), kr.data(), v.data(), o.data());
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  GdpaBackward(shape, qr.data(), kr.data(), v.data(), d_o.data(), dq.data(), dk.data(), dv.data());
  if (c.rope) {
    RopeBackward(table.data(), c.lq, H, D, dq.data());
    RopeBackward(table.data(), c.lk, H, D, dk.data());
  }
  // The oracle.
  const std::vector<int64_t> q_off = {0, c.lq}, kv_off = {0, c.lk};
  AttentionInputs in;
  in.q = {q, {c.lq, H, D}};
  in.k = {k, {c.lk, H, D}};
  in.v = {v, {c.lk, H, D}};
  in.q_offsets = {q_off, {2}};
  in.kv_offsets = {kv_off, {2}};
  in.max_lq = c.lq;
  in.max_lk = c.lk;
  const std::vector<double> rq(table.begin(), table.begin() + static_cast<long>(c.lq) * D),
      rk(table.begin(), table.begin() + static_cast<long>(c.lk) * D);
  if (c.rope) {
    in.rope_q = {rq, {c.lq, D}};
    in.rope_k = {rk, {c.lk, D}};
  }
  AttentionOptions opt;
  opt.act = Activation::kSilu;
  opt.pre_scale = 1.0;
  opt.post_scale = 1.0 / 33.0;
  opt.align = Alignment::kTopLeft;
  if (c.window >= 0) {
    opt.mask = MaskKind::kWindow;
    opt.window_left = opt.window_right = c.window;
  } else if (c.block > 0) {
    opt.mask = MaskKind::kBlock;
    opt.block = c.block;
  }
  ExecutionOptions exec;
  exec.threads = 1;
  absl::StatusOr<AttentionForwardResult> f = AttentionForward(in, opt, exec);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<AttentionBackwardResult> b = AttentionBackward(in, opt, {d_o, {c.lq, H, D}}, *f, exec);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_LE(MaxRelDiff(o, f->o), 1e-12);
  EXPECT_LE(MaxRelDiff(dq, b->dq), 1e-12);
  EXPECT_LE(MaxRelDiff(dk, b->dk), 1e-12);
  EXPECT_LE(MaxRelDiff(dv, b->dv), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GdpaVsOracle,
                         ::testing::Values(Case{"PmaSeedsOverSequence", 2, 70, -1, 0, false},
                                           Case{"SequenceOverXsum", 66, 2, -1, 0, false},
                                           Case{"Window16WithRope", 66, 66, 16, 0, true},
                                           Case{"LoneToken", 1, 1, 16, 0, true},
                                           Case{"Block64WithRope", 130, 130, -1, 64, true}),
                         [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

TEST(EmbeddingGather, Fp32GatherEqualsTheTbeOracleBitForBit) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  const EmbeddingConfig e = ModelEmbeddingConfig(*config, 0.05f, 9);
  const EmbeddingState state = InitEmbeddingState(e);
  const TrainBatch batch = gemtb::testing::RandomBatch(*config, 5, 21, 64);
  absl::StatusOr<EmbeddingOutput> out = EmbeddingForward(e, state, BatchKjt(*config, batch), {}, 1);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::vector<float>> tables;
  for (const auto& t : state.tables) tables.push_back(t.weights);
  const GatheredBatch<float> g = GatherBatch(*config, e, tables, batch);
  const int d = static_cast<int>(config->d);
  const int J = static_cast<int>(config->sequences.size());
  std::vector<int64_t> offset(J, 0);
  for (int64_t b = 0; b < batch.size; ++b) {
    const std::vector<float> row(out->pooled.begin() + b * out->pooled_width,
                                 out->pooled.begin() + (b + 1) * out->pooled_width);
    EXPECT_EQ(g.pooled[b], row) << "sample " << b;
    for (int j = 0; j < J; ++j) {
      for (size_t e2 = 0; e2 < g.events[b][j].size(); ++e2) {
        const size_t at = static_cast<size_t>(offset[j] * d) + e2;
        const float want = (out->sequence[3 * j][at] + out->sequence[3 * j + 1][at]) + out->sequence[3 * j + 2][at];
        ASSERT_EQ(g.events[b][j][e2], want) << "sample " << b << " seq " << j;
      }
      offset[j] += static_cast<int64_t>(g.events[b][j].size() / d);
    }
  }
}

}  // namespace
}  // namespace gemtb::reference::model
