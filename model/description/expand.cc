// ModelConfig -> op graph, in this layer order:
//   E stage (pooled lookups, sequence lookups, dense Linear, LCE_in),
//   per layer l: cross (X_sum; layer 1 prepends it to each sequence as CLS; per j PMA, recent
//   tokens, gate), Wukong interaction (FMB with experts, LCB, LCE_res, LN), then per sequence j
//   (a) GDPA cross-attention to X_sum, (b) window / 64-block self-attention, (c) FFN,
//   final cross, head MLP, loss.
// Regions ("<layer>.<arch>[j]") are the checkpoint regions and FSDP units: E.sparse, E.seq<j>,
// E.dense, L<l>.cross, L<l>.wukong, L<l>.seq<j>, F.cross, head.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/description/model_graph.h"
#include "model/description/op_factory.h"

namespace gemtb::model {
namespace {

using ops::Constant;
using ops::PerSample;
using ops::Tokens;
using ops::Where;

class Expander {
 public:
  explicit Expander(const ModelConfig& c) : c_(c), d_(c.d), J_(static_cast<int>(c.sequences.size())) {}

  ModelGraph Run() {
    g_.version = c_.version;
    g_.config = c_.name;
    g_.d = d_;
    for (int j = 0; j < J_; ++j) g_.sequences.push_back({j, c_.sequences[j].lmax, c_.arch.n_s});
    Tables();
    g_.experts = {c_.arch.wukong.experts.count, c_.arch.wukong.experts.shard_group};
    EmbeddingStage();
    for (int64_t l = 1; l <= c_.arch.layers; ++l) {
      const std::string layer = absl::StrCat("L", l);
      Cross(layer + ".cross", /*prepend_cls=*/l == 1);
      Wukong(layer + ".wukong");
      for (int j = 0; j < J_; ++j) SequenceArch(layer, l, j);
    }
    Cross("F.cross", /*prepend_cls=*/false);
    Head();
    return std::move(g_);
  }

 private:
  void Add(Op op) { g_.ops.push_back(std::move(op)); }

  void Tables() {
    for (const TableSpec& t : c_.tables) {
      GraphTable gt;
      gt.name = t.name;
      gt.rows = t.rows;
      gt.dim = t.dim;
      gt.dtype = t.dtype;
      gt.pooling = t.pooling;
      gt.optimizer = t.optimizer;
      g_.tables.push_back(gt);
    }
    for (const SparseFeatureSpec& f : c_.features) g_.tables[f.table_index].features.push_back(f.name);
    for (const SequenceSpec& s : c_.sequences) {
      g_.tables[s.item_table_index].features.push_back(s.name + ".item");
      g_.tables[s.action_table_index].features.push_back(s.name + ".action");
      g_.tables[s.dt_table_index].features.push_back(s.name + ".dt");
    }
  }

  // Rows of sequence j without its CLS tokens: l = N - n_s B.
  Affine EventRows() const { return Tokens(1) + PerSample(-static_cast<double>(c_.arch.n_s)); }

  void EmbeddingStage() {
    const int64_t F = static_cast<int64_t>(c_.features.size());
    if (F > 0) {
      // Expected ids per bag: bags filled uniformly in 1..max_len (the data generator's law may
      // differ; bytes are an estimate).
      double ids = 0, id_bytes = 0;
      for (const SparseFeatureSpec& f : c_.features) {
        const double mean_len = 0.5 * static_cast<double>(f.max_len + 1);
        ids += mean_len;
        id_bytes += mean_len * DtypeBytes(DtypeOf(c_.tables[f.table_index].dtype));
      }
      Add(ops::Embedding({"E.sparse.tbe", "E.sparse", std::nullopt, std::nullopt}, PerSample(ids),
                         PerSample(static_cast<double>(F)), d_, id_bytes / ids));
    }
    for (int j = 0; j < J_; ++j) {
      const SequenceSpec& s = c_.sequences[j];
      const double row_bytes = (DtypeBytes(DtypeOf(c_.tables[s.item_table_index].dtype)) +
                                DtypeBytes(DtypeOf(c_.tables[s.action_table_index].dtype)) +
                                DtypeBytes(DtypeOf(c_.tables[s.dt_table_index].dtype))) / 3.0;
      const std::string region = absl::StrCat("E.seq", j);
      Add(ops::Embedding({region + ".lookup", region, j, std::nullopt}, 3.0 * EventRows(), EventRows(),
                         d_, row_bytes));
    }
    if (c_.dense.n_d > 0) {
      Add(ops::Linear({"E.dense.linear", "E.dense", std::nullopt, std::nullopt}, PerSample(1),
                      c_.dense.m, c_.dense.n_d * d_));
    }
    Add(ops::TokenMix({"E.dense.lce_in", "E.dense", std::nullopt, std::nullopt}, F + c_.dense.n_d,
                      c_.arch.n_x, d_));
  }

