// The `cluster` section of scenario.json and calibration files
// (sim/calibration/*.json): parsing with every check, errors naming the JSON path, the value and
// the rule ("cluster.tiers[1].bw_GBps: -3 must be > 0"), unknown keys rejected.
//
// cluster = {
//   "world_size": 4096, "gpus_per_host": 8, "zone_size": 2048, "nics_per_gpu": 1,
//   "tiers": [ {"name": "nvlink", "bw_GBps": 450, "eff_busbw_GBps": 370, "alpha_us": 1.87,
//               "oversubscription": 1}, ... ],               // innermost first, non-empty, <= 3
//   "gpu": {"peak_flops": {"bf16": 989e12, "fp8": 1979e12}, "hbm_bytes": 141e9, "hbm_GBps": 4800,
//           "sm_count": 132},
//   "calibration": {...} | "relative/path.json"              // optional; default none (tier defaults)
// }
// calibration = {
//   "nccl_version": "2.27.3", "nccl_commit": "5067397...", "nvls": false,
//   "constants": {"name": number, ...},                        // overrides of NCCL tuning constants
//   "fitted": [ {"op": "all_gather", "tier": "nvlink", "algo": "auto"|"ring"|..., "gpus": 2,
//                "min_bytes": 1048576, "max_bytes": 4194304,   // segment [min, max); 0 = unbounded
//                "alpha_us": 9.1, "busbw_GBps": 361.2}, ... ],  // for groups of exactly `gpus` (0: any)
//   "nccl_fitted": [ {"op": "all_reduce", "tier": "nvlink", "algo": "auto"|"ring"|"tree"|"nvls",
//                     "nccl_algo": "ring"|"tree"|"nvls"|"pat", "proto": "LL"|"LL128"|"Simple", "gpus": 2,
//                     "min_bytes": 0, "max_bytes": 4194304, "launch_us": 12.3, "eta": 0.8}, ... ],
//                                                              // mode nccl's segments (nccl_fit.h)
//   "eta_tables": [ {"op": "all_reduce", "hosts": 2, "points": [[bytes, eta], ...]}, ... ],
//   "kappa": 0.22,
//   "efficiency": {"e_mem": 0.6, "ops": {"linear": 0.45, "attention": [[tokens, e], ...]}},
//   "layers": {...} | "relative/path.json",                   // optional: measured per-layer
//                                                              // efficiencies (layer_calibration_json.h)
//   "source", "note", "fit", "held_out", "measured": free-form documentation (not read)
// }
// world_size may be omitted (0) when a scenario or sweep sets it later; ValidateClusterWorld checks
// it then.
#ifndef GEMTB_SIM_NETWORK_CLUSTER_JSON_H_
#define GEMTB_SIM_NETWORK_CLUSTER_JSON_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

// Reads a referenced file (a section given as a relative path). The default reads from disk.
using FileReader = std::function<absl::StatusOr<std::string>(const std::string& path)>;
absl::StatusOr<std::string> ReadFileFromDisk(const std::string& path);

// Parses `json` (an object, or a string naming a file relative to base_dir) as a cluster. path_prefix
// names it in errors ("cluster", "scenario.cluster"). Checks: gpus_per_host divides zone_size,
// which divides world_size (a world smaller than one zone is one zone: zone_size is capped);
// bandwidths, peaks, latencies > 0; oversubscription >= 1; 0 < eta <= 1; tiers non-empty; a world
// spanning several hosts needs a second tier, several zones a third.
absl::StatusOr<Cluster> ParseCluster(const nlohmann::json& json, std::string_view path_prefix,
                                     const std::string& base_dir,
                                     const FileReader& reader = ReadFileFromDisk);

// Parses a calibration object (or a path relative to base_dir) as above.
absl::StatusOr<Calibration> ParseCalibration(const nlohmann::json& json, std::string_view path_prefix,
                                             const std::string& base_dir,
                                             const FileReader& reader = ReadFileFromDisk);

// Reads and parses a cluster file (references resolved relative to its folder).
absl::StatusOr<Cluster> LoadClusterFile(const std::string& path);

// The world checks for a world_size set after parsing (sweeps): world_size >= 1, gpus_per_host
// divides it (or it is smaller than one host), zone_size divides it (a smaller world is one zone),
// enough tiers for the hosts and zones it spans. Names `path_prefix`.world_size.
absl::Status ValidateClusterWorld(const Cluster& cluster, std::string_view path_prefix);

// The effective zone size: min(zone_size, world_size) (a world smaller than a zone is one zone).
int EffectiveZoneSize(const Cluster& cluster);

// The default cluster of `gemtb whatif collective` and of gem-default (sim/network/default_cluster.json,
// calibration sim/calibration/h200.json), compiled into the binary so no file path is needed.
// world_size as in the file; callers override it.
absl::StatusOr<Cluster> DefaultCluster();
// The text of the two files, as compiled in (for tools that print or copy them).
std::string_view DefaultClusterJsonText();
std::string_view DefaultCalibrationJsonText();

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_CLUSTER_JSON_H_
