// model.json: ModelGraph <-> JSON. Keys are written in a fixed
// (sorted) order; numbers that are integers are written as integers, other doubles in nlohmann's
// shortest round-trip form. The parser is strict: unknown keys, wrong types and references out of
// range are errors naming the JSON path.
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_graph.h"
#include "model/json/json_reader.h"

namespace gemtb::model {
namespace {

using gemtb::json::BadField;
using gemtb::json::GetBool;
using gemtb::json::GetDouble;
using gemtb::json::GetInt;
using gemtb::json::GetString;
using gemtb::json::IndexPath;
using gemtb::json::JoinPath;
using gemtb::json::CheckKeys;
using nlohmann::json;

// An integral double within 2^53 is written as an integer (128, not 128.0).
json Number(double v) {
  if (std::nearbyint(v) == v && std::fabs(v) < 9007199254740992.0) {
    return json(static_cast<int64_t>(v));
  }
  return json(v);
}

json AffineJson(const Affine& a) {
  json j = json::object();
  if (a.c != 0.0) j["c"] = Number(a.c);
  if (a.B != 0.0) j["B"] = Number(a.B);
  if (a.N != 0.0) j["N"] = Number(a.N);
  if (a.P != 0.0) j["P"] = Number(a.P);
  return j;
}

json ShapeJson(const Shape& shape) {
  json j = json::array();
  for (const Affine& dim : shape) j.push_back(dim.IsConstant() ? Number(dim.c) : AffineJson(dim));
  return j;
}

json MaskJson(const AttentionMask& m) {
  const std::string name(MaskKindName(m.kind));
  switch (m.kind) {
    case MaskKind::kNone: return name;
    case MaskKind::kWindow: return json{{name, json::array({m.left, m.right})}};
    case MaskKind::kBlock: return json{{name, m.block}};
    case MaskKind::kCausal: return json{{name, true}};
  }
  return name;
}

json AttentionJson(const AttentionSpec& a) {
  return json{{"act", std::string(ActivationName(a.act))}, {"H", a.H},
              {"Hkv", a.Hkv},         {"Dqk", a.Dqk},
              {"Dv", a.Dv},           {"mask", MaskJson(a.mask)},
              {"q_tokens", a.q_tokens}, {"kv_tokens", a.kv_tokens},
              {"scale", Number(a.scale)}, {"qk_norm", a.qk_norm},
              {"rope", std::string(NameIn(kRopeKindNames, a.rope))}, {"broadcast_q", a.broadcast_q}};
}

json OpJson(const Op& op) {
  json j;
  j["name"] = op.name;
  j["region"] = op.region;
  j["kind"] = std::string(OpKindName(op.kind));
  j["seq"] = op.seq.has_value() ? json(*op.seq) : json(nullptr);
  if (op.attn.has_value()) j["attn"] = AttentionJson(*op.attn);
  json in = json::array();
  for (const Shape& s : op.shapes.in) in.push_back(ShapeJson(s));
  j["shapes"] = json{{"in", in}, {"out", ShapeJson(op.shapes.out)}};
  j["flops"] = json{{"fwd", AffineJson(op.flops.fwd)}, {"bwd", AffineJson(op.flops.bwd)}};
  j["bytes"] = json{{"fwd", AffineJson(op.bytes.fwd)}, {"bwd", AffineJson(op.bytes.bwd)}};
  j["saved"] = json{{"bytes", AffineJson(op.saved.bytes)},
                    {"recompute", std::string(RecomputeClassName(op.saved.recompute))}};
  j["params"] = op.params;
  j["expert"] = op.expert.has_value() ? json(*op.expert) : json(nullptr);
  j["local_mfu"] = op.local_mfu;
  return j;
}

// ---- parsing ----

absl::Status ParseAffine(const json& j, const std::string& path, Affine* out) {
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"c", "B", "N", "P"}));
  *out = Affine{};
  GEMTB_RETURN_IF_ERROR(GetDouble(j, "c", path, &out->c, false));
  GEMTB_RETURN_IF_ERROR(GetDouble(j, "B", path, &out->B, false));
  GEMTB_RETURN_IF_ERROR(GetDouble(j, "N", path, &out->N, false));
  GEMTB_RETURN_IF_ERROR(GetDouble(j, "P", path, &out->P, false));
  return absl::OkStatus();
}