  AttentionSpec BaseAttention() const {
    AttentionSpec a;
    a.H = a.Hkv = c_.heads;
    a.Dqk = a.Dv = c_.HeadDim();
    a.qk_norm = true;  // every GDPA use (PMA, cross- and self-attention) norms q and k per head
    return a;
  }

  // X_sum = Gate(LCE_s(X)); per j: S_sum,j = Gate([CLS_j || PMA_j || REC_j]).
  void Cross(const std::string& region, bool prepend_cls) {
    const int64_t n_s = c_.arch.n_s, k_p = c_.arch.k_p;
    const double ns = static_cast<double>(n_s), kp = static_cast<double>(k_p);
    const double n_sum = static_cast<double>(c_.SummaryTokens());
    const double d = static_cast<double>(d_);
    auto at = [&](const std::string& name, std::optional<int> seq) {
      return Where{region + "." + name, region, seq, std::nullopt};
    };
    Add(ops::TokenMix(at("lce_s", std::nullopt), c_.arch.n_x, n_s, d_));
    Add(ops::Linear(at("gate_proj", std::nullopt), PerSample(ns), d_, d_));
    Add(ops::Pointwise(at("gate", std::nullopt), PerSample(ns), d_, 2, 2, 4.0));
    for (int j = 0; j < J_; ++j) {
      const std::string s = absl::StrCat("seq", j, ".");
      if (prepend_cls) {
        // S_j = [X_sum || events]: N rows written from l event rows and n_s X_sum rows.
        Add(ops::Copy(at(s + "cls", j), d * Tokens(1), d * Tokens(1), Shape{Tokens(1), Constant(d)}));
      }
      if (k_p > 0) {
        // Seeds [k_p, d] are parameters of the query projection's op (batch independent).
        Add(ops::Linear(at(s + "pma_q", j), Constant(kp), d_, d_, true, k_p * d_));
        Add(ops::Linear(at(s + "pma_kv", j), Tokens(1), d_, 2 * d_));
        AttentionSpec a = BaseAttention();
        a.act = Activation::kSilu;
        a.q_tokens = k_p;
        a.broadcast_q = true;
        a.scale = 1.0 / static_cast<double>(c_.sequences[j].lmax);
        Add(ops::Attention(at(s + "pma", j), a,
                           {Constant(kp), Tokens(1), PerSample(kp), Tokens(kp)}));
        Add(ops::Linear(at(s + "pma_o", j), PerSample(kp), d_, d_));
      }
      // [CLS (first n_s) || PMA || REC (last K_r, zero-padded)].
      Add(ops::Copy(at(s + "summary", j), PerSample(n_sum * d), PerSample(n_sum * d),
                    Shape{PerSample(n_sum), Constant(d)}));
      Add(ops::Linear(at(s + "gate_proj", j), PerSample(n_sum), d_, d_));
      Add(ops::Pointwise(at(s + "gate", j), PerSample(n_sum), d_, 2, 2, 4.0));
    }
  }

