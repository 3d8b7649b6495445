// FitCalibration / HeldOutMape (see calibrate.h).
#include "sim/network/calibrate.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iterator>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "sim/network/collective_cost.h"
#include "sim/network/nccl_fit.h"

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
    if (!j.at("gemm").at("kappa").is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".gemm.kappa: ", j.at("gemm").at("kappa").dump(),
                                                     " is not a number"));
    }
    set->kappas.push_back({gpus, std::max(0.0, j.at("gemm").at("kappa").get<double>()), ""});
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

// One fit size as mode nccl sees it: measured time, NCCL's table time and (algorithm, protocol).
struct NcclPoint {
  double bytes, time_s, nccl_s;
  CollAlgo algo;
  CollProto proto;
  bool SameChoice(const NcclPoint& o) const { return algo == o.algo && proto == o.proto; }
};

// η of a segment whose measured times do not grow: t = launch (+ a negligible share of NCCL's time).
constexpr double kFlatEta = 1e6;

// launch + t_NCCL/η through a and b (same choice), valid on [lo, hi). The launch may come out
// negative (the measured curve steeper than NCCL's: NCCL's latency term larger than what the host
// shows, or its bandwidth higher); that is kept as long as the line stays above half the time
// measured at lo (`floor_s`: the fit size lo, or a's time when the segment starts at a or at 0),
// checked with NCCL's argmin time at lo, which is <= this choice's time, so the check holds for every
// S in the segment: t grows with S. (Half of a's time, as this check once read, rejects exact lines
// through bandwidth-bound pairs whose segment reaches down to a fit size 4x smaller: there the time
// at lo is well under half of a's.) A flat or falling pair (latency-bound, noisy) stays flat at the
// larger time; a line failing the check scales NCCL's time instead (launch 0, through the larger point).
void SegmentThrough(const NcclPoint& a, const NcclPoint& b, double nccl_at_lo, double floor_s, NcclFitSegment* fit) {
  const double dn = b.nccl_s - a.nccl_s, dt = b.time_s - a.time_s;
  if (dn > 0 && dt > 0) {
    const double scale = dt / dn;  // 1/η
    const double launch = a.time_s - scale * a.nccl_s;
    if (launch + scale * nccl_at_lo >= 0.5 * floor_s) {
      fit->launch_s = launch;
      fit->eta = 1 / scale;
      return;
    }
  }
  if (!(dt > 0)) {
    // No measurable growth between the two: flat at the larger time (NCCL's part all but scaled out).
    fit->launch_s = std::max(a.time_s, b.time_s);
    fit->eta = kFlatEta;
    return;
  }
  fit->launch_s = 0;
  fit->eta = b.nccl_s / b.time_s;
}

// The segments of one measured (op, algo, gpus) over its fit points (ascending S). Runs of
// consecutive points with the same NCCL choice get one segment per neighbouring pair; the run's first
// segment reaches down to the previous run's last fit size and its last up to the next run's first
// (sizes in between take whichever run NCCL's choice at that size belongs to). A run of one point
// scales NCCL's time of its choice through that point (launch 0, η = t_NCCL / t): with one point
// nothing tells a launch from a slope, and NCCL's table time already holds that protocol's own
// latency; the launch fitted in a neighbouring protocol's run measures how far the host's floor lies
// above *that* protocol's table latency (on 4 H200s Ring LL's is 10.2 µs, LL128's 25.4 µs), so
// carrying it over would count the latency twice.
std::vector<NcclFitSegment> NcclSegments(const std::vector<NcclPoint>& pts, const NcclFitSegment& proto_fit,
                                         const std::function<double(double)>& nccl_time) {
  std::vector<NcclFitSegment> out;
  const size_t n = pts.size();
  std::vector<std::pair<size_t, size_t>> runs;  // [first, last]
  for (size_t i = 0; i < n; ++i) {
    if (i == 0 || !pts[i].SameChoice(pts[i - 1])) runs.push_back({i, i});
    runs.back().second = i;
  }
  std::vector<size_t> singles;  // the points that are a run of their own
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto [first, last] = runs[r];
    const double run_lo = first == 0 ? 0 : pts[first - 1].bytes;
    const double run_hi = last + 1 == n ? 0 : pts[last + 1].bytes;
    if (first == last) {
      singles.push_back(first);
      continue;
    }
    for (size_t i = first; i < last; ++i) {
      NcclFitSegment fit = proto_fit;
      fit.algo = pts[i].algo;
      fit.proto = pts[i].proto;
      fit.min_bytes = i == first ? run_lo : pts[i].bytes;
      fit.max_bytes = i + 1 == last ? run_hi : pts[i + 1].bytes;
      // The measured time at lo: the previous run's last fit size (run_lo), else a's own.
      const double floor_s = i == first && first > 0 ? pts[first - 1].time_s : pts[i].time_s;
      SegmentThrough(pts[i], pts[i + 1], nccl_time(std::max(fit.min_bytes, 1.0)), floor_s, &fit);
      out.push_back(fit);
    }
  }
  for (const size_t i : singles) {
    NcclFitSegment fit = proto_fit;
    fit.algo = pts[i].algo;
    fit.proto = pts[i].proto;
    fit.min_bytes = i == 0 ? 0 : pts[i - 1].bytes;
    fit.max_bytes = i + 1 == n ? 0 : pts[i + 1].bytes;
    fit.launch_s = 0;
    fit.eta = pts[i].nccl_s / pts[i].time_s;
    out.push_back(fit);
  }
  return out;
}

