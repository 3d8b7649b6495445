// Fitting a calibration from measured collectives (`gemtb whatif calibrate`):
// `gemtb bench comm` records (tools/bench/results/comm_*.json) in, per (op, pinned algorithm, GPU
// count) a piecewise α–β fit out (one α and effective busbw B per interval between consecutive fit
// sizes: α from the small sizes, B_eff from the large ones), plus NCCL's per-channel bandwidth and κ,
// fitted on one half of the sizes (even or odd powers of two) and judged on the other half by the
// held-out MAPE for S >= 1 MiB.
#ifndef GEMTB_SIM_NETWORK_CALIBRATE_H_
#define GEMTB_SIM_NETWORK_CALIBRATE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

struct Measurement {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::string algo;  // "auto", "ring", "tree": how NCCL_ALGO was set
  int gpus = 0;
  double bytes = 0;
  double time_s = 0;  // median
};

// What NCCL's graph search found on the measured host (its INFO line "Pattern P, crossNic c,
// nChannels n, bw intra/inter, ..."; pattern 4 ring, 1/2/3 trees), the inputs of ncclTopoTuneModel.
struct NcclGraph {
  int nchannels = 0;  // 0: not logged
  double bw_intra_GBps = 0;
};

// κ (GEMM slowdown under a concurrent all-gather) as one record measured it.
struct KappaMeasurement {
  int gpus = 0;
  double kappa = 0;
  std::string source;  // the file it came from (MergeMeasurements), empty for one parsed record
};

struct MeasuredSet {
  std::vector<Measurement> rows;
  // From the record's nccl_tuning_log, when present. NCCL searches its graphs per communicator: the
  // ring graph of the H200 hosts is the same on 2 and 4 GPUs (12 channels × 30 GB/s), the tree graph
  // is not (2 GPUs: bw 60, 4 GPUs: bw 30), so tree graphs are also kept per GPU count; tree_graph is
  // the one of the most GPUs (the default for group sizes not measured).
  NcclGraph ring_graph, tree_graph;
  std::map<int, NcclGraph> tree_graphs;  // by GPU count, when all of a file's records share one
  std::string nccl_version;
  std::string device;
  bool nvls_off = true;
  std::vector<KappaMeasurement> kappas;  // every record's κ (ChooseKappa picks the one a fit uses)
};

// The κ a fit takes from `set.kappas`: the record of the most GPUs (the nearest to sim/'s 8-GPU
// hosts; the mean if several records measured that many), and a text naming the choice and every
// value. nullopt when no record measured κ.
struct KappaChoice {
  double kappa = 0;
  std::string text;
};
std::optional<KappaChoice> ChooseKappa(const MeasuredSet& set);

// Reads a `gemtb bench comm --json` record, or tools/bench_comm.sh's comm_results.json ({"runs":
// {name: record}}). Errors name the JSON path.
absl::StatusOr<MeasuredSet> ParseMeasurements(const nlohmann::json& json);

// Several measurement files (e.g. tools/bench_comm.sh on a 2-GPU and on a 4-GPU host) as one set:
// rows concatenated (the same op, algorithm, GPU count and size in two files is an error); NCCL
// version, device and NVLS setting must agree, and so must the ring graphs the files logged (mode
// nccl's tables take one); tree graphs are kept per GPU count (two files of one GPU count must agree);
// every record's κ is kept with its file's name (ChooseKappa). Errors name the files (`name`).
struct NamedMeasurements {
  std::string name;
  MeasuredSet set;
};
absl::StatusOr<MeasuredSet> MergeMeasurements(const std::vector<NamedMeasurements>& sets);

// Which sizes a fit may see: log2(bytes) even or odd (the rest are held out).
enum class FitSizes { kEven, kOdd };
bool IsFitSize(double bytes, FitSizes split);

