// FitCalibration / HeldOutMape (see calibrate.h).
#include "sim/network/calibrate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sim/network/collective_cost.h"

namespace gemtb::sim {
namespace {

using nlohmann::json;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string AlgoFromEnv(std::string env) {
  std::transform(env.begin(), env.end(), env.begin(), [](unsigned char c) { return std::tolower(c); });
  if (env.empty() || env == "auto") return "auto";
  if (env.find("tree") != std::string::npos) return "tree";
  if (env.find("ring") != std::string::npos) return "ring";
  return env;
}

absl::Status ParseRecord(const json& j, const std::string& path, MeasuredSet* set) {
  if (!j.is_object() || !j.contains("results") || !j.at("results").is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a `gemtb bench comm` record (no results[])"));
  }
  const int gpus = j.value("gpus", 0);
  if (gpus < 2) return absl::InvalidArgumentError(absl::StrCat(path, ".gpus: ", gpus, " must be >= 2"));
  const std::string algo = AlgoFromEnv(j.value("nccl_algo", std::string("auto")));
  if (set->nccl_version.empty()) set->nccl_version = j.value("nccl_version", std::string());
  if (set->device.empty()) set->device = j.value("device", std::string());
  if (j.value("nccl_nvls_enable", std::string("0")) != "0") set->nvls_off = false;
  if (j.contains("gemm") && j.at("gemm").is_object() && j.at("gemm").contains("kappa")) {
    set->has_kappa = true;
    set->kappa = std::max(0.0, j.at("gemm").at("kappa").get<double>());
  }
  const json& rows = j.at("results");
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string rp = absl::StrCat(path, ".results[", i, "]");
    const json& r = rows[i];
    if (!r.is_object() || !r.contains("op") || !r.contains("bytes") || !r.contains("time_us") ||
        !r.at("bytes").is_number() || !r.at("time_us").is_number() || !r.at("op").is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(rp, ": needs op, bytes, time_us"));
    }
    absl::StatusOr<CollectiveOp> op = ParseCollectiveOp(r.at("op").get<std::string>());
    if (!op.ok()) return absl::InvalidArgumentError(absl::StrCat(rp, ".op: ", op.status().message()));
    Measurement m;
    m.op = *op;
    m.algo = algo;
    m.gpus = gpus;
    m.bytes = r.at("bytes").get<double>();
    m.time_s = r.at("time_us").get<double>() * 1e-6;
    if (!(m.bytes > 0) || !(m.time_s > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(rp, ": bytes and time_us must be > 0"));
    }
    set->rows.push_back(m);
  }
  return absl::OkStatus();
}

// The α–β form t = n·α + f·S/B of each measured (op, algo) on p GPUs of one host, as the cost model
// evaluates it there (collective_cost.cc): ring-like for auto/ring, the double binary tree for tree.
struct Form {
  double n, f;
};
Form FormOf(CollectiveOp op, const std::string& algo, int p) {
  const double q = p;
  if (op == CollectiveOp::kAllReduce) {
    if (algo == "tree") return {2 * std::ceil(std::log2(q) - 1e-12), 2};
    return {2 * (q - 1), 2 * (q - 1) / q};
  }
  if (op == CollectiveOp::kBroadcast) return {q - 1, 1};
  return {q - 1, (q - 1) / q};  // all-gather, reduce-scatter, all-to-all (window 1)
}

struct Fit {
  double alpha_s = 0, busbw_Bps = 0;
};


