// gemtb whatif collective: the predicted time and busbw of one collective on a cluster
// (sim/network). gemtb whatif calibrate: fits a calibration file from
// `gemtb bench comm` records and prints the held-out MAPE.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "sim/network/byte_size.h"
#include "sim/network/calibrate.h"
#include "sim/network/cluster_json.h"
#include "sim/network/collective_cost.h"
#include "sim/network/nccl_fit.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {
namespace {

using nlohmann::json;

absl::StatusOr<json> ReadJson(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = sim::ReadFileFromDisk(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", text.status().message()));
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not valid JSON"));
  return j;
}

// A group of `gpus` contiguous ranks must fill whole hosts (and whole zones) once it leaves one:
// the cost model's tier profile assumes every host (zone) it touches holds the same number of
// members, so 12 GPUs on 8-GPU hosts would silently be priced as 8 x 2.
absl::Status CheckEvenLayout(const sim::Cluster& cluster, int64_t gpus) {
  const int host = cluster.gpus_per_host;
  const int zone = sim::EffectiveZoneSize(cluster);
  if (gpus > host && gpus % host != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus: ", gpus, " spans hosts of ", host,
                                                   " GPUs without filling them (use at most ", host,
                                                   " or a multiple of ", host, ")"));
  }
  if (gpus > zone && gpus % zone != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus: ", gpus, " spans AI zones of ", zone,
                                                   " GPUs without filling them (use at most ", zone,
                                                   " or a multiple of ", zone, ")"));
  }
  return absl::OkStatus();
}

// Elements per call as nccl-tests prints them for a bf16 buffer: the whole buffer (all_reduce,
// broadcast), one rank's chunk (all_gather, reduce_scatter), one peer's share (all_to_all).
int64_t ElementCount(sim::CollectiveOp op, int64_t bytes, int64_t gpus) {
  const int64_t elements = bytes / 2;
  return op == sim::CollectiveOp::kAllReduce || op == sim::CollectiveOp::kBroadcast ? elements : elements / gpus;
}

