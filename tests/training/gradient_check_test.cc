// row 6: fp64 central differences (h = 1e-6) of the whole tiny model, random directions,
// relative error <= 1e-6. The model is smooth everywhere (GELU, SiLU, sigmoid gates, LayerNorm,
// RMS QK-norm, BCE with logits), so the smooth variant is the model itself.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/description/model_config.h"
#include "reference/model/batch_pass.h"
#include "reference/model/embedding_gather.h"
#include "reference/model/gem_model.h"
#include "reference/model/params.h"
#include "tests/training/random_batch.h"

namespace gemtb::reference::model {
namespace {

constexpr double kH = 1e-6;
constexpr double kTolerance = 1e-6;

struct Problem {
  gemtb::model::ModelConfig config;
  GemModel model;
  EmbeddingConfig emb;
  TrainBatch batch;
  std::vector<double> params;
  std::vector<std::vector<double>> tables;
};

// `experts` > 1: tiny's Wukong MLP as that many experts (H split among them).
Problem MakeProblem(uint64_t seed, int64_t experts = 1) {
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  config->arch.wukong.experts.count = experts;
  absl::StatusOr<GemModel> model = GemModel::Create(*config);
  EXPECT_TRUE(model.ok()) << model.status();
  Problem p{*config, *model, ModelEmbeddingConfig(*config, 0.1f, seed), {}, {}, {}};
  // Sequences up to 40 events: longer than the window (2w+1 = 33 keys), so the mask is exercised,
  // and shorter than K_r for some samples (zero-padded REC).
  p.batch = gemtb::testing::RandomBatch(p.config, 3, seed, 40);
  std::mt19937_64 rng(seed + 17);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<float> init = InitParams(p.model.layout(), seed);
  // Perturb the init so that biases, LayerNorm betas etc. are non-zero and nothing is at a special point.
  for (float w : init) p.params.push_back(static_cast<double>(w) + 0.05 * normal(rng));
  for (const auto& t : p.config.tables) {
    std::vector<double> w(static_cast<size_t>(t.rows * t.dim));
    for (double& x : w) x = 0.3 * normal(rng);
    p.tables.push_back(std::move(w));
  }
  return p;
}

double Loss(const Problem& p, const std::vector<double>& params, const std::vector<std::vector<double>>& tables) {
  GatheredBatch<double> g = GatherBatch(p.config, p.emb, tables, p.batch);
  BatchPassOptions o;
  o.backward = false;
  return RunBatch(p.model, params.data(), g.inputs, p.batch.labels, p.batch.masks, o).loss;
}

struct Gradient {
  std::vector<double> params;
  std::vector<std::vector<double>> tables;
};

Gradient Grad(const Problem& p) {
  GatheredBatch<double> g = GatherBatch(p.config, p.emb, p.tables, p.batch);
  BatchPassResult<double> r = RunBatch(p.model, p.params.data(), g.inputs, p.batch.labels, p.batch.masks, {});
  Gradient out;
  out.params = r.param_grad;
  for (const auto& t : p.tables) out.tables.emplace_back(t.size(), 0.0);
  ScatterBatchGrad(p.config, p.emb, p.batch, r.input_grads, out.tables);
  return out;
}

// (L(x + h u) - L(x - h u)) / 2h against grad . u for direction u over params (mask_params) and tables.
double RelativeError(const Problem& p, const Gradient& g, const std::vector<double>& u_params,
                     const std::vector<std::vector<double>>& u_tables, double* analytic_out = nullptr,
                     double floor = 1e-300) {
  double analytic = 0;
  for (size_t e = 0; e < u_params.size(); ++e) analytic += g.params[e] * u_params[e];
  for (size_t t = 0; t < u_tables.size(); ++t)
    for (size_t e = 0; e < u_tables[t].size(); ++e) analytic += g.tables[t][e] * u_tables[t][e];
  std::vector<double> pp = p.params, pm = p.params;
  for (size_t e = 0; e < pp.size(); ++e) {
    pp[e] += kH * u_params[e];
    pm[e] -= kH * u_params[e];
  }
  std::vector<std::vector<double>> tp = p.tables, tm = p.tables;
  for (size_t t = 0; t < tp.size(); ++t)
    for (size_t e = 0; e < tp[t].size(); ++e) {
      tp[t][e] += kH * u_tables[t][e];
      tm[t][e] -= kH * u_tables[t][e];
    }
  const double fd = (Loss(p, pp, tp) - Loss(p, pm, tm)) / (2 * kH);
  if (analytic_out) *analytic_out = analytic;
  return std::abs(fd - analytic) / std::max(std::abs(analytic), floor);
}

TEST(GradientCheck, WholeTinyModelMatchesCentralDifferencesInRandomDirections) {
  const Problem p = MakeProblem(7);
  const Gradient g = Grad(p);
  std::mt19937_64 rng(99);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<double> up(p.params.size());
    for (double& x : up) x = normal(rng);
    std::vector<std::vector<double>> ut;
    for (const auto& t : p.tables) {
      std::vector<double> u(t.size());
      for (double& x : u) x = normal(rng);
      ut.push_back(std::move(u));
    }
    double analytic = 0;
    const double err = RelativeError(p, g, up, ut, &analytic);
    EXPECT_LE(err, kTolerance) << "trial " << trial << " analytic " << analytic;
  }
}

// Two Wukong experts (y = sum_e MLP_e(x) with one output bias): every parameter tensor, the experts'
// own included, against central differences.
TEST(GradientCheck, TwoWukongExpertsMatchCentralDifferences) {
  const Problem p = MakeProblem(13, 2);
  const Gradient g = Grad(p);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> zero_tables;
  for (const auto& t : p.tables) zero_tables.emplace_back(t.size(), 0.0);
  int expert_tensors = 0;
  for (const ParamInfo& info : p.model.layout().params()) {
    if (info.name.find(".wukong.mlp") == std::string::npos) continue;
    ++expert_tensors;
    std::vector<double> up(p.params.size(), 0.0);
    for (size_t e = 0; e < info.ref.size; ++e) up[info.ref.offset + e] = normal(rng);
    double analytic = 0;
    const double err = RelativeError(p, g, up, zero_tables, &analytic, 1e-3);
    EXPECT_LE(err, kTolerance) << info.name << " analytic " << analytic;
  }
  // Per layer: mlp1.e0 (w, b), mlp2.e0.w, mlp1.e1 (w, b), mlp2.e1.w, mlp2.b.
  EXPECT_EQ(expert_tensors, 7 * static_cast<int>(p.config.arch.layers));
  std::vector<double> up(p.params.size());
  for (double& x : up) x = normal(rng);
  EXPECT_LE(RelativeError(p, g, up, zero_tables), kTolerance);
}

// y = sum_e MLP_e(x): two experts holding the halves of one MLP's hidden units (the first layer's
// columns and biases, the second layer's rows, its bias shared) compute the one-expert model.
TEST(GradientCheck, TwoExpertsHoldingHalvesOfTheMlpAreTheOneExpertModel) {
  const Problem one = MakeProblem(17), two = MakeProblem(17, 2);
  const ParamLayout& l1 = one.model.layout();
  auto slice = [&](const std::string& name) {
    for (const ParamInfo& info : l1.params())
      if (info.name == name) return info;
    ADD_FAILURE() << "no " << name;
    return ParamInfo{};
  };
  std::vector<double> params(two.params.size(), 0.0);
  const int64_t H = one.config.arch.wukong.hidden, he = H / 2;
  for (const ParamInfo& info : two.model.layout().params()) {
    double* dst = params.data() + info.ref.offset;
    const size_t e_at = info.name.find(".e");
    const bool expert = info.name.find(".wukong.mlp") != std::string::npos && e_at != std::string::npos;
    if (!expert) {  // the same parameter (mlp2.b is the one MLP's output bias)
      const ParamInfo& src = slice(info.name);
      std::copy_n(one.params.data() + src.ref.offset, info.ref.size, dst);
      continue;
    }
    const int e = info.name[e_at + 2] - '0';
    const std::string base = info.name.substr(0, e_at);  // "L<l>.wukong.mlp1" or ".mlp2"
    const std::string part = info.name.substr(info.name.rfind('.'));  // ".w" or ".b"
    const ParamInfo& src = slice(base + part);
    const double* from = one.params.data() + src.ref.offset;
    if (base.ends_with("mlp1") && part == ".w") {  // [in, H]: columns [e he, (e + 1) he)
      const int64_t in = info.shape[0];
      for (int64_t i = 0; i < in; ++i)
        for (int64_t c = 0; c < he; ++c) dst[i * he + c] = from[i * H + e * he + c];
    } else if (base.ends_with("mlp1")) {  // bias [H]
      std::copy_n(from + e * he, he, dst);
    } else {  // mlp2 weight [H, out]: rows [e he, (e + 1) he)
      const int64_t out = info.shape[1];
      std::copy_n(from + e * he * out, he * out, dst);
    }
  }
  const double a = Loss(one, one.params, one.tables), b = Loss(two, params, one.tables);
  EXPECT_NEAR(a, b, 1e-12 * std::abs(a));
  EXPECT_NE(a, Loss(two, two.params, one.tables));  // not vacuous: the experts' own init differs
}

// The same per parameter tensor (and per table), so a failure names the layer. Some tensors move the
// loss very little (|grad . u| ~ 1e-5); there the central difference itself carries a rounding error
// of about eps * |L| / h ~ 1e-10, so the error is taken relative to max(|grad . u|, 1e-3): an
// absolute floor of 1e-9.
TEST(GradientCheck, EveryParameterTensorAndTableMatchesCentralDifferences) {
  const Problem p = MakeProblem(11);
  const Gradient g = Grad(p);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> zero_tables;
  for (const auto& t : p.tables) zero_tables.emplace_back(t.size(), 0.0);
  for (const ParamInfo& info : p.model.layout().params()) {
    std::vector<double> up(p.params.size(), 0.0);
    for (size_t e = 0; e < info.ref.size; ++e) up[info.ref.offset + e] = normal(rng);
    double analytic = 0;
    const double err = RelativeError(p, g, up, zero_tables, &analytic, 1e-3);
    EXPECT_LE(err, kTolerance) << info.name << " analytic " << analytic;
  }
  const std::vector<double> zero_params(p.params.size(), 0.0);
  for (size_t t = 0; t < p.tables.size(); ++t) {
    std::vector<std::vector<double>> ut = zero_tables;
    for (double& x : ut[t]) x = normal(rng);
    double analytic = 0;
    const double err = RelativeError(p, g, zero_params, ut, &analytic, 1e-3);
    EXPECT_LE(err, kTolerance) << "table " << p.config.tables[t].name << " analytic " << analytic;
  }
}

// counting rules for tiny, term by term (d 32, n_x 8, n_s = k_p = K_r = 2, J 2, n_z 20,
// k 8, H 128, n_F = n_L = 4, f 2, L 2, head 448-128-64-2): 0.229 M dense parameters.
TEST(ParamCount, TinyDenseParametersFollowTheCountingRules) {
  const int64_t d = 32, n_x = 8, n_s = 2, k_p = 2, J = 2, n_z = 20, k = 8, H = 128, n_f = 4, n_l = 4, f = 2;
  const int64_t attn = 4 * (d * d + d), gate = d * d + d;
  const int64_t embed = (8 * d + d) + (9 + 1) * n_x;
  const int64_t cross = n_x * n_s + gate + J * (k_p * d + attn + gate);
  const int64_t wukong = 3 * n_z * k + (n_z * k * H + H) + (H * n_f * d + n_f * d) + n_l * n_z + n_x * n_z + 2 * d;
  const int64_t seq = 2 * (attn + 2 * d) + (2 * f * d * d + f * d + d) + 2 * d;
  const int64_t head = (448 * 128 + 128) + (128 * 64 + 64) + (64 * 2 + 2);
  const int64_t expected = embed + 2 * (cross + wukong + J * seq) + cross + head;
  EXPECT_EQ(expected, 228642);
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<GemModel> model = GemModel::Create(*config);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(static_cast<int64_t>(model->layout().total()), expected);
}

}  // namespace
}  // namespace gemtb::reference::model
