#include "model/description/gem_geometry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/description/layer_params.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::model {
namespace {

void AddCross(ParamLayout& L, const GemGeometry& g, const std::string& name) {
  AddTokenMix(L, name + ".lce_s", g.n_x, g.n_s);
  AddLinear(L, name + ".x_gate", g.d, g.d);
  for (int j = 0; j < g.num_sequences(); ++j) {
    const std::string sj = absl::StrCat(name, ".seq", j);
    L.Add(sj + ".pma.seeds", {g.k_p, g.d}, ParamInit::kFanIn, 1);  // uniform(-1, 1)
    AddAttention(L, sj + ".pma", g.d);
    AddLinear(L, sj + ".sum_gate", g.d, g.d);
  }
}

}  // namespace

absl::StatusOr<GemGeometry> MakeGemGeometry(const ModelConfig& c) {
  GemGeometry g;
  auto bad = [](const std::string& s) { return absl::InvalidArgumentError(s); };
  if (c.d <= 0 || c.heads <= 0 || c.d % c.heads != 0 || (c.d / c.heads) % 2 != 0)
    return bad(absl::StrCat("heads: d ", c.d, " / heads ", c.heads, " must be an even integer head dim"));
  for (const auto& t : c.tables)
    if (t.dim != c.d) return bad(absl::StrCat("tables.", t.name, ".dim: ", t.dim, " != d ", c.d));
  for (const auto& f : c.features)
    if (f.pooling == Pooling::kNone)
      return bad(absl::StrCat("features.", f.name, ".pooling: none is not a pooled feature"));
  if (c.head.widths.size() < 2) return bad("head.widths: needs at least input and output widths");
  g.d = static_cast<int>(c.d);
  g.heads = static_cast<int>(c.heads);
  g.num_features = static_cast<int>(c.features.size());
  g.dense_m = static_cast<int>(c.dense.m);
  g.n_d = static_cast<int>(c.dense.n_d);
  g.n_x = static_cast<int>(c.arch.n_x);
  g.n_s = static_cast<int>(c.arch.n_s);
  g.k_p = static_cast<int>(c.arch.k_p);
  g.k_r = static_cast<int>(c.arch.k_r);
  g.wk_k = static_cast<int>(c.arch.wukong.k);
  g.n_f = static_cast<int>(c.arch.wukong.n_f);
  g.n_l = static_cast<int>(c.arch.wukong.n_l);
  g.wk_h = static_cast<int>(c.arch.wukong.hidden);
  g.experts = static_cast<int>(c.arch.wukong.experts.count);  // dividing H (model_config.cc checks it)
  g.ffn = static_cast<int>(c.arch.f * c.d);
  g.num_tasks = static_cast<int>(c.NumTasks());
  g.layers = static_cast<int>(c.arch.layers);
  g.compskip = c.arch.compskip;
  if (g.n_f + g.n_l != g.n_x) return bad(absl::StrCat("arch.wukong.n_f + n_l: ", g.n_f + g.n_l, " != n_x ", g.n_x));
  const int d = g.d;
  int max_tokens = 1;
  for (const auto& s : c.sequences) {
    GemSequenceGeometry info;
    info.lmax = static_cast<int>(s.lmax);
    if (s.act != Activation::kSilu)
      return absl::UnimplementedError(
          absl::StrCat("sequences.", s.name, ".act: softmax (the model's executors run SiLU GDPA)"));
    if (s.rope == RopeKind::kLogDt)
      return absl::UnimplementedError(absl::StrCat("sequences.", s.name, ".rope: log_dt (position RoPE only)"));
    info.rope = s.rope == RopeKind::kPosition;
    if (s.attention == SeqAttentionKind::kWindow) {
      info.window = static_cast<int>(s.window);
      info.self_post = 1.0 / static_cast<double>(2 * s.window + 1);  // SiLU scale 1/(2w+1)
    } else {
      info.block = static_cast<int>(s.block);
      info.self_post = 1.0 / static_cast<double>(s.block);
    }
    max_tokens = std::max(max_tokens, info.lmax + g.n_s);
    g.seqs.push_back(info);
  }
  const int J = g.num_sequences();
  if (c.head.widths.front() != (g.n_s + J * g.n_sum()) * d)
    return bad(absl::StrCat("head.widths[0]: ", c.head.widths.front(), " != ", (g.n_s + J * g.n_sum()) * d));
  if (c.head.widths.back() != g.num_tasks)
    return bad(absl::StrCat("head.widths[-1]: ", c.head.widths.back(), " != tasks ", g.num_tasks));
  for (auto w : c.head.widths) g.head_widths.push_back(static_cast<int>(w));
  g.rope_rows = max_tokens;

  ParamLayout& L = g.layout;
  AddLinear(L, "embed.dense", g.dense_m, g.n_d * d);
  AddTokenMix(L, "embed.lce_in", g.num_features + g.n_d, g.n_x);
  const int n_z = g.n_z();
  for (int l = 0; l < g.layers; ++l) {
    const std::string name = absl::StrCat("L", l + 1);
    AddCross(L, g, name + ".cross");
    L.Add(name + ".wukong.y", {n_z, g.wk_k}, ParamInit::kFanIn, n_z);
    AddLayerNorm(L, name + ".wukong.ln_flat", n_z * g.wk_k);
    if (g.experts == 1) {
      AddLinear(L, name + ".wukong.mlp1", n_z * g.wk_k, g.wk_h);
      AddLinear(L, name + ".wukong.mlp2", g.wk_h, g.n_f * d);
    } else {
      // y = sum_e MLP_e(x), each H / E wide, with one output bias.
      const int he = g.wk_h / g.experts;
      for (int e = 0; e < g.experts; ++e) {
        AddLinear(L, absl::StrCat(name, ".wukong.mlp1.e", e), n_z * g.wk_k, he);
        L.Add(absl::StrCat(name, ".wukong.mlp2.e", e, ".w"), {he, g.n_f * d}, ParamInit::kFanIn, he);
      }
      L.Add(name + ".wukong.mlp2.b", {g.n_f * d}, ParamInit::kZero);
    }
    AddTokenMix(L, name + ".wukong.lcb", n_z, g.n_l);
    AddTokenMix(L, name + ".wukong.lce_res", n_z, g.n_x);
    AddLayerNorm(L, name + ".wukong.ln_out", d);
    for (int j = 0; j < J; ++j) {
      const std::string sj = absl::StrCat(name, ".seq", j);
      AddLayerNorm(L, sj + ".ln_a", d);
      AddAttention(L, sj + ".attn_a", d);
      AddLayerNorm(L, sj + ".ln_b", d);
      AddAttention(L, sj + ".attn_b", d);
      AddLayerNorm(L, sj + ".ln_c", d);
      AddLinear(L, sj + ".ffn1", d, g.ffn);
      AddLinear(L, sj + ".ffn2", g.ffn, d);
    }
  }
  AddCross(L, g, "final.cross");
  for (size_t i = 0; i + 1 < g.head_widths.size(); ++i)
    AddLinear(L, absl::StrCat("head.mlp", i), g.head_widths[i], g.head_widths[i + 1]);
  return g;
}