absl::Status Collective(const std::vector<std::string>& args) {
  std::string op_name, size_text, sweep_text, cluster_path, algo = "auto", mode = "alpha_beta";
  int64_t gpus = 0;
  bool no_eta = false, json_out = false;
  FlagSet flags("gemtb whatif collective --op OP --gpus N (--size S | --sweep MIN:MAX:FACTOR) [--cluster FILE] "
                "[--algo A] [--mode M]",
                "Predicts one collective on N GPUs (ranks 0..N-1, contiguous: NVLink hosts first; a group\n"
                "that leaves a host fills whole hosts) of a cluster (default: the compiled-in gem-default\n"
                "cluster, sim/network/default_cluster.json with sim/calibration/h200.json). S in bytes as\n"
                "nccl-tests: the buffer (all_reduce, broadcast), the full gathered size (all_gather,\n"
                "reduce_scatter), the bytes one rank sends (all_to_all); suffixes K, M, G are powers of 2.\n"
                "Prints the time in microseconds, algbw and busbw (GB/s); --sweep prints one nccl-tests-style\n"
                "table (bf16). Groups across hosts are scaled by the calibration's published size-efficiency\n"
                "tables unless --no-eta.");
  flags.String("op", &op_name, "all_reduce | all_gather | reduce_scatter | all_to_all | broadcast");
  flags.Int64("gpus", &gpus, "number of GPUs in the group");
  flags.String("size", &size_text, "S, e.g. 64M");
  flags.String("sweep", &sweep_text, "MIN:MAX:FACTOR, e.g. 1K:1G:2 (nccl-tests -b/-e/-f)");
  flags.String("cluster", &cluster_path, "cluster JSON (or a scenario file: its cluster section)");
  flags.String("algo", &algo, "auto (NCCL's algorithms: the cheapest) | ring | tree | halving_doubling | direct | "
                              "hierarchical | nvls | pat");
  flags.String("mode", &mode, "alpha_beta (default) | nccl");
  flags.Bool("no-eta", &no_eta, "ignore the calibration's size-efficiency tables");
  flags.Bool("json", &json_out, "print JSON (one object; with --sweep an array) instead of text");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (op_name.empty()) return absl::InvalidArgumentError("--op: missing");
  if (size_text.empty() == sweep_text.empty()) {
    return absl::InvalidArgumentError("--size/--sweep: give exactly one of them");
  }
  if (gpus < 1 || gpus > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus: ", gpus, " must be in [1, 16777216]"));
  }
  absl::StatusOr<sim::CollectiveOp> op = sim::ParseCollectiveOp(op_name);
  if (!op.ok()) return absl::InvalidArgumentError(absl::StrCat("--", op.status().message()));
  std::vector<int64_t> sizes;
  if (!size_text.empty()) {
    absl::StatusOr<int64_t> size = sim::ParseByteSize("--size", size_text);
    if (!size.ok()) return size.status();
    sizes.push_back(*size);
  } else {
    absl::StatusOr<std::vector<int64_t>> sweep = sim::ParseByteSweep("--sweep", sweep_text);
    if (!sweep.ok()) return sweep.status();
    sizes = *std::move(sweep);
  }
  absl::StatusOr<sim::Cluster> cluster = cluster_path.empty() ? sim::DefaultCluster() : sim::LoadClusterFile(cluster_path);
  if (!cluster.ok()) return cluster.status();
  cluster->world_size = std::max<int>(cluster->world_size, static_cast<int>(gpus));
  if (absl::Status s = sim::ValidateClusterWorld(*cluster, "cluster"); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus ", gpus, ": ", s.message()));
  }
  GEMTB_RETURN_IF_ERROR(CheckEvenLayout(*cluster, gpus));
  sim::CollectivesPlan plan;
  plan.cost_mode = mode;
  plan.eta_tables = !no_eta;
  plan.algo[op_name] = algo;
  absl::StatusOr<sim::CollectiveCostModel> model = sim::CollectiveCostModel::Create(*cluster, plan);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--algo/--mode: ", model.status().message()));
  }
  absl::StatusOr<sim::GroupShape> shape = sim::ContiguousGroupShape(*cluster, static_cast<int>(gpus));
  if (!shape.ok()) return shape.status();
  std::vector<sim::CollectiveCost> costs;
  for (int64_t size : sizes) costs.push_back(model->Estimate(*op, *shape, static_cast<double>(size)));
  auto extrapolated = [](const sim::CollectiveCost& c) {
    return c.anchor_gpus > 0 ? absl::StrCat("extrapolated from the ", c.anchor_gpus, "-GPU measurement") : std::string();
  };
  if (json_out) {
    json rows = json::array();
    for (size_t i = 0; i < sizes.size(); ++i) {
      const sim::CollectiveCost& c = costs[i];
      json j = {{"op", op_name}, {"gpus", gpus}, {"bytes", sizes[i]}, {"mode", mode},
                {"algo", sim::AlgoLabel(c.algo, c.proto)}, {"hosts", shape->hosts}, {"zones", shape->zones},
                {"time_us", c.duration_s * 1e6}, {"algbw_GBps", c.algbw_Bps / 1e9}, {"busbw_GBps", c.busbw_Bps / 1e9}};
      if (c.anchor_gpus > 0) j["extrapolated_from_gpus"] = c.anchor_gpus;
      rows.push_back(j);
    }
    std::cout << (sweep_text.empty() ? rows[0] : rows).dump() << "\n";
    return absl::OkStatus();
  }
  if (sweep_text.empty()) {
    const sim::CollectiveCost& c = costs[0];
    std::cout << absl::StrFormat("%s on %d GPUs (%d per host, %d hosts, %d zones), S = %s (%d B), mode %s, algo %s\n",
                                 op_name, gpus, shape->members_per_host, shape->hosts, shape->zones,
                                 sim::FormatByteSize(static_cast<double>(sizes[0])), sizes[0], mode,
                                 sim::AlgoLabel(c.algo, c.proto));
    std::cout << absl::StrFormat("time %.3f us  algbw %.2f GB/s  busbw %.2f GB/s\n", c.duration_s * 1e6,
                                 c.algbw_Bps / 1e9, c.busbw_Bps / 1e9);
    if (c.anchor_gpus > 0) std::cout << extrapolated(c) << "\n";
    return absl::OkStatus();
  }
  std::cout << absl::StrFormat("# %s on %d GPUs (%d per host, %d hosts, %d zones), mode %s, algo %s%s\n", op_name,
                               gpus, shape->members_per_host, shape->hosts, shape->zones, mode, algo,
                               no_eta ? ", eta tables off" : "");
  std::cout << absl::StrFormat("#%13s %13s %9s %11s %8s %8s  %s\n", "size", "count", "type", "time", "algbw", "busbw",
                               "algo");
  std::cout << absl::StrFormat("#%13s %13s %9s %11s %8s %8s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const sim::CollectiveCost& c = costs[i];
    std::cout << absl::StrFormat("%14d %13d %9s %11.2f %8.2f %8.2f  %s%s\n", sizes[i], ElementCount(*op, sizes[i], gpus),
                                 "bfloat16", c.duration_s * 1e6, c.algbw_Bps / 1e9, c.busbw_Bps / 1e9,
                                 sim::AlgoLabel(c.algo, c.proto),
                                 c.anchor_gpus > 0 ? absl::StrCat(" (", extrapolated(c), ")") : std::string());
  }
  return absl::OkStatus();
}

