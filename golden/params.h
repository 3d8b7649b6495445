// Reading a golden producer's parameters (JSON) with errors that name the key. Parameters come from
// the registry in code, so an error here is a bug in a registry entry, reported rather than crashing.
#ifndef GEMTB_GOLDEN_PARAMS_H_
#define GEMTB_GOLDEN_PARAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gemtb::golden {

class Params {
 public:
  explicit Params(const nlohmann::json& j) : j_(j) {}

  absl::Status Int(const char* key, int64_t* out) const {
    if (!j_.contains(key)) return absl::OkStatus();
    if (!j_[key].is_number_integer()) return Bad(key, "an integer");
    *out = j_[key].get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status Number(const char* key, double* out) const {
    if (!j_.contains(key)) return absl::OkStatus();
    if (!j_[key].is_number()) return Bad(key, "a number");
    *out = j_[key].get<double>();
    return absl::OkStatus();
  }
  absl::Status Bool(const char* key, bool* out) const {
    if (!j_.contains(key)) return absl::OkStatus();
    if (!j_[key].is_boolean()) return Bad(key, "true/false");
    *out = j_[key].get<bool>();
    return absl::OkStatus();
  }
  absl::Status String(const char* key, std::string* out) const {
    if (!j_.contains(key)) return absl::OkStatus();
    if (!j_[key].is_string()) return Bad(key, "a string");
    *out = j_[key].get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Ints(const char* key, std::vector<int64_t>* out) const {
    if (!j_.contains(key)) return absl::OkStatus();
    if (!j_[key].is_array()) return Bad(key, "an array of integers");
    out->clear();
    for (const nlohmann::json& v : j_[key]) {
      if (!v.is_number_integer()) return Bad(key, "an array of integers");
      out->push_back(v.get<int64_t>());
    }
    return absl::OkStatus();
  }
  bool Has(const char* key) const { return j_.contains(key); }
  const nlohmann::json& Json() const { return j_; }

 private:
  absl::Status Bad(const char* key, const char* want) const {
    return absl::InvalidArgumentError(absl::StrCat("params.", key, "=", j_[key].dump(), ": want ", want));
  }
  const nlohmann::json& j_;
};

}  // namespace gemtb::golden

#endif  // GEMTB_GOLDEN_PARAMS_H_
