#include "sim/network/json_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace gemtb::sim::json_fields {
namespace {

absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Show(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

}  // namespace

absl::Status Bad(std::string_view path, const nlohmann::json& value, std::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat(View(path), ": ", Show(value), " ", View(rule)));
}

std::string Join(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(View(parent), ".", View(key));
}

std::string Index(std::string_view parent, size_t i) { return absl::StrCat(View(parent), "[", i, "]"); }

absl::Status CheckObject(const nlohmann::json& j, std::string_view path, std::initializer_list<std::string_view> known) {
  if (!j.is_object()) return Bad(path, j, "must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(known.begin(), known.end(), std::string_view(it.key())) == known.end()) {
      std::string names;
      for (std::string_view k : known) absl::StrAppend(&names, names.empty() ? "" : ", ", View(k));
      return absl::InvalidArgumentError(
          absl::StrCat(Join(path, it.key()), ": unknown key (known: ", names, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Number(const nlohmann::json& obj, std::string_view path, const char* key, double* out, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? absl::InvalidArgumentError(absl::StrCat(Join(path, key), ": missing")) : absl::OkStatus();
  }
  if (!it->is_number()) return Bad(Join(path, key), *it, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) return Bad(Join(path, key), *it, "must be finite");
  *out = v;
  return absl::OkStatus();
}

absl::Status Int(const nlohmann::json& obj, std::string_view path, const char* key, int* out, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? absl::InvalidArgumentError(absl::StrCat(Join(path, key), ": missing")) : absl::OkStatus();
  }
  if (!it->is_number_integer()) return Bad(Join(path, key), *it, "must be an integer");
  if (it->is_number_unsigned() ? it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                               : (it->get<int64_t>() > std::numeric_limits<int>::max() ||
                                  it->get<int64_t>() < std::numeric_limits<int>::min())) {
    return Bad(Join(path, key), *it, "does not fit a 32-bit integer");
  }
  *out = static_cast<int>(it->get<int64_t>());
  return absl::OkStatus();
}

absl::Status String(const nlohmann::json& obj, std::string_view path, const char* key, std::string* out,
                    bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return required ? absl::InvalidArgumentError(absl::StrCat(Join(path, key), ": missing")) : absl::OkStatus();
  }
  if (!it->is_string()) return Bad(Join(path, key), *it, "must be a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status Bool(const nlohmann::json& obj, std::string_view path, const char* key, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return absl::OkStatus();
  if (!it->is_boolean()) return Bad(Join(path, key), *it, "must be true or false");
  *out = it->get<bool>();
  return absl::OkStatus();
}

}  // namespace gemtb::sim::json_fields
