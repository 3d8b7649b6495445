// The GPU model's precision flags, shared by `gemtb train`, `gemtb bench layers` and
// `gemtb check train`: --matmul fp32|tf32, --attention fp32|bf16, --ffn fp32|bf16,
// --attention-blocks fp32|bf16 and --block-kernels separate|fused (gpu/train/numerics.h).
#ifndef GEMTB_TOOLS_GEMTB_GPU_NUMERICS_FLAGS_H_
#define GEMTB_TOOLS_GEMTB_GPU_NUMERICS_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gpu/train/numerics.h"
#include "nlohmann/json.hpp"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {

struct NumericsFlags {
  // As given; the defaults are the command's (--ffn and --attention-blocks: fp32; --block-kernels: separate).
  std::string matmul, attention, ffn, attention_blocks, block_kernels;

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
    flags.String("attention-blocks", &attention_blocks,
                 "the attention blocks' arrays (the sequence layers' cross and self attention, the PMA): fp32 | "
                 "bf16 (bf16 q, k, v, GDPA output and gradients, bf16 projections with fp32 accumulation; needs "
                 "--attention bf16) (default fp32)");
    flags.String("block-kernels", &block_kernels,
                 "the bf16 blocks' kernels: separate (one kernel per op) | fused (at widths 32, 64 and 128: the "
                 "feed-forward backward, an attention block's LayerNorm, projections and QK-norm, and its "
                 "projections' input gradient with the LayerNorm's backward, one kernel each) (default separate)");
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
    absl::StatusOr<gpu::train::AttentionBlockPrecision> b = gpu::train::ParseAttentionBlockPrecision(
        "--attention-blocks", attention_blocks.empty() ? "fp32" : attention_blocks);
    if (!b.ok()) return b.status();
    if (*b == gpu::train::AttentionBlockPrecision::kBf16 && *a != gpu::train::AttentionPrecision::kBf16) {
      return absl::InvalidArgumentError(absl::StrCat("--attention-blocks bf16: needs --attention bf16 (it is ",
                                                     gpu::train::PrecisionName(*a), ")"));
    }
    absl::StatusOr<gpu::train::BlockKernels> k =
        gpu::train::ParseBlockKernels("--block-kernels", block_kernels.empty() ? "separate" : block_kernels);
    if (!k.ok()) return k.status();
    o.block_kernels = *k;
    o.matmul = *m;
    o.attention = *a;
    o.ffn = *f;
    o.attention_blocks = *b;
    return o;
  }

 private:
  std::string matmul_default_ = "fp32", attention_default_ = "fp32";
};

// {"matmul": "...", "attention": "...", "ffn": "...", "attention_blocks": "...", "block_kernels": "..."}
// for reports.
inline nlohmann::json NumericsJson(const gpu::train::GemModelOptions& o) {
  return {{"matmul", gpu::train::PrecisionName(o.matmul)},
          {"attention", gpu::train::PrecisionName(o.attention)},
          {"ffn", gpu::train::PrecisionName(o.ffn)},
          {"attention_blocks", gpu::train::PrecisionName(o.attention_blocks)},
          {"block_kernels", gpu::train::BlockKernelsName(o.block_kernels)}};
}

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_GPU_NUMERICS_FLAGS_H_
