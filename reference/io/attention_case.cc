#include "reference/io/attention_case.h"

#include <cstdint>
#include <filesystem>
#include <limits>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/json/json_reader.h"
#include "model/json/user_file.h"
#include "nlohmann/json.hpp"

namespace gemtb::io {
namespace {

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

// Reads a floating tensor; `field` names it in errors. Without a source (`read` empty) the file is
// read straight into `values` (one read, no per-element work for float64).
// `values` holds the decoded array that `view` views; with `lend`, fp64 arrays from `read` are viewed
// where they are instead, and `values` stays empty.
absl::Status LoadFloat(const ArraySource& read, const std::string& path, absl::string_view field,
                       std::vector<double>& values, reference::TensorView<double>& view, NpyDType* dtype = nullptr,
                       bool lend = false) {
  if (path.empty()) return absl::OkStatus();
  const std::string where = absl::StrCat(field, " (", path, ")");
  if (!read) {
    absl::StatusOr<NpyFile> file = NpyFile::Open(path);
    if (!file.ok()) return Bad(absl::StrCat(field, ": ", file.status().message()));
    absl::StatusOr<std::vector<double>> decoded = file->ReadFloat(where);
    if (!decoded.ok()) return decoded.status();
    values = *std::move(decoded);
    view = {values, file->header().shape};
    if (dtype) *dtype = file->header().dtype;
    return absl::OkStatus();
  }
  absl::StatusOr<NpyView> array = read(path);
  if (!array.ok()) return Bad(absl::StrCat(field, ": ", array.status().message()));
  if (lend && array->dtype == NpyDType::kFloat64 &&
      reinterpret_cast<uintptr_t>(array->data.data()) % alignof(double) == 0) {
    // The lender's fp64 bytes are the values: view them (DecodeFloat would copy them unchanged).
    view = {absl::MakeConstSpan(reinterpret_cast<const double*>(array->data.data()),
                                static_cast<size_t>(array->NumElements())),
            array->shape};
    if (dtype) *dtype = array->dtype;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<double>> decoded = DecodeFloat(*array, where);
  if (!decoded.ok()) return decoded.status();
  values = *std::move(decoded);
  view = {values, array->shape};
  if (dtype) *dtype = array->dtype;
  return absl::OkStatus();
}

absl::Status LoadInt(const ArraySource& read, const std::string& path, absl::string_view field,
                     std::vector<int64_t>& values, reference::TensorView<int64_t>& view) {
  if (path.empty()) return absl::OkStatus();
  NpyArray file;  // the file's contents, when there is no `read`
  absl::StatusOr<NpyView> array = read ? read(path) : [&]() -> absl::StatusOr<NpyView> {
    absl::StatusOr<NpyArray> read_file = ReadNpy(path);
    if (!read_file.ok()) return read_file.status();
    file = *std::move(read_file);
    return file.View();
  }();
  if (!array.ok()) return Bad(absl::StrCat(field, ": ", array.status().message()));
  if (array->dtype != NpyDType::kInt64) {
    return Bad(absl::StrCat(field, " (", path, "): dtype ", NpyDTypeName(array->dtype),
                            ", expected int64 (<i8)"));
  }
  absl::StatusOr<std::vector<int64_t>> decoded = DecodeInt(*array, field);
  if (!decoded.ok()) return decoded.status();
  values = *std::move(decoded);
  view = {values, array->shape};
  return absl::OkStatus();
}

absl::Status SameDType(NpyDType got, NpyDType want, absl::string_view field) {
  if (got != want) {
    return Bad(absl::StrCat(field, ": dtype ", NpyDTypeName(got), " differs from q's ",
                            NpyDTypeName(want)));
  }
  return absl::OkStatus();
}

}  // namespace

ElementType ToElementType(NpyDType dtype) {
  switch (dtype) {
    case NpyDType::kFloat32: return ElementType::kFloat32;
    case NpyDType::kFloat16: return ElementType::kFloat16;
    case NpyDType::kBFloat16: return ElementType::kBFloat16;
    default: return ElementType::kFloat64;
  }
}

absl::StatusOr<AttentionCaseSpec> ReadCaseFolder(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "case.json").string();
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (!text.ok()) return Bad(absl::StrCat("--case=", dir, ": ", text.status().message()));
  return ParseCaseFolderJson(*text, dir);
}

absl::StatusOr<AttentionCaseSpec> ParseCaseFolderJson(const std::string& json_text, const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "case.json").string();
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return json::BadField(path, "not valid JSON");
  absl::StatusOr<json::ObjectReader> opened = json::ObjectReader::Open(
      j, path,
      {"q", "k", "v", "q-offsets", "kv-offsets", "kv-index", "bias-dense", "bias-rel", "ts", "bias-ts",
       "rope-q", "rope-k", "rope-v", "do", "max-lq", "max-lk", "act", "pre-scale", "post-scale", "mask",
       "window-left", "window-right", "block", "align", "broadcast-q"});
  if (!opened.ok()) return opened.status();
  const json::ObjectReader& r = *opened;
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  AttentionCaseSpec s;
  // A file name, relative to the case folder.
  auto file = [&](const char* key, std::string& dst) -> absl::Status {
    if (!r.Has(key)) return absl::OkStatus();
    std::string name;
    GEMTB_RETURN_IF_ERROR(r.String(key, &name));
    dst = (std::filesystem::path(dir) / name).string();
    return absl::OkStatus();
  };
  auto opt_integer = [&](const char* key, std::optional<int64_t>& dst) -> absl::Status {
    if (!r.Has(key)) return absl::OkStatus();
    int64_t v = 0;
    GEMTB_RETURN_IF_ERROR(r.Int64(key, &v, kMin, kMax));
    dst = v;
    return absl::OkStatus();
  };
  auto opt_number = [&](const char* key, std::optional<double>& dst) -> absl::Status {
    if (!r.Has(key)) return absl::OkStatus();
    absl::StatusOr<double> v = json::ReadNumber(*r.Get(key), json::JoinPath(path, key));
    if (!v.ok()) return v.status();
    dst = *v;
    return absl::OkStatus();
  };
  // A name that model/'s `parse` must accept.
  auto name = [&](const char* key, std::string& dst, auto parse, const char* rule) -> absl::Status {
    GEMTB_RETURN_IF_ERROR(r.String(key, &dst));
    if (r.Has(key) && !parse(dst)) return json::BadValue(json::JoinPath(path, key), *r.Get(key), rule);
    return absl::OkStatus();
  };
  GEMTB_RETURN_IF_ERROR(file("q", s.q));
  GEMTB_RETURN_IF_ERROR(file("k", s.k));
  GEMTB_RETURN_IF_ERROR(file("v", s.v));
  GEMTB_RETURN_IF_ERROR(file("q-offsets", s.q_offsets));
  GEMTB_RETURN_IF_ERROR(file("kv-offsets", s.kv_offsets));
  GEMTB_RETURN_IF_ERROR(file("kv-index", s.kv_index));
  GEMTB_RETURN_IF_ERROR(file("bias-dense", s.bias_dense));
  GEMTB_RETURN_IF_ERROR(file("bias-rel", s.bias_rel));
  GEMTB_RETURN_IF_ERROR(file("ts", s.ts));
  GEMTB_RETURN_IF_ERROR(file("bias-ts", s.bias_ts));
  GEMTB_RETURN_IF_ERROR(file("rope-q", s.rope_q));
  GEMTB_RETURN_IF_ERROR(file("rope-k", s.rope_k));
  GEMTB_RETURN_IF_ERROR(file("rope-v", s.rope_v));
  GEMTB_RETURN_IF_ERROR(file("do", s.d_o));
  GEMTB_RETURN_IF_ERROR(opt_integer("max-lq", s.max_lq));
  GEMTB_RETURN_IF_ERROR(opt_integer("max-lk", s.max_lk));
  GEMTB_RETURN_IF_ERROR(name("act", s.act, [](std::string_view n) { return ParseActivation(n).has_value(); },
                             "is not an activation"));
  GEMTB_RETURN_IF_ERROR(opt_number("pre-scale", s.pre_scale));
  GEMTB_RETURN_IF_ERROR(opt_number("post-scale", s.post_scale));
  GEMTB_RETURN_IF_ERROR(name("mask", s.mask, [](std::string_view n) { return ParseMaskKind(n).has_value(); },
                             "is not a mask (none, causal, window, block)"));
  GEMTB_RETURN_IF_ERROR(r.Int64("window-left", &s.window_left, kMin, kMax));
  GEMTB_RETURN_IF_ERROR(r.Int64("window-right", &s.window_right, kMin, kMax));
  GEMTB_RETURN_IF_ERROR(r.Int64("block", &s.block, kMin, kMax));
  GEMTB_RETURN_IF_ERROR(name("align", s.align, [](std::string_view n) { return ParseAlignment(n).has_value(); },
                             "is not an alignment (bottom_right, top_left)"));
  GEMTB_RETURN_IF_ERROR(r.Bool("broadcast-q", &s.broadcast_q));
  for (const auto& [key, value] : j.items()) s.given.insert(key);
  return s;
}

