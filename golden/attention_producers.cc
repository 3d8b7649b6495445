// Golden vectors of the attention oracle: every activation under every mask, each
// option on its own and combined, oracle (fp64) and emulate mode. Each case folder holds its inputs,
// a case.json (so `gemtb ref attention --case golden/attention/NAME` runs it) and the outputs under
// the names that command writes: o, lse, dq, dk, dv, ddense, drel, dts.
#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/attention/attention_options.h"
#include "model/common/status_macros.h"
#include "reference/attention/attention.h"
#include "golden/inputs.h"
#include "golden/params.h"
#include "golden/registry.h"

namespace gemtb::golden {
namespace {

using nlohmann::json;
using golden::BellValues;
using golden::RoundTo;

// Value streams of one case (the Philox stream index of each tensor).
enum Stream : uint64_t { kQ = 1, kK, kV, kDo, kDense, kRel, kTs, kTsTable, kRopeQ, kRopeK, kRopeV };

struct DTypeInfo {
  ElementType type;
  io::NpyDType npy;
};

std::optional<DTypeInfo> ParseDType(const std::string& name) {
  switch (io::ParseNpyDTypeName(name).value_or(io::NpyDType::kUInt8)) {
    case io::NpyDType::kFloat64: return DTypeInfo{ElementType::kFloat64, io::NpyDType::kFloat64};
    case io::NpyDType::kFloat32: return DTypeInfo{ElementType::kFloat32, io::NpyDType::kFloat32};
    case io::NpyDType::kFloat16: return DTypeInfo{ElementType::kFloat16, io::NpyDType::kFloat16};
    case io::NpyDType::kBFloat16: return DTypeInfo{ElementType::kBFloat16, io::NpyDType::kBFloat16};
    default: return std::nullopt;  // not a floating dtype name
  }
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> off(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) off[i + 1] = off[i] + lengths[i];
  return off;
}

int64_t Longest(const std::vector<int64_t>& lengths) {
  int64_t m = 0;
  for (int64_t l : lengths) m = std::max(m, l);
  return m;
}

// RoPE table [rows, d]: sin in columns [0, d/2), cos in [d/2, d), from the rational parametrisation
// cos = (1-t^2)/(1+t^2), sin = 2t/(1+t^2) of a uniform t: no libm, any angle in (-pi/2, pi/2).
std::vector<double> RopeTable(uint64_t seed, uint64_t stream, int64_t rows, int64_t d, ElementType type) {
  std::vector<double> table(static_cast<size_t>(rows * d));
  const int64_t half = d / 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t m = 0; m < half; ++m) {
      const double t = golden::Uniform(seed, stream, static_cast<uint64_t>(r * half + m));
      const double den = 1.0 + t * t;
      table[r * d + m] = RoundTo(2.0 * t / den, type);
      table[r * d + half + m] = RoundTo((1.0 - t * t) / den, type);
    }
  }
  return table;
}

// Timestamps that grow by gaps of 2^0 .. 2^58 (plus a little), so time-bias buckets from 0 to 128
// all occur.
std::vector<int64_t> Timestamps(uint64_t seed, int64_t tokens) {
  std::vector<int64_t> ts(static_cast<size_t>(tokens));
  int64_t now = static_cast<int64_t>(golden::UniformInt(seed, kTs, 0, 1000));
  for (int64_t t = 0; t < tokens; ++t) {
    const uint64_t shift = golden::UniformInt(seed, kTs, 2 * t + 1, 59);
    now += (int64_t{1} << shift) + static_cast<int64_t>(golden::UniformInt(seed, kTs, 2 * t + 2, 8));
    ts[t] = now;
  }
  return ts;
}

