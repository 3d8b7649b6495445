// Strict JSON field readers for the model description: every error names the JSON path and the
// offending value, and objects are checked for unknown keys. Host only.
#ifndef GEMTB_MODEL_DESCRIPTION_JSON_FIELDS_H_
#define GEMTB_MODEL_DESCRIPTION_JSON_FIELDS_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
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

// A string among `names`, mapped to its enum value.
template <typename E>
absl::Status GetEnum(const nlohmann::json& j, std::string_view key, std::string_view path,
                     std::initializer_list<std::pair<std::string_view, E>> names, E* out,
                     bool required) {
  std::string text;
  bool present = j.contains(key);
  if (absl::Status s = GetString(j, key, path, &text, required); !s.ok() || !present) return s;
  std::string all;
  for (const auto& [name, value] : names) {
    if (text == name) {
      *out = value;
      return absl::OkStatus();
    }
    all += all.empty() ? "" : "|";
    all += name;
  }
  return Bad(Join(path, key), "'" + text + "' is not one of " + all);
}

}  // namespace gemtb::model::json_fields

#endif  // GEMTB_MODEL_DESCRIPTION_JSON_FIELDS_H_
