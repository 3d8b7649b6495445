// Strict JSON field readers for the model description: every error names the JSON path and the
// offending value, and objects are checked for unknown keys. Host only.
#ifndef GEMTB_MODEL_DESCRIPTION_JSON_FIELDS_H_
#define GEMTB_MODEL_DESCRIPTION_JSON_FIELDS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "model/common/enum_names.h"
#include "model/json/json_reader.h"
#include "nlohmann/json.hpp"

namespace gemtb::model::json_fields {

// "<path>: <what>" as InvalidArgument.
absl::Status Bad(std::string_view path, std::string_view what);
std::string Join(std::string_view path, std::string_view key);     // path.key
std::string Index(std::string_view path, size_t i);                  // path[i]

// `j` must be an object whose keys are all in `allowed`.
absl::Status OnlyKeys(const nlohmann::json& j, std::string_view path,
                      std::initializer_list<std::string_view> allowed);

// Readers: a missing key is an error when `required`, else the destination keeps its value.
absl::Status GetInt(const nlohmann::json& j, std::string_view key, std::string_view path,
                    int64_t* out, bool required, int64_t min_value = INT64_MIN,
                    int64_t max_value = INT64_MAX);
absl::Status GetInt32(const nlohmann::json& j, std::string_view key, std::string_view path,
                      int* out, bool required, int min_value = INT32_MIN);
absl::Status GetDouble(const nlohmann::json& j, std::string_view key, std::string_view path,
                       double* out, bool required);
absl::Status GetBool(const nlohmann::json& j, std::string_view key, std::string_view path,
                     bool* out, bool required);
absl::Status GetString(const nlohmann::json& j, std::string_view key, std::string_view path,
                       std::string* out, bool required);

// A string among the names of `table`, mapped to its enum value.
template <typename E, size_t N>
absl::Status GetEnum(const nlohmann::json& j, std::string_view key, std::string_view path,
                     const EnumName<E> (&table)[N], E* out, bool required) {
  if (!j.contains(key)) return required ? Bad(Join(path, key), "required") : absl::OkStatus();
  absl::StatusOr<E> value = gemtb::json::ReadNamed(j[key], Join(path, key), table);
  if (!value.ok()) return value.status();
  *out = *value;
  return absl::OkStatus();
}

}  // namespace gemtb::model::json_fields

#endif  // GEMTB_MODEL_DESCRIPTION_JSON_FIELDS_H_
