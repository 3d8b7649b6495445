#include "model/description/json_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace gemtb::model::json_fields {

using nlohmann::json;

absl::Status Bad(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(absl::string_view(path.data(), path.size()), ": ",
                                                 absl::string_view(what.data(), what.size())));
}

std::string Join(std::string_view path, std::string_view key) {
  std::string out(path);
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

std::string Index(std::string_view path, size_t i) {
  return absl::StrCat(absl::string_view(path.data(), path.size()), "[", i, "]");
}

absl::Status OnlyKeys(const json& j, std::string_view path,
                      std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) return Bad(path, absl::StrCat(j.dump(), " is not an object"));
  for (const auto& item : j.items()) {
    bool ok = false;
    for (std::string_view a : allowed) ok = ok || item.key() == a;
    if (!ok) return Bad(Join(path, item.key()), "unknown key");
  }
  return absl::OkStatus();
}

absl::Status GetInt(const json& j, std::string_view key, std::string_view path, int64_t* out,
                    bool required, int64_t min_value, int64_t max_value) {
  const std::string p = Join(path, key);
  auto it = j.find(key);
  if (it == j.end()) return required ? Bad(p, "required") : absl::OkStatus();
  if (!it->is_number_integer()) return Bad(p, absl::StrCat(it->dump(), " is not an integer"));
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Bad(p, absl::StrCat(it->dump(), " is out of range"));
  }
  const int64_t v = it->get<int64_t>();
  if (v < min_value) return Bad(p, absl::StrCat(v, " is below the minimum ", min_value));
  if (v > max_value) return Bad(p, absl::StrCat(v, " is above the maximum ", max_value));
  *out = v;
  return absl::OkStatus();
}

absl::Status GetInt32(const json& j, std::string_view key, std::string_view path, int* out,
                      bool required, int min_value) {
  int64_t v = *out;
  if (absl::Status s = GetInt(j, key, path, &v, required, min_value); !s.ok()) return s;
  if (v > std::numeric_limits<int>::max()) {
    return Bad(Join(path, key), absl::StrCat(v, " is out of range"));
  }
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status GetDouble(const json& j, std::string_view key, std::string_view path, double* out,
                       bool required) {
  const std::string p = Join(path, key);
  auto it = j.find(key);
  if (it == j.end()) return required ? Bad(p, "required") : absl::OkStatus();
  if (!it->is_number()) return Bad(p, absl::StrCat(it->dump(), " is not a number"));
  const double v = it->get<double>();
  if (!std::isfinite(v)) return Bad(p, absl::StrCat(it->dump(), " is not finite"));
  *out = v;
  return absl::OkStatus();
}

absl::Status GetBool(const json& j, std::string_view key, std::string_view path, bool* out,
                     bool required) {
  const std::string p = Join(path, key);
  auto it = j.find(key);
  if (it == j.end()) return required ? Bad(p, "required") : absl::OkStatus();
  if (!it->is_boolean()) return Bad(p, absl::StrCat(it->dump(), " is not a boolean"));
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status GetString(const json& j, std::string_view key, std::string_view path,
                       std::string* out, bool required) {
  const std::string p = Join(path, key);
  auto it = j.find(key);
  if (it == j.end()) return required ? Bad(p, "required") : absl::OkStatus();
  if (!it->is_string()) return Bad(p, absl::StrCat(it->dump(), " is not a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

}  // namespace gemtb::model::json_fields