  void Wukong(const std::string& region) {
    const WukongSpec& w = c_.arch.wukong;
    const int64_t n_z = c_.InteractionTokens();
    const double z = static_cast<double>(n_z), d = static_cast<double>(d_);
    auto at = [&](const std::string& name, std::optional<int> expert = std::nullopt) {
      return Where{region + "." + name, region, std::nullopt, expert};
    };
    Add(ops::Copy(at("concat"), PerSample(z * d), PerSample(z * d),
                  Shape{PerSample(1), Constant(z), Constant(d)}));
    Add(ops::WukongInteraction(at("fmb_zzy"), n_z, w.k, d_));
    Add(ops::LayerNorm(at("fmb_ln"), PerSample(1), n_z * w.k));
    const int64_t E = w.experts.count;
    const int64_t hidden = w.hidden / E;
    for (int64_t e = 0; e < E; ++e) {
      const std::optional<int> expert = E > 1 ? std::optional<int>(static_cast<int>(e)) : std::nullopt;
      const std::string sfx = E > 1 ? absl::StrCat(".e", e) : "";
      Add(ops::Linear(at("fmb_mlp1" + sfx, expert), PerSample(1), n_z * w.k, hidden));
      Add(ops::Pointwise(at("fmb_act" + sfx, expert), PerSample(1), hidden, 1, 1, 8.0));
      // With experts, y = sum_e MLP_e(x) has one output bias (per-expert biases would only add up).
      Add(ops::Linear(at("fmb_mlp2" + sfx, expert), PerSample(1), hidden, w.n_f * d_, E == 1));
    }
    if (E > 1) {
      Op sum = ops::Pointwise(at("fmb_expert_sum"), PerSample(1), w.n_f * d_, static_cast<int>(E), 0,
                              static_cast<double>(E));
      sum.params = w.n_f * d_;  // the shared output bias
      sum.bytes.fwd += Constant(ops::kActBytes * static_cast<double>(sum.params));
      sum.bytes.bwd += Constant(ops::kActBytes * static_cast<double>(sum.params));
      Add(std::move(sum));
    }
    Add(ops::TokenMix(at("lcb"), n_z, w.n_l, d_));
    Add(ops::TokenMix(at("lce_res"), n_z, c_.arch.n_x, d_));
    // X' = LN([FMB || LCB] + LCE_res(Z)).
    Add(ops::LayerNorm(at("ln"), PerSample(static_cast<double>(c_.arch.n_x)), d_, 1));
  }

  void SequenceArch(const std::string& layer, int64_t l, int j) {
    const SequenceSpec& s = c_.sequences[j];
    const std::string region = absl::StrCat(layer, ".seq", j);
    const double ns = static_cast<double>(c_.arch.n_s);
    auto at = [&](const std::string& name) { return Where{region + "." + name, region, j, std::nullopt}; };
    const bool cross = !c_.arch.compskip || l % 2 == 1;
    const bool self = !c_.arch.compskip || l % 2 == 0;
    if (cross) {  // (a) S += W_o GDPA(Q = LN(S) W_q, K/V = X_sum), SiLU, 1/n_s, QK-norm
      Add(ops::LayerNorm(at("xattn_ln"), Tokens(1), d_));
      Add(ops::Linear(at("xattn_q"), Tokens(1), d_, d_));
      Add(ops::Linear(at("xattn_kv"), PerSample(ns), d_, 2 * d_));
      AttentionSpec a = BaseAttention();
      a.act = Activation::kSilu;
      a.kv_tokens = c_.arch.n_s;
      a.scale = 1.0 / ns;
      Add(ops::Attention(at("xattn"), a, {Tokens(1), PerSample(ns), Tokens(1), Tokens(ns)}));
      Add(ops::Linear(at("xattn_o"), Tokens(1), d_, d_));
      Add(ops::Pointwise(at("xattn_res"), Tokens(1), d_, 2, 0, 1.0));
    }
    if (self) {  // (b) S += W_o Attn(LN(S)), window |i-t| <= w or 64-blocks, RoPE
      const bool window = s.attention == SeqAttentionKind::kWindow;
      const std::string name = window ? "swa" : "block_attn";
      Add(ops::LayerNorm(at(name + "_ln"), Tokens(1), d_));
      Add(ops::Linear(at(name + "_qkv"), Tokens(1), d_, 3 * d_));
      AttentionSpec a = BaseAttention();
      if (window) {
        a.mask = AttentionMask{MaskKind::kWindow, s.window, s.window, 0};
      } else {
        a.mask = AttentionMask{MaskKind::kBlock, -1, -1, s.block};
      }
      if (s.act == Activation::kSoftmax) {
        a.act = Activation::kSoftmax;
        a.scale = 1.0 / std::sqrt(static_cast<double>(a.Dqk));
      } else {
        a.act = Activation::kSilu;
        a.scale = 1.0 / static_cast<double>(window ? 2 * s.window + 1 : s.block);
      }
      a.rope = s.rope;
      Add(ops::Attention(at(name), a, {Tokens(1), Tokens(1), Tokens(1), Affine{0, 0, 0, 1}}));
      Add(ops::Linear(at(name + "_o"), Tokens(1), d_, d_));
      Add(ops::Pointwise(at(name + "_res"), Tokens(1), d_, 2, 0, 1.0));
    }
    // (c) S += W_2 GELU(W_1 LN(S)), width f d.
    const int64_t fd = c_.arch.f * d_;
    Add(ops::LayerNorm(at("ffn_ln"), Tokens(1), d_));
    Add(ops::Linear(at("ffn_w1"), Tokens(1), d_, fd));
    Add(ops::Pointwise(at("ffn_act"), Tokens(1), fd, 1, 1, 8.0));
    Add(ops::Linear(at("ffn_w2"), Tokens(1), fd, d_));
    Add(ops::Pointwise(at("ffn_res"), Tokens(1), d_, 2, 0, 1.0));
  }

