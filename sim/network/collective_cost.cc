// CollectiveCostModel: resolves the plan (mode, algorithm per op) and the cluster (per-level α/B,
// fitted calibration, NCCL inputs, η tables) once; Estimate then costs one call in O(tiers).
#include "sim/network/collective_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sim/network/alpha_beta.h"
#include "sim/network/nccl_tuning.h"

namespace gemtb::sim {

namespace {

constexpr std::array<CollectiveOp, 5> kOps = {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                                              CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll,
                                              CollectiveOp::kBroadcast};

int OpIndex(CollectiveOp op) { return static_cast<int>(op); }

// The algorithms each op can be pinned to in mode alpha_beta (static: the hot path allocates nothing).
std::span<const CollAlgo> AlgosFor(CollectiveOp op) {
  static constexpr CollAlgo kAllReduceAlgos[] = {CollAlgo::kRing, CollAlgo::kTree, CollAlgo::kHalvingDoubling,
                                                 CollAlgo::kHierarchical, CollAlgo::kNvls};
  static constexpr CollAlgo kGatherAlgos[] = {CollAlgo::kRing, CollAlgo::kHalvingDoubling, CollAlgo::kHierarchical,
                                              CollAlgo::kNvls, CollAlgo::kPat};
  static constexpr CollAlgo kAllToAllAlgos[] = {CollAlgo::kDirect};
  static constexpr CollAlgo kBroadcastAlgos[] = {CollAlgo::kRing, CollAlgo::kTree};
  switch (op) {
    case CollectiveOp::kAllReduce: return kAllReduceAlgos;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter: return kGatherAlgos;
    case CollectiveOp::kAllToAll: return kAllToAllAlgos;
    case CollectiveOp::kBroadcast: return kBroadcastAlgos;
  }
  return kAllToAllAlgos;
}

// The algorithms NCCL itself runs for op, in "auto"'s tie-breaking order: ring and tree (all-reduce),
// ring (all-gather, reduce-scatter, broadcast), PAT for all-gather/reduce-scatter only with one GPU
// per host (NCCL enables it only when every rank is on its own node), NVLS for all-reduce inside one
// host when the calibration says NVLS is on, direct for all-to-all. Halving-doubling and hierarchical
// stay pinnable for what-if questions but are never NCCL's choice.
bool AutoCandidate(CollectiveOp op, CollAlgo algo, const GroupShape& s, bool nvls) {
  switch (algo) {
    case CollAlgo::kRing: return op != CollectiveOp::kAllToAll;
    case CollAlgo::kTree: return op == CollectiveOp::kAllReduce;
    case CollAlgo::kPat:
      return (op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter) && s.members_per_host == 1 &&
             s.hosts > 1;
    case CollAlgo::kNvls: return nvls && op == CollectiveOp::kAllReduce && s.hosts <= 1;
    case CollAlgo::kDirect: return op == CollectiveOp::kAllToAll;
    case CollAlgo::kHalvingDoubling:
    case CollAlgo::kHierarchical:
    case CollAlgo::kAllToAllv: return false;
  }
  return false;
}

std::optional<CollAlgo> ParseAlgo(std::string_view name) {
  if (name == "ring" || name == "flat_ring") return CollAlgo::kRing;
  if (name == "tree") return CollAlgo::kTree;
  if (name == "halving_doubling" || name == "recursive") return CollAlgo::kHalvingDoubling;
  if (name == "direct" || name == "multi_tier") return CollAlgo::kDirect;
  if (name == "hierarchical") return CollAlgo::kHierarchical;
  if (name == "nvls") return CollAlgo::kNvls;
  if (name == "pat") return CollAlgo::kPat;
  return std::nullopt;
}

double Constant(const Calibration& c, const std::string& name, double fallback) {
  auto it = c.nccl_constants.find(name);
  return it == c.nccl_constants.end() ? fallback : it->second;
}

// One fitted (op, level, algo) override; algo nullopt = the "auto" entry.
struct Fitted {
  CollectiveOp op;
  int level;
  std::optional<CollAlgo> algo;
  int gpus;
  double min_bytes, max_bytes;  // 0 = unbounded
  double alpha_s;
  double busbw_Bps;
  bool Covers(double bytes) const {
    return (min_bytes <= 0 || bytes >= min_bytes) && (max_bytes <= 0 || bytes < max_bytes);
  }
};

// One fitted correction of mode nccl (NcclFitSegment, nccl_fit.h) with its tier resolved; pinned
// nullopt = the "auto" measurement.
struct NcclFitEntry {
  std::optional<CollAlgo> pinned;
  CollAlgo algo;
  CollProto proto;
  int level;  // the tier it was measured across: applies to groups whose top tier is this one
  int gpus;
  double min_bytes, max_bytes;  // 0 = unbounded
  double launch_s;
  double eta;
  bool Covers(double bytes) const {
    return (min_bytes <= 0 || bytes >= min_bytes) && (max_bytes <= 0 || bytes < max_bytes);
  }
};

}  // namespace

struct CollectiveCostModel::Impl {
  bool nccl_mode = false;
  std::array<std::optional<CollAlgo>, 5> op_algo{};  // nullopt = auto
  std::array<alpha_beta::Level, 3> levels{};      // members filled per shape
  std::array<std::vector<Fitted>, 5> fitted;  // by op: the engine's hot path scans one op's entries
  std::array<std::vector<int>, 5> fitted_gpus;  // by op: the group sizes with entries (0: any size)
  std::array<std::vector<NcclFitEntry>, 5> nccl_fits;  // by op: mode nccl's launch/η segments
  int window = 1;
  bool nvls = false;
  double nvls_busbw_Bps = 475e9;
  bool eta = false;
  std::vector<EtaTable> eta_tables;
  // NCCL inputs independent of the shape.
  int nchannels = 16;
  double bw_intra_GBps = 0;
  std::array<double, 5> op_bw_intra_GBps{};  // per-op overrides ("nccl_bw_intra_GBps.all_gather"), 0: none
  double tree_bw_intra_GBps = 0;
  std::vector<std::pair<int, double>> tree_bw_intra_GBps_by_gpus;  // kTreeBwPerGpusPrefix<N>: (N, bw)
  std::optional<double> bw_inter_GBps;
  double net_overhead_us = 1.0;
  double latency_inter_us = 0;
  bool amd_cpu = false;
  bool same_channels = true;
  bool ll128 = true;
  bool tree_correction = true;
  int nvls_nchannels = 16;
  double nvls_bw_intra_GBps = 0;
  double nics_per_gpu = 1;