// How mode nccl's constants and segments were fitted (calibration.fit.nccl_mode).
std::string NcclModeNote(const sim::MeasuredSet& measured) {
  const std::string segments =
      "; nccl_tree_correction (NCCL's size-based Tree all-reduce correction) kept or dropped by leave-one-out on "
      "the fit sizes >= 1 MiB; then nccl_fitted: per (op, algo, gpus) and NCCL's (algorithm, protocol) choice under "
      "those constants, segments t = launch + t_NCCL / eta through consecutive fit sizes of the same choice (never "
      "across a protocol switch; a negative launch kept while the line stays above half the time measured at the "
      "segment's lower end; a one-point regime scales NCCL's time through its point, launch 0)";
  if (measured.ring_graph.nchannels > 0) {
    return "nccl_nchannels, nccl_bw_intra_GBps, nccl_tree_bw_intra_GBps: the graph NCCL logged on the measured hosts "
           "(nccl_tuning_log: ring pattern 4 nChannels x bw, the same in every file; tree pattern 1-3 scaled to the "
           "ring's channel count, that of the most GPUs, and nccl_tree_bw_intra_GBps.gpusN for a GPU count whose "
           "logged tree graph differs)" +
           segments;
  }
  return "nccl_bw_intra_GBps = B_eff of the large sizes (median over all_reduce, all_gather, reduce_scatter) / "
         "nccl_nchannels (24); nccl_bw_intra_GBps.<op> the same per op; nccl_tree_bw_intra_GBps from the Tree run" +
         segments;
}

