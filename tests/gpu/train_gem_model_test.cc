// The GPU model (gpu/train/gem_model.h) against the oracle's batch pass (reference/model/batch_pass.h)
// on the tiny config (with one Wukong expert and with two): one batch of random inputs (jagged sequences, an empty one and a full one),
// the logits, the loss, every named parameter's gradient and the input gradients, each compared by
// its relative L2 distance. Both run fp32; they differ only in summation orders (cuBLAS matmuls,
// one sum over the batch instead of the oracle's 16 sample blocks), so each array must agree to a
// few fp32 roundings relative to its size: rel-L2 <= 1e-5. With the tensor-core precisions (GEMMs on
// TF32 operands, attention on bf16 or fp32, fp32 sums) each array must stay within the bf16 trainer's bounds
// (gemtb check train's defaults): rel-L2 <= 5e-2 for gradients, 1e-2 for the logits, the loss within
// 1e-3 + 1e-2 |oracle|. Then a second run must give the same bytes.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu/train/gem_model.h"
#include "gtest/gtest.h"
#include "model/description/gem_geometry.h"
#include "reference/model/batch_pass.h"
#include "reference/model/gem_model.h"
#include "tests/gpu/train_test_util.h"

namespace gemtb::gpu::train {
namespace {

using test::DeviceArray;
using test::HaveSm90;

double RelL2(const std::vector<float>& a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t e = 0; e < n; ++e) {
    const double d = static_cast<double>(a[e]) - b[e];
    num += d * d;
    den += static_cast<double>(b[e]) * b[e];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(GemModelGpuTest, RejectsBadInputsBeforeTheDevice) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  gemtb::model::ModelConfig odd = *config;
  odd.heads = 8;
  absl::StatusOr<std::unique_ptr<GemModelGpu>> m = GemModelGpu::Create(odd);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("heads"), std::string::npos) << m.status();
  // bf16 attention blocks need GDPA's tensor cores (the fp32 kernels take fp32 tensors).
  GemModelOptions blocks;
  blocks.attention_blocks = AttentionBlockPrecision::kBf16;
  m = GemModelGpu::Create(*config, blocks);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("attention blocks bf16: needs attention bf16"), std::string::npos) << m.status();
}

// What one precision must hold to: the arrays' rel-L2 and the loss's bound.
struct Bounds {
  double logits = 1e-5, grads = 1e-5, loss_abs = 0, loss_rel = 1e-5;
};
constexpr Bounds kFp32Bounds;
constexpr Bounds kBf16Bounds{1e-2, 5e-2, 1e-3, 1e-2};