// α from the small sizes, B from the large sizes, alternating (each needs the other's correction).
Fit FitSmallLarge(const Form& form, const std::vector<const Measurement*>& fit_rows, const FitOptions& o) {
  std::vector<const Measurement*> small, large;
  for (const Measurement* m : fit_rows) {
    if (m->bytes <= o.small_max_bytes) small.push_back(m);
    if (m->bytes >= o.large_min_bytes) large.push_back(m);
  }
  if (large.empty()) large = {fit_rows.back()};
  if (small.empty()) small = {fit_rows.front()};
  Fit fit;
  for (int round = 0; round < 4; ++round) {
    std::vector<double> bw;
    for (const Measurement* m : large) bw.push_back(form.f * m->bytes / std::max(m->time_s - form.n * fit.alpha_s, 1e-12));
    fit.busbw_Bps = Median(bw);
    std::vector<double> alpha;
    for (const Measurement* m : small) alpha.push_back(std::max(0.0, m->time_s - form.f * m->bytes / fit.busbw_Bps) / form.n);
    fit.alpha_s = Median(alpha);
  }
  return fit;
}

// The line t = n·α + f·S/B through two measurements (S_a < S_b), as a FittedLink's α and busbw.
FittedLink LineThrough(const Measurement& a, const Measurement& b, const Form& form) {
  FittedLink link;
  const double slope = (b.time_s - a.time_s) / (b.bytes - a.bytes);  // f / B
  if (slope <= 0) {
    // Flat (latency-bound) or noisy: all latency, bandwidth no limit within the segment.
    link.busbw_Bps = 1e15;
    link.alpha_s = std::max(a.time_s, b.time_s) / form.n;
  } else {
    link.busbw_Bps = form.f / slope;
    link.alpha_s = (a.time_s - form.f * a.bytes / link.busbw_Bps) / form.n;
    if (link.alpha_s < 0) {  // steeper than proportional: no latency, B from the larger point
      link.alpha_s = 0;
      link.busbw_Bps = form.f * b.bytes / b.time_s;
    }
  }
  return link;
}

P2pChannels P2pChannelsOf(const Calibration& cal) {
  const auto get = [&](const char* name, double fallback) {
    auto it = cal.nccl_constants.find(name);
    return it == cal.nccl_constants.end() ? fallback : it->second;
  };
  P2pChannels c;
  c.channels = static_cast<int>(get("nccl_p2p_nchannels", c.channels));
  c.per_peer = static_cast<int>(get("nccl_p2p_nchannels_per_peer", c.per_peer));
  c.chunk_bytes = get("nccl_p2p_chunk_bytes", c.chunk_bytes);
  return c;
}

using GroupKey = std::tuple<int, std::string, int>;  // op, algo, gpus

std::map<GroupKey, std::vector<const Measurement*>> Groups(const MeasuredSet& set) {
  std::map<GroupKey, std::vector<const Measurement*>> groups;
  for (const Measurement& m : set.rows) groups[{static_cast<int>(m.op), m.algo, m.gpus}].push_back(&m);
  for (auto& [key, rows] : groups) {
    std::sort(rows.begin(), rows.end(), [](const Measurement* a, const Measurement* b) { return a->bytes < b->bytes; });
  }
  return groups;
}

}  // namespace

std::vector<double> P2pRegimeBoundaries(int p, const P2pChannels& c) {
  std::vector<double> out;
  if (p < 2 || c.per_peer < 1 || c.channels < 1 || !(c.chunk_bytes > 0)) return out;
  int n_min = c.per_peer;
  while (n_min * p > c.channels && n_min > 1) n_min /= 2;
  const double min_part = c.chunk_bytes / 8, max_part = c.chunk_bytes * 32;
  out.push_back(p * n_min * min_part);  // below: ⌈b/minPart⌉ channels of minPart each
  for (int n = n_min; n <= c.per_peer / 2; n *= 2) out.push_back(p * n * max_part);  // then b/n per channel
  return out;
}

bool IsFitSize(double bytes, FitSizes split) {
  const long l = std::lround(std::log2(bytes));
  return (l % 2 == 0) == (split == FitSizes::kEven);
}

absl::StatusOr<MeasuredSet> ParseMeasurements(const json& j) {
  MeasuredSet set;
  if (j.is_object() && j.contains("runs") && j.at("runs").is_object()) {
    for (auto it = j.at("runs").begin(); it != j.at("runs").end(); ++it) {
      if (it.value().contains("error")) continue;  // a run that did not happen
      absl::Status s = ParseRecord(it.value(), absl::StrCat("runs.", it.key()), &set);
      if (!s.ok()) return s;
    }
  } else {
    absl::Status s = ParseRecord(j, "record", &set);
    if (!s.ok()) return s;
  }
  if (set.rows.empty()) return absl::InvalidArgumentError("results: no measurements");
  return set;
}