  alpha_beta::Profile ProfileFor(CollectiveOp op, std::optional<CollAlgo> algo, const GroupShape& s,
                                 double bytes) const;
  // algo's closed form; with auto_fit the fitted "auto" entry's α and B (not algo's own entry).
  CollectiveCost AlphaBeta(CollectiveOp op, CollAlgo algo, const GroupShape& s, double bytes,
                           bool auto_fit = false) const;
  // Whether a fitted "auto" entry (measured with NCCL's own choice) covers op on this shape at S.
  bool HasAutoFit(CollectiveOp op, const GroupShape& s, double bytes) const;
  CollectiveCost Nccl(CollectiveOp op, std::optional<CollAlgo> algo, const GroupShape& s, double bytes) const;
  // t = launch + t / η of the fitted segment for this measurement (pinned algo, else auto), group
  // size and S: the one fitted on NCCL's (algo, proto) choice, else any covering S; none: unchanged.
  double NcclFitted(CollectiveOp op, std::optional<CollAlgo> pinned, const GroupShape& s, double bytes,
                    const CollectiveCost& raw) const;
  double Eta(CollectiveOp op, const GroupShape& s, double bytes) const;
  // The group size whose fitted entries apply to s: its own when measured (or an entry for any
  // size), else on one host the largest measured size below it (the extrapolation anchor), else -1.
  int FitSize(CollectiveOp op, const GroupShape& s) const;
};

namespace {

// Latency steps of algo's form on p ranks, up to a constant factor (only ratios are used): p − 1 for
// ring and direct, ⌈log2 p⌉ for the tree-like forms, 1 for NVLS.
double LatencySteps(CollAlgo algo, int p) {
  switch (algo) {
    case CollAlgo::kTree:
    case CollAlgo::kHalvingDoubling:
    case CollAlgo::kPat: return std::ceil(std::log2(std::max(p, 1)) - 1e-12);
    case CollAlgo::kNvls: return 1;
    case CollAlgo::kRing:
    case CollAlgo::kHierarchical:
    case CollAlgo::kDirect:
    case CollAlgo::kAllToAllv: return p - 1;
  }
  return p - 1;
}

}  // namespace

alpha_beta::Profile CollectiveCostModel::Impl::ProfileFor(CollectiveOp op, std::optional<CollAlgo> algo,
                                                          const GroupShape& s, double bytes) const {
  alpha_beta::Profile g;
  g.level = levels;
  const double p = s.members;
  const double m0 = std::max(1, s.members_per_host);
  const double zone = std::max(s.members_per_zone, s.members_per_host);
  g.level[0].members = m0;
  g.level[1].members = std::max(1.0, zone / m0);
  g.level[2].members = std::max(1.0, p / zone);
  g.p = p;
  g.post_overhead_s = net_overhead_us * 1e-6 * (amd_cpu ? 2 : 1);
  // Fitted α/B replace the level's defaults for groups of exactly the measured size (gpus 0: any
  // size): the entry for this algorithm, else the "auto" entry; among an entry's size segments the
  // one covering S (piecewise fits, calibrate.h). Measured per-call latency is mostly fixed launch
  // cost, so it is not extrapolated to other group sizes as a per-step α.
  const int size = FitSize(op, s);
  for (int pass = 0; size >= 0 && pass < 2; ++pass) {
    const Fitted* best = nullptr;
    for (const Fitted& f : fitted[OpIndex(op)]) {
      if (pass == 0 ? f.algo != algo || !algo.has_value() : f.algo.has_value()) continue;
      if (f.level != g.Top() || !f.Covers(bytes) || (f.gpus != 0 && f.gpus != size)) continue;
      if (best == nullptr || (best->gpus == 0 && f.gpus != 0)) best = &f;
    }
    if (best != nullptr) {
      double alpha = best->alpha_s;
      if (best->gpus != 0 && best->gpus != s.members) {
        // Extrapolated from the largest measured group below this one: the anchor's latency steps
        // at its fitted α, each further step at the tier's own α, so a larger group is never
        // predicted faster than the measured one; bandwidth as measured (NVSwitch: busbw does not
        // fall with p).
        const CollAlgo form = algo.value_or(op == CollectiveOp::kAllToAll ? CollAlgo::kDirect : CollAlgo::kRing);
        const double n_anchor = LatencySteps(form, best->gpus), n = LatencySteps(form, s.members);
        alpha = n > 0 ? (n_anchor * best->alpha_s + (n - n_anchor) * levels[best->level].alpha_s) / n : best->alpha_s;
      }
      g.level[best->level].alpha_s = alpha;
      g.level[best->level].bw_Bps = best->busbw_Bps;
      break;
    }
  }
  return g;
}

int CollectiveCostModel::Impl::FitSize(CollectiveOp op, const GroupShape& s) const {
  const std::vector<int>& sizes = fitted_gpus[OpIndex(op)];
  int anchor = -1;
  for (int n : sizes) {
    if (n == 0 || n == s.members) return n == 0 ? s.members : n;
    if (s.hosts <= 1 && n < s.members) anchor = std::max(anchor, n);
  }
  return anchor;
}

double CollectiveCostModel::Impl::Eta(CollectiveOp op, const GroupShape& s, double bytes) const {
  if (!eta) return 1.0;
  // The table of the most hosts not above the group's: a group on one host takes no network table,
  // one beyond the largest table takes that table (its ratios past it would fold in the per-step
  // latency that the α terms already charge).
  const EtaTable* table = nullptr;
  for (const EtaTable& t : eta_tables) {
    if (t.op != op || t.size_eta.empty() || t.hosts > s.hosts) continue;
    if (table == nullptr || t.hosts > table->hosts) table = &t;
  }
  if (table == nullptr) return 1.0;
  const auto& pts = table->size_eta;
  if (bytes <= pts.front().first) return pts.front().second;
  if (bytes >= pts.back().first) return pts.back().second;
  for (size_t i = 1; i < pts.size(); ++i) {
    if (bytes <= pts[i].first) {
      const double x0 = std::log(pts[i - 1].first), x1 = std::log(pts[i].first);
      const double w = (std::log(bytes) - x0) / (x1 - x0);
      return pts[i - 1].second + w * (pts[i].second - pts[i - 1].second);
    }
  }
  return pts.back().second;
}

bool CollectiveCostModel::Impl::HasAutoFit(CollectiveOp op, const GroupShape& s, double bytes) const {
  const int top = s.hosts <= 1 ? 0 : s.zones <= 1 ? 1 : 2;
  const int size = FitSize(op, s);
  if (size < 0) return false;
  for (const Fitted& f : fitted[OpIndex(op)]) {
    if (!f.algo.has_value() && f.level == top && f.Covers(bytes) && (f.gpus == 0 || f.gpus == size)) return true;
  }
  return false;
}

CollectiveCost CollectiveCostModel::Impl::AlphaBeta(CollectiveOp op, CollAlgo algo, const GroupShape& s,
                                                    double S, bool auto_fit) const {
  const alpha_beta::Profile g = ProfileFor(op, auto_fit ? std::nullopt : std::optional<CollAlgo>(algo), s, S);
  // Every form is affine in S on a fixed profile: t(S) = latency + S · c; t(0) is the latency that the
  // η tables leave alone.
  auto form = [&](double x) {
    double t = 0;
    switch (algo) {
      case CollAlgo::kRing:
        t = op == CollectiveOp::kAllReduce   ? alpha_beta::RingAllReduce(g, x)
            : op == CollectiveOp::kBroadcast ? alpha_beta::RingBroadcast(g, x)
            : op == CollectiveOp::kAllToAll  ? alpha_beta::DirectAllToAll(g, x, window)
                                             : alpha_beta::RingAllGather(g, x);
        break;
      case CollAlgo::kTree:
        t = op == CollectiveOp::kBroadcast ? alpha_beta::TreeBroadcast(g, x) : alpha_beta::TreeAllReduce(g, x);
        break;
      case CollAlgo::kHalvingDoubling:
        t = op == CollectiveOp::kAllReduce ? alpha_beta::HalvingDoublingAllReduce(g, x)
                                           : alpha_beta::RecursiveAllGather(g, x);
        break;
      case CollAlgo::kHierarchical:
        t = op == CollectiveOp::kAllReduce ? alpha_beta::HierarchicalAllReduce(g, x)
                                           : alpha_beta::HierarchicalAllGather(g, x);
        break;
      case CollAlgo::kNvls:
        t = alpha_beta::NvlsAllReduce(g, x, nvls_busbw_Bps);
        break;
      case CollAlgo::kPat:  // NCCL's PAT (one GPU per host): log2(p) steps, as recursive doubling
        t = alpha_beta::RecursiveAllGather(g, x);
        break;
      case CollAlgo::kDirect:
      case CollAlgo::kAllToAllv:
        t = alpha_beta::DirectAllToAll(g, x, window);
        break;
    }
    return t;
  };
  const double t = form(S);
  CollectiveCost c;
  c.duration_s = t;
  c.latency_s = form(0);
  c.algo = algo;
  if (const int size = FitSize(op, s); size > 0 && size != s.members) c.anchor_gpus = size;
  return c;
}

double CollectiveCostModel::Impl::NcclFitted(CollectiveOp op, std::optional<CollAlgo> pinned, const GroupShape& s,
                                             double bytes, const CollectiveCost& raw) const {
  const std::vector<NcclFitEntry>& fits = nccl_fits[OpIndex(op)];
  if (fits.empty()) return raw.duration_s;
  const int top = s.hosts <= 1 ? 0 : s.zones <= 1 ? 1 : 2;
  for (int pass = 0; pass < 4; ++pass) {
    const bool want_pinned = pass < 2;
    const bool want_match = pass % 2 == 0;
    if (want_pinned && !pinned.has_value()) continue;
    for (const NcclFitEntry& f : fits) {
      if (want_pinned ? f.pinned != pinned : f.pinned.has_value()) continue;
      if (f.level != top || (f.gpus != 0 && f.gpus != s.members)) continue;
      if (!f.Covers(bytes)) continue;
      if (want_match && (f.algo != raw.algo || f.proto != raw.proto)) continue;
      return std::max(0.0, f.launch_s + raw.duration_s / f.eta);  // a hand-made file could go below 0
    }
  }
  return raw.duration_s;
}

CollectiveCost CollectiveCostModel::Impl::Nccl(CollectiveOp op, std::optional<CollAlgo> algo, const GroupShape& s,
                                               double S) const {
  nccl::CommParams comm;
  comm.nranks = s.members;
  comm.nnodes = std::max(1, s.hosts);
  comm.nchannels = nchannels;
  comm.bw_intra_GBps = op_bw_intra_GBps[OpIndex(op)] > 0 ? op_bw_intra_GBps[OpIndex(op)] : bw_intra_GBps;
  comm.tree_bw_intra_GBps = tree_bw_intra_GBps;
  if (s.hosts <= 1) {
    for (const auto& [gpus, bw] : tree_bw_intra_GBps_by_gpus) {
      if (gpus == s.members) comm.tree_bw_intra_GBps = bw;
    }
  }
  if (bw_inter_GBps) {
    comm.bw_inter_GBps = *bw_inter_GBps;
  } else {
    // A ring channel crosses each host once: the host's NICs (members on it × NICs per GPU) share
    // the channels; across zones the zone's uplink (÷ oversubscription) binds instead.
    const double ppn = std::max(1, s.members_per_host);
    double inter = ppn * nics_per_gpu * levels[1].bw_Bps / 1e9;
    if (s.zones > 1) inter = std::min(inter, std::max(s.members_per_zone, 1) * nics_per_gpu * levels[2].bw_Bps / 1e9);
    comm.bw_inter_GBps = std::min(bw_intra_GBps, inter / nchannels);
  }
  comm.latency_inter_us = latency_inter_us;
  comm.net_overhead_us = net_overhead_us;
  comm.amd_cpu = amd_cpu;
  comm.same_channels = same_channels;
  comm.ll128 = ll128;
  comm.tree_correction = tree_correction;
  comm.nvls = nvls;
  comm.nvls_nchannels = nvls_nchannels;
  comm.nvls_bw_intra_GBps = nvls_bw_intra_GBps;
  int only = -1;
  if (algo == CollAlgo::kRing) only = nccl::kRing;
  if (algo == CollAlgo::kTree) only = nccl::kTree;
  if (algo == CollAlgo::kNvls) only = nccl::kNvls;
  const nccl::Tables tables = nccl::TuneModel(op, comm);
  const nccl::Choice choice = nccl::Choose(tables, op, comm, S, only);
  CollectiveCost c;
  if (choice.time_us < 0) {
    // Pinned to something NCCL does not run here (e.g. Tree all-gather): NCCL falls back to Ring.
    const nccl::Choice ring = nccl::Choose(tables, op, comm, S, nccl::kRing);
    c.duration_s = ring.time_us * 1e-6;
    c.algo = CollAlgo::kRing;
    c.proto = static_cast<CollProto>(static_cast<int>(ring.proto) + 1);
    c.duration_s = NcclFitted(op, algo, s, S, c);
    return c;
  }
  c.duration_s = choice.time_us * 1e-6;
  c.algo = choice.algo == nccl::kTree   ? CollAlgo::kTree
           : choice.algo == nccl::kNvls ? CollAlgo::kNvls
           : choice.algo == nccl::kPat  ? CollAlgo::kPat
                                        : CollAlgo::kRing;
  c.proto = static_cast<CollProto>(static_cast<int>(choice.proto) + 1);
  c.duration_s = NcclFitted(op, algo, s, S, c);
  return c;
}

absl::StatusOr<CollectiveCostModel> CollectiveCostModel::Create(const Cluster& cluster, const CollectivesPlan& plan) {
  auto impl = std::make_shared<Impl>();
  if (plan.cost_mode != "alpha_beta" && plan.cost_mode != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat("plan.collectives.cost_mode: \"", plan.cost_mode,
                                                   "\" is not one of alpha_beta, nccl"));
  }
  impl->nccl_mode = plan.cost_mode == "nccl";
  for (const auto& [op_name, algo_name] : plan.algo) {
    auto op = ParseCollectiveOp(op_name);
    if (!op.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("plan.collectives.algo.", op_name,
                                                     ": unknown op (one of all_reduce, all_gather, reduce_scatter, "
                                                     "all_to_all, broadcast)"));
    }
    if (algo_name == "auto") continue;
    const std::optional<CollAlgo> algo = ParseAlgo(algo_name);
    const std::span<const CollAlgo> valid = AlgosFor(*op);
    if (!algo || std::find(valid.begin(), valid.end(), *algo) == valid.end()) {
      std::string names = "auto";
      for (CollAlgo a : valid) absl::StrAppend(&names, ", ", std::string(CollAlgoName(a)));
      return absl::InvalidArgumentError(absl::StrCat("plan.collectives.algo.", op_name, ": \"", algo_name,
                                                     "\" is not one of ", names));
    }
    impl->op_algo[OpIndex(*op)] = *algo;
  }
  if (cluster.tiers.empty()) return absl::InvalidArgumentError("cluster.tiers: must not be empty");
  const Calibration& cal = cluster.calibration;
  impl->nics_per_gpu = std::max(1, cluster.nics_per_gpu);
  for (int k = 0; k < 3; ++k) {
    const Tier& tier = cluster.tiers[std::min<size_t>(k, cluster.tiers.size() - 1)];
    const double o = std::max(1.0, tier.oversubscription);
    impl->levels[k].alpha_s = tier.alpha_s;
    impl->levels[k].bw_Bps = (k == 0 ? tier.eff_busbw_Bps : tier.eff_busbw_Bps * impl->nics_per_gpu) / o;
  }
  for (size_t i = 0; i < cal.nccl_fitted.size(); ++i) {
    const NcclFitSegment& fit = cal.nccl_fitted[i];
    const std::string where = absl::StrCat("cluster.calibration.nccl_fitted[", i, "]");
    int level = -1;
    for (size_t k = 0; k < cluster.tiers.size() && k < 3; ++k) {
      if (cluster.tiers[k].name == fit.tier) level = static_cast<int>(k);
    }
    if (level < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".tier: \"", fit.tier, "\" is not a tier of the cluster"));
    }
    if (!std::isfinite(fit.launch_s)) return absl::InvalidArgumentError(absl::StrCat(where, ".launch_us: must be finite"));
    if (!(fit.eta > 0)) return absl::InvalidArgumentError(absl::StrCat(where, ".eta: ", fit.eta, " must be > 0"));
    impl->nccl_fits[OpIndex(fit.op)].push_back(
        {fit.pinned, fit.algo, fit.proto, level, fit.gpus, fit.min_bytes, fit.max_bytes, fit.launch_s, fit.eta});
  }
  for (const FittedLink& f : cal.fitted) {
    int level = -1;
    for (size_t k = 0; k < cluster.tiers.size() && k < 3; ++k) {
      if (cluster.tiers[k].name == f.tier) level = static_cast<int>(k);
    }
    if (level < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster.calibration.fitted: tier \"", f.tier, "\" is not a tier of the cluster"));
    }
    std::optional<CollAlgo> algo;
    if (f.algo != "auto") {
      algo = ParseAlgo(f.algo);
      if (!algo) {
        return absl::InvalidArgumentError(
            absl::StrCat("cluster.calibration.fitted: algo \"", f.algo, "\" is not a known algorithm"));
      }
    }
    impl->fitted[OpIndex(f.op)].push_back({f.op, level, algo, f.gpus, f.min_bytes, f.max_bytes, f.alpha_s, f.busbw_Bps});
    std::vector<int>& sizes = impl->fitted_gpus[OpIndex(f.op)];
    if (std::find(sizes.begin(), sizes.end(), f.gpus) == sizes.end()) sizes.push_back(f.gpus);
  }
  impl->window = static_cast<int>(Constant(cal, "a2a_window", 1));
  impl->nvls = cal.nvls;
  impl->nvls_busbw_Bps = Constant(cal, "nvls_busbw_GBps", 475) * 1e9;
  impl->eta = plan.eta_tables;
  impl->eta_tables = cal.eta_tables;
  impl->nchannels = static_cast<int>(Constant(cal, "nccl_nchannels", 16));
  impl->bw_intra_GBps = Constant(cal, "nccl_bw_intra_GBps", cluster.tiers[0].eff_busbw_Bps / 1e9 / impl->nchannels);
  impl->tree_bw_intra_GBps = Constant(cal, "nccl_tree_bw_intra_GBps", 0.0);
  for (const auto& [name, value] : cal.nccl_constants) {
    if (name.rfind(kTreeBwPerGpusPrefix, 0) != 0) continue;
    const std::string suffix = name.substr(std::string_view(kTreeBwPerGpusPrefix).size());
    int gpus = 0;
    if (!absl::SimpleAtoi(suffix, &gpus) || gpus < 2 || !(value > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("cluster.calibration.constants.", name, ": ", value,
                                                     " (the name must end in a GPU count >= 2, the value be > 0)"));
    }
    impl->tree_bw_intra_GBps_by_gpus.push_back({gpus, value});
  }
  for (CollectiveOp op : kOps) {
    impl->op_bw_intra_GBps[OpIndex(op)] =
        Constant(cal, absl::StrCat("nccl_bw_intra_GBps.", std::string(CollectiveOpName(op))), 0.0);
  }
  if (cal.nccl_constants.count("nccl_bw_inter_GBps")) impl->bw_inter_GBps = cal.nccl_constants.at("nccl_bw_inter_GBps");
  impl->net_overhead_us = Constant(cal, "nccl_net_overhead_us", 1.0);
  impl->latency_inter_us = Constant(cal, "nccl_latency_inter_us", 0.0);
  impl->amd_cpu = Constant(cal, "nccl_amd_cpu", 0) != 0;
  impl->same_channels = Constant(cal, "nccl_same_channels", 1) != 0;
  impl->ll128 = Constant(cal, "nccl_ll128", 1) != 0;
  impl->tree_correction = Constant(cal, "nccl_tree_correction", 1) != 0;
  impl->nvls_nchannels = static_cast<int>(Constant(cal, "nccl_nvls_nchannels", 16));
  impl->nvls_bw_intra_GBps =
      Constant(cal, "nccl_nvls_bw_intra_GBps", cluster.tiers[0].bw_Bps / 1e9 / impl->nvls_nchannels);
  if (impl->nchannels < 1 || impl->window < 1 || impl->bw_intra_GBps <= 0 || impl->nvls_nchannels < 1) {
    return absl::InvalidArgumentError(
        "cluster.calibration.constants: nccl_nchannels, nccl_nvls_nchannels, a2a_window must be >= 1 and "
        "nccl_bw_intra_GBps > 0");
  }
  CollectiveCostModel model;
  model.cluster_ = std::make_shared<const Cluster>(cluster);
  model.plan_ = std::make_shared<const CollectivesPlan>(plan);
  model.impl_ = std::move(impl);
  return model;
}

