// The per-layer calibration file (docs/layer-calibration.md): efficiencies measured by running each
// layer alone on one GPU, forward and backward, by op name, by layer (model region) and by op kind,
// with where and how they were measured. Parsed strictly: unknown keys, a missing provenance field,
// an efficiency outside (0, 1] or an unknown op kind fail naming the JSON path and the value.
//
// {
//   "format": "gemtb-layer-calibration", "version": 1,
//   "hardware": "NVIDIA H200 SXM 141GB", "commit": "...", "command": "gemtb bench layers --config small",
//   "config": "small",
//   "ops":   {"L1.cross.seq0.pma_q": {"fwd": 0.52, "bwd": 0.47}, ...},   // by op name (model.json)
//   "layers": {"L1.seq0": {"fwd": 0.012, "bwd": 0.009}, ...},          // by region: of its FLOPs
//   "kinds": {"linear": {"fwd": 0.5, "bwd": 0.45}, ...},               // by op kind
//   "note": free-form (not read)
// }
#ifndef GEMTB_SIM_NETWORK_LAYER_CALIBRATION_JSON_H_
#define GEMTB_SIM_NETWORK_LAYER_CALIBRATION_JSON_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sim/scenario/scenario.h"

namespace gemtb::sim {

inline constexpr std::string_view kLayerCalibrationFormat = "gemtb-layer-calibration";
inline constexpr int kLayerCalibrationVersion = 1;

// Parses `json` (an object) as a layer calibration; path_prefix names it in errors
// ("cluster.calibration.layers").
absl::StatusOr<LayerCalibration> ParseLayerCalibration(const nlohmann::json& json, std::string_view path_prefix);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_LAYER_CALIBRATION_JSON_H_
