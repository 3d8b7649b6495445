// Strict field reading for sim/network's JSON (cluster, calibration): unknown keys rejected, every
// error "<path>: <value> <rule>". Private to sim/network (sim/scenario has its own reader, and
// depends on this library, not the other way round).
#ifndef GEMTB_SIM_NETWORK_JSON_FIELDS_H_
#define GEMTB_SIM_NETWORK_JSON_FIELDS_H_

#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace gemtb::sim::json_fields {

absl::Status Bad(std::string_view path, const nlohmann::json& value, std::string_view rule);
std::string Join(std::string_view parent, std::string_view key);
std::string Index(std::string_view parent, size_t i);

// Fails unless `j` is an object whose keys are all in `known`.
absl::Status CheckObject(const nlohmann::json& j, std::string_view path, std::initializer_list<std::string_view> known);

// Readers: absent key leaves *out unchanged unless `required` (then "<path>: missing").
absl::Status Number(const nlohmann::json& obj, std::string_view path, const char* key, double* out, bool required);
absl::Status Int(const nlohmann::json& obj, std::string_view path, const char* key, int* out, bool required);
absl::Status String(const nlohmann::json& obj, std::string_view path, const char* key, std::string* out, bool required);
absl::Status Bool(const nlohmann::json& obj, std::string_view path, const char* key, bool* out);

}  // namespace gemtb::sim::json_fields

#endif  // GEMTB_SIM_NETWORK_JSON_FIELDS_H_