// One batch of `B` samples against the oracle's batch pass; `experts` Wukong experts; width: the
// model's d and its tables' width (0: tiny's).
void ExpectMatchesTheOracle(int batch, const GemModelOptions& numerics = {}, const Bounds& bounds = kFp32Bounds,
                            int experts = 1, int width = 0) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  config->arch.wukong.experts.count = experts;
  if (width > 0) {
    // The head's input is the flattened tokens: d wide each.
    config->head.widths.front() = config->head.widths.front() / config->d * width;
    config->d = width;
    for (auto& table : config->tables) table.dim = width;
  }
  absl::StatusOr<reference::model::GemModel> ref = reference::model::GemModel::Create(*config);
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<std::unique_ptr<GemModelGpu>> gpu = GemModelGpu::Create(*config, numerics);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const gemtb::model::GemGeometry& g = (*gpu)->geometry();
  const int B = batch, d = g.d, F = g.num_features, J = g.num_sequences(), T = g.num_tasks;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto draw = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const std::vector<float> params = gemtb::model::InitParams(g.layout, 3);
  const std::vector<float> pooled = draw(static_cast<size_t>(B) * F * d), dense = draw(static_cast<size_t>(B) * g.dense_m);
  std::vector<std::vector<int32_t>> lengths(J);
  std::vector<std::vector<float>> events(J);
  for (int j = 0; j < J; ++j) {
    for (int b = 0; b < B; ++b) {
      int len = static_cast<int>(rng() % (g.seqs[j].lmax + 1));
      if (b == 0) len = 0;
      if (b == 1) len = g.seqs[j].lmax;
      lengths[j].push_back(len);
    }
    int64_t total = 0;
    for (int len : lengths[j]) total += len;
    events[j] = draw(static_cast<size_t>(total) * d);
  }
  std::vector<float> labels(static_cast<size_t>(B) * T), masks(labels.size());
  for (size_t e = 0; e < labels.size(); ++e) labels[e] = static_cast<float>(rng() % 2), masks[e] = (e % 5 == 3) ? 0.0f : 1.0f;

  // The oracle.
  std::vector<reference::model::SampleInput<float>> inputs(B);
  std::vector<int64_t> at(J, 0);
  for (int b = 0; b < B; ++b) {
    inputs[b].pooled = pooled.data() + static_cast<size_t>(b) * F * d;
    inputs[b].dense = dense.data() + static_cast<size_t>(b) * g.dense_m;
    for (int j = 0; j < J; ++j) {
      inputs[b].events.push_back(events[j].data() + at[j] * d);
      inputs[b].lengths.push_back(lengths[j][b]);
      at[j] += lengths[j][b];
    }
  }
  reference::model::BatchPassOptions options;
  const reference::model::BatchPassResult<float> want =
      reference::model::RunBatch(*ref, params.data(), inputs, labels, masks, options);

  // The GPU.
  DeviceArray<float> d_params(params), d_pooled(pooled), d_dense(dense), d_labels(labels), d_masks(masks);
  DeviceArray<float> d_logits(std::vector<float>(static_cast<size_t>(B) * T)), d_grad(std::vector<float>(params.size()));
  DeviceArray<float> d_pooled_grad(std::vector<float>(pooled.size()));
  DeviceArray<double> d_loss(std::vector<double>(1));
  std::vector<std::unique_ptr<DeviceArray<float>>> d_events, d_events_grad;
  GemBatchInput in;
  in.batch = B, in.lengths = lengths, in.pooled = d_pooled.ptr, in.dense = d_dense.ptr;
  in.labels = d_labels.ptr, in.masks = d_masks.ptr;
  GemBatchOutput out;
  out.logits = d_logits.ptr, out.loss = d_loss.ptr, out.param_grad = d_grad.ptr, out.pooled_grad = d_pooled_grad.ptr;
  for (int j = 0; j < J; ++j) {
    d_events.push_back(std::make_unique<DeviceArray<float>>(events[j]));
    d_events_grad.push_back(std::make_unique<DeviceArray<float>>(std::vector<float>(events[j].size())));
    in.events.push_back(EventRows{d_events[j]->ptr});
    out.events_grad.push_back(d_events_grad[j]->ptr);
  }
  const absl::Status ran = (*gpu)->Run(d_params.ptr, in, out, nullptr);
  ASSERT_TRUE(ran.ok()) << ran;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> logits = d_logits.Get(static_cast<size_t>(B) * T);
  const std::vector<double> loss = d_loss.Get(1);
  const std::vector<float> grad = d_grad.Get(params.size());
  EXPECT_LE(RelL2(logits, want.logits.data(), logits.size()), bounds.logits);
  EXPECT_NEAR(loss[0], want.loss, bounds.loss_abs + bounds.loss_rel * std::abs(want.loss));
  int shown = 0;
  double worst = 0;
  std::string worst_name;
  for (const gemtb::model::ParamInfo& p : g.layout.params()) {
    const std::vector<float> mine(grad.begin() + static_cast<long>(p.ref.offset),
                                  grad.begin() + static_cast<long>(p.ref.offset + p.ref.size));
    const double e = RelL2(mine, want.param_grad.data() + p.ref.offset, p.ref.size);
    if (!(e <= bounds.grads) && shown++ < 20) ADD_FAILURE() << "gradient of " << p.name << ": rel-L2 " << e;
    if (e > worst) worst = e, worst_name = p.name;
  }
  std::printf("matmul %s, attention %s, ffn %s, attention blocks %s, %s kernels, batch %d: logits rel-L2 %.3g, "
              "worst gradient rel-L2 %.3g (%s)\n",
              PrecisionName(numerics.matmul), PrecisionName(numerics.attention), PrecisionName(numerics.ffn),
              PrecisionName(numerics.attention_blocks), BlockKernelsName(numerics.block_kernels), batch,
              RelL2(logits, want.logits.data(), logits.size()), worst, worst_name.c_str());
  std::vector<float> want_pooled;
  for (int b = 0; b < B; ++b) want_pooled.insert(want_pooled.end(), want.input_grads[b].pooled.begin(), want.input_grads[b].pooled.end());
  EXPECT_LE(RelL2(d_pooled_grad.Get(pooled.size()), want_pooled.data(), pooled.size()), bounds.grads) << "pooled gradient";
  for (int j = 0; j < J; ++j) {
    std::vector<float> want_events;
    for (int b = 0; b < B; ++b)
      want_events.insert(want_events.end(), want.input_grads[b].events[j].begin(), want.input_grads[b].events[j].end());
    EXPECT_LE(RelL2(d_events_grad[j]->Get(events[j].size()), want_events.data(), want_events.size()), bounds.grads)
        << "events gradient of sequence " << j;
  }

  // Determinism: a second pass writes the same bytes.
  const absl::Status run = (*gpu)->Run(d_params.ptr, in, out, nullptr);
  ASSERT_TRUE(run.ok()) << run;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_grad.Get(params.size()), grad);
  EXPECT_EQ(d_logits.Get(logits.size()), logits);
}