struct NcclPass {
  std::vector<NcclFitSegment> segments;
  double loo_error = 0;  // sum of |predicted / measured - 1| over the left-out fit sizes
};

Cluster OneTierCluster(const std::string& tier_name, int gpus) {
  Cluster c;
  c.world_size = gpus;
  c.gpus_per_host = gpus;
  c.zone_size = gpus;
  c.tiers.push_back({tier_name, 450e9, 370e9, 1.87e-6, 1});
  return c;
}

// "... Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, ..." (graph.cc
// ncclTopoPrintGraph) -> the ring (pattern 4) or tree (patterns 1-3) graph; the first line of each wins.
void ParseGraphLine(const std::string& line, MeasuredSet* set) {
  const size_t at = line.find("Pattern ");
  if (at == std::string::npos) return;
  int pattern = 0, cross_nic = 0, nch = 0;
  double bw_intra = 0, bw_inter = 0;
  if (std::sscanf(line.c_str() + at, "Pattern %d, crossNic %d, nChannels %d, bw %lf/%lf", &pattern, &cross_nic, &nch,
                  &bw_intra, &bw_inter) != 5 ||
      nch < 1 || !(bw_intra > 0)) {
    return;
  }
  NcclGraph* graph = pattern == 4 ? &set->ring_graph : (pattern >= 1 && pattern <= 3) ? &set->tree_graph : nullptr;
  if (graph != nullptr && graph->nchannels == 0) *graph = {nch, bw_intra};
}

// All-to-all's latency plateau and where it ends. NCCL stripes each peer's bytes over channels the
// same way on 2 and 4 GPUs (P2pBytesPerChannel), and per channel the measured hosts agree once the
// transfer outlasts a host's fixed cost: on 4 H200s the time sits at ~36 us from 256 KiB to 8 MiB,
// then follows the 2-GPU curve read at the same bytes per channel (sim/network/README.md). So, for a
// pair of consecutive fit sizes a < b of one regime on p GPUs, where a lies on a plateau (the fit size
// below a is within kPlateauTolerance of a's time) and the smaller host's per-channel curve (its fit
// sizes, piecewise linear in bytes per channel) is below t(a) at a but reaches t(a) by b, the plateau
// ends where that curve reaches t(a): the segment [a, b) becomes flat at t(a) up to that size and
// the line from there to b. Returns that size, or nothing.
constexpr double kPlateauTolerance = 0.1;

using ChannelCurve = std::vector<std::pair<double, double>>;  // (bytes per channel, seconds), ascending

