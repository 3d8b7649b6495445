// gemtb.ref.attention: the jagged attention oracle on in-memory arrays, as `gemtb ref attention`
// runs it on .npy files (the same case loader, options, output dtypes and encodings).
#include <algorithm>
#include <optional>


#include "absl/strings/str_cat.h"
#include "python/src/arrays.h"
#include "reference/attention/attention.h"
#include "reference/io/attention_case.h"

namespace gemtb::python {
namespace {

struct AttentionArgs {
  std::string act, mask, align, mode, out_dtype;
  std::optional<double> pre_scale, post_scale;
  int64_t window_left, window_right, block;
  std::optional<int64_t> max_lq, max_lk;
  bool broadcast_q, backward;
  int threads;
};

// The spec names each array by its key; the loader reads them through `arrays`.
io::AttentionCaseSpec SpecOf(const WireMap& arrays, const AttentionArgs& a) {
  io::AttentionCaseSpec s;
  const std::pair<const char*, std::string io::AttentionCaseSpec::*> files[] = {
      {"q", &io::AttentionCaseSpec::q},           {"k", &io::AttentionCaseSpec::k},
      {"v", &io::AttentionCaseSpec::v},           {"q_offsets", &io::AttentionCaseSpec::q_offsets},
      {"kv_offsets", &io::AttentionCaseSpec::kv_offsets}, {"kv_index", &io::AttentionCaseSpec::kv_index},
      {"bias_dense", &io::AttentionCaseSpec::bias_dense}, {"bias_rel", &io::AttentionCaseSpec::bias_rel},
      {"ts", &io::AttentionCaseSpec::ts},         {"bias_ts", &io::AttentionCaseSpec::bias_ts},
      {"rope_q", &io::AttentionCaseSpec::rope_q}, {"rope_k", &io::AttentionCaseSpec::rope_k},
      {"rope_v", &io::AttentionCaseSpec::rope_v}, {"do", &io::AttentionCaseSpec::d_o}};
  for (const auto& [key, member] : files) {
    if (arrays.contains(key)) s.*member = key;
  }
  s.act = a.act;
  s.mask = a.mask;
  s.align = a.align;
  s.pre_scale = a.pre_scale;
  s.post_scale = a.post_scale;
  s.window_left = a.window_left;
  s.window_right = a.window_right;
  s.block = a.block;
  s.max_lq = a.max_lq;
  s.max_lk = a.max_lk;
  s.broadcast_q = a.broadcast_q;
  return s;
}

nb::dict Attention(const WireMap& arrays, const AttentionArgs& a) {
  for (const auto& [key, wire] : arrays) {
    (void)wire;
    static const char* const kKnown[] = {"q", "k", "v", "q_offsets", "kv_offsets", "kv_index", "bias_dense",
                                         "bias_rel", "ts", "bias_ts", "rope_q", "rope_k", "rope_v", "do"};
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      Raise(absl::InvalidArgumentError(absl::StrCat(key, ": not an attention input")));
    }
  }
  reference::ExecutionOptions exec;
  if (a.mode == "oracle") {
    exec.precision = reference::Precision::kOracle;
  } else if (a.mode == "emulate") {
    exec.precision = reference::Precision::kEmulate;
  } else {
    Raise(absl::InvalidArgumentError(absl::StrCat("mode=", a.mode, ": want oracle|emulate")));
  }
  if (a.threads < 0 || a.threads > 4096) Raise(absl::InvalidArgumentError(absl::StrCat("threads=", a.threads, ": want 0..4096")));
  exec.threads = a.threads;
  if (a.backward && !arrays.contains("do")) Raise(absl::InvalidArgumentError("do: the backward needs dO"));