absl::StatusOr<Calibration> FitCalibration(const MeasuredSet& measured, const Calibration& base,
                                           const std::string& tier_name, const FitOptions& o) {
  Calibration cal = base;
  cal.fitted.clear();
  cal.eta_tables.clear();
  cal.nccl_version = measured.nccl_version;
  cal.nvls = !measured.nvls_off;
  if (measured.has_kappa) cal.kappa = measured.kappa;
  std::vector<double> large_busbw;
  for (const auto& [key, rows] : Groups(measured)) {
    const auto& [op_index, algo, gpus] = key;
    const CollectiveOp op = static_cast<CollectiveOp>(op_index);
    std::vector<const Measurement*> fit_rows;
    for (const Measurement* m : rows) {
      if (IsFitSize(m->bytes, o.split)) fit_rows.push_back(m);
    }
    if (fit_rows.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("results: ", std::string(CollectiveOpName(op)), " (", algo, ", ", gpus,
                                                     " GPUs) has too few fit sizes"));
    }
    const Form form = FormOf(op, algo, gpus);
    // Piecewise α–β: between consecutive fit sizes S_i < S_j the line through both measurements,
    // t = n·α + f·S/B, valid on [S_i, S_j) (the first segment also below, the last also above). The
    // first segments carry the small-size α, the last the large-size B_eff (spec §6.6); held-out
    // sizes fall between fit sizes, so each is predicted by its two neighbours' line. All-to-all
    // bends where NCCL changes how it stripes each peer's bytes over channels (P2pRegime): a pair
    // of fit sizes on both sides of such a bend is not joined; each side continues the line of its
    // own regime's neighbouring pair.
    const auto push = [&](const Measurement& a, const Measurement& b, double min_bytes, double max_bytes) {
      FittedLink link = LineThrough(a, b, form);
      link.op = op;
      link.tier = tier_name;
      link.algo = algo;
      link.gpus = gpus;
      link.min_bytes = min_bytes;
      link.max_bytes = max_bytes;
      cal.fitted.push_back(link);
    };
    std::vector<double> bends;  // S at which a new regime starts (just above each boundary)
    if (op == CollectiveOp::kAllToAll) {
      for (double boundary : P2pRegimeBoundaries(gpus, P2pChannelsOf(base))) {
        bends.push_back(std::nextafter(boundary, std::numeric_limits<double>::infinity()));
      }
    }
    const auto regime = [&](double bytes) {
      return std::count_if(bends.begin(), bends.end(), [&](double bend) { return bytes >= bend; });
    };
    const size_t n_fit = fit_rows.size();
    for (size_t i = 0; i + 1 < n_fit; ++i) {
      const Measurement& a = *fit_rows[i];
      const Measurement& b = *fit_rows[i + 1];
      const double lo = i == 0 ? 0 : a.bytes;
      const double hi = i + 2 == n_fit ? 0 : b.bytes;
      const long ra = regime(a.bytes), rb = regime(b.bytes);
      if (ra == rb) {
        push(a, b, lo, hi);
        continue;
      }
      // The first bend above a and the last below b; between them (regimes without a fit size)
      // the pair's own line.
      double first = 0, last = 0;
      for (double bend : bends) {
        if (bend > a.bytes && first == 0) first = bend;
        if (bend <= b.bytes) last = bend;
      }
      const bool below_same = i > 0 && regime(fit_rows[i - 1]->bytes) == ra;
      const bool above_same = i + 2 < n_fit && regime(fit_rows[i + 2]->bytes) == rb;
      if (below_same) {
        push(*fit_rows[i - 1], a, lo, first);
      } else {
        push(a, b, lo, first);
      }
      if (first < last) push(a, b, first, last);
      if (above_same) {
        push(b, *fit_rows[i + 2], last, hi);
      } else {
        push(a, b, last, hi);
      }
    }
    if (algo == "auto" && op != CollectiveOp::kAllToAll) {
      // NCCL's ring busbw at large sizes is nCh·bwIntra for every op; measured, the ops differ, so each
      // gets its own per-channel bandwidth besides the shared one (median over AR/AG/RS).
      const double busbw = FitSmallLarge(form, fit_rows, o).busbw_Bps;
      if (op != CollectiveOp::kBroadcast) large_busbw.push_back(busbw);
      cal.nccl_constants[absl::StrCat("nccl_bw_intra_GBps.", std::string(CollectiveOpName(op)))] =
          busbw / 1e9 / o.nccl_channels;
    }
    if (algo == "tree" && op == CollectiveOp::kAllReduce) {
      // NCCL's Tree all-reduce: algbw = nCh·bwTree·0.92·0.5 at large sizes, and the tree form's B is
      // 2S/t = 2·algbw, so bwTree per channel = B / (0.92 · nCh).
      cal.nccl_constants["nccl_tree_bw_intra_GBps"] = FitSmallLarge(form, fit_rows, o).busbw_Bps / 1e9 / (0.92 * o.nccl_channels);
    }
  }
  if (!large_busbw.empty()) {
    cal.nccl_constants["nccl_nchannels"] = o.nccl_channels;
    cal.nccl_constants["nccl_bw_intra_GBps"] = Median(large_busbw) / 1e9 / o.nccl_channels;
  }
  return cal;
}

