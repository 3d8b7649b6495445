// Op graph expansion: parameter counts equal the table of model/description/README.md to its printed precision, model
// FLOPs per sample within 10 % of the counting rules, region and op conventions.
#include <cmath>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "model/attention/attention_options.h"
#include "model/description/graph_costs.h"
#include "model/description/model_graph.h"

namespace gemtb::model {
namespace {

ModelGraph Expand(const std::string& name) {
  auto config = LoadModelConfig(name);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return ModelGraph{};
  auto graph = ExpandModel(*config);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *graph : ModelGraph{};
}

// The leading `digits` significant digits of v, rounded, as the README's table prints them
// (Printed(32009283, 3) = 320).
int64_t Printed(double v, int digits) {
  const int shift = digits - 1 - static_cast<int>(std::floor(std::log10(v)));
  return static_cast<int64_t>(std::llround(v * std::pow(10.0, shift)));
}

double ModelFlopsPerSample(const ModelGraph& g, double sparsity, int64_t batch) {
  const GraphTotals t = EvaluateGraph(g, batch, LengthsAtSparsity(g, sparsity));
  return t.model.flops_fwd / static_cast<double>(batch);
}

// README table: tiny 0.58 M sparse / 0.229 M dense.
TEST(ModelGraph, TinyParamsEqualReadmeTable) {
  const ModelGraph g = Expand("tiny");
  EXPECT_EQ(Printed(static_cast<double>(SparseParamCount(g)), 2), 58);  // 0.58 M
  EXPECT_EQ(Printed(static_cast<double>(DenseParamCount(g)), 3), 229);  // 0.229 M
  // Hand count with the counting rules: E 288 + 80; per layer cross 11760, Wukong 37904,
  // 2 x seq 12832; final cross 11760; head 65858.
  EXPECT_EQ(DenseParamCount(g), 368 + 2 * (11760 + 37904 + 2 * 12832) + 11760 + 65858);
}

// small: 2.69 B / 32.0 M.
TEST(ModelGraph, SmallParamsEqualReadmeTable) {
  const ModelGraph g = Expand("small");
  EXPECT_EQ(Printed(static_cast<double>(SparseParamCount(g)), 3), 269);  // 2.69 B
  EXPECT_EQ(Printed(static_cast<double>(DenseParamCount(g)), 3), 320);  // 32.0 M
  // E 16640 + 1088; per layer cross 348928, Wukong 4733440, 4 x seq 264576; head 7079939.
  EXPECT_EQ(DenseParamCount(g), 17728 + 4 * (348928 + 4733440 + 4 * 264576) + 348928 + 7079939);
}

// gem-scale: ≈2.05 T / ≈8.21 B.
TEST(ModelGraph, GemScaleParamsEqualReadmeTable) {
  const ModelGraph g = Expand("gem-scale");
  EXPECT_EQ(Printed(static_cast<double>(SparseParamCount(g)), 3), 205);  // 2.05 T
  EXPECT_EQ(Printed(static_cast<double>(DenseParamCount(g)), 3), 821);  // 8.21 B
  // E 4198400 + 716*512; per layer cross 3404544, Wukong 1310216704, 10 x seq 1053440;
  // head 261102088.
  EXPECT_EQ(DenseParamCount(g),
            int64_t{4198400} + 716 * 512 + 6 * (int64_t{3404544} + 1310216704 + 10 * 1053440) + 3404544 + 261102088);
}

// Forward FLOPs per sample at sparsity 0.5 + CLS within 10 % of the counting rules: ≈6.2 M, ≈4.1 G,
// ≈290 G (the rules leave out the final cross's PMA and the per-sample cross/LCE GEMMs; the graph
// counts them).
TEST(ModelGraph, FlopsPerSampleWithinTenPercentOfCountingRules) {
  EXPECT_NEAR(ModelFlopsPerSample(Expand("tiny"), 0.5, 64) / 6.2e6, 1.0, 0.10);
  EXPECT_NEAR(ModelFlopsPerSample(Expand("small"), 0.5, 1024) / 4.1e9, 1.0, 0.10);
  EXPECT_NEAR(ModelFlopsPerSample(Expand("gem-scale"), 0.5, 1024) / 290e9, 1.0, 0.10);
}

TEST(ModelGraph, TokensPerSampleMatchReadmeTable) {
  for (const auto& [name, tokens] : {std::pair<std::string, int64_t>{"tiny", 100},
                                     {"small", 1712}, {"gem-scale", 20640}}) {
    const ModelGraph g = Expand(name);
    const std::vector<int64_t> l = LengthsAtSparsity(g, 0.5);
    int64_t total = 0;
    for (size_t j = 0; j < l.size(); ++j) total += l[j] + g.sequences[j].n_s;
    EXPECT_EQ(total, tokens) << name;
  }
}

TEST(ModelGraph, OpConventions) {
  const ModelGraph g = Expand("gem-scale");
  std::set<std::string> names;
  int experts_seen = 0;
  for (const Op& op : g.ops) {
    EXPECT_TRUE(names.insert(op.name).second) << op.name;
    EXPECT_EQ(op.name.rfind(op.region + ".", 0), 0u) << op.name << " in " << op.region;
    EXPECT_EQ(op.kind == OpKind::kAttention, op.attn.has_value()) << op.name;
    EXPECT_EQ(op.local_mfu, op.kind == OpKind::kLinear || op.kind == OpKind::kAttention ||
                                op.kind == OpKind::kInteraction) << op.name;
    if (!op.seq.has_value()) {
      EXPECT_EQ(op.flops.fwd.N, 0.0) << op.name;
      EXPECT_EQ(op.flops.fwd.P, 0.0) << op.name;
    }
    if (op.expert.has_value()) ++experts_seen;
    // Every GDPA use (PMA, cross- and self-attention) norms q and k per head, as the executors do.
    if (op.kind == OpKind::kAttention) {
      EXPECT_TRUE(op.attn->qk_norm) << op.name;
    }
    if (op.kind == OpKind::kAttention && op.attn->q_tokens == 0 && op.attn->kv_tokens == 0) {
      EXPECT_EQ(op.attn->mask.kind, MaskKind::kBlock) << op.name;
      EXPECT_EQ(op.attn->mask.block, 64);
      // 2 H (Dqk + Dv) per pair forward, 2.5x backward.
      EXPECT_EQ(op.flops.fwd.P, 2.0 * 4 * (64 + 64));
      EXPECT_EQ(op.flops.bwd.P, 2.5 * 2.0 * 4 * (64 + 64));
    }
  }
  // 6 layers x 2 experts x (mlp1, act, mlp2).
  EXPECT_EQ(experts_seen, 6 * 2 * 3);
  EXPECT_EQ(g.experts.count, 2);
  EXPECT_EQ(g.experts.shard_group, 16);
  EXPECT_EQ(g.ops.front().region, "E.sparse");
  EXPECT_EQ(g.ops.back().name, "head.loss");
}

TEST(ModelGraph, TinyWindowOpMatchesWorkedExample) {
  // An example op: L1.seq0.swa, silu, H 2, D 16, window [16, 16], flops fwd P 128, bwd 320.
  const ModelGraph g = Expand("tiny");
  const Op* swa = nullptr;
  for (const Op& op : g.ops) {
    if (op.name == "L1.seq0.swa") swa = &op;
  }
  ASSERT_NE(swa, nullptr);
  EXPECT_EQ(swa->region, "L1.seq0");
  EXPECT_EQ(swa->seq, std::optional<int>(0));
  EXPECT_EQ(swa->params, 0);
  EXPECT_EQ(swa->attn->act, Activation::kSilu);
  EXPECT_EQ(swa->attn->H, 2);
  EXPECT_EQ(swa->attn->Dqk, 16);
  EXPECT_EQ(swa->attn->mask, (AttentionMask{MaskKind::kWindow, 16, 16, 0}));
  EXPECT_EQ(swa->flops.fwd, (Affine{0, 0, 0, 128}));
  EXPECT_EQ(swa->flops.bwd, (Affine{0, 0, 0, 320}));
  EXPECT_EQ(swa->saved.recompute, RecomputeClass::kAttention);
}

// Brute-force pair count straight from the mask's keep rule.
int64_t BrutePairs(const AttentionMask& m, int64_t L) {
  int64_t n = 0;
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t t = 0; t < L; ++t) {
      bool keep = true;
      if (m.kind == MaskKind::kWindow) {
        keep = (m.left < 0 || t >= i - m.left) && (m.right < 0 || t <= i + m.right);
      } else if (m.kind == MaskKind::kCausal) {
        keep = t <= i;
      } else if (m.kind == MaskKind::kBlock) {
        keep = i / m.block == t / m.block;
      }
      n += keep ? 1 : 0;
    }
  }
  return n;
}

