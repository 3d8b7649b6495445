// Fitting κ from `gemtb bench comm --gemm`: a bf16 GEMM timed alone, beside an
// SM-based copy and beside a copy-engine copy of the same bytes. κ = GEMM time beside / alone − 1.
//
// The record (one `gemtb bench comm --json` object, or tools/bench_comm.sh's file whose runs.auto is
// one) holds
//   "gpus": N, "device": "...",
//   "gemm": {"dim": 8192, "gemms": 20, "copy_bytes": 268435456, "alone_ms": 1.9,
//            "sm_based":    {"how": "NCCL all_gather on 4 GPUs", "ms": 2.3},
//            "copy_engine": {"how": "cudaMemcpyAsync device-to-device on GPU 0", "ms": 2.0}}
// ApplyKappaFit writes the copy engine's κ into a calibration (kappa_copy_engine), and the SM-based κ
// (kappa) only when it was an NCCL all-gather (N >= 2): on one GPU the SM-based copy is cuBLAS's copy
// kernel, whose SM footprint is not a collective's; it is recorded in kappa_measured, not applied.
#ifndef GEMTB_SIM_NETWORK_KAPPA_FIT_H_
#define GEMTB_SIM_NETWORK_KAPPA_FIT_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gemtb::sim {

struct KappaBeside {
  std::string how;
  double ms = 0;
  double kappa = 0;  // ms / alone − 1 (negative: noise; ApplyKappaFit clamps at 0)
};

struct KappaFit {
  int gpus = 0;
  std::string device;
  int dim = 0;
  double alone_ms = 0;
  KappaBeside sm_based;
  KappaBeside copy_engine;
};

// Reads the record; errors name the field ("gemm.copy_engine.ms: -1 must be > 0", "gemm: missing
// (run gemtb bench comm --gemm)").
absl::StatusOr<KappaFit> FitKappa(const nlohmann::json& record);

// `calibration` with the fitted κ written in (see above) and kappa_measured saying what was
// measured where; `source` names the record (a file name).
nlohmann::json ApplyKappaFit(nlohmann::json calibration, const KappaFit& fit, const std::string& source);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_KAPPA_FIT_H_