absl::StatusOr<std::vector<MapeRow>> HeldOutMape(const Cluster& cluster, const MeasuredSet& measured, FitSizes split,
                                                 double min_bytes) {
  std::vector<MapeRow> out;
  for (const auto& [key, rows] : Groups(measured)) {
    const auto& [op_index, algo, gpus] = key;
    const CollectiveOp op = static_cast<CollectiveOp>(op_index);
    MapeRow row;
    row.op = op;
    row.algo = algo;
    row.gpus = gpus;
    CollectivesPlan plan;
    if (algo != "auto") plan.algo[std::string(CollectiveOpName(op))] = algo;
    CollectivesPlan eta_plan = plan, nccl_plan = plan;
    eta_plan.eta_tables = true;
    nccl_plan.cost_mode = "nccl";
    absl::StatusOr<CollectiveCostModel> ab = CollectiveCostModel::Create(cluster, plan);
    if (!ab.ok()) return ab.status();
    absl::StatusOr<CollectiveCostModel> abe = CollectiveCostModel::Create(cluster, eta_plan);
    if (!abe.ok()) return abe.status();
    absl::StatusOr<CollectiveCostModel> nc = CollectiveCostModel::Create(cluster, nccl_plan);
    if (!nc.ok()) return nc.status();
    const GroupShape shape{gpus, gpus, 1, gpus, 1};  // measured on one host
    for (const Measurement* m : rows) {
      if (m->bytes < min_bytes || IsFitSize(m->bytes, split)) continue;
      const double e_ab = std::fabs(ab->Estimate(op, shape, m->bytes).duration_s / m->time_s - 1);
      row.mape_alpha_beta += e_ab;
      row.max_ape_alpha_beta = std::max(row.max_ape_alpha_beta, 100 * e_ab);
      row.mape_alpha_beta_eta += std::fabs(abe->Estimate(op, shape, m->bytes).duration_s / m->time_s - 1);
      row.mape_nccl += std::fabs(nc->Estimate(op, shape, m->bytes).duration_s / m->time_s - 1);
      ++row.sizes;
    }
    if (row.sizes > 0) {
      row.mape_alpha_beta *= 100.0 / row.sizes;
      row.mape_alpha_beta_eta *= 100.0 / row.sizes;
      row.mape_nccl *= 100.0 / row.sizes;
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace gemtb::sim