TEST(PairsUnderMask, EqualsBruteForce) {
  using K = MaskKind;
  const AttentionMask masks[] = {{K::kNone, -1, -1, 0},  {K::kCausal, -1, 0, 0},
                                 {K::kWindow, 16, 16, 0}, {K::kWindow, 3, 0, 0},
                                 {K::kWindow, -1, 2, 0},  {K::kWindow, 0, 0, 0},
                                 {K::kWindow, 5, -1, 0},  {K::kBlock, -1, -1, 64},
                                 {K::kBlock, -1, -1, 7}};
  for (const AttentionMask& m : masks) {
    for (int64_t L : {0, 1, 2, 5, 16, 17, 33, 34, 63, 64, 65, 130}) {
      EXPECT_EQ(PairsUnderMask(m, L), BrutePairs(m, L))
          << "kind " << static_cast<int>(m.kind) << " l " << m.left << " r " << m.right << " L " << L;
    }
  }
}

// The O(1) count agrees with the key ranges the executors iterate (ValidKeys of AttentionOptions
// carrying the same mask), for both alignments (Lq = Lk, so they agree).
TEST(PairsUnderMask, EqualsExecutorKeyRanges) {
  using K = MaskKind;
  const AttentionMask masks[] = {{K::kNone, -1, -1, 0},  {K::kCausal, -1, 0, 0}, {K::kWindow, 16, 16, 0},
                                 {K::kWindow, 3, 0, 0},  {K::kWindow, -1, 2, 0}, {K::kBlock, -1, -1, 64},
                                 {K::kBlock, -1, -1, 7}, {K::kBlock, -1, -1, 1}};
  for (const AttentionMask& m : masks) {
    for (Alignment align : {Alignment::kBottomRight, Alignment::kTopLeft}) {
      AttentionOptions o;
      o.align = align;
      SetMask(m, &o);
      EXPECT_EQ(MaskOf(o), m);
      for (int64_t L : {0, 1, 2, 5, 17, 64, 65, 130}) {
        int64_t keys = 0;
        for (int64_t i = 0; i < L; ++i) {
          const KeyRange r = ValidKeys(o, i, L, L);
          keys += r.end - r.begin;
        }
        EXPECT_EQ(PairsUnderMask(m, L), keys) << MaskKindName(m.kind) << " l " << m.left << " r " << m.right
                                              << " block " << m.block << " L " << L;
      }
    }
  }
}

TEST(ModelGraph, CompskipAlternatesCrossAndSelf) {
  auto config = LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  config->arch.compskip = true;
  auto graph = ExpandModel(*config);
  ASSERT_TRUE(graph.ok());
  std::set<std::string> names;
  for (const Op& op : graph->ops) names.insert(op.name);
  EXPECT_EQ(names.count("L1.seq0.xattn"), 1u);
  EXPECT_EQ(names.count("L1.seq0.swa"), 0u);
  EXPECT_EQ(names.count("L2.seq0.xattn"), 0u);
  EXPECT_EQ(names.count("L2.seq0.swa"), 1u);
}

TEST(ModelGraph, RejectsInconsistentHandBuiltConfig) {
  auto config = LoadModelConfig("tiny");
  ASSERT_TRUE(config.ok());
  ModelConfig bad = *config;
  bad.heads = 3;
  EXPECT_FALSE(ExpandModel(bad).ok());
  bad = *config;
  bad.features[0].table_index = 99;
  EXPECT_FALSE(ExpandModel(bad).ok());
  bad = *config;
  bad.head.widths.back() = 5;
  EXPECT_FALSE(ExpandModel(bad).ok());
}

}  // namespace
}  // namespace gemtb::model