namespace {

// η scales busbw: the bandwidth part of the time, not the latency steps (mode nccl's
// times are not split: there η scales the whole time).
CollectiveCost Finish(CollectiveCost c, CollectiveOp op, const GroupShape& s, double bytes, double eta) {
  c.duration_s = c.latency_s + (c.duration_s - c.latency_s) / eta;
  if (c.duration_s > 0) {
    c.algbw_Bps = bytes / c.duration_s;
    c.busbw_Bps = c.algbw_Bps * BusBwFactor(op, s.members);
  }
  return c;
}

}  // namespace

CollectiveCost CollectiveCostModel::Estimate(CollectiveOp op, const GroupShape& shape, double bytes) const {
  const std::optional<CollAlgo> pinned = impl_->op_algo[OpIndex(op)];
  if (shape.members <= 1 || !(bytes > 0)) {
    CollectiveCost zero;
    zero.algo = pinned.value_or(op == CollectiveOp::kAllToAll ? CollAlgo::kDirect : CollAlgo::kRing);
    return zero;
  }
  if (pinned) return EstimateWith(op, *pinned, shape, bytes);
  const double eta = impl_->Eta(op, shape, bytes);
  if (impl_->nccl_mode && op != CollectiveOp::kAllToAll) {
    return Finish(impl_->Nccl(op, std::nullopt, shape, bytes), op, shape, bytes, eta);
  }
  if (impl_->HasAutoFit(op, shape, bytes)) {
    // The measured NCCL-auto curve, in the form calibrate.cc fitted it in (FormOf: ring, direct for
    // all-to-all). Its α and B belong to that form: another algorithm's closed form with them (e.g.
    // halving-doubling's 2·log2(p)·α instead of the ring's 2(p−1)·α) would predict a time nobody
    // measured, and the argmin would pick it on p > 2, where the forms differ.
    const CollAlgo form = op == CollectiveOp::kAllToAll ? CollAlgo::kDirect : CollAlgo::kRing;
    return Finish(impl_->AlphaBeta(op, form, shape, bytes, /*auto_fit=*/true), op, shape, bytes, eta);
  }
  CollectiveCost best;
  best.duration_s = std::numeric_limits<double>::infinity();
  for (CollAlgo algo : AlgosFor(op)) {
    if (!AutoCandidate(op, algo, shape, impl_->nvls)) continue;
    const CollectiveCost c = impl_->AlphaBeta(op, algo, shape, bytes);
    if (c.duration_s < best.duration_s) best = c;
  }
  return Finish(best, op, shape, bytes, eta);
}

