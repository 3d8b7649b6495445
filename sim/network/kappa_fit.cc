#include "sim/network/kappa_fit.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gemtb::sim {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const json& value, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", value.dump(), " ", rule));
}

absl::StatusOr<double> Positive(const json& obj, const std::string& path, const std::string& key) {
  const std::string at = absl::StrCat(path, ".", key);
  if (!obj.contains(key)) return absl::InvalidArgumentError(absl::StrCat(at, ": missing"));
  const json& v = obj.at(key);
  if (!v.is_number() || !(v.get<double>() > 0)) return Bad(at, v, "must be a number > 0");
  return v.get<double>();
}

absl::StatusOr<KappaBeside> Beside(const json& gemm, const std::string& key, double alone_ms) {
  const std::string path = absl::StrCat("gemm.", key);
  if (!gemm.contains(key) || !gemm.at(key).is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing (an object {how, ms})"));
  }
  const json& b = gemm.at(key);
  KappaBeside out;
  absl::StatusOr<double> ms = Positive(b, path, "ms");
  if (!ms.ok()) return ms.status();
  out.ms = *ms;
  out.kappa = *ms / alone_ms - 1;
  if (b.contains("how") && b.at("how").is_string()) out.how = b.at("how").get<std::string>();
  return out;
}

}  // namespace

absl::StatusOr<KappaFit> FitKappa(const json& record_in) {
  const json* record = &record_in;
  if (record_in.is_object() && record_in.contains("runs") && record_in.at("runs").contains("auto")) {
    record = &record_in.at("runs").at("auto");
  }
  if (!record->is_object()) return absl::InvalidArgumentError("record: must be a JSON object");
  if (!record->contains("gemm") || !record->at("gemm").is_object()) {
    return absl::InvalidArgumentError("gemm: missing (run gemtb bench comm --gemm)");
  }
  const json& gemm = record->at("gemm");
  KappaFit fit;
  if (!record->contains("gpus") || !record->at("gpus").is_number_integer() || record->at("gpus").get<int>() < 1) {
    return Bad("gpus", record->value("gpus", json()), "must be an integer >= 1");
  }
  fit.gpus = record->at("gpus").get<int>();
  if (record->contains("device") && record->at("device").is_string()) fit.device = record->at("device").get<std::string>();
  if (gemm.contains("dim") && gemm.at("dim").is_number_integer()) fit.dim = gemm.at("dim").get<int>();
  absl::StatusOr<double> alone = Positive(gemm, "gemm", "alone_ms");
  if (!alone.ok()) return alone.status();
  fit.alone_ms = *alone;
  absl::StatusOr<KappaBeside> sm = Beside(gemm, "sm_based", fit.alone_ms);
  if (!sm.ok()) return sm.status();
  absl::StatusOr<KappaBeside> ce = Beside(gemm, "copy_engine", fit.alone_ms);
  if (!ce.ok()) return ce.status();
  fit.sm_based = *sm;
  fit.copy_engine = *ce;
  return fit;
}

json ApplyKappaFit(json cal, const KappaFit& fit, const std::string& source) {
  const std::string where = absl::StrFormat("GEMM %d^3 bf16 alone %.4g ms on %d x %s (%s)", fit.dim, fit.alone_ms,
                                            fit.gpus, fit.device, source);
  const double ce = std::max(0.0, fit.copy_engine.kappa);
  const double sm = std::max(0.0, fit.sm_based.kappa);
  cal["kappa_copy_engine"] = ce;
  json measured = json::object();
  measured["kappa_copy_engine"] = absl::StrFormat("%.4f: %s, beside %s %.4g ms", ce, where, fit.copy_engine.how,
                                                  fit.copy_engine.ms);
  if (fit.gpus >= 2) {
    cal["kappa"] = sm;
    measured["kappa"] = absl::StrFormat("%.4f: %s, beside %s %.4g ms", sm, where, fit.sm_based.how, fit.sm_based.ms);
  } else {
    measured["sm_copy_kernel"] = absl::StrFormat(
        "%.4f (not applied: a copy kernel's SM footprint is not a collective's): %s, beside %s %.4g ms", sm, where,
        fit.sm_based.how, fit.sm_based.ms);
  }
  cal["kappa_measured"] = measured;
  if (cal.contains("assumed") && cal["assumed"].is_object()) {
    cal["assumed"].erase("kappa_copy_engine");
    if (cal["assumed"].empty()) cal.erase("assumed");
  }
  return cal;
}

}  // namespace gemtb::sim