double CurveAt(const ChannelCurve& c, double x) {
  size_t i = 0;
  while (i + 2 < c.size() && x > c[i + 1].first) ++i;
  const auto& [x0, y0] = c[i];
  const auto& [x1, y1] = c[i + 1];
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

std::optional<double> AllToAllPlateauEnd(const ChannelCurve& smaller, int p, const P2pChannels& channels,
                                         const Measurement* below, const Measurement& a, const Measurement& b) {
  if (smaller.size() < 2 || below == nullptr || below->time_s < (1 - kPlateauTolerance) * a.time_s) return std::nullopt;
  const auto f = [&](double bytes) { return CurveAt(smaller, P2pBytesPerChannel(bytes, p, channels)); };
  if (!(f(a.bytes) < a.time_s && f(b.bytes) >= a.time_s)) return std::nullopt;
  double lo = a.bytes, hi = b.bytes;  // f(lo) < t(a) <= f(hi)
  for (int i = 0; i < 100 && hi - lo > 1; ++i) {
    const double mid = 0.5 * (lo + hi);
    (f(mid) < a.time_s ? lo : hi) = mid;
  }
  return std::round(hi);
}

// The per-channel curve of the all-to-all measured on the most GPUs below `gpus` (same algo), from its
// fit sizes; empty when there is none.
ChannelCurve SmallerHostCurve(const std::map<GroupKey, std::vector<const Measurement*>>& groups,
                              const std::string& algo, int gpus, const P2pChannels& channels, FitSizes split) {
  const std::vector<const Measurement*>* rows = nullptr;
  int best = 0;
  for (const auto& [key, r] : groups) {
    const int g = std::get<2>(key);
    if (std::get<0>(key) == static_cast<int>(CollectiveOp::kAllToAll) && std::get<1>(key) == algo && g < gpus &&
        g > best) {
      best = g;
      rows = &r;
    }
  }
  std::map<double, double> points;  // a later (larger) size with the same bytes per channel replaces
  if (rows != nullptr) {
    for (const Measurement* m : *rows) {
      if (IsFitSize(m->bytes, split)) points[P2pBytesPerChannel(m->bytes, best, channels)] = m->time_s;
    }
  }
  return ChannelCurve(points.begin(), points.end());
}

}  // namespace

namespace {

// NCCL's striping constants for p GPUs (calibrate.h, P2pChannels): nMin channels per peer and the
// smallest and largest part one channel carries; nothing for constants that stripe nothing.
struct P2pStriping {
  int n_min;
  double min_part, max_part;
};
std::optional<P2pStriping> StripingOf(int p, const P2pChannels& c) {
  if (p < 1 || c.per_peer < 1 || c.channels < 1 || !(c.chunk_bytes > 0)) return std::nullopt;
  int n_min = c.per_peer;
  while (n_min * p > c.channels && n_min > 1) n_min /= 2;
  return P2pStriping{n_min, c.chunk_bytes / 8, c.chunk_bytes * 32};
}

}  // namespace

std::vector<double> P2pRegimeBoundaries(int p, const P2pChannels& c) {
  std::vector<double> out;
  const std::optional<P2pStriping> s = StripingOf(p, c);
  if (p < 2 || !s) return out;
  out.push_back(p * s->n_min * s->min_part);  // below: ⌈b/minPart⌉ channels of minPart each
  for (int n = s->n_min; n <= c.per_peer / 2; n *= 2) out.push_back(p * n * s->max_part);  // then b/n per channel
  return out;
}

double P2pBytesPerChannel(double bytes, int p, const P2pChannels& c) {
  const std::optional<P2pStriping> s = StripingOf(p, c);
  if (!s || !(bytes > 0)) return bytes;
  const double b = bytes / p;
  double n = std::min<double>(s->n_min, std::ceil(b / s->min_part));
  while (b / n > s->max_part && n <= c.per_peer / 2) n *= 2;
  return b / n;
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
  if (j.is_object() && j.contains("nccl_tuning_log") && j.at("nccl_tuning_log").is_array()) {
    for (const json& line : j.at("nccl_tuning_log")) {
      if (line.is_string()) ParseGraphLine(line.get<std::string>(), &set);
    }
  }
  // The log is the file's: its tree graph is that GPU count's when the records share one.
  const int gpus = set.rows.front().gpus;
  const bool one_count =
      std::all_of(set.rows.begin(), set.rows.end(), [&](const Measurement& m) { return m.gpus == gpus; });
  if (one_count && set.tree_graph.nchannels > 0) set.tree_graphs[gpus] = set.tree_graph;
  return set;
}

namespace {

std::string GraphText(const NcclGraph& g) {
  return absl::StrCat("nChannels ", g.nchannels, ", bw ", g.bw_intra_GBps);
}

bool SameGraph(const NcclGraph& a, const NcclGraph& b) {
  return a.nchannels == b.nchannels && a.bw_intra_GBps == b.bw_intra_GBps;
}

}  // namespace