CollectiveCost CollectiveCostModel::EstimateWith(CollectiveOp op, CollAlgo algo, const GroupShape& shape,
                                                 double bytes) const {
  if (shape.members <= 1 || !(bytes > 0)) {
    CollectiveCost zero;
    zero.algo = algo;
    return zero;
  }
  const double eta = impl_->Eta(op, shape, bytes);
  if (impl_->nccl_mode && op != CollectiveOp::kAllToAll &&
      (algo == CollAlgo::kRing || algo == CollAlgo::kTree || algo == CollAlgo::kNvls)) {
    return Finish(impl_->Nccl(op, algo, shape, bytes), op, shape, bytes, eta);
  }
  const std::span<const CollAlgo> valid = AlgosFor(op);
  if (std::find(valid.begin(), valid.end(), algo) == valid.end() || (algo == CollAlgo::kNvls && shape.hosts > 1) ||
      (algo == CollAlgo::kNvls && op != CollectiveOp::kAllReduce)) {
    algo = op == CollectiveOp::kAllToAll ? CollAlgo::kDirect : CollAlgo::kRing;
  }
  return Finish(impl_->AlphaBeta(op, algo, shape, bytes), op, shape, bytes, eta);
}

CollectiveCost CollectiveCostModel::EstimateAllToAllv(const GroupShape& shape, const AllToAllvLoad& load) const {
  CollectiveCost c;
  c.algo = CollAlgo::kAllToAllv;
  const double total = load.bytes_per_tier[0] + load.bytes_per_tier[1] + load.bytes_per_tier[2];
  if (shape.members <= 1 || !(total > 0)) return c;
  const alpha_beta::Profile g = impl_->ProfileFor(CollectiveOp::kAllToAll, CollAlgo::kDirect, shape, total);
  c.duration_s = alpha_beta::AllToAllv(g, load.bytes_per_tier, impl_->window);
  c.latency_s = alpha_beta::AllToAllLatency(g, impl_->window);
  const double eta = impl_->Eta(CollectiveOp::kAllToAll, shape, total);
  return Finish(c, CollectiveOp::kAllToAll, shape, total, eta);
}