absl::Status ParseShape(const json& j, const std::string& path, Shape* out) {
  if (!j.is_array()) return BadField(path, absl::StrCat(j.dump(), " is not an array of dims"));
  out->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    Affine dim;
    if (j[i].is_number()) {
      dim.c = j[i].get<double>();
      if (!std::isfinite(dim.c)) return BadField(IndexPath(path, i), "is not finite");
    } else {
      GEMTB_RETURN_IF_ERROR(ParseAffine(j[i], IndexPath(path, i), &dim));
    }
    out->push_back(dim);
  }
  return absl::OkStatus();
}

absl::Status ParseFwdBwd(const json& j, const std::string& path, FwdBwd* out) {
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"fwd", "bwd"}));
  if (!j.contains("fwd")) return BadField(JoinPath(path, "fwd"), "required");
  if (!j.contains("bwd")) return BadField(JoinPath(path, "bwd"), "required");
  GEMTB_RETURN_IF_ERROR(ParseAffine(j["fwd"], JoinPath(path, "fwd"), &out->fwd));
  return ParseAffine(j["bwd"], JoinPath(path, "bwd"), &out->bwd);
}

// A required name from an enum's name table.
template <typename E, size_t K>
absl::Status ParseName(const json& j, std::string_view key, const std::string& path,
                       const EnumName<E> (&names)[K], E* out) {
  if (!j.is_object() || !j.contains(key)) return BadField(JoinPath(path, key), "required");
  absl::StatusOr<E> value = gemtb::json::ReadNamed(j[key], JoinPath(path, key), names);
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

absl::Status ParseOptionalIndex(const json& j, std::string_view key, const std::string& path,
                                int64_t limit, std::optional<int>* out) {
  const std::string p = JoinPath(path, key);
  if (!j.contains(key)) return BadField(p, "required (an index or null)");
  if (j[key].is_null()) {
    out->reset();
    return absl::OkStatus();
  }
  int64_t v = 0;
  GEMTB_RETURN_IF_ERROR(GetInt(j, key, path, &v, true, 0));
  if (v >= limit) return BadField(p, absl::StrCat(v, " is out of range [0, ", limit, ")"));
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ParseMask(const json& j, const std::string& path, AttentionMask* out) {
  *out = AttentionMask{};
  if (j.is_string() && ParseMaskKind(j.get<std::string>()) == MaskKind::kNone) return absl::OkStatus();
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"window", "block", "causal"}));
  if (j.size() != 1) return BadField(path, absl::StrCat(j.dump(), " must be \"none\" or hold one of window|block|causal"));
  if (j.contains("window")) {
    const json& w = j["window"];
    if (!w.is_array() || w.size() != 2 || !w[0].is_number_integer() || !w[1].is_number_integer() ||
        w[0].get<int64_t>() < -1 || w[1].get<int64_t>() < -1) {
      return BadField(JoinPath(path, "window"), absl::StrCat(w.dump(), " is not [left, right] (>= -1)"));
    }
    out->kind = MaskKind::kWindow;
    out->left = w[0].get<int64_t>();
    out->right = w[1].get<int64_t>();
  } else if (j.contains("block")) {
    out->kind = MaskKind::kBlock;
    GEMTB_RETURN_IF_ERROR(GetInt(j, "block", path, &out->block, true, 1));
  } else {
    if (!j["causal"].is_boolean() || !j["causal"].get<bool>()) {
      return BadField(JoinPath(path, "causal"), absl::StrCat(j["causal"].dump(), " must be true"));
    }
    out->kind = MaskKind::kCausal;
  }
  return absl::OkStatus();
}