TEST(GemModelGpuTest, MatchesTheOracleBatchPassOnTiny) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  ExpectMatchesTheOracle(12);
}

// Enough rows (about 19,000 per sequence) that weight gradients and column sums run as partitioned
// sums over row blocks (gem_model.cc's WeightGrad, model_kernels.h's ColumnSums).
TEST(GemModelGpuTest, MatchesTheOracleBatchPassOnALargeBatch) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  ExpectMatchesTheOracle(400);
}

// Two Wukong experts (each half of the FMB MLP's hidden width, one shared output bias), every expert
// run on this GPU: the experts' gradients and everything downstream as closely as one expert's.
TEST(GemModelGpuTest, MatchesTheOracleWithTwoWukongExperts) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  ExpectMatchesTheOracle(12, {}, kFp32Bounds, 2);
  ExpectMatchesTheOracle(400, {}, kFp32Bounds, 2);
  ExpectMatchesTheOracle(12, GemModelOptions{MatmulPrecision::kTf32, AttentionPrecision::kBf16}, kBf16Bounds, 2);
}

TEST(GemModelGpuTest, TensorCorePrecisionsStayWithinTheBf16Bounds) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  for (const AttentionPrecision attention : {AttentionPrecision::kFp32, AttentionPrecision::kBf16}) {
    ExpectMatchesTheOracle(12, GemModelOptions{MatmulPrecision::kTf32, attention}, kBf16Bounds);
  }
  ExpectMatchesTheOracle(400, GemModelOptions{MatmulPrecision::kTf32, AttentionPrecision::kBf16}, kBf16Bounds);
}

// The feed-forward block in bf16 (its input, hidden arrays, gradients and weights rounded to bf16,
// the products accumulated in fp32) within the same bounds, with the rest in the training precision; with
// one kernel per op and with the fused block kernels.
TEST(GemModelGpuTest, Bf16FeedForwardStaysWithinTheBf16Bounds) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  GemModelOptions bf16_ffn{MatmulPrecision::kTf32, AttentionPrecision::kBf16, FfnPrecision::kBf16};
  for (const BlockKernels kernels : {BlockKernels::kSeparate, BlockKernels::kFused}) {
    bf16_ffn.block_kernels = kernels;
    ExpectMatchesTheOracle(12, bf16_ffn, kBf16Bounds);
    ExpectMatchesTheOracle(400, bf16_ffn, kBf16Bounds);
  }
}

// At d = 128 (small's width, the one the benchmarks train) with the rest of tiny: the bf16 blocks with
// one kernel per op and with the fused kernels at the widest width they take; with either, the
// feed-forward's forward after its LayerNorm is one kernel at this width (ffn_forward.h), and with
// separate kernels so is its backward's hidden gradient (ffn_hidden_grad.h).
TEST(GemModelGpuTest, Bf16BlocksAtWidth128StayWithinTheBf16Bounds) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  for (const BlockKernels kernels : {BlockKernels::kSeparate, BlockKernels::kFused}) {
    GemModelOptions both{MatmulPrecision::kTf32, AttentionPrecision::kBf16, FfnPrecision::kBf16,
                         AttentionBlockPrecision::kBf16, kernels};
    ExpectMatchesTheOracle(12, both, kBf16Bounds, 1, 128);
  }
}

// The attention blocks in bf16 (q, k, v, the normed q and k, GDPA's output, their gradients and the
// projections' weights rounded to bf16, the products accumulated in fp32), alone and with the bf16
// feed-forward block, within the same bounds; with two Wukong experts too; with one kernel per op and
// with the blocks' fused kernels (tiny's widths are ones they take).
TEST(GemModelGpuTest, Bf16AttentionBlocksStayWithinTheBf16Bounds) {
  if (!HaveSm90()) GTEST_SKIP() << "no sm_90 GPU";
  for (const BlockKernels kernels : {BlockKernels::kSeparate, BlockKernels::kFused}) {
    GemModelOptions blocks{MatmulPrecision::kTf32, AttentionPrecision::kBf16};
    blocks.attention_blocks = AttentionBlockPrecision::kBf16;
    blocks.block_kernels = kernels;
    ExpectMatchesTheOracle(12, blocks, kBf16Bounds);
    ExpectMatchesTheOracle(400, blocks, kBf16Bounds);
    GemModelOptions both = blocks;
    both.ffn = FfnPrecision::kBf16;
    ExpectMatchesTheOracle(400, both, kBf16Bounds);
    ExpectMatchesTheOracle(12, both, kBf16Bounds, 2);
  }
}

}  // namespace
}  // namespace gemtb::gpu::train