absl::StatusOr<std::vector<AllToAllvLoad>> AllToAllvLoads(const GroupShape& shape, std::span<const double> matrix) {
  const int p = shape.members;
  if (matrix.size() != static_cast<size_t>(p) * p) {
    return absl::InvalidArgumentError(absl::StrCat("all-to-allv matrix: ", matrix.size(), " entries for a group of ",
                                                   p, " (needs ", static_cast<int64_t>(p) * p, ")"));
  }
  const int host = std::max(1, shape.members_per_host);
  const int zone = std::max(std::max(1, shape.members_per_zone), host);
  auto tier = [&](int i, int j) { return i / host == j / host ? 0 : i / zone == j / zone ? 1 : 2; };
  std::vector<std::array<double, kMaxTiers>> sent(p), received(p);
  for (int i = 0; i < p; ++i) {
    for (int j = 0; j < p; ++j) {
      if (i == j) continue;
      const double b = matrix[static_cast<size_t>(i) * p + j];
      const int k = tier(i, j);
      sent[i][k] += b;
      received[j][k] += b;
    }
  }
  std::vector<AllToAllvLoad> loads(p);
  for (int i = 0; i < p; ++i) {
    for (int k = 0; k < kMaxTiers; ++k) loads[i].bytes_per_tier[k] = std::max(sent[i][k], received[i][k]);
  }
  return loads;
}

