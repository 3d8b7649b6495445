// The GPU model's precision flags, shared by `gemtb train`, `gemtb bench layers` and
// `gemtb check train`: --matmul fp32|tf32, --attention fp32|bf16 and --ffn fp32|bf16
// (gpu/train/numerics.h).
#ifndef GEMTB_TOOLS_GEMTB_GPU_NUMERICS_FLAGS_H_
#define GEMTB_TOOLS_GEMTB_GPU_NUMERICS_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "gpu/train/numerics.h"
#include "nlohmann/json.hpp"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {

struct NumericsFlags {
  std::string matmul, attention, ffn;  // as given; the defaults are the command's (--ffn: fp32)

  // Registers both flags and what each means when absent.
  void Register(FlagSet& flags, const std::string& matmul_default, const std::string& attention_default) {
    matmul_default_ = matmul_default;
    attention_default_ = attention_default;
    flags.String("matmul", &matmul,
                 "GEMM precision: fp32 (IEEE, the oracle checks' precision) | tf32 (tensor cores, fp32 "
                 "accumulation) (default " + matmul_default + ")");
    flags.String("attention", &attention,
                 "GDPA precision: fp32 (the reference's order of sums) | bf16 (tensor cores, fp32 accumulation) "
                 "(default " + attention_default + ")");
    flags.String("ffn", &ffn,
                 "the sequence layers' feed-forward arrays: fp32 | bf16 (bf16 hidden arrays and gradients, bf16 "
                 "matmuls with fp32 accumulation) (default fp32)");
  }
  // InvalidArgument naming the flag and value.
  absl::StatusOr<gpu::train::GemModelOptions> Resolve() const {
    gpu::train::GemModelOptions o;
    absl::StatusOr<gpu::train::MatmulPrecision> m =
        gpu::train::ParseMatmulPrecision("--matmul", matmul.empty() ? matmul_default_ : matmul);
    if (!m.ok()) return m.status();
    absl::StatusOr<gpu::train::AttentionPrecision> a =
        gpu::train::ParseAttentionPrecision("--attention", attention.empty() ? attention_default_ : attention);
    if (!a.ok()) return a.status();
    absl::StatusOr<gpu::train::FfnPrecision> f = gpu::train::ParseFfnPrecision("--ffn", ffn.empty() ? "fp32" : ffn);
    if (!f.ok()) return f.status();
    o.matmul = *m;
    o.attention = *a;
    o.ffn = *f;
    return o;
  }

 private:
  std::string matmul_default_ = "fp32", attention_default_ = "fp32";
};

// {"matmul": "...", "attention": "...", "ffn": "..."} for reports.
inline nlohmann::json NumericsJson(const gpu::train::GemModelOptions& o) {
  return {{"matmul", gpu::train::PrecisionName(o.matmul)},
          {"attention", gpu::train::PrecisionName(o.attention)},
          {"ffn", gpu::train::PrecisionName(o.ffn)}};
}

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_GPU_NUMERICS_FLAGS_H_
