// ParseCluster / ParseCalibration: the checks, each error naming the JSON path, value and rule.
#include "sim/network/cluster_json.h"

#include <filesystem>
#include <limits>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/json/json_reader.h"
#include "model/json/user_file.h"
#include "sim/network/collective_cost.h"
#include "sim/network/default_cluster_text.h"
#include "sim/network/layer_calibration_json.h"
#include "sim/network/nccl_fit.h"

namespace gemtb::sim {
namespace {

namespace jr = gemtb::json;
using jr::ObjectReader;
using nlohmann::json;

absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Field reads of the strict reader, with a flag for the fields that must be present.
absl::Status Number(const ObjectReader& r, std::string_view key, double* out, bool required) {
  if (required) GEMTB_RETURN_IF_ERROR(r.Require(key));
  return r.Double(key, out);
}

absl::Status Positive(const ObjectReader& r, std::string_view key, double* out, bool required) {
  if (required) GEMTB_RETURN_IF_ERROR(r.Require(key));
  return r.Positive(key, out);
}

absl::Status IntAtLeast(const ObjectReader& r, std::string_view key, int* out, int lo, bool required) {
  if (required) GEMTB_RETURN_IF_ERROR(r.Require(key));
  return r.Int(key, out, lo, std::numeric_limits<int>::max());
}

absl::Status Text(const ObjectReader& r, std::string_view key, std::string* out, bool required) {
  if (required) GEMTB_RETURN_IF_ERROR(r.Require(key));
  return r.String(key, out);
}

// A positive number that is the value of a free-form map entry (peak_flops per dtype).
absl::StatusOr<double> PositiveValue(const json& value, const std::string& path) {
  absl::StatusOr<double> v = jr::ReadNumber(value, path);
  if (!v.ok()) return v.status();
  if (!(*v > 0)) return jr::BadValue(path, value, "must be > 0");
  return *v;
}

// A section given inline, or as a string naming a file relative to base_dir: returns the JSON and
// the folder that the section's own references resolve against.
absl::StatusOr<std::pair<json, std::string>> Resolve(const json& j, std::string_view path, const std::string& base_dir,
                                                     const FileReader& reader) {
  if (!j.is_string()) return std::make_pair(j, base_dir);
  const std::filesystem::path file = std::filesystem::path(base_dir) / j.get<std::string>();
  absl::StatusOr<std::string> text = reader(file.lexically_normal().string());
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(View(path), ": cannot read \"", j.get<std::string>(), "\" (",
                                                   text.status().message(), ")"));
  }
  json parsed = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(View(path), ": \"", j.get<std::string>(), "\" is not valid JSON"));
  }
  return std::make_pair(std::move(parsed), file.parent_path().string());
}

