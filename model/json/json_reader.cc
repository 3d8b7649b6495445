#include "model/json/json_reader.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gemtb::json {

std::string ShowValue(const nlohmann::json& value) {
  if (value.is_array() && value.size() > 4) return absl::StrCat("[... ", value.size(), " items]");
  if (value.is_object()) return value.size() > 4 ? absl::StrCat("{... ", value.size(), " keys}") : value.dump();
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

absl::Status BadValue(std::string_view path, const nlohmann::json& value, std::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(absl::string_view(path.data(), path.size()), ": ", ShowValue(value),
                                                 " ", absl::string_view(rule.data(), rule.size())));
}

absl::Status BadField(std::string_view path, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(absl::string_view(path.data(), path.size()), ": ",
                                                 absl::string_view(message.data(), message.size())));
}

std::string JoinPath(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return absl::StrCat(absl::string_view(parent.data(), parent.size()), ".", absl::string_view(key.data(), key.size()));
}

std::string IndexPath(std::string_view parent, size_t index) {
  return absl::StrCat(absl::string_view(parent.data(), parent.size()), "[", index, "]");
}

absl::StatusOr<ObjectReader> ObjectReader::Open(const nlohmann::json& json, std::string path,
                                                std::initializer_list<std::string_view> known) {
  return OpenChecked(json, std::move(path), known, false);
}

absl::StatusOr<ObjectReader> ObjectReader::OpenAllowingComments(const nlohmann::json& json, std::string path,
                                                                std::initializer_list<std::string_view> known) {
  return OpenChecked(json, std::move(path), known, true);
}