absl::Status Calibrate(const std::vector<std::string>& args) {
  std::vector<std::string> in_paths;
  std::string out_path, fit_sizes = "even", base_path, cluster_path;
  FlagSet flags("gemtb whatif calibrate --in RESULTS.json [--in MORE.json ...] [--fit-sizes even|odd] --out CALIBRATION.json",
                "Fits a calibration file from `gemtb bench comm` records (or tools/bench_comm.sh's\n"
                "comm_results.json; several files, e.g. one per host size, are merged: --in repeated or\n"
                "comma-separated; they must share NCCL version, device, NVLS setting and the logged ring graph,\n"
                "and kappa is taken from the file of the most GPUs):\n"
                "per op, pinned algorithm and GPU count a piecewise alpha-beta fit (alpha\n"
                "from the small sizes, effective busbw from the large ones, one segment between consecutive\n"
                "fit sizes), mode nccl's inputs (the NCCL graph the record logged) with launch/eta segments per\n"
                "protocol regime, and kappa (GEMM slowdown), on the even (or odd)\n"
                "powers of two; prints the held-out MAPE for S >= 1 MiB on the other sizes in modes\n"
                "alpha_beta (eta off/on) and nccl. Other fields (efficiency) come from --base (default: the\n"
                "compiled-in sim/calibration/h200.json).");
  flags.StringList("in", &in_paths, "measured results (JSON); repeatable, or comma-separated");
  flags.String("out", &out_path, "calibration file to write");
  flags.String("fit-sizes", &fit_sizes, "even (default) | odd: which powers of two the fit sees");
  flags.String("base", &base_path, "calibration whose other fields are kept");
  flags.String("cluster", &cluster_path, "cluster for the held-out check (default: the compiled-in one)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return absl::OkStatus();
  }
  if (in_paths.empty()) return absl::InvalidArgumentError("--in: missing");
  if (out_path.empty()) return absl::InvalidArgumentError("--out: missing");
  if (fit_sizes != "even" && fit_sizes != "odd") {
    return absl::InvalidArgumentError(absl::StrCat("--fit-sizes: \"", fit_sizes, "\" is not one of even, odd"));
  }
  sim::FitOptions options;
  options.split = fit_sizes == "even" ? sim::FitSizes::kEven : sim::FitSizes::kOdd;
  std::vector<sim::NamedMeasurements> sets;
  json sources = json::array();
  for (const std::string& path : in_paths) {
    absl::StatusOr<json> in = ReadJson("--in", path);
    if (!in.ok()) return in.status();
    absl::StatusOr<sim::MeasuredSet> one = sim::ParseMeasurements(*in);
    if (!one.ok()) return absl::InvalidArgumentError(absl::StrCat("--in ", path, ": ", one.status().message()));
    const std::string name = std::filesystem::path(path).filename().string();
    for (const sim::NamedMeasurements& earlier : sets) {
      if (earlier.name == name) return absl::InvalidArgumentError(absl::StrCat("--in: ", name, " given twice"));
    }
    sets.push_back({name, *std::move(one)});
    sources.push_back(name);
  }
  absl::StatusOr<sim::MeasuredSet> measured = sim::MergeMeasurements(sets);
  if (!measured.ok()) return absl::InvalidArgumentError(absl::StrCat("--in: ", measured.status().message()));
  json base_json = json::parse(sim::DefaultCalibrationJsonText(), nullptr, false);
  if (!base_path.empty()) {
    absl::StatusOr<json> b = ReadJson("--base", base_path);
    if (!b.ok()) return b.status();
    base_json = *b;
  }
  absl::StatusOr<sim::Calibration> base = sim::ParseCalibration(base_json, "base", ".");
  if (!base.ok()) return base.status();
  absl::StatusOr<sim::Cluster> cluster = cluster_path.empty() ? sim::DefaultCluster() : sim::LoadClusterFile(cluster_path);
  if (!cluster.ok()) return cluster.status();
  const sim::Cluster fit_cluster = *cluster;
  options.cluster = &fit_cluster;
  absl::StatusOr<sim::Calibration> cal = sim::FitCalibration(*measured, *base, cluster->tiers[0].name, options);
  if (!cal.ok()) return cal.status();
  cluster->calibration = *cal;
  absl::StatusOr<std::vector<sim::MapeRow>> mape = sim::HeldOutMape(*cluster, *measured, options.split);
  if (!mape.ok()) return mape.status();

  // The file: the base's documentation and efficiency, then what was fitted.
  json out = base_json;
  for (const char* key : {"fitted", "nccl_fitted", "eta_tables", "held_out", "fit", "measured", "note", "source"}) out.erase(key);
  std::set<int> gpu_counts;
  for (const sim::Measurement& m : measured->rows) gpu_counts.insert(m.gpus);
  out["note"] = absl::StrCat(
      "Written by `gemtb whatif calibrate` from measured NCCL collectives, each file on one host (",
      absl::StrJoin(gpu_counts, " and "),
      " GPUs; NVLink only: network tiers keep the published defaults of sim/network/default_cluster.json).");
  out["source"] = sources;
  out["nccl_version"] = cal->nccl_version;
  out["nccl_commit"] =
      "measured with the NCCL above; nccl-mode constants from NVIDIA/nccl master 5067397c (2.30.7)";
  out["nvls"] = cal->nvls;
  if (cal->kappa) out["kappa"] = *cal->kappa;
  json constants = json::object();  // the fit starts from the base's constants and may drop some
  for (const auto& [name, value] : cal->nccl_constants) constants[name] = value;
  out["constants"] = constants;
  out["measured"] = {{"device", measured->device}, {"nvls_off", measured->nvls_off}, {"gpus", gpu_counts}};
  out["fit"] = {{"sizes", fit_sizes},
                {"held_out", fit_sizes == "even" ? "odd powers of two" : "even powers of two"},
                {"model", "piecewise alpha-beta: per (op, algo, gpus) one segment [min_bytes, max_bytes) between "
                          "consecutive fit sizes, t = n*alpha + f*S/busbw through both measurements (n, f of the "
                          "op's ring form: all_reduce 2(p-1), 2(p-1)/p; tree 2*ceil(log2 p), 2; others p-1, "
                          "(p-1)/p, broadcast f = 1); small sizes give alpha, large ones B_eff; all_to_all segments never "
                          "cross a bend of NCCL's p2p channel striping (per-peer bytes S/p at nMin*chunk/8 and "
                          "n*32*chunk, sim/network/calibrate.h P2pRegimeBoundaries): each side continues its own "
                          "regime's line, and on a host with a smaller measured host a segment starting on a latency plateau stays "
                          "flat until the smaller host's time per channel (P2pBytesPerChannel) reaches it, then joins the next fit "
                          "size (calibrate.cc AllToAllPlateauEnd); mode alpha_beta with algo auto evaluates a measured auto segment in exactly this form "
                          "(sim/network/collective_cost.h Estimate)"},
                {"nccl_mode", NcclModeNote(*measured)}};
  if (const std::optional<sim::KappaChoice> kappa = sim::ChooseKappa(*measured)) out["fit"]["kappa"] = kappa->text;
  json fitted = json::array();
  json nccl_fitted = json::array();
  for (const sim::FittedLink& f : cal->fitted) {
    fitted.push_back({{"op", std::string(sim::CollectiveOpName(f.op))}, {"tier", f.tier}, {"algo", f.algo},
                      {"gpus", f.gpus}, {"min_bytes", f.min_bytes}, {"max_bytes", f.max_bytes},
                      {"alpha_us", f.alpha_s * 1e6}, {"busbw_GBps", f.busbw_Bps / 1e9}});
  }
  for (const sim::NcclFitSegment& n : cal->nccl_fitted) {
    nccl_fitted.push_back({{"op", std::string(sim::CollectiveOpName(n.op))}, {"tier", n.tier},
                           {"algo", std::string(sim::PinnedAlgoName(n.pinned))},
                           {"nccl_algo", std::string(sim::CollAlgoName(n.algo))},
                           {"proto", std::string(sim::CollProtoName(n.proto))}, {"gpus", n.gpus},
                           {"min_bytes", n.min_bytes}, {"max_bytes", n.max_bytes}, {"launch_us", n.launch_s * 1e6},
                           {"eta", n.eta}});
  }
  out["fitted"] = fitted;
  out["nccl_fitted"] = nccl_fitted;
  json etas = json::array();
  for (const sim::EtaTable& t : cal->eta_tables) {
    json pts = json::array();
    for (const auto& [bytes, e] : t.size_eta) pts.push_back({bytes, e});
    etas.push_back({{"op", std::string(sim::CollectiveOpName(t.op))}, {"hosts", t.hosts}, {"points", pts}});
  }
  out["eta_tables"] = etas;
  json held = json::array();
  std::cout << absl::StrFormat("held-out MAPE (S >= 1 MiB, %s powers of two held out), %s, NCCL %s\n",
                               fit_sizes == "even" ? "odd" : "even", measured->device, measured->nccl_version);
  std::cout << absl::StrFormat("%-15s %-5s %4s %5s %12s %14s %10s %12s\n", "op", "algo", "gpus", "sizes",
                               "alpha_beta%", "alpha_beta+eta%", "nccl%", "max_ab%");
  for (const sim::MapeRow& r : *mape) {
    std::cout << absl::StrFormat("%-15s %-5s %4d %5d %12.2f %14.2f %10.2f %12.2f\n", std::string(sim::CollectiveOpName(r.op)),
                                 r.algo, r.gpus, r.sizes, r.mape_alpha_beta, r.mape_alpha_beta_eta, r.mape_nccl,
                                 r.max_ape_alpha_beta);
    held.push_back({{"op", std::string(sim::CollectiveOpName(r.op))}, {"algo", r.algo}, {"gpus", r.gpus},
                    {"sizes", r.sizes}, {"mape_alpha_beta_pct", r.mape_alpha_beta},
                    {"mape_alpha_beta_eta_pct", r.mape_alpha_beta_eta}, {"mape_nccl_pct", r.mape_nccl},
                    {"max_ape_alpha_beta_pct", r.max_ape_alpha_beta}});
  }
  out["held_out"] = held;
  // Check that what we write parses back before replacing the file.
  absl::StatusOr<sim::Calibration> back = sim::ParseCalibration(out, "calibration", ".");
  if (!back.ok()) return absl::InternalError(absl::StrCat("the fitted calibration does not parse: ", back.status().message()));
  return WriteTextAtomically(out_path, out.dump(1) + "\n");
}

}  // namespace

int RunWhatifCollective(const std::vector<std::string>& args) {
  if (absl::Status s = Collective(args); !s.ok()) return ReportError("whatif collective", s);
  return kExitOk;
}

int RunWhatifCalibrate(const std::vector<std::string>& args) {
  if (absl::Status s = Calibrate(args); !s.ok()) return ReportError("whatif calibrate", s);
  return kExitOk;
}

}  // namespace gemtb::cli