std::optional<KappaChoice> ChooseKappa(const MeasuredSet& set) {
  if (set.kappas.empty()) return std::nullopt;
  int most = 0;
  for (const KappaMeasurement& k : set.kappas) most = std::max(most, k.gpus);
  double sum = 0;
  int n = 0;
  std::string chosen, others;
  for (const KappaMeasurement& k : set.kappas) {
    const std::string text =
        absl::StrCat(k.kappa, " on ", k.gpus, " GPUs", k.source.empty() ? "" : absl::StrCat(" (", k.source, ")"));
    if (k.gpus == most) {
      sum += k.kappa;
      ++n;
      absl::StrAppend(&chosen, chosen.empty() ? "" : ", ", text);
    } else {
      absl::StrAppend(&others, others.empty() ? "" : ", ", text);
    }
  }
  KappaChoice out;
  out.kappa = sum / n;
  out.text = absl::StrCat("kappa ", out.kappa, ": ", n > 1 ? "the mean of the records of the most GPUs, " : "", chosen,
                          " (the most GPUs measured: the nearest to the 8-GPU hosts sim/ models)",
                          others.empty() ? "" : absl::StrCat("; also measured: ", others));
  return out;
}

absl::StatusOr<MeasuredSet> MergeMeasurements(const std::vector<NamedMeasurements>& sets) {
  if (sets.empty()) return absl::InvalidArgumentError("no measurement files");
  MeasuredSet out;
  const std::string& first = sets.front().name;
  out.nccl_version = sets.front().set.nccl_version;
  out.device = sets.front().set.device;
  out.nvls_off = sets.front().set.nvls_off;
  std::string ring_from;  // which file gave the shared ring graph
  std::map<int, std::string> tree_graph_from;
  std::map<std::tuple<int, std::string, int, double>, std::string> seen;  // (op, algo, gpus, bytes) -> file
  for (const auto& [name, set] : sets) {
    if (set.nccl_version != out.nccl_version) {
      return absl::InvalidArgumentError(absl::StrCat("nccl_version: ", name, " has \"", set.nccl_version, "\", ", first,
                                                     " has \"", out.nccl_version,
                                                     "\" (one calibration records one NCCL version)"));
    }
    if (set.device != out.device) {
      return absl::InvalidArgumentError(absl::StrCat("device: ", name, " has \"", set.device, "\", ", first, " has \"",
                                                     out.device, "\" (one calibration is for one GPU)"));
    }
    if (set.nvls_off != out.nvls_off) {
      return absl::InvalidArgumentError(absl::StrCat("nccl_nvls_enable: NVLS is ", set.nvls_off ? "off" : "on", " in ",
                                                     name, " but ", out.nvls_off ? "off" : "on", " in ", first));
    }
    if (set.ring_graph.nchannels > 0) {
      if (out.ring_graph.nchannels == 0) {
        out.ring_graph = set.ring_graph;
        ring_from = name;
      } else if (!SameGraph(out.ring_graph, set.ring_graph)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "nccl_tuning_log: the ring graph (Pattern 4) of ", name, " (", GraphText(set.ring_graph),
            ") differs from that of ", ring_from, " (", GraphText(out.ring_graph),
            "); mode nccl's tables take one ring graph"));
      }
    }
    for (const auto& [gpus, graph] : set.tree_graphs) {
      auto [it, added] = out.tree_graphs.emplace(gpus, graph);
      if (added) {
        tree_graph_from[gpus] = name;
      } else if (!SameGraph(it->second, graph)) {
        return absl::InvalidArgumentError(absl::StrCat("nccl_tuning_log: the tree graph on ", gpus, " GPUs of ", name, " (",
                                                       GraphText(graph), ") differs from that of ", tree_graph_from[gpus],
                                                       " (", GraphText(it->second), ")"));
      }
    }
    if (set.tree_graph.nchannels > 0 && out.tree_graph.nchannels == 0) out.tree_graph = set.tree_graph;
    for (const Measurement& m : set.rows) {
      auto [it, added] = seen.emplace(std::make_tuple(static_cast<int>(m.op), m.algo, m.gpus, m.bytes), name);
      if (!added) {
        return absl::InvalidArgumentError(absl::StrCat("results: ", std::string(CollectiveOpName(m.op)), " (", m.algo,
                                                       ") on ", m.gpus, " GPUs at ", m.bytes, " bytes is in both ",
                                                       it->second, " and ", name));
      }
      out.rows.push_back(m);
    }
    for (KappaMeasurement k : set.kappas) {
      k.source = name;
      out.kappas.push_back(k);
    }
  }
  if (!out.tree_graphs.empty()) out.tree_graph = out.tree_graphs.rbegin()->second;  // the most GPUs
  return out;
}