absl::StatusOr<AttentionOptions> AttentionOptionsOf(const AttentionCaseSpec& s, absl::string_view flag_prefix) {
  AttentionOptions o;
  std::optional<Activation> act = ParseActivation(s.act);
  if (!act) return Bad(absl::StrCat(flag_prefix, "act=", s.act, ": unknown activation"));
  o.act = *act;
  std::optional<MaskKind> mask = ParseMaskKind(s.mask);
  if (!mask) return Bad(absl::StrCat(flag_prefix, "mask=", s.mask, ": want none|causal|window|block"));
  o.mask = *mask;
  std::optional<Alignment> align = ParseAlignment(s.align);
  if (!align) return Bad(absl::StrCat(flag_prefix, "align=", s.align, ": want bottom_right|top_left"));
  o.align = *align;
  o.pre_scale = s.pre_scale;
  o.post_scale = s.post_scale;
  o.window_left = s.window_left;
  o.window_right = s.window_right;
  o.block = s.block;
  o.broadcast_q = s.broadcast_q;
  return o;
}

absl::StatusOr<AttentionCase> LoadAttentionCase(const AttentionCaseSpec& s) {
  return LoadAttentionCase(s, ArraySource{});  // files, read by LoadFloat / LoadInt themselves
}

absl::StatusOr<AttentionCase> LoadAttentionCase(const AttentionCaseSpec& s, const ArraySource& read) {
  for (const auto& [name, value] : {std::pair{"--q", &s.q}, {"--k", &s.k}, {"--v", &s.v},
                                    {"--q-offsets", &s.q_offsets}, {"--kv-offsets", &s.kv_offsets}}) {
    if (value->empty()) return Bad(absl::StrCat(name, ": required"));
  }
  AttentionCase c;
  absl::StatusOr<AttentionOptions> options = AttentionOptionsOf(s, "--");
  if (!options.ok()) return options.status();
  c.options = *options;

  reference::AttentionInputs& in = c.inputs;
  NpyDType dk = NpyDType::kFloat64, dv = NpyDType::kFloat64, ddo = NpyDType::kFloat64;
  // Q, K and V, the large inputs, are viewed in place when an ArraySource lends them in fp64.
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.q, "q", c.q, in.q, &c.input_dtype, /*lend=*/true));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.k, "k", c.k, in.k, &dk, /*lend=*/true));
  GEMTB_RETURN_IF_ERROR(SameDType(dk, c.input_dtype, "k"));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.v, "v", c.v, in.v, &dv, /*lend=*/true));
  GEMTB_RETURN_IF_ERROR(SameDType(dv, c.input_dtype, "v"));
  GEMTB_RETURN_IF_ERROR(LoadInt(read, s.q_offsets, "q_offsets", c.q_offsets, in.q_offsets));
  GEMTB_RETURN_IF_ERROR(LoadInt(read, s.kv_offsets, "kv_offsets", c.kv_offsets, in.kv_offsets));
  GEMTB_RETURN_IF_ERROR(LoadInt(read, s.kv_index, "kv_index", c.kv_index, in.kv_index));
  GEMTB_RETURN_IF_ERROR(LoadInt(read, s.ts, "ts", c.ts, in.ts));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.bias_dense, "bias_dense", c.bias_dense, in.bias_dense));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.bias_rel, "bias_rel", c.bias_rel, in.bias_rel));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.bias_ts, "bias_ts", c.bias_ts, in.bias_ts));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.rope_q, "rope_q", c.rope_q, in.rope_q));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.rope_k, "rope_k", c.rope_k, in.rope_k));
  GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.rope_v, "rope_v", c.rope_v, in.rope_v));
  if (!s.d_o.empty()) {
    reference::TensorView<double> view;
    GEMTB_RETURN_IF_ERROR(LoadFloat(read, s.d_o, "do", c.d_o, view, &ddo));
    GEMTB_RETURN_IF_ERROR(SameDType(ddo, c.input_dtype, "do"));
    c.d_o_shape = view.shape;
    c.has_d_o = true;
  }
  in.input_type = ToElementType(c.input_dtype);

  // Default maxima: the longest sequence. Offsets are validated by the oracle below; here only
  // what is needed to take a maximum safely.
  auto longest = [](const std::vector<int64_t>& off) {
    int64_t m = 0;
    for (size_t i = 1; i < off.size(); ++i) {
      // Hostile offsets could overflow the difference; pairs that validation will reject anyway
      // (negative or decreasing) are skipped.
      if (off[i - 1] >= 0 && off[i] >= off[i - 1]) m = std::max(m, off[i] - off[i - 1]);
    }
    return m;
  };
  in.max_lq = s.max_lq.value_or(longest(c.q_offsets));
  in.max_lk = s.max_lk.value_or(longest(c.kv_offsets));
  GEMTB_RETURN_IF_ERROR(reference::ValidateAttention(in, c.options));
  return c;
}

}  // namespace gemtb::io