absl::Status ParseAttention(const json& j, const std::string& path, AttentionSpec* a) {
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"act", "H", "Hkv", "Dqk", "Dv", "mask", "q_tokens",
                                           "kv_tokens", "scale", "qk_norm", "rope", "broadcast_q"}));
  GEMTB_RETURN_IF_ERROR(ParseName(j, "act", path, kActivationNames, &a->act));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "H", path, &a->H, true, 1));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "Hkv", path, &a->Hkv, true, 1));
  if (a->H % a->Hkv != 0) return BadField(JoinPath(path, "Hkv"), absl::StrCat(a->Hkv, " does not divide H ", a->H));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "Dqk", path, &a->Dqk, true, 1));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "Dv", path, &a->Dv, true, 1));
  if (!j.contains("mask")) return BadField(JoinPath(path, "mask"), "required");
  GEMTB_RETURN_IF_ERROR(ParseMask(j["mask"], JoinPath(path, "mask"), &a->mask));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "q_tokens", path, &a->q_tokens, false, 0));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "kv_tokens", path, &a->kv_tokens, false, 0));
  GEMTB_RETURN_IF_ERROR(GetDouble(j, "scale", path, &a->scale, false));
  GEMTB_RETURN_IF_ERROR(GetBool(j, "qk_norm", path, &a->qk_norm, false));
  if (j.contains("rope")) GEMTB_RETURN_IF_ERROR(ParseName(j, "rope", path, kRopeKindNames, &a->rope));
  GEMTB_RETURN_IF_ERROR(GetBool(j, "broadcast_q", path, &a->broadcast_q, false));
  return absl::OkStatus();
}

absl::Status CheckPerOpAffine(const Op& op, const std::string& path) {
  if (op.seq.has_value()) return absl::OkStatus();
  const std::pair<const char*, const Affine*> all[] = {
      {"flops.fwd", &op.flops.fwd}, {"flops.bwd", &op.flops.bwd}, {"bytes.fwd", &op.bytes.fwd},
      {"bytes.bwd", &op.bytes.bwd}, {"saved.bytes", &op.saved.bytes}};
  for (const auto& [name, a] : all) {
    if (a->N != 0.0 || a->P != 0.0) {
      return BadField(JoinPath(path, name), "has N or P terms but the op has no sequence (seq is null)");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseOp(const json& j, const std::string& path, const ModelGraph& g, Op* op) {
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"name", "region", "kind", "seq", "attn", "shapes", "flops",
                                           "bytes", "saved", "params", "expert", "local_mfu"}));
  GEMTB_RETURN_IF_ERROR(GetString(j, "name", path, &op->name, true));
  if (op->name.empty()) return BadField(JoinPath(path, "name"), "is empty");
  GEMTB_RETURN_IF_ERROR(GetString(j, "region", path, &op->region, true));
  if (op->region.empty()) return BadField(JoinPath(path, "region"), "is empty");
  GEMTB_RETURN_IF_ERROR(ParseName(j, "kind", path, kOpKindNames, &op->kind));
  GEMTB_RETURN_IF_ERROR(ParseOptionalIndex(j, "seq", path, static_cast<int64_t>(g.sequences.size()), &op->seq));
  if (j.contains("attn") && !j["attn"].is_null()) {
    AttentionSpec a;
    GEMTB_RETURN_IF_ERROR(ParseAttention(j["attn"], JoinPath(path, "attn"), &a));
    op->attn = a;
  }
  if ((op->kind == OpKind::kAttention) != op->attn.has_value()) {
    return BadField(JoinPath(path, "attn"), op->attn.has_value() ? "is only for kind attention"
                                                        : "required for kind attention");
  }
  const std::string spath = JoinPath(path, "shapes");
  if (!j.contains("shapes")) return BadField(spath, "required");
  GEMTB_RETURN_IF_ERROR(CheckKeys(j["shapes"], spath, {"in", "out"}));
  if (!j["shapes"].contains("in") || !j["shapes"]["in"].is_array()) {
    return BadField(JoinPath(spath, "in"), "required array of shapes");
  }
  for (size_t i = 0; i < j["shapes"]["in"].size(); ++i) {
    Shape s;
    GEMTB_RETURN_IF_ERROR(ParseShape(j["shapes"]["in"][i], IndexPath(JoinPath(spath, "in"), i), &s));
    op->shapes.in.push_back(s);
  }
  if (!j["shapes"].contains("out")) return BadField(JoinPath(spath, "out"), "required");
  GEMTB_RETURN_IF_ERROR(ParseShape(j["shapes"]["out"], JoinPath(spath, "out"), &op->shapes.out));
  for (const char* key : {"flops", "bytes", "saved"}) {
    if (!j.contains(key)) return BadField(JoinPath(path, key), "required");
  }
  GEMTB_RETURN_IF_ERROR(ParseFwdBwd(j["flops"], JoinPath(path, "flops"), &op->flops));
  GEMTB_RETURN_IF_ERROR(ParseFwdBwd(j["bytes"], JoinPath(path, "bytes"), &op->bytes));
  const std::string vpath = JoinPath(path, "saved");
  GEMTB_RETURN_IF_ERROR(CheckKeys(j["saved"], vpath, {"bytes", "recompute"}));
  if (!j["saved"].contains("bytes")) return BadField(JoinPath(vpath, "bytes"), "required");
  GEMTB_RETURN_IF_ERROR(ParseAffine(j["saved"]["bytes"], JoinPath(vpath, "bytes"), &op->saved.bytes));
  GEMTB_RETURN_IF_ERROR(ParseName(j["saved"], "recompute", vpath, kRecomputeClassNames, &op->saved.recompute));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "params", path, &op->params, true, 0));
  GEMTB_RETURN_IF_ERROR(ParseOptionalIndex(j, "expert", path, g.experts.count, &op->expert));
  if (op->expert.has_value() && g.experts.count == 1) {
    return BadField(JoinPath(path, "expert"), absl::StrCat(*op->expert, " but experts.count is 1: must be null"));
  }
  GEMTB_RETURN_IF_ERROR(GetBool(j, "local_mfu", path, &op->local_mfu, true));
  return CheckPerOpAffine(*op, path);
}