// How NCCL (enqueue.cc addP2pToPlan, 2.28 / master 5067397) stripes the ncclSend/ncclRecv pairs of an
// all-to-all over channels, one host: each peer's b = S/p bytes go over n channels, n = min(nMin,
// ⌈b/minPart⌉), doubled while b/n > maxPart and n <= nMax/2, with minPart = chunk/8, maxPart =
// 32·chunk, nMax = p2p channels per peer and nMin = nMax halved while nMin·p > p2p channels. The
// per-channel part follows a different law in each regime (minPart, then b/nMin, b/(2·nMin), ...), so
// measured all-to-all times bend at the regime boundaries. Defaults: two NVSwitch-connected H200s
// (24 ring channels -> 32 p2p channels, 32 per peer, NCCL_P2P_NVL_CHUNKSIZE 512 KiB); calibration
// constants nccl_p2p_nchannels, nccl_p2p_nchannels_per_peer, nccl_p2p_chunk_bytes override them.
struct P2pChannels {
  int channels = 32;
  int per_peer = 32;
  double chunk_bytes = 512 * 1024;
};
// The sizes S (nccl-tests' all-to-all convention: bytes one rank sends) at which a regime ends on p
// GPUs of one host, ascending; S equal to a boundary still belongs to the lower regime.
std::vector<double> P2pRegimeBoundaries(int p, const P2pChannels& channels);
// The bytes one channel carries to one peer in an all-to-all of S on p GPUs of one host: b / n with
// b = S/p and n as above.
double P2pBytesPerChannel(double bytes, int p, const P2pChannels& channels);

struct FitOptions {
  FitSizes split = FitSizes::kEven;
  double small_max_bytes = 64 * 1024;       // α from fit sizes <= this
  double large_min_bytes = 64 * 1024 * 1024;  // B from fit sizes >= this
  int nccl_channels = 24;  // what NCCL 2.28 logs on two NVSwitch-connected H200s
  // The cluster on which mode nccl's tables are evaluated for its fitted launch/η segments (its
  // calibration is replaced by the one being fitted); null: one NVLink tier named tier_name with the
  // the tier defaults.
  const Cluster* cluster = nullptr;
  // Leave-one-out over fit sizes >= this decides nccl_tree_correction (see FitCalibration).
  double loo_min_bytes = 1024 * 1024;
};

// Fits `base` (kept: efficiency, kappa unless measured, other constants) to the measurements, for a
// cluster whose first tier is `tier_name` (the NVLink tier: only one host is measured). Adds per
// (op, algo, gpus) the FittedLink segments [S_i, S_{i+1}) between consecutive fit sizes (the line
// t = n·α + f·S/B through both, in the form the cost model evaluates for that op and algorithm), the
// NCCL per-channel bandwidth (nccl_bw_intra_GBps) from the large sizes or, when the records logged
// NCCL's graphs, the ring graph and the tree graph of the most GPUs (nccl_tree_bw_intra_GBps) plus
// nccl_tree_bw_intra_GBps.gpusN for each GPU count whose tree graph differs, the NCCL version, nvls,
// kappa. η tables of `base` for one host are dropped (the segments already follow the measured
// curve); those of 2 hosts and more (network tiers) are kept. For
// all-to-all no segment crosses a P2pRegimeBoundaries bend (channel constants from `base`), and
// where a smaller host's all-to-all was measured too, a segment that starts on a latency plateau ends
// the plateau where the smaller host's time per channel reaches it (AllToAllPlateauEnd in
// calibrate.cc; sim/network/README.md, "All-to-all's plateau").
// Mode nccl (all ops but all-to-all, which it costs with the α–β segments): per (op, algo, gpus) and
// NCCL (algorithm, protocol) choice under the fitted constants, segments t = launch + t_NCCL/η through
// consecutive fit sizes of the same choice (nccl_fit.h); a segment never spans a protocol switch, and
// a choice seen at one fit size only scales NCCL's time through it (launch 0).
// NCCL's size-based Tree all-reduce correction is kept (nccl_tree_correction 1) unless turning it off
// predicts the fit sizes better by leave-one-out (each interior fit size >= loo_min_bytes from its two
// fit neighbours); the held-out sizes play no part.
absl::StatusOr<Calibration> FitCalibration(const MeasuredSet& measured, const Calibration& base,
                                           const std::string& tier_name, const FitOptions& options);

struct MapeRow {
  CollectiveOp op;
  std::string algo;
  int gpus = 0;
  int sizes = 0;  // held-out sizes >= 1 MiB
  double mape_alpha_beta = 0;      // percent, mode alpha_beta, η off
  double mape_alpha_beta_eta = 0;  // mode alpha_beta, η on
  double mape_nccl = 0;            // mode nccl, η off
  double max_ape_alpha_beta = 0;
};

// Held-out MAPE (S >= min_bytes, sizes not in the fit half) of the cost model on `cluster` (whose
// calibration is the fitted one) against the measurements, per (op, algo, gpus), in a fixed order.
absl::StatusOr<std::vector<MapeRow>> HeldOutMape(const Cluster& cluster, const MeasuredSet& measured,
                                                 FitSizes split, double min_bytes = 1024 * 1024);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_CALIBRATE_H_
