// The project's one strict JSON reader: every key of an object must be known, every value is checked
// against its rule, and every error names the JSON path, the value and the rule
// ("plan.dense.prefetch_depth: -1 must be >= 0") as InvalidArgument. Every JSON input of gemtb
// (model configs, scenarios, clusters, sharding plans, embedding specs, case files) is read with it.
#ifndef GEMTB_MODEL_JSON_JSON_READER_H_
#define GEMTB_MODEL_JSON_JSON_READER_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/common/enum_names.h"
#include "nlohmann/json.hpp"

namespace gemtb::json {

// "<path>: <value> <rule>" as InvalidArgument.
absl::Status BadValue(std::string_view path, const nlohmann::json& value, std::string_view rule);
// "<path>: <message>" as InvalidArgument.
absl::Status BadField(std::string_view path, std::string_view message);

// A JSON value as the message shows it: numbers in shortest round-trip form, strings quoted,
// long arrays and objects abbreviated.
std::string ShowValue(const nlohmann::json& value);

// "<parent>.<key>" (or "<key>" at the top).
std::string JoinPath(std::string_view parent, std::string_view key);
// "<parent>[<index>]".
std::string IndexPath(std::string_view parent, size_t index);

// `json` as one of the names of `table` ("... is not one of a, b, c").
template <typename E, size_t N>
absl::StatusOr<E> ReadNamed(const nlohmann::json& json, std::string_view path, const EnumName<E> (&table)[N]) {
  if (!json.is_string()) return BadValue(path, json, "is not a string");
  if (std::optional<E> e = ParseIn(table, json.get<std::string>())) return *e;
  return BadValue(path, json, "is not one of " + NamesOf(table));
}

class ObjectReader {
 public:
  // Fails unless `json` is an object whose keys are all in `known`.
  static absl::StatusOr<ObjectReader> Open(const nlohmann::json& json, std::string path,
                                           std::initializer_list<std::string_view> known);
  // As Open, but keys starting with '_' are comments ("_comment") and ignored.
  static absl::StatusOr<ObjectReader> OpenAllowingComments(const nlohmann::json& json, std::string path,
                                                           std::initializer_list<std::string_view> known);

  const std::string& path() const { return path_; }
  bool Has(std::string_view key) const;
  // The value at `key`, or nullptr when absent.
  const nlohmann::json* Get(std::string_view key) const;
  // Fails when `key` is absent ("<path>.<key>: missing").
  absl::Status Require(std::string_view key) const;

  // Each reader leaves *out unchanged when the key is absent.
  absl::Status Int(std::string_view key, int* out, int64_t lo, int64_t hi) const;
  absl::Status Int64(std::string_view key, int64_t* out, int64_t lo, int64_t hi) const;
  absl::Status Uint64(std::string_view key, uint64_t* out) const;
  absl::Status Bool(std::string_view key, bool* out) const;
  absl::Status String(std::string_view key, std::string* out) const;
  // A string from a fixed set ("... is not one of a, b, c").
  absl::Status Enum(std::string_view key, std::string* out, std::initializer_list<std::string_view> allowed) const;

  // A name from an enum's name table (model/common/enum_names.h) as that enum value.
  template <typename E, size_t N>
  absl::Status Named(std::string_view key, E* out, const EnumName<E> (&table)[N]) const {
    const nlohmann::json* v = Get(key);
    if (v == nullptr) return absl::OkStatus();
    absl::StatusOr<E> e = ReadNamed(*v, JoinPath(path_, key), table);
    if (!e.ok()) return e.status();
    *out = *e;
    return absl::OkStatus();
  }

  // Numbers (integers accepted). Rules: > 0, >= 0, in [lo, hi], in (0, 1].
  absl::Status Positive(std::string_view key, double* out) const;
  absl::Status NonNegative(std::string_view key, double* out) const;
  absl::Status Range(std::string_view key, double* out, double lo, double hi) const;
  absl::Status Fraction(std::string_view key, double* out) const;  // 0 < x <= 1
  absl::Status Double(std::string_view key, double* out) const;    // any finite number

 private:
  ObjectReader(const nlohmann::json* json, std::string path) : json_(json), path_(std::move(path)) {}
  static absl::StatusOr<ObjectReader> OpenChecked(const nlohmann::json& json, std::string path,
                                                  std::initializer_list<std::string_view> known, bool comments);
  absl::StatusOr<double> Number(std::string_view key, const nlohmann::json& v) const;

  const nlohmann::json* json_;
  std::string path_;
};

// Checks that `json` is a finite number; returns it.
absl::StatusOr<double> ReadNumber(const nlohmann::json& json, std::string_view path);
// Checks that `json` is an integer in [lo, hi]; returns it.
absl::StatusOr<int64_t> ReadInteger(const nlohmann::json& json, std::string_view path, int64_t lo, int64_t hi);

// Field readers for code that walks an object by hand after CheckKeys (nested and cross-checked
// structures such as model configs and model.json). A missing key fails as "<path>.<key>: missing"
// when `required`, else leaves *out unchanged; the rules read as ObjectReader's.
absl::Status CheckKeys(const nlohmann::json& json, std::string_view path,
                       std::initializer_list<std::string_view> known);
absl::Status GetInt(const nlohmann::json& json, std::string_view key, std::string_view path, int64_t* out,
                    bool required, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
absl::Status GetInt32(const nlohmann::json& json, std::string_view key, std::string_view path, int* out,
                      bool required, int lo = INT32_MIN);
absl::Status GetDouble(const nlohmann::json& json, std::string_view key, std::string_view path, double* out,
                       bool required);
absl::Status GetBool(const nlohmann::json& json, std::string_view key, std::string_view path, bool* out,
                     bool required);
absl::Status GetString(const nlohmann::json& json, std::string_view key, std::string_view path, std::string* out,
                       bool required);
template <typename E, size_t N>
absl::Status GetEnum(const nlohmann::json& json, std::string_view key, std::string_view path,
                     const EnumName<E> (&table)[N], E* out, bool required) {
  if (!json.contains(key)) return required ? BadField(JoinPath(path, key), "missing") : absl::OkStatus();
  absl::StatusOr<E> value = ReadNamed(json[key], JoinPath(path, key), table);
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

}  // namespace gemtb::json

#endif  // GEMTB_MODEL_JSON_JSON_READER_H_