  void Head() {
    const std::string region = "head";
    auto at = [&](const std::string& name) { return Where{region + "." + name, region, std::nullopt, std::nullopt}; };
    const std::vector<int64_t>& w = c_.head.widths;
    const double in = static_cast<double>(w.front());
    // H = [flatten(X_sum) || flatten(S_sum,1..J)] from the final cross.
    Add(ops::Copy(at("concat"), PerSample(in), PerSample(in), Shape{PerSample(1), Constant(in)}));
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      Add(ops::Linear(at(absl::StrCat("mlp", i)), PerSample(1), w[i], w[i + 1]));
      if (i + 2 < w.size()) Add(ops::Pointwise(at(absl::StrCat("act", i)), PerSample(1), w[i + 1], 1, 1, 1.0));
    }
    Add(ops::Loss(at("loss"), c_.NumTasks()));
  }

  const ModelConfig& c_;
  const int64_t d_;
  const int J_;
  ModelGraph g_;
};

}  // namespace

absl::StatusOr<ModelGraph> ExpandModel(const ModelConfig& config) {
  // Configs normally come from ParseModelConfig; a hand-built one gets the checks expansion relies on.
  if (config.d <= 0 || config.heads <= 0 || config.d % config.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("config: d ", config.d, " and heads ", config.heads,
                                                   " must be positive, heads dividing d"));
  }
  if (config.arch.layers < 1 || config.arch.n_x < 1 || config.arch.n_s < 1 ||
      config.arch.wukong.experts.count < 1 ||
      config.arch.wukong.hidden % config.arch.wukong.experts.count != 0) {
    return absl::InvalidArgumentError("config: arch sizes are invalid (use ParseModelConfig to validate)");
  }
  if (config.head.widths.size() < 2 || config.head.widths.front() != config.HeadInputWidth() ||
      config.head.widths.back() != config.NumTasks()) {
    return absl::InvalidArgumentError("config: head.widths do not match the model (use ParseModelConfig)");
  }
  for (const SparseFeatureSpec& f : config.features) {
    if (f.table_index < 0 || static_cast<size_t>(f.table_index) >= config.tables.size()) {
      return absl::InvalidArgumentError(absl::StrCat("config: feature '", f.name, "' has no table"));
    }
  }
  for (const SequenceSpec& s : config.sequences) {
    for (int t : {s.item_table_index, s.action_table_index, s.dt_table_index}) {
      if (t < 0 || static_cast<size_t>(t) >= config.tables.size()) {
        return absl::InvalidArgumentError(absl::StrCat("config: sequence '", s.name, "' has no table"));
      }
    }
  }
  return Expander(config).Run();
}

}  // namespace gemtb::model