absl::StatusOr<std::vector<GoldenFile>> Run(const json& j) {
  const golden::Params p(j);
  std::vector<int64_t> q_len, kv_len, kv_index;
  int64_t heads = 2, kv_heads = 2, dqk = 4, dv = 4, seed = 1;
  int64_t window_left = -1, window_right = -1, block = 64, slack_q = 0, slack_k = 0;
  int64_t dense_heads = 0, rel_heads = 0, ts_heads = 0;
  std::string act = "softmax", mask = "none", align = "bottom_right", rope = "none";
  std::string dtype_name = "float64", mode = "oracle";
  bool broadcast_q = false, self = false, backward = true, has_kv_index = false;
  GEMTB_RETURN_IF_ERROR(p.Ints("q_lengths", &q_len));
  GEMTB_RETURN_IF_ERROR(p.Bool("self", &self));
  GEMTB_RETURN_IF_ERROR(p.Ints("kv_lengths", &kv_len));
  if (self) kv_len = q_len;
  has_kv_index = p.Has("kv_index");
  GEMTB_RETURN_IF_ERROR(p.Ints("kv_index", &kv_index));
  GEMTB_RETURN_IF_ERROR(p.Int("heads", &heads));
  GEMTB_RETURN_IF_ERROR(p.Int("kv_heads", &kv_heads));
  GEMTB_RETURN_IF_ERROR(p.Int("dqk", &dqk));
  GEMTB_RETURN_IF_ERROR(p.Int("dv", &dv));
  GEMTB_RETURN_IF_ERROR(p.Int("seed", &seed));
  GEMTB_RETURN_IF_ERROR(p.Int("window_left", &window_left));
  GEMTB_RETURN_IF_ERROR(p.Int("window_right", &window_right));
  GEMTB_RETURN_IF_ERROR(p.Int("block", &block));
  GEMTB_RETURN_IF_ERROR(p.Int("max_lq_slack", &slack_q));
  GEMTB_RETURN_IF_ERROR(p.Int("max_lk_slack", &slack_k));
  GEMTB_RETURN_IF_ERROR(p.Int("dense_bias_heads", &dense_heads));
  GEMTB_RETURN_IF_ERROR(p.Int("rel_bias_heads", &rel_heads));
  GEMTB_RETURN_IF_ERROR(p.Int("time_bias_heads", &ts_heads));
  GEMTB_RETURN_IF_ERROR(p.String("act", &act));
  GEMTB_RETURN_IF_ERROR(p.String("mask", &mask));
  GEMTB_RETURN_IF_ERROR(p.String("align", &align));
  GEMTB_RETURN_IF_ERROR(p.String("rope", &rope));
  GEMTB_RETURN_IF_ERROR(p.String("dtype", &dtype_name));
  GEMTB_RETURN_IF_ERROR(p.String("mode", &mode));
  GEMTB_RETURN_IF_ERROR(p.Bool("broadcast_q", &broadcast_q));
  GEMTB_RETURN_IF_ERROR(p.Bool("backward", &backward));

  AttentionOptions o;
  const std::optional<Activation> a = ParseActivation(act);
  const std::optional<MaskKind> m = ParseMaskKind(mask);
  const std::optional<Alignment> al = ParseAlignment(align);
  const std::optional<DTypeInfo> dt = ParseDType(dtype_name);
  if (!a || !m || !al || !dt || (rope != "none" && rope != "qk" && rope != "qkv") ||
      (mode != "oracle" && mode != "emulate")) {
    return absl::InvalidArgumentError("params: unknown act, mask, align, dtype, rope or mode");
  }
  o.act = *a;
  o.mask = *m;
  o.align = *al;
  o.window_left = window_left;
  o.window_right = window_right;
  o.block = block;
  o.broadcast_q = broadcast_q;
  if (p.Has("pre_scale")) {
    double s = 0;
    GEMTB_RETURN_IF_ERROR(p.Number("pre_scale", &s));
    o.pre_scale = s;
  }
  if (p.Has("post_scale")) {
    double s = 0;
    GEMTB_RETURN_IF_ERROR(p.Number("post_scale", &s));
    o.post_scale = s;
  }
  const ElementType type = dt->type;
  const uint64_t s = static_cast<uint64_t>(seed);

  // Shapes and pairing.
  const std::vector<int64_t> q_off = Offsets(q_len), kv_off = Offsets(kv_len);
  const int64_t tq = q_off.back(), tk = kv_off.back();
  const int64_t nq = static_cast<int64_t>(q_len.size()), nkv = static_cast<int64_t>(kv_len.size());
  const int64_t batch = broadcast_q ? (has_kv_index ? static_cast<int64_t>(kv_index.size()) : nkv) : nq;
  const int64_t max_lq = Longest(q_len) + slack_q, max_lk = Longest(kv_len) + slack_k;
  const int64_t max_l = std::max(max_lq, max_lk);
  const int64_t out_rows = broadcast_q ? batch * (nq > 0 ? q_len[0] : 0) : tq;
  // fp32-valued tables (biases, RoPE) unless the whole case is fp64.
  const ElementType table_type = type == ElementType::kFloat64 ? ElementType::kFloat64 : ElementType::kFloat32;
  const io::NpyDType table_npy = type == ElementType::kFloat64 ? io::NpyDType::kFloat64 : io::NpyDType::kFloat32;

  const std::vector<double> q = BellValues(s, kQ, tq * heads * dqk, 1.0, type);
  const std::vector<double> k = BellValues(s, kK, tk * kv_heads * dqk, 1.0, type);
  const std::vector<double> v = BellValues(s, kV, tk * kv_heads * dv, 1.0, type);
  const std::vector<double> d_o = BellValues(s, kDo, out_rows * heads * dv, 1.0, type);

  reference::AttentionInputs in;
  in.q = {q, {tq, heads, dqk}};
  in.k = {k, {tk, kv_heads, dqk}};
  in.v = {v, {tk, kv_heads, dv}};
  in.q_offsets = {q_off, {nq + 1}};
  in.kv_offsets = {kv_off, {nkv + 1}};
  in.max_lq = max_lq;
  in.max_lk = max_lk;
  in.input_type = type;
  if (has_kv_index) in.kv_index = {kv_index, {static_cast<int64_t>(kv_index.size())}};

  std::vector<GoldenFile> files;
  json case_json = {{"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"q-offsets", "q_offsets.npy"},
                    {"kv-offsets", "kv_offsets.npy"}, {"max-lq", max_lq}, {"max-lk", max_lk},
                    {"act", act}, {"mask", mask}, {"window-left", window_left},
                    {"window-right", window_right}, {"block", block}, {"align", align},
                    {"broadcast-q", broadcast_q}};
  if (o.pre_scale) case_json["pre-scale"] = *o.pre_scale;
  if (o.post_scale) case_json["post-scale"] = *o.post_scale;
  files.push_back(InputFile("q.npy", io::EncodeFloat(q, in.q.shape, dt->npy)));
  files.push_back(InputFile("k.npy", io::EncodeFloat(k, in.k.shape, dt->npy)));
  files.push_back(InputFile("v.npy", io::EncodeFloat(v, in.v.shape, dt->npy)));
  files.push_back(InputFile("q_offsets.npy", io::EncodeInt64(q_off, in.q_offsets.shape)));
  files.push_back(InputFile("kv_offsets.npy", io::EncodeInt64(kv_off, in.kv_offsets.shape)));
  if (has_kv_index) {
    files.push_back(InputFile("kv_index.npy", io::EncodeInt64(kv_index, in.kv_index.shape)));
    case_json["kv-index"] = "kv_index.npy";
  }

  // Dense bias: N-ish values on valid pairs, NaN everywhere else (never read).
  std::vector<double> dense;
  if (dense_heads > 0) {
    dense.assign(static_cast<size_t>(batch * dense_heads * max_lq * max_lk), std::numeric_limits<double>::quiet_NaN());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t qs = broadcast_q ? 0 : b;
      const int64_t ks = has_kv_index ? kv_index[b] : b;
      if (qs >= nq || ks < 0 || ks >= nkv) return absl::InvalidArgumentError("params: pairing out of range");
      const int64_t lq = q_len[qs], lk = kv_len[ks];
      for (int64_t hb = 0; hb < dense_heads; ++hb) {
        for (int64_t i = 0; i < lq; ++i) {
          const KeyRange r = ValidKeys(o, i, lq, lk);
          for (int64_t jj = r.begin; jj < r.end; ++jj) {
            const int64_t at = ((b * dense_heads + hb) * max_lq + i) * max_lk + jj;
            dense[at] = RoundTo(golden::Bell(s, kDense, static_cast<uint64_t>(at)), table_type);
          }
        }
      }
    }
    in.bias_dense = {dense, {batch, dense_heads, max_lq, max_lk}};
    files.push_back(InputFile("bias_dense.npy", io::EncodeFloat(dense, in.bias_dense.shape, table_npy)));
    case_json["bias-dense"] = "bias_dense.npy";
  }
  std::vector<double> rel, ts_table, rope_q, rope_k, rope_v;
  std::vector<int64_t> ts;
  if (rel_heads > 0) {
    rel = BellValues(s, kRel, rel_heads * (2 * max_l - 1), 0.5, table_type);
    in.bias_rel = {rel, {rel_heads, 2 * max_l - 1}};
    files.push_back(InputFile("bias_rel.npy", io::EncodeFloat(rel, in.bias_rel.shape, table_npy)));
    case_json["bias-rel"] = "bias_rel.npy";
  }
  if (ts_heads > 0) {
    ts = Timestamps(s, tq);
    ts_table = BellValues(s, kTsTable, ts_heads * 129, 0.5, table_type);
    in.ts = {ts, {tq}};
    in.bias_ts = {ts_table, {ts_heads, 129}};
    files.push_back(InputFile("ts.npy", io::EncodeInt64(ts, in.ts.shape)));
    files.push_back(InputFile("bias_ts.npy", io::EncodeFloat(ts_table, in.bias_ts.shape, table_npy)));
    case_json["ts"] = "ts.npy";
    case_json["bias-ts"] = "bias_ts.npy";
  }
  if (rope != "none") {
    rope_q = RopeTable(s, kRopeQ, tq, dqk, table_type);
    rope_k = RopeTable(s, kRopeK, tk, dqk, table_type);
    in.rope_q = {rope_q, {tq, dqk}};
    in.rope_k = {rope_k, {tk, dqk}};
    files.push_back(InputFile("rope_q.npy", io::EncodeFloat(rope_q, in.rope_q.shape, table_npy)));
    files.push_back(InputFile("rope_k.npy", io::EncodeFloat(rope_k, in.rope_k.shape, table_npy)));
    case_json["rope-q"] = "rope_q.npy";
    case_json["rope-k"] = "rope_k.npy";
    if (rope == "qkv") {
      rope_v = RopeTable(s, kRopeV, tk, dv, table_type);
      in.rope_v = {rope_v, {tk, dv}};
      files.push_back(InputFile("rope_v.npy", io::EncodeFloat(rope_v, in.rope_v.shape, table_npy)));
      case_json["rope-v"] = "rope_v.npy";
    }
  }

  reference::ExecutionOptions exec;
  exec.precision = mode == "oracle" ? reference::Precision::kOracle : reference::Precision::kEmulate;
  // As `gemtb ref attention` writes them: float64 in oracle mode, the input dtype in emulate mode;
  // LSE and bias gradients fp32 unless the output is float64.
  const io::NpyDType out = mode == "oracle" ? io::NpyDType::kFloat64 : dt->npy;
  const io::NpyDType aux = out == io::NpyDType::kFloat64 ? io::NpyDType::kFloat64 : io::NpyDType::kFloat32;

  absl::StatusOr<reference::AttentionForwardResult> fwd = reference::AttentionForward(in, o, exec);
  if (!fwd.ok()) return fwd.status();
  files.push_back(OutputFile("o.npy", io::EncodeFloat(fwd->o, fwd->o_shape, out)));
  if (o.act == Activation::kSoftmax) files.push_back(OutputFile("lse.npy", io::EncodeFloat(fwd->lse, fwd->lse_shape, aux)));
  if (backward) {
    const reference::TensorView<double> d_o_view{d_o, {out_rows, heads, dv}};
    files.push_back(InputFile("do.npy", io::EncodeFloat(d_o, d_o_view.shape, dt->npy)));
    case_json["do"] = "do.npy";
    absl::StatusOr<reference::AttentionBackwardResult> bwd = reference::AttentionBackward(in, o, d_o_view, *fwd, exec);
    if (!bwd.ok()) return bwd.status();
    files.push_back(OutputFile("dq.npy", io::EncodeFloat(bwd->dq, bwd->dq_shape, out)));
    files.push_back(OutputFile("dk.npy", io::EncodeFloat(bwd->dk, bwd->dk_shape, out)));
    files.push_back(OutputFile("dv.npy", io::EncodeFloat(bwd->dv, bwd->dv_shape, out)));
    if (!bwd->d_bias_dense_shape.empty()) {
      files.push_back(OutputFile("ddense.npy", io::EncodeFloat(bwd->d_bias_dense, bwd->d_bias_dense_shape, aux)));
    }
    if (!bwd->d_bias_rel_shape.empty()) {
      files.push_back(OutputFile("drel.npy", io::EncodeFloat(bwd->d_bias_rel, bwd->d_bias_rel_shape, aux)));
    }
    if (!bwd->d_bias_ts_shape.empty()) {
      files.push_back(OutputFile("dts.npy", io::EncodeFloat(bwd->d_bias_ts, bwd->d_bias_ts_shape, aux)));
    }
  }
  files.push_back(JsonFile("case.json", case_json));
  return files;
}