absl::StatusOr<CollectiveCostModel::AllToAllvResult> CollectiveCostModel::EstimateAllToAllvMatrix(
    const GroupShape& shape, std::span<const double> matrix) const {
  absl::StatusOr<std::vector<AllToAllvLoad>> loads = AllToAllvLoads(shape, matrix);
  if (!loads.ok()) return loads.status();
  AllToAllvResult r;
  r.member_duration_s.reserve(loads->size());
  for (size_t m = 0; m < loads->size(); ++m) {
    const CollectiveCost c = EstimateAllToAllv(shape, (*loads)[m]);
    r.member_duration_s.push_back(c.duration_s);
    if (m == 0 || c.duration_s > r.slowest.duration_s) {
      r.slowest = c;
      r.slowest_member = static_cast<int>(m);
    }
  }
  return r;
}

absl::StatusOr<CollectiveCost> Estimate(const Cluster& cluster, const CollectivesPlan& plan, CollectiveOp op,
                                        const GroupShape& shape, double bytes) {
  absl::StatusOr<CollectiveCostModel> model = CollectiveCostModel::Create(cluster, plan);
  if (!model.ok()) return model.status();
  return model->Estimate(op, shape, bytes);
}

// ---- names -------------------------------------------------------------------------------------

std::string_view CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllToAll: return "all_to_all";
    case CollectiveOp::kBroadcast: return "broadcast";
  }
  return "?";
}