absl::StatusOr<ObjectReader> ObjectReader::OpenChecked(const nlohmann::json& json, std::string path,
                                                       std::initializer_list<std::string_view> known,
                                                       bool comments) {
  if (!json.is_object()) return BadValue(path, json, "is not an object");
  for (const auto& [key, value] : json.items()) {
    if (comments && !key.empty() && key[0] == '_') continue;
    bool ok = false;
    for (std::string_view k : known) ok = ok || k == key;
    if (!ok) {
      std::vector<std::string> names(known.begin(), known.end());
      return BadField(JoinPath(path, key), absl::StrCat("unknown key (known: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  return ObjectReader(&json, std::move(path));
}

bool ObjectReader::Has(std::string_view key) const { return json_->contains(key); }

const nlohmann::json* ObjectReader::Get(std::string_view key) const {
  auto it = json_->find(key);
  return it == json_->end() ? nullptr : &*it;
}

absl::Status ObjectReader::Require(std::string_view key) const {
  if (!Has(key)) return BadField(JoinPath(path_, key), "missing");
  return absl::OkStatus();
}

absl::StatusOr<double> ReadNumber(const nlohmann::json& json, std::string_view path) {
  if (!json.is_number()) return BadValue(path, json, "is not a number");
  const double v = json.get<double>();
  if (!std::isfinite(v)) return BadValue(path, json, "is not finite");
  return v;
}

absl::StatusOr<int64_t> ReadInteger(const nlohmann::json& json, std::string_view path, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (json.is_number_unsigned()) {
    const uint64_t u = json.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return BadValue(path, json, absl::StrCat("must be in [", lo, ", ", hi, "]"));
    }
    v = static_cast<int64_t>(u);
  } else if (json.is_number_integer()) {
    v = json.get<int64_t>();
  } else if (json.is_number_float()) {
    // 1e9 and 2048.0 are integers too; 1.5 is not.
    const double d = json.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return BadValue(path, json, "is not an integer");
    v = static_cast<int64_t>(d);
  } else {
    return BadValue(path, json, "is not an integer");
  }
  if (v < lo || v > hi) return BadValue(path, json, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  return v;
}

absl::Status ObjectReader::Int64(std::string_view key, int64_t* out, int64_t lo, int64_t hi) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<int64_t> i = ReadInteger(*v, JoinPath(path_, key), lo, hi);
  if (!i.ok()) return i.status();
  *out = *i;
  return absl::OkStatus();
}

absl::Status ObjectReader::Int(std::string_view key, int* out, int64_t lo, int64_t hi) const {
  int64_t v = *out;
  if (absl::Status s = Int64(key, &v, lo, hi); !s.ok()) return s;
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status ObjectReader::Uint64(std::string_view key, uint64_t* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
  } else if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v->get<int64_t>());
  } else {
    return BadValue(JoinPath(path_, key), *v, "is not an unsigned 64-bit integer");
  }
  return absl::OkStatus();
}

absl::Status ObjectReader::Bool(std::string_view key, bool* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return BadValue(JoinPath(path_, key), *v, "is not true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ObjectReader::String(std::string_view key, std::string* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return BadValue(JoinPath(path_, key), *v, "is not a string");
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status ObjectReader::Enum(std::string_view key, std::string* out,
                                std::initializer_list<std::string_view> allowed) const {
  std::string text = *out;
  if (absl::Status s = String(key, &text); !s.ok()) return s;
  if (!Has(key)) return absl::OkStatus();
  for (std::string_view a : allowed) {
    if (a == text) {
      *out = text;
      return absl::OkStatus();
    }
  }
  std::vector<std::string> names(allowed.begin(), allowed.end());
  return BadValue(JoinPath(path_, key), *Get(key), absl::StrCat("is not one of ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<double> ObjectReader::Number(std::string_view key, const nlohmann::json& v) const {
  return ReadNumber(v, JoinPath(path_, key));
}

absl::Status ObjectReader::Positive(std::string_view key, double* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<double> d = Number(key, *v);
  if (!d.ok()) return d.status();
  if (!(*d > 0)) return BadValue(JoinPath(path_, key), *v, "must be > 0");
  *out = *d;
  return absl::OkStatus();
}

absl::Status ObjectReader::NonNegative(std::string_view key, double* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<double> d = Number(key, *v);
  if (!d.ok()) return d.status();
  if (!(*d >= 0)) return BadValue(JoinPath(path_, key), *v, "must be >= 0");
  *out = *d;
  return absl::OkStatus();
}

absl::Status ObjectReader::Range(std::string_view key, double* out, double lo, double hi) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<double> d = Number(key, *v);
  if (!d.ok()) return d.status();
  if (!(*d >= lo && *d <= hi)) {
    return BadValue(JoinPath(path_, key), *v, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  }
  *out = *d;
  return absl::OkStatus();
}

absl::Status ObjectReader::Double(std::string_view key, double* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<double> d = Number(key, *v);
  if (!d.ok()) return d.status();
  *out = *d;
  return absl::OkStatus();
}

absl::Status ObjectReader::Fraction(std::string_view key, double* out) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  absl::StatusOr<double> d = Number(key, *v);
  if (!d.ok()) return d.status();
  if (!(*d > 0 && *d <= 1)) return BadValue(JoinPath(path_, key), *v, "must be in (0, 1]");
  *out = *d;
  return absl::OkStatus();
}

absl::Status CheckKeys(const nlohmann::json& json, std::string_view path,
                       std::initializer_list<std::string_view> known) {
  return ObjectReader::Open(json, std::string(path), known).status();
}

namespace {

// The value at `key`, nullptr when absent; `status` says whether an absent key is an error.
const nlohmann::json* Field(const nlohmann::json& json, std::string_view key, std::string_view path, bool required,
                            absl::Status* status) {
  *status = absl::OkStatus();
  auto it = json.find(key);
  if (it != json.end()) return &*it;
  if (required) *status = BadField(JoinPath(path, key), "missing");
  return nullptr;
}

}  // namespace

absl::Status GetInt(const nlohmann::json& json, std::string_view key, std::string_view path, int64_t* out,
                    bool required, int64_t lo, int64_t hi) {
  absl::Status status;
  const nlohmann::json* v = Field(json, key, path, required, &status);
  if (v == nullptr) return status;
  const std::string p = JoinPath(path, key);
  absl::StatusOr<int64_t> i =
      ReadInteger(*v, p, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (!i.ok()) return i.status();
  if (*i < lo) return BadValue(p, *v, absl::StrCat("must be >= ", lo));
  if (*i > hi) return BadValue(p, *v, absl::StrCat("must be <= ", hi));
  *out = *i;
  return absl::OkStatus();
}

absl::Status GetInt32(const nlohmann::json& json, std::string_view key, std::string_view path, int* out,
                      bool required, int lo) {
  int64_t v = *out;
  if (absl::Status s = GetInt(json, key, path, &v, required, lo, std::numeric_limits<int>::max()); !s.ok()) {
    return s;
  }
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status GetDouble(const nlohmann::json& json, std::string_view key, std::string_view path, double* out,
                       bool required) {
  absl::Status status;
  const nlohmann::json* v = Field(json, key, path, required, &status);
  if (v == nullptr) return status;
  absl::StatusOr<double> d = ReadNumber(*v, JoinPath(path, key));
  if (!d.ok()) return d.status();
  *out = *d;
  return absl::OkStatus();
}

absl::Status GetBool(const nlohmann::json& json, std::string_view key, std::string_view path, bool* out,
                     bool required) {
  absl::Status status;
  const nlohmann::json* v = Field(json, key, path, required, &status);
  if (v == nullptr) return status;
  if (!v->is_boolean()) return BadValue(JoinPath(path, key), *v, "is not true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status GetString(const nlohmann::json& json, std::string_view key, std::string_view path, std::string* out,
                       bool required) {
  absl::Status status;
  const nlohmann::json* v = Field(json, key, path, required, &status);
  if (v == nullptr) return status;
  if (!v->is_string()) return BadValue(JoinPath(path, key), *v, "is not a string");
  *out = v->get<std::string>();
  return absl::OkStatus();
}

}  // namespace gemtb::json