// The shared shape of the activation x mask grid: an empty query sequence, a key-less one, Lq < Lk,
// Lq == Lk; windows and blocks small enough to cut every sequence.
json GridCase(Activation act, MaskKind mask) {
  json c = {{"act", std::string(ActivationName(act))}, {"mask", std::string(MaskKindName(mask))},
            {"q_lengths", {5, 0, 7, 3}}, {"kv_lengths", {6, 2, 7, 0}}, {"heads", 2}, {"kv_heads", 2},
            {"dqk", 4}, {"dv", 4}, {"seed", 1}};
  if (mask == MaskKind::kWindow) {
    c["window_left"] = 2;
    c["window_right"] = 1;
  }
  if (mask == MaskKind::kBlock) c["block"] = 4;
  return c;
}

// Adds keys to a base case.
json With(json base, const json& extra) {
  for (const auto& item : extra.items()) base[item.key()] = item.value();
  return base;
}

}  // namespace

absl::StatusOr<std::vector<GoldenFile>> RunAttentionProducer(const json& params) { return Run(params); }

void AddAttentionProducers(std::vector<GoldenProducer>& out) {
  auto add = [&](const std::string& name, json params) {
    out.push_back({absl::StrCat("attention/", name), "attention", std::move(params)});
  };
  // 9 activations x 4 masks, forward and backward, oracle mode.
  for (int code = 0; code < kNumActivations; ++code) {
    const Activation act = static_cast<Activation>(code);
    for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock}) {
      add(absl::StrCat(std::string(ActivationName(act)), "_", std::string(MaskKindName(mask))), GridCase(act, mask));
    }
  }
  const json cross = {{"q_lengths", {4, 6}}, {"kv_lengths", {6, 3}}, {"heads", 2}, {"kv_heads", 2},
                      {"dqk", 4}, {"dv", 4}, {"seed", 2}};
  // Options, one at a time and combined.
  add("opt_rope_qk", With(cross, {{"act", "softmax"}, {"mask", "causal"}, {"self", true}, {"q_lengths", {6, 3}}, {"rope", "qk"}}));
  add("opt_rope_qkv", With(cross, {{"act", "silu"}, {"rope", "qkv"}, {"dv", 6}}));
  add("opt_bias_dense", With(cross, {{"act", "softmax"}, {"dense_bias_heads", 1}, {"max_lq_slack", 1}, {"max_lk_slack", 2}}));
  add("opt_bias_dense_per_head", With(cross, {{"act", "gelu"}, {"mask", "causal"}, {"dense_bias_heads", 2}}));
  add("opt_bias_rel", With(cross, {{"act", "silu"}, {"mask", "causal"}, {"self", true}, {"q_lengths", {5, 7}}, {"rel_bias_heads", 2}}));
  add("opt_bias_rel_cross", With(cross, {{"act", "softmax"}, {"rel_bias_heads", 1}, {"max_lk_slack", 1}}));
  add("opt_bias_time", With(cross, {{"act", "silu"}, {"mask", "causal"}, {"self", true}, {"q_lengths", {6, 4}}, {"time_bias_heads", 1}}));
  add("opt_hstu", With(cross, {{"act", "silu"}, {"mask", "causal"}, {"self", true}, {"q_lengths", {7, 3, 5}},
                               {"rel_bias_heads", 1}, {"time_bias_heads", 2}, {"pre_scale", 0.5}, {"post_scale", 1.0 / 7.0}}));
  add("opt_gqa_4_2", With(cross, {{"act", "softmax"}, {"heads", 4}, {"kv_heads", 2}}));
  add("opt_gqa_4_1", With(cross, {{"act", "gelu"}, {"mask", "window"}, {"window_left", 1}, {"window_right", 1},
                                  {"align", "top_left"}, {"heads", 4}, {"kv_heads", 1}}));
  add("opt_dv_gt_dqk", With(cross, {{"act", "relu"}, {"mask", "causal"}, {"dqk", 4}, {"dv", 6}}));
  add("opt_dv_lt_dqk", With(cross, {{"act", "softmax"}, {"dqk", 6}, {"dv", 2}}));
  add("opt_broadcast_q", With(cross, {{"act", "softmax"}, {"broadcast_q", true}, {"q_lengths", {3}}, {"kv_lengths", {5, 0, 4}}}));
  add("opt_broadcast_q_kv_index", With(cross, {{"act", "gelu_tanh"}, {"broadcast_q", true}, {"q_lengths", {2}},
                                               {"kv_lengths", {4, 3}}, {"kv_index", {1, 0, 1}}}));
  add("opt_kv_index", With(cross, {{"act", "gelu"}, {"mask", "window"}, {"window_left", 2}, {"window_right", 2},
                                   {"align", "top_left"}, {"post_scale", 0.5}, {"q_lengths", {3, 4, 0, 2}},
                                   {"kv_lengths", {5, 3}}, {"kv_index", {0, 0, 1, 1}}}));
  add("opt_scales", With(cross, {{"act", "relu_square"}, {"mask", "causal"}, {"align", "top_left"},
                                 {"pre_scale", 0.7}, {"post_scale", 1.25}}));
  add("opt_scales_softmax", With(cross, {{"act", "softmax"}, {"mask", "window"}, {"window_left", 3}, {"window_right", 0},
                                         {"pre_scale", 0.3}, {"post_scale", 2.0}}));
  add("opt_asymmetric_top_left", With(cross, {{"act", "softmax"}, {"mask", "causal"}, {"align", "top_left"},
                                              {"q_lengths", {6, 2}}, {"kv_lengths", {3, 5}}}));
  add("opt_asymmetric_bottom_right", With(cross, {{"act", "hardswish"}, {"mask", "causal"},
                                                  {"q_lengths", {6, 2}}, {"kv_lengths", {3, 5}}}));
  add("opt_empty_sequences", With(cross, {{"act", "softmax"}, {"mask", "causal"}, {"q_lengths", {0, 3, 0, 2}},
                                          {"kv_lengths", {2, 0, 0, 4}}}));
  add("opt_all_empty", With(cross, {{"act", "silu"}, {"q_lengths", {0, 0}}, {"kv_lengths", {0, 0}}}));
  add("opt_block64", With(cross, {{"act", "softmax"}, {"mask", "block"}, {"block", 64}, {"self", true},
                                  {"q_lengths", {70, 9}}, {"heads", 1}, {"kv_heads", 1}, {"rope", "qk"}}));
  add("opt_everything", With(cross, {{"act", "leaky_relu"}, {"self", true}, {"q_lengths", {4, 5}}, {"kv_heads", 1},
                                     {"dense_bias_heads", 2}, {"rel_bias_heads", 1}, {"time_bias_heads", 2},
                                     {"rope", "qkv"}, {"max_lq_slack", 1}, {"max_lk_slack", 1}}));
  add("opt_bf16_inputs_oracle", With(GridCase(Activation::kSoftmax, MaskKind::kCausal), {{"dtype", "bfloat16"}}));
  // Emulate mode: a tensor-core kernel's casts, outputs in the input dtype.
  const auto emulate = [](json c, const char* dtype) { return With(std::move(c), {{"mode", "emulate"}, {"dtype", dtype}}); };
  add("emulate_bf16_softmax_causal", emulate(GridCase(Activation::kSoftmax, MaskKind::kCausal), "bfloat16"));
  add("emulate_bf16_silu_window", emulate(GridCase(Activation::kSilu, MaskKind::kWindow), "bfloat16"));
  add("emulate_bf16_gelu_biases", emulate(With(cross, {{"act", "gelu"}, {"dense_bias_heads", 1}, {"rel_bias_heads", 2}}), "bfloat16"));
  add("emulate_bf16_block_rope", emulate(With(cross, {{"act", "softmax"}, {"mask", "block"}, {"block", 4}, {"self", true},
                                                      {"q_lengths", {9, 5}}, {"rope", "qk"}}), "bfloat16"));
  add("emulate_fp32_softmax_none", emulate(GridCase(Activation::kSoftmax, MaskKind::kNone), "float32"));
  add("emulate_fp32_relu_block", emulate(GridCase(Activation::kRelu, MaskKind::kBlock), "float32"));
  add("emulate_fp16_gelu_tanh_causal", emulate(GridCase(Activation::kGeluTanh, MaskKind::kCausal), "float16"));
}

}  // namespace gemtb::golden