absl::Status ParseTable(const json& j, const std::string& path, GraphTable* t) {
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"name", "rows", "dim", "dtype", "pooling", "features", "optimizer"}));
  GEMTB_RETURN_IF_ERROR(GetString(j, "name", path, &t->name, true));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "rows", path, &t->rows, true, 1));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "dim", path, &t->dim, true, 1));
  GEMTB_RETURN_IF_ERROR(ParseName(j, "dtype", path, kTableDtypeNames, &t->dtype));
  GEMTB_RETURN_IF_ERROR(ParseName(j, "pooling", path, kPoolingNames, &t->pooling));
  GEMTB_RETURN_IF_ERROR(ParseName(j, "optimizer", path, kOptimizerKindNames, &t->optimizer));
  const std::string fpath = JoinPath(path, "features");
  if (!j.contains("features") || !j["features"].is_array()) return BadField(fpath, "required array of names");
  for (size_t i = 0; i < j["features"].size(); ++i) {
    if (!j["features"][i].is_string()) {
      return BadField(IndexPath(fpath, i), absl::StrCat(j["features"][i].dump(), " is not a string"));
    }
    t->features.push_back(j["features"][i].get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view OpKindName(OpKind kind) { return NameIn(kOpKindNames, kind); }

std::string_view RecomputeClassName(RecomputeClass cls) { return NameIn(kRecomputeClassNames, cls); }

json ToJson(const ModelGraph& g) {
  json j;
  j["version"] = g.version;
  j["config"] = g.config;
  j["d"] = g.d;
  json seqs = json::array();
  for (const GraphSequence& s : g.sequences) seqs.push_back(json{{"j", s.j}, {"Lmax", s.lmax}, {"n_s", s.n_s}});
  j["sequences"] = seqs;
  json tables = json::array();
  for (const GraphTable& t : g.tables) {
    tables.push_back(json{{"name", t.name}, {"rows", t.rows}, {"dim", t.dim}, {"dtype", std::string(NameIn(kTableDtypeNames, t.dtype))},
                          {"pooling", std::string(NameIn(kPoolingNames, t.pooling))}, {"features", t.features},
                          {"optimizer", std::string(NameIn(kOptimizerKindNames, t.optimizer))}});
  }
  j["tables"] = tables;
  j["experts"] = json{{"count", g.experts.count}, {"shard_group", g.experts.shard_group}};
  json ops = json::array();
  for (const Op& op : g.ops) ops.push_back(OpJson(op));
  j["ops"] = ops;
  return j;
}

std::string ToJsonText(const ModelGraph& g) {
  // One top-level key per line and one table / op per line: diffable and still compact for the
  // ~1,600 ops of gem-scale.
  const json j = ToJson(g);
  std::string out = "{\n";
  bool first = true;
  for (const auto& item : j.items()) {
    absl::StrAppend(&out, first ? "" : ",\n", "  ", json(item.key()).dump(), ": ");
    first = false;
    if (item.value().is_array() && !item.value().empty() && item.value()[0].is_object()) {
      out += "[\n";
      for (size_t i = 0; i < item.value().size(); ++i) {
        absl::StrAppend(&out, "    ", item.value()[i].dump(), i + 1 < item.value().size() ? ",\n" : "\n");
      }
      out += "  ]";
    } else {
      out += item.value().dump();
    }
  }
  out += "\n}\n";
  return out;
}

absl::StatusOr<ModelGraph> ParseModelJson(const json& j, std::string_view json_path) {
  const std::string path(json_path);
  GEMTB_RETURN_IF_ERROR(CheckKeys(j, path, {"version", "config", "d", "sequences", "tables", "experts", "ops"}));
  ModelGraph g;
  int64_t version = 0;
  GEMTB_RETURN_IF_ERROR(GetInt(j, "version", path, &version, true));
  if (version != 1) return BadField(JoinPath(path, "version"), absl::StrCat(version, " is not supported (1)"));
  g.version = 1;
  GEMTB_RETURN_IF_ERROR(GetString(j, "config", path, &g.config, true));
  GEMTB_RETURN_IF_ERROR(GetInt(j, "d", path, &g.d, true, 1));
  const std::string qpath = JoinPath(path, "sequences");
  if (!j.contains("sequences") || !j["sequences"].is_array()) return BadField(qpath, "required array");
  for (size_t i = 0; i < j["sequences"].size(); ++i) {
    const std::string p = IndexPath(qpath, i);
    const json& sj = j["sequences"][i];
    GEMTB_RETURN_IF_ERROR(CheckKeys(sj, p, {"j", "Lmax", "n_s"}));
    int64_t index = 0;
    GraphSequence s;
    GEMTB_RETURN_IF_ERROR(GetInt(sj, "j", p, &index, true));
    if (index != static_cast<int64_t>(i)) return BadField(JoinPath(p, "j"), absl::StrCat(index, " != its position ", i));
    s.j = static_cast<int>(i);
    GEMTB_RETURN_IF_ERROR(GetInt(sj, "Lmax", p, &s.lmax, true, 1));
    GEMTB_RETURN_IF_ERROR(GetInt(sj, "n_s", p, &s.n_s, true, 0));
    g.sequences.push_back(s);
  }
  const std::string tpath = JoinPath(path, "tables");
  if (!j.contains("tables") || !j["tables"].is_array()) return BadField(tpath, "required array");
  std::set<std::string> table_names;
  for (size_t i = 0; i < j["tables"].size(); ++i) {
    GraphTable t;
    GEMTB_RETURN_IF_ERROR(ParseTable(j["tables"][i], IndexPath(tpath, i), &t));
    if (!table_names.insert(t.name).second) {
      return BadField(JoinPath(IndexPath(tpath, i), "name"), absl::StrCat("'", t.name, "' is used twice"));
    }
    g.tables.push_back(std::move(t));
  }
  const std::string epath = JoinPath(path, "experts");
  if (!j.contains("experts")) return BadField(epath, "required");
  GEMTB_RETURN_IF_ERROR(CheckKeys(j["experts"], epath, {"count", "shard_group"}));
  GEMTB_RETURN_IF_ERROR(GetInt(j["experts"], "count", epath, &g.experts.count, true, 1));
  GEMTB_RETURN_IF_ERROR(GetInt(j["experts"], "shard_group", epath, &g.experts.shard_group, true, 1));
  const std::string opath = JoinPath(path, "ops");
  if (!j.contains("ops") || !j["ops"].is_array()) return BadField(opath, "required array");
  std::set<std::string> op_names;
  for (size_t i = 0; i < j["ops"].size(); ++i) {
    Op op;
    const std::string p = IndexPath(opath, i);
    GEMTB_RETURN_IF_ERROR(ParseOp(j["ops"][i], p, g, &op));
    if (!op_names.insert(op.name).second) {
      return BadField(JoinPath(p, "name"), absl::StrCat("'", op.name, "' is used twice"));
    }
    g.ops.push_back(std::move(op));
  }
  return g;
}

absl::StatusOr<ModelGraph> ParseModelJsonText(std::string_view text, std::string_view json_path) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::string_view(json_path.data(), json_path.size()), ": not valid JSON"));
  }
  return ParseModelJson(j, json_path);
}

}  // namespace gemtb::model