EmbeddingConfig GemEmbeddingConfig(const ModelConfig& config, float table_lr, uint64_t seed) {
  EmbeddingConfig e;
  e.seed = seed;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableSpec& spec = config.tables[t];
    TableConfig tc;
    tc.name = spec.name;
    tc.rows = spec.rows;
    tc.dim = spec.dim;
    tc.dtype = ElementType::kFloat32;
    tc.hashing = spec.hashing;
    tc.bounds = BoundsMode::kError;
    tc.hash_seed = embedding::DefaultHashSeed(static_cast<int>(t));
    tc.optimizer.kind = OptimizerKind::kRowwiseAdagrad;
    tc.optimizer.lr = table_lr;
    e.tables.push_back(tc);
  }
  for (const auto& f : config.features) {
    FeatureConfig fc;
    fc.key = f.name;
    fc.table = f.table_index;
    fc.pooling = f.pooling;
    fc.max_len = f.max_len;
    e.features.push_back(fc);
  }
  for (const auto& s : config.sequences) {
    const int tables[3] = {s.item_table_index, s.action_table_index, s.dt_table_index};
    const char* parts[3] = {"item", "action", "dt"};
    for (int k = 0; k < 3; ++k) {
      FeatureConfig fc;
      fc.key = absl::StrCat(s.name, ".", parts[k]);
      fc.table = tables[k];
      fc.pooling = Pooling::kNone;
      fc.max_len = s.lmax;
      e.features.push_back(fc);
    }
  }
  return e;
}

namespace {

// An invariant of the layout this file builds: a message and abort when it does not hold.
void Invariant(bool holds, const std::string& what) {
  if (holds) return;
  std::fprintf(stderr, "ParamUnits: %s\n", what.c_str());
  std::abort();
}

// The region a parameter of the layout belongs to, from its name (the layout's naming above).
std::string RegionOfParam(const std::string& name) {
  const size_t dot = name.find('.');
  const std::string head = name.substr(0, dot);
  if (head == "embed") return "E.dense";
  if (head == "final") return "F.cross";
  if (head == "head") return "head";
  const size_t second = name.find('.', dot + 1);
  Invariant(head.size() > 1 && head[0] == 'L' && dot != std::string::npos, "parameter " + name + " has no region");
  return name.substr(0, second);
}

}  // namespace

std::vector<ParamUnit> ParamUnits(const GemGeometry& g) {
  std::vector<ParamUnit> units;
  for (const ParamInfo& p : g.layout.params()) {
    const std::string region = RegionOfParam(p.name);
    const int64_t first = static_cast<int64_t>(p.ref.offset), count = static_cast<int64_t>(p.ref.size);
    if (!units.empty() && units.back().region == region) {
      Invariant(units.back().first + units.back().count == first, "parameter " + p.name + " leaves a gap");
      units.back().count += count;
      continue;
    }
    for (const ParamUnit& u : units) Invariant(u.region != region, "region " + region + " is not contiguous");
    units.push_back({region, first, count});
  }
  return units;
}

std::vector<int> ExpertsOfMember(int experts, int degree, int member) {
  std::vector<int> mine;
  for (int e = 0; e < experts; ++e)
    if (MemberRunsExpert(e, degree, member)) mine.push_back(e);
  return mine;
}

absl::Status CheckExpertDegree(const GemGeometry& g, int degree, const std::string& field) {
  if (degree < 1 || g.experts % degree != 0)
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", degree, " does not divide the model's ", g.experts,
                                                   g.experts == 1 ? " Wukong expert" : " Wukong experts",
                                                   " (arch.wukong.experts.count)"));
  return absl::OkStatus();
}

}  // namespace gemtb::model