absl::StatusOr<CollectiveOp> ParseCollectiveOp(std::string_view name) {
  for (CollectiveOp op : kOps) {
    if (CollectiveOpName(op) == name) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "op: \"", absl::string_view(name.data(), name.size()),
      "\" is not one of all_reduce, all_gather, reduce_scatter, all_to_all, broadcast"));
}

std::string_view CollAlgoName(CollAlgo algo) {
  switch (algo) {
    case CollAlgo::kRing: return "ring";
    case CollAlgo::kTree: return "tree";
    case CollAlgo::kHalvingDoubling: return "halving_doubling";
    case CollAlgo::kDirect: return "direct";
    case CollAlgo::kHierarchical: return "hierarchical";
    case CollAlgo::kNvls: return "nvls";
    case CollAlgo::kPat: return "pat";
    case CollAlgo::kAllToAllv: return "all_to_allv";
  }
  return "?";
}

std::string_view CollProtoName(CollProto proto) {
  switch (proto) {
    case CollProto::kNone: return "";
    case CollProto::kLL: return "LL";
    case CollProto::kLL128: return "LL128";
    case CollProto::kSimple: return "Simple";
  }
  return "";
}

std::string AlgoLabel(CollAlgo algo, CollProto proto) {
  std::string label(CollAlgoName(algo));
  if (proto != CollProto::kNone) absl::StrAppend(&label, "/", absl::string_view(CollProtoName(proto).data(), CollProtoName(proto).size()));
  return label;
}

double BusBwFactor(CollectiveOp op, int members) {
  const double p = members;
  if (members <= 1) return 0;
  switch (op) {
    case CollectiveOp::kAllReduce: return 2 * (p - 1) / p;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll: return (p - 1) / p;
    case CollectiveOp::kBroadcast: return 1;
  }
  return 1;
}

}  // namespace gemtb::sim