absl::Status ParseTier(const json& j, const std::string& path, Tier* tier) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(j, path, {"name", "bw_GBps", "eff_busbw_GBps", "alpha_us", "oversubscription", "note"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(Text(*r, "name", &tier->name, true));
  if (tier->name.empty()) return jr::BadValue(jr::JoinPath(path, "name"), j.at("name"), "must not be empty");
  double bw = 0, eff = 0, alpha = 0, over = 1;
  GEMTB_RETURN_IF_ERROR(Positive(*r, "bw_GBps", &bw, true));
  eff = bw;
  GEMTB_RETURN_IF_ERROR(Positive(*r, "eff_busbw_GBps", &eff, false));
  GEMTB_RETURN_IF_ERROR(Positive(*r, "alpha_us", &alpha, true));
  GEMTB_RETURN_IF_ERROR(Number(*r, "oversubscription", &over, false));
  if (!(over >= 1)) return jr::BadValue(jr::JoinPath(path, "oversubscription"), j.at("oversubscription"), "must be >= 1");
  tier->bw_Bps = bw * 1e9;
  tier->eff_busbw_Bps = eff * 1e9;
  tier->alpha_s = alpha * 1e-6;
  tier->oversubscription = over;
  return absl::OkStatus();
}

absl::Status ParseGpu(const json& j, const std::string& path, GpuSpec* gpu) {
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(j, path, {"peak_flops", "hbm_bytes", "hbm_GBps", "sm_count", "name", "note"});
  if (!r.ok()) return r.status();
  if (j.contains("peak_flops")) {
    const std::string pf = jr::JoinPath(path, "peak_flops");
    const json& p = j.at("peak_flops");
    if (!p.is_object() || p.empty()) return jr::BadValue(pf, p, "must be a non-empty object {dtype: FLOP/s}");
    gpu->peak_flops.clear();
    for (auto it = p.begin(); it != p.end(); ++it) {
      absl::StatusOr<double> v = PositiveValue(it.value(), jr::JoinPath(pf, it.key()));
      if (!v.ok()) return v.status();
      gpu->peak_flops[it.key()] = *v;
    }
  }
  GEMTB_RETURN_IF_ERROR(Positive(*r, "hbm_bytes", &gpu->hbm_bytes, false));
  double hbm_GBps = gpu->hbm_Bps / 1e9;
  GEMTB_RETURN_IF_ERROR(Positive(*r, "hbm_GBps", &hbm_GBps, false));
  gpu->hbm_Bps = hbm_GBps * 1e9;
  GEMTB_RETURN_IF_ERROR(IntAtLeast(*r, "sm_count", &gpu->sm_count, 1, false));
  return absl::OkStatus();
}

absl::Status ParseCurve(const json& j, const std::string& path, Curve* curve) {
  curve->points.clear();
  if (j.is_number()) {
    const double v = j.get<double>();
    if (!(v > 0 && v <= 1)) return jr::BadValue(path, j, "must be in (0, 1]");
    curve->points.push_back({0.0, v});
    return absl::OkStatus();
  }
  if (!j.is_array() || j.empty()) return jr::BadValue(path, j, "must be a number or [[tokens, efficiency], ...]");
  for (size_t i = 0; i < j.size(); ++i) {
    const json& pt = j[i];
    const std::string ip = jr::IndexPath(path, i);
    if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number()) {
      return jr::BadValue(ip, pt, "must be [tokens, efficiency]");
    }
    const double tokens = pt[0].get<double>(), e = pt[1].get<double>();
    if (!(tokens >= 0)) return jr::BadValue(ip, pt, "tokens must be >= 0");
    if (!(e > 0 && e <= 1)) return jr::BadValue(ip, pt, "efficiency must be in (0, 1]");
    if (!curve->points.empty() && !(tokens > curve->points.back().first)) {
      return jr::BadValue(ip, pt, "tokens must ascend");
    }
    curve->points.push_back({tokens, e});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFileFromDisk(const std::string& path) {
  return ReadUserFile(path);
}

absl::StatusOr<Calibration> ParseCalibration(const json& json_in, std::string_view path_prefix,
                                             const std::string& base_dir, const FileReader& reader) {
  const std::string path(path_prefix);
  absl::StatusOr<std::pair<json, std::string>> resolved = Resolve(json_in, path, base_dir, reader);
  if (!resolved.ok()) return resolved.status();
  const json& j = resolved->first;
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(j, path, {"nccl_version", "nccl_commit", "nvls", "constants", "fitted", "nccl_fitted",
                                   "eta_tables", "kappa", "kappa_ops", "kappa_copy_engine", "efficiency", "source", "note",
                                   "fit", "held_out", "measured", "published", "assumed", "extrapolated",
                                   "kappa_measured", "layers"});
  if (!r.ok()) return r.status();
  Calibration cal;
  GEMTB_RETURN_IF_ERROR(r->String("nccl_version", &cal.nccl_version));
  GEMTB_RETURN_IF_ERROR(r->String("nccl_commit", &cal.nccl_commit));
  GEMTB_RETURN_IF_ERROR(r->Bool("nvls", &cal.nvls));
  if (j.contains("constants")) {
    const std::string cp = jr::JoinPath(path, "constants");
    const json& c = j.at("constants");
    if (!c.is_object()) return jr::BadValue(cp, c, "must be an object {name: number}");
    for (auto it = c.begin(); it != c.end(); ++it) {
      absl::StatusOr<double> v = jr::ReadNumber(it.value(), jr::JoinPath(cp, it.key()));
      if (!v.ok()) return v.status();
      if (!(*v >= 0)) return jr::BadValue(jr::JoinPath(cp, it.key()), it.value(), "must be >= 0");
      cal.nccl_constants[it.key()] = *v;
    }
  }
  if (j.contains("fitted")) {
    const std::string fp = jr::JoinPath(path, "fitted");
    const json& f = j.at("fitted");
    if (!f.is_array()) return jr::BadValue(fp, f, "must be an array");
    for (size_t i = 0; i < f.size(); ++i) {
      const std::string ip = jr::IndexPath(fp, i);
      absl::StatusOr<ObjectReader> fr = ObjectReader::Open(
          f[i], ip, {"op", "tier", "algo", "gpus", "min_bytes", "max_bytes", "alpha_us", "busbw_GBps", "note"});
      if (!fr.ok()) return fr.status();
      FittedLink link;
      std::string op;
      GEMTB_RETURN_IF_ERROR(Text(*fr, "op", &op, true));
      absl::StatusOr<CollectiveOp> parsed = ParseCollectiveOp(op);
      if (!parsed.ok()) return jr::BadValue(jr::JoinPath(ip, "op"), f[i].at("op"), "is not a collective op");
      link.op = *parsed;
      GEMTB_RETURN_IF_ERROR(Text(*fr, "tier", &link.tier, true));
      link.algo = "auto";
      GEMTB_RETURN_IF_ERROR(Text(*fr, "algo", &link.algo, false));
      GEMTB_RETURN_IF_ERROR(IntAtLeast(*fr, "gpus", &link.gpus, 0, false));
      GEMTB_RETURN_IF_ERROR(Number(*fr, "min_bytes", &link.min_bytes, false));
      GEMTB_RETURN_IF_ERROR(Number(*fr, "max_bytes", &link.max_bytes, false));
      if (!(link.min_bytes >= 0)) return jr::BadValue(jr::JoinPath(ip, "min_bytes"), f[i].at("min_bytes"), "must be >= 0");
      if (!(link.max_bytes >= 0) || (link.max_bytes > 0 && link.max_bytes <= link.min_bytes)) {
        return jr::BadValue(jr::JoinPath(ip, "max_bytes"), f[i].at("max_bytes"), "must be 0 (unbounded) or > min_bytes");
      }
      double alpha_us = 0, busbw = 0;
      GEMTB_RETURN_IF_ERROR(Number(*fr, "alpha_us", &alpha_us, true));
      if (!(alpha_us >= 0)) return jr::BadValue(jr::JoinPath(ip, "alpha_us"), f[i].at("alpha_us"), "must be >= 0");
      GEMTB_RETURN_IF_ERROR(Positive(*fr, "busbw_GBps", &busbw, true));
      link.alpha_s = alpha_us * 1e-6;
      link.busbw_Bps = busbw * 1e9;
      cal.fitted.push_back(link);
    }
  }
  if (j.contains("nccl_fitted")) {
    // Mode nccl's launch/η segments (nccl_fit.h).
    const std::string fp = jr::JoinPath(path, "nccl_fitted");
    const json& f = j.at("nccl_fitted");
    if (!f.is_array()) return jr::BadValue(fp, f, "must be an array");
    for (size_t i = 0; i < f.size(); ++i) {
      const std::string ip = jr::IndexPath(fp, i);
      absl::StatusOr<ObjectReader> fr = ObjectReader::Open(f[i], ip, {"op", "tier", "algo", "nccl_algo", "proto", "gpus",
                                                                     "min_bytes", "max_bytes", "launch_us", "eta", "note"});
      if (!fr.ok()) return fr.status();
      NcclFitSegment fit;
      std::string op, pinned = "auto", nccl_algo, proto;
      GEMTB_RETURN_IF_ERROR(Text(*fr, "op", &op, true));
      absl::StatusOr<CollectiveOp> parsed = ParseCollectiveOp(op);
      if (!parsed.ok()) return jr::BadValue(jr::JoinPath(ip, "op"), f[i].at("op"), "is not a collective op");
      fit.op = *parsed;
      GEMTB_RETURN_IF_ERROR(Text(*fr, "tier", &fit.tier, true));
      GEMTB_RETURN_IF_ERROR(Text(*fr, "algo", &pinned, false));
      if (!ParsePinnedAlgo(pinned, &fit.pinned)) {
        return jr::BadValue(jr::JoinPath(ip, "algo"), f[i].at("algo"), "is not one of auto, ring, tree, nvls");
      }
      GEMTB_RETURN_IF_ERROR(Text(*fr, "nccl_algo", &nccl_algo, true));
      const std::optional<CollAlgo> a = ParseNcclAlgo(nccl_algo);
      if (!a) return jr::BadValue(jr::JoinPath(ip, "nccl_algo"), f[i].at("nccl_algo"), "is not one of ring, tree, nvls, pat");
      fit.algo = *a;
      GEMTB_RETURN_IF_ERROR(Text(*fr, "proto", &proto, true));
      const std::optional<CollProto> pr = ParseNcclProto(proto);
      if (!pr) return jr::BadValue(jr::JoinPath(ip, "proto"), f[i].at("proto"), "is not one of LL, LL128, Simple");
      fit.proto = *pr;
      GEMTB_RETURN_IF_ERROR(IntAtLeast(*fr, "gpus", &fit.gpus, 0, false));
      GEMTB_RETURN_IF_ERROR(Number(*fr, "min_bytes", &fit.min_bytes, false));
      GEMTB_RETURN_IF_ERROR(Number(*fr, "max_bytes", &fit.max_bytes, false));
      if (!(fit.min_bytes >= 0)) return jr::BadValue(jr::JoinPath(ip, "min_bytes"), f[i].at("min_bytes"), "must be >= 0");
      if (!(fit.max_bytes >= 0) || (fit.max_bytes > 0 && fit.max_bytes <= fit.min_bytes)) {
        return jr::BadValue(jr::JoinPath(ip, "max_bytes"), f[i].at("max_bytes"), "must be 0 (unbounded) or > min_bytes");
      }
      double launch_us = 0;
      GEMTB_RETURN_IF_ERROR(Number(*fr, "launch_us", &launch_us, true));
      fit.launch_s = launch_us * 1e-6;
      GEMTB_RETURN_IF_ERROR(Positive(*fr, "eta", &fit.eta, true));
      cal.nccl_fitted.push_back(std::move(fit));
    }
  }
  if (j.contains("eta_tables")) {
    const std::string ep = jr::JoinPath(path, "eta_tables");
    const json& e = j.at("eta_tables");
    if (!e.is_array()) return jr::BadValue(ep, e, "must be an array");
    for (size_t i = 0; i < e.size(); ++i) {
      const std::string ip = jr::IndexPath(ep, i);
      absl::StatusOr<ObjectReader> er = ObjectReader::Open(e[i], ip, {"op", "hosts", "points", "note"});
      if (!er.ok()) return er.status();
      EtaTable table;
      std::string op;
      GEMTB_RETURN_IF_ERROR(Text(*er, "op", &op, true));
      absl::StatusOr<CollectiveOp> parsed = ParseCollectiveOp(op);
      if (!parsed.ok()) return jr::BadValue(jr::JoinPath(ip, "op"), e[i].at("op"), "is not a collective op");
      table.op = *parsed;
      GEMTB_RETURN_IF_ERROR(IntAtLeast(*er, "hosts", &table.hosts, 1, false));
      const std::string pp = jr::JoinPath(ip, "points");
      GEMTB_RETURN_IF_ERROR(er->Require("points"));
      const json& pts = e[i].at("points");
      if (!pts.is_array() || pts.empty()) return jr::BadValue(pp, pts, "must be a non-empty [[bytes, eta], ...]");
      for (size_t k = 0; k < pts.size(); ++k) {
        const std::string kp = jr::IndexPath(pp, k);
        const json& pt = pts[k];
        if (!pt.is_array() || pt.size() != 2 || !pt[0].is_number() || !pt[1].is_number()) {
          return jr::BadValue(kp, pt, "must be [bytes, eta]");
        }
        const double bytes = pt[0].get<double>(), eta = pt[1].get<double>();
        if (!(bytes > 0)) return jr::BadValue(kp, pt, "bytes must be > 0");
        if (!(eta > 0 && eta <= 1)) return jr::BadValue(kp, pt, "eta must be in (0, 1]");
        if (!table.size_eta.empty() && !(bytes > table.size_eta.back().first)) {
          return jr::BadValue(kp, pt, "bytes must ascend");
        }
        table.size_eta.push_back({bytes, eta});
      }
      cal.eta_tables.push_back(std::move(table));
    }
  }
  if (j.contains("kappa")) {
    double kappa = 0;
    GEMTB_RETURN_IF_ERROR(Number(*r, "kappa", &kappa, true));
    if (!(kappa >= 0)) return jr::BadValue(jr::JoinPath(path, "kappa"), j.at("kappa"), "must be >= 0");
    cal.kappa = kappa;
  }
  if (j.contains("kappa_ops")) {
    const std::string kp = jr::JoinPath(path, "kappa_ops");
    const json& k = j.at("kappa_ops");
    if (!k.is_object()) return jr::BadValue(kp, k, "must be an object {op: kappa}");
    for (const auto& [name, value] : k.items()) {
      absl::StatusOr<CollectiveOp> op = ParseCollectiveOp(name);
      if (!op.ok()) return jr::BadValue(jr::JoinPath(kp, name), value, "names no collective op");
      if (!value.is_number() || !(value.get<double>() >= 0)) {
        return jr::BadValue(jr::JoinPath(kp, name), value, "must be a number >= 0");
      }
      cal.kappa_ops[static_cast<size_t>(*op)] = value.get<double>();
    }
  }
  if (j.contains("kappa_copy_engine")) {
    double kappa = 0;
    GEMTB_RETURN_IF_ERROR(Number(*r, "kappa_copy_engine", &kappa, true));
    if (!(kappa >= 0)) {
      return jr::BadValue(jr::JoinPath(path, "kappa_copy_engine"), j.at("kappa_copy_engine"), "must be >= 0");
    }
    cal.kappa_copy_engine = kappa;
  }
  if (j.contains("efficiency")) {
    const std::string ep = jr::JoinPath(path, "efficiency");
    const json& e = j.at("efficiency");
    absl::StatusOr<ObjectReader> effr = ObjectReader::Open(e, ep, {"e_mem", "ops", "note"});
    if (!effr.ok()) return effr.status();
    GEMTB_RETURN_IF_ERROR(effr->Double("e_mem", &cal.efficiency.e_mem));
    if (e.contains("e_mem") && !(cal.efficiency.e_mem > 0 && cal.efficiency.e_mem <= 1)) {
      return jr::BadValue(jr::JoinPath(ep, "e_mem"), e.at("e_mem"), "must be in (0, 1]");
    }
    if (e.contains("ops")) {
      const std::string op_path = jr::JoinPath(ep, "ops");
      const json& ops = e.at("ops");
      if (!ops.is_object()) return jr::BadValue(op_path, ops, "must be an object {op name or kind: efficiency}");
      for (auto it = ops.begin(); it != ops.end(); ++it) {
        Curve curve;
        GEMTB_RETURN_IF_ERROR(ParseCurve(it.value(), jr::JoinPath(op_path, it.key()), &curve));
        cal.efficiency.by_name_or_kind[it.key()] = std::move(curve);
      }
    }
  }
  if (j.contains("layers")) {
    const std::string lp = jr::JoinPath(path, "layers");
    absl::StatusOr<std::pair<json, std::string>> layers = Resolve(j.at("layers"), lp, resolved->second, reader);
    if (!layers.ok()) return layers.status();
    absl::StatusOr<LayerCalibration> parsed = ParseLayerCalibration(layers->first, lp);
    if (!parsed.ok()) return parsed.status();
    cal.layers = *std::move(parsed);
  }
  return cal;
}

int EffectiveZoneSize(const Cluster& cluster) {
  if (cluster.zone_size <= 0) return cluster.world_size;
  if (cluster.world_size > 0 && cluster.world_size < cluster.zone_size) return cluster.world_size;
  return cluster.zone_size;
}

absl::Status ValidateClusterWorld(const Cluster& cluster, std::string_view path_prefix) {
  const std::string path = jr::JoinPath(path_prefix, "world_size");
  const int w = cluster.world_size, g = cluster.gpus_per_host;
  if (w < 1) return jr::BadValue(path, w, "must be >= 1");
  if (w > g && w % g != 0) return jr::BadValue(path, w, absl::StrCat("is not a multiple of gpus_per_host ", g));
  const int zone = cluster.zone_size;
  if (zone > 0 && w > zone && w % zone != 0) {
    return jr::BadValue(path, w, absl::StrCat("is not a multiple of zone_size ", zone));
  }
  const size_t tiers = cluster.tiers.size();
  if (w > g && tiers < 2) {
    return jr::BadValue(path, w, absl::StrCat("spans several hosts of ", g, " GPUs but cluster.tiers has only ", tiers,
                                         " tier (a host tier and a network tier are needed)"));
  }
  if (zone > 0 && w > zone && tiers < 3) {
    return jr::BadValue(path, w, absl::StrCat("spans several zones of ", zone, " GPUs but cluster.tiers has only ", tiers,
                                         " tiers (a cross-zone tier is needed)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Cluster> ParseCluster(const json& json_in, std::string_view path_prefix, const std::string& base_dir,
                                     const FileReader& reader) {
  const std::string path(path_prefix);
  absl::StatusOr<std::pair<json, std::string>> resolved = Resolve(json_in, path, base_dir, reader);
  if (!resolved.ok()) return resolved.status();
  const json& j = resolved->first;
  const std::string& dir = resolved->second;
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(
      j, path, {"world_size", "gpus_per_host", "zone_size", "tiers", "nics_per_gpu", "gpu", "calibration", "name", "note"});
  if (!r.ok()) return r.status();
  Cluster c;
  GEMTB_RETURN_IF_ERROR(IntAtLeast(*r, "world_size", &c.world_size, 0, false));
  GEMTB_RETURN_IF_ERROR(IntAtLeast(*r, "gpus_per_host", &c.gpus_per_host, 1, true));
  GEMTB_RETURN_IF_ERROR(IntAtLeast(*r, "nics_per_gpu", &c.nics_per_gpu, 1, false));

  const std::string tp = jr::JoinPath(path, "tiers");
  GEMTB_RETURN_IF_ERROR(r->Require("tiers"));
  const json& tiers = j.at("tiers");
  if (!tiers.is_array() || tiers.empty()) return jr::BadValue(tp, tiers, "must be a non-empty array (innermost first)");
  if (tiers.size() > static_cast<size_t>(kMaxTiers)) {
    return jr::BadValue(tp, tiers, absl::StrCat("has ", tiers.size(), " tiers; at most ", kMaxTiers,
                                           " (host, zone, cross-zone)"));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < tiers.size(); ++i) {
    Tier tier;
    GEMTB_RETURN_IF_ERROR(ParseTier(tiers[i], jr::IndexPath(tp, i), &tier));
    if (!names.insert(tier.name).second) {
      return jr::BadValue(jr::JoinPath(jr::IndexPath(tp, i), "name"), tier.name, "repeats an earlier tier's name");
    }
    c.tiers.push_back(std::move(tier));
  }

  // zone_size: required when a cross-zone tier exists; otherwise the whole world is one zone.
  GEMTB_RETURN_IF_ERROR(IntAtLeast(*r, "zone_size", &c.zone_size, 1, c.tiers.size() >= 3));
  if (c.zone_size > 0 && c.zone_size % c.gpus_per_host != 0) {
    return jr::BadValue(jr::JoinPath(path, "zone_size"), c.zone_size,
                   absl::StrCat("is not a multiple of gpus_per_host ", c.gpus_per_host));
  }
  if (c.world_size > 0) GEMTB_RETURN_IF_ERROR(ValidateClusterWorld(c, path));

  // The GPU: H200 defaults where the file says nothing.
  c.gpu.peak_flops = {{"bf16", 989e12}, {"fp8", 1979e12}};
  c.gpu.hbm_bytes = 141e9;
  c.gpu.hbm_Bps = 4.8e12;
  c.gpu.sm_count = 132;
  if (j.contains("gpu")) GEMTB_RETURN_IF_ERROR(ParseGpu(j.at("gpu"), jr::JoinPath(path, "gpu"), &c.gpu));

  if (j.contains("calibration")) {
    absl::StatusOr<Calibration> cal = ParseCalibration(j.at("calibration"), jr::JoinPath(path, "calibration"), dir, reader);
    if (!cal.ok()) return cal.status();
    c.calibration = std::move(*cal);
    // Fitted entries must name a tier of this cluster.
    for (size_t i = 0; i < c.calibration.fitted.size(); ++i) {
      if (!names.count(c.calibration.fitted[i].tier)) {
        return jr::BadValue(jr::JoinPath(jr::IndexPath(jr::JoinPath(jr::JoinPath(path, "calibration"), "fitted"), i), "tier"),
                       c.calibration.fitted[i].tier, "is not the name of a tier of this cluster");
      }
    }
    for (size_t i = 0; i < c.calibration.nccl_fitted.size(); ++i) {
      if (!names.count(c.calibration.nccl_fitted[i].tier)) {
        return jr::BadValue(jr::JoinPath(jr::IndexPath(jr::JoinPath(jr::JoinPath(path, "calibration"), "nccl_fitted"), i), "tier"),
                       c.calibration.nccl_fitted[i].tier, "is not the name of a tier of this cluster");
      }
    }
  }
  return c;
}

absl::StatusOr<Cluster> LoadClusterFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileFromDisk(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--cluster: ", text.status().message()));
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat("--cluster: ", path, " is not valid JSON"));
  // A whole scenario file is accepted too: its cluster section is used.
  if (j.is_object() && j.contains("cluster") && !j.contains("tiers")) {
    return ParseCluster(j.at("cluster"), "cluster", std::filesystem::path(path).parent_path().string());
  }
  return ParseCluster(j, "cluster", std::filesystem::path(path).parent_path().string());
}

std::string_view DefaultClusterJsonText() { return kDefaultClusterJson; }
std::string_view DefaultCalibrationJsonText() { return kDefaultCalibrationJson; }

absl::StatusOr<Cluster> DefaultCluster() {
  // The compiled-in files stand for sim/network/default_cluster.json and sim/calibration/h200.json;
  // the cluster names its calibration "../calibration/h200.json", as on disk.
  const FileReader embedded = [](const std::string& p) -> absl::StatusOr<std::string> {
    if (std::filesystem::path(p).filename() == "h200.json") return std::string(kDefaultCalibrationJson);
    return absl::NotFoundError(absl::StrCat("no compiled-in file ", p));
  };
  json j = json::parse(kDefaultClusterJson, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError("default_cluster.json (compiled in) is not valid JSON");
  return ParseCluster(j, "cluster", "sim/network", embedded);
}

}  // namespace gemtb::sim