  std::map<std::string, F64Result> outputs;
  absl::Status status = [&]() -> absl::Status {
    nb::gil_scoped_release release;
    absl::StatusOr<io::AttentionCase> c = io::LoadAttentionCase(
        SpecOf(arrays, a), [&](const std::string& key) { return ToNpyView(key, arrays.at(key)); });
    if (!c.ok()) return c.status();
    // Output dtypes as `gemtb ref attention --out-dtype` picks them.
    io::NpyDType out = exec.precision == reference::Precision::kOracle ? io::NpyDType::kFloat64 : c->input_dtype;
    const std::optional<io::NpyDType> named = io::ParseNpyDTypeName(a.out_dtype);
    if (named == io::NpyDType::kFloat64 || named == io::NpyDType::kFloat32) {
      out = *named;
    } else if (a.out_dtype == "input") {
      out = c->input_dtype;
    } else if (!a.out_dtype.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("out_dtype=", a.out_dtype, ": want float64|float32|input"));
    }
    const io::NpyDType aux = out == io::NpyDType::kFloat64 ? io::NpyDType::kFloat64 : io::NpyDType::kFloat32;
    absl::StatusOr<reference::AttentionForwardResult> fwd = reference::AttentionForward(c->inputs, c->options, exec);
    if (!fwd.ok()) return fwd.status();
    const bool has_lse = !fwd->lse.empty() || c->options.act == Activation::kSoftmax;
    if (a.backward) {
      const reference::TensorView<double> d_o{c->d_o, c->d_o_shape};
      absl::StatusOr<reference::AttentionBackwardResult> bwd =
          reference::AttentionBackward(c->inputs, c->options, d_o, *fwd, exec);
      if (!bwd.ok()) return bwd.status();
      outputs["dq"] = EncodeResult(std::move(bwd->dq), bwd->dq_shape, out);
      outputs["dk"] = EncodeResult(std::move(bwd->dk), bwd->dk_shape, out);
      outputs["dv"] = EncodeResult(std::move(bwd->dv), bwd->dv_shape, out);
      if (!bwd->d_bias_dense_shape.empty()) {
        outputs["ddense"] = EncodeResult(std::move(bwd->d_bias_dense), bwd->d_bias_dense_shape, aux);
      }
      if (!bwd->d_bias_rel_shape.empty()) outputs["drel"] = EncodeResult(std::move(bwd->d_bias_rel), bwd->d_bias_rel_shape, aux);
      if (!bwd->d_bias_ts_shape.empty()) outputs["dts"] = EncodeResult(std::move(bwd->d_bias_ts), bwd->d_bias_ts_shape, aux);
    }
    // The forward's outputs last: the backward reads them.
    outputs["o"] = EncodeResult(std::move(fwd->o), fwd->o_shape, out);
    if (has_lse) outputs["lse"] = EncodeResult(std::move(fwd->lse), fwd->lse_shape, aux);
    return absl::OkStatus();
  }();
  Check(status);
  nb::dict result;
  for (auto& [name, array] : outputs) result[name.c_str()] = FromResult(std::move(array));
  return result;
}

}  // namespace

void BindAttention(nb::module_& m) {
  m.def(
      "attention",
      [](const WireMap& arrays, std::string act, std::optional<double> pre_scale, std::optional<double> post_scale,
         std::string mask, int64_t window_left, int64_t window_right, int64_t block, std::string align,
         std::optional<int64_t> max_lq, std::optional<int64_t> max_lk, bool broadcast_q, std::string mode,
         std::string out_dtype, int threads, bool backward) {
        return Attention(arrays, {.act = act, .mask = mask, .align = align, .mode = mode, .out_dtype = out_dtype,
                                  .pre_scale = pre_scale, .post_scale = post_scale, .window_left = window_left,
                                  .window_right = window_right, .block = block, .max_lq = max_lq,
                                  .max_lk = max_lk, .broadcast_q = broadcast_q, .backward = backward,
                                  .threads = threads});
      },
      nb::arg("arrays"), nb::arg("act"), nb::arg("pre_scale").none(), nb::arg("post_scale").none(), nb::arg("mask"),
      nb::arg("window_left"), nb::arg("window_right"), nb::arg("block"), nb::arg("align"),
      nb::arg("max_lq").none(), nb::arg("max_lk").none(), nb::arg("broadcast_q"), nb::arg("mode"),
      nb::arg("out_dtype"), nb::arg("threads"), nb::arg("backward"));
}

}  // namespace gemtb::python