namespace {

// Mode nccl: NCCL's tables under `cal` (its constants fitted, no nccl segments yet), then per measured
// (op, algo, gpus) the launch/η segments of each protocol regime, from the fit sizes only; and the
// leave-one-out error of the segments over interior fit sizes >= 1 MiB.
absl::Status FitNcclSegments(const MeasuredSet& measured, const Calibration& cal, const std::string& tier_name,
                             const FitOptions& o, NcclPass* out) {
  for (const auto& [key, rows] : Groups(measured)) {
    // Named variables, not a structured binding: lambdas below capture them (clang < 16, the fuzz
    // build's compiler, rejects captured bindings).
    const int op_index = std::get<0>(key);
    const std::string& algo = std::get<1>(key);
    const int gpus = std::get<2>(key);
    const CollectiveOp op = static_cast<CollectiveOp>(op_index);
    if (op == CollectiveOp::kAllToAll) continue;
    Cluster cluster = o.cluster != nullptr ? *o.cluster : OneTierCluster(tier_name, gpus);
    cluster.calibration = cal;
    CollectivesPlan plan;
    plan.cost_mode = "nccl";
    if (algo != "auto") plan.algo[std::string(CollectiveOpName(op))] = algo;
    absl::StatusOr<CollectiveCostModel> model = CollectiveCostModel::Create(cluster, plan);
    if (!model.ok()) return model.status();
    const GroupShape host{gpus, gpus, 1, gpus, 1};
    std::vector<NcclPoint> pts;
    for (const Measurement* m : rows) {
      if (!IsFitSize(m->bytes, o.split)) continue;
      const CollectiveCost c = model->Estimate(op, host, m->bytes);
      pts.push_back({m->bytes, m->time_s, c.duration_s, c.algo, c.proto});
    }
    NcclFitSegment proto_fit;
    proto_fit.op = op;
    proto_fit.tier = tier_name;
    if (!ParsePinnedAlgo(algo, &proto_fit.pinned)) {
      return absl::InvalidArgumentError(absl::StrCat("measured ", std::string(CollectiveOpName(op)), " with NCCL_ALGO \"",
                                                     algo, "\": mode nccl fits auto, ring, tree, nvls only"));
    }
    proto_fit.gpus = gpus;
    const auto nccl_time = [&](double bytes) { return model->Estimate(op, host, bytes).duration_s; };
    std::vector<NcclFitSegment> segments = NcclSegments(pts, proto_fit, nccl_time);
    out->segments.insert(out->segments.end(), segments.begin(), segments.end());
    for (size_t i = 1; i + 1 < pts.size(); ++i) {
      if (pts[i].bytes < o.loo_min_bytes || !pts[i].SameChoice(pts[i - 1]) || !pts[i].SameChoice(pts[i + 1])) continue;
      NcclFitSegment fit;
      SegmentThrough(pts[i - 1], pts[i + 1], nccl_time(pts[i - 1].bytes), pts[i - 1].time_s, &fit);
      out->loo_error += std::fabs((fit.launch_s + pts[i].nccl_s / fit.eta) / pts[i].time_s - 1);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Calibration> FitCalibration(const MeasuredSet& measured, const Calibration& base,
                                           const std::string& tier_name, const FitOptions& o) {
  Calibration cal = base;
  cal.fitted.clear();
  cal.nccl_fitted.clear();
  // The fit covers one host: its measured segments replace NVLink's η tables; the network tiers'
  // tables (2 hosts and more, published measurements) are kept.
  std::erase_if(cal.eta_tables, [](const EtaTable& t) { return t.hosts < 2; });
  cal.nccl_version = measured.nccl_version;
  cal.nvls = !measured.nvls_off;
  if (const std::optional<KappaChoice> kappa = ChooseKappa(measured)) cal.kappa = kappa->kappa;
  std::vector<double> large_busbw;
  const P2pChannels channels = P2pChannelsOf(base);
  const std::map<GroupKey, std::vector<const Measurement*>> groups = Groups(measured);
  for (const auto& [key, rows] : groups) {
    // Named variables, not a structured binding: lambdas below capture them (clang < 16, the fuzz
    // build's compiler, rejects captured bindings).
    const int op_index = std::get<0>(key);
    const std::string& algo = std::get<1>(key);
    const int gpus = std::get<2>(key);
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
    // first segments carry the small-size α, the last the large-size B_eff; held-out
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
      for (double boundary : P2pRegimeBoundaries(gpus, channels)) {
        bends.push_back(std::nextafter(boundary, std::numeric_limits<double>::infinity()));
      }
    }
    const auto regime = [&](double bytes) {
      return std::count_if(bends.begin(), bends.end(), [&](double bend) { return bytes >= bend; });
    };
    const ChannelCurve smaller = op == CollectiveOp::kAllToAll
                                     ? SmallerHostCurve(groups, algo, gpus, channels, o.split)
                                     : ChannelCurve{};
    const size_t n_fit = fit_rows.size();
    for (size_t i = 0; i + 1 < n_fit; ++i) {
      const Measurement& a = *fit_rows[i];
      const Measurement& b = *fit_rows[i + 1];
      const double lo = i == 0 ? 0 : a.bytes;
      const double hi = i + 2 == n_fit ? 0 : b.bytes;
      const long ra = regime(a.bytes), rb = regime(b.bytes);
      if (ra == rb) {
        const std::optional<double> end = AllToAllPlateauEnd(smaller, gpus, channels,
                                                             i > 0 ? fit_rows[i - 1] : nullptr, a, b);
        if (end) {
          Measurement knot = a;
          knot.bytes = *end;
          push(a, knot, lo, *end);
          push(knot, b, *end, hi);
        } else {
          push(a, b, lo, hi);
        }
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
  if (measured.ring_graph.nchannels > 0) {
    // NCCL's own graph of the measured host is known: its tables get exactly NCCL's inputs (so the
    // argmin switches protocol where NCCL did), and the fitted launch/η segments below carry what the
    // host delivers. The per-op and Tree bandwidths fitted above are not used.
    for (auto it = cal.nccl_constants.begin(); it != cal.nccl_constants.end();) {
      it = it->first.rfind("nccl_bw_intra_GBps", 0) == 0 || it->first.rfind("nccl_tree_bw_intra_GBps", 0) == 0
               ? cal.nccl_constants.erase(it)
               : std::next(it);
    }
    const NcclGraph& ring = measured.ring_graph;
    cal.nccl_constants["nccl_nchannels"] = ring.nchannels;
    cal.nccl_constants["nccl_bw_intra_GBps"] = ring.bw_intra_GBps;
    if (measured.tree_graph.nchannels > 0) {
      // One channel count in CommParams: the tree graph's busbw nCh_tree·bw_tree over the ring's nCh.
      const auto per_ring_channel = [&](const NcclGraph& g) { return g.nchannels * g.bw_intra_GBps / ring.nchannels; };
      const double tree = per_ring_channel(measured.tree_graph);
      cal.nccl_constants["nccl_tree_bw_intra_GBps"] = tree;
      // GPU counts whose logged tree graph differs from that default (one host of exactly that many).
      for (const auto& [gpus, graph] : measured.tree_graphs) {
        if (per_ring_channel(graph) != tree) {
          cal.nccl_constants[absl::StrCat(kTreeBwPerGpusPrefix, gpus)] = per_ring_channel(graph);
        }
      }
    }
  } else if (!large_busbw.empty()) {
    cal.nccl_constants["nccl_nchannels"] = o.nccl_channels;
    cal.nccl_constants["nccl_bw_intra_GBps"] = Median(large_busbw) / 1e9 / o.nccl_channels;
  }
  // Mode nccl. Whether NCCL's size-based Tree correction describes this host is decided on the fit
  // sizes alone, by leave-one-out: each interior fit size >= 1 MiB predicted from its two fit
  // neighbours' segment; the lower total error wins (ties keep NCCL's default, on).
  NcclPass on, off;
  Calibration cal_off = cal;
  cal.nccl_constants["nccl_tree_correction"] = 1;
  cal_off.nccl_constants["nccl_tree_correction"] = 0;
  GEMTB_RETURN_IF_ERROR(FitNcclSegments(measured, cal, tier_name, o, &on));
  GEMTB_RETURN_IF_ERROR(FitNcclSegments(measured, cal_off, tier_name, o, &off));
  const bool keep = on.loo_error <= off.loo_error;
  if (!keep) cal = cal_off;
  const NcclPass& pass = keep ? on : off;
  cal.nccl_fitted = pass.segments;
  return cal;
}

absl::StatusOr<std::vector<MapeRow>> HeldOutMape(const Cluster& cluster, const MeasuredSet& measured, FitSizes split,
                                                 double min_bytes) {
  std::vector<MapeRow> out;
  for (const auto& [key, rows] : Groups(measured)) {
    // Named variables, not a structured binding: lambdas below capture them (clang < 16, the fuzz
    // build's compiler, rejects captured bindings).
    const int op_index = std::get<0>(key);
    const std::string& algo = std::get<1>(key);
    const int gpus = std::get<2>(key);
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
