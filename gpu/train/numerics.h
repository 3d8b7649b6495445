// The GPU model's precision choices for its two kinds of heavy op, the matmuls and attention, the
// arrays of its blocks, and how its bf16 blocks' ops are grouped into kernels. Host code only (no CUDA
// headers): the CLI parses and reports them on any build.
#ifndef GEMTB_GPU_TRAIN_NUMERICS_H_
#define GEMTB_GPU_TRAIN_NUMERICS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace gemtb::gpu::train {

// How a matmul's operands are multiplied (gemm.h); C and the accumulation are fp32 in every case.
enum class MatmulPrecision {
  kFp32,  // IEEE fp32 products and sums (CUBLAS_COMPUTE_32F_PEDANTIC): fp32 rounding alone
  kTf32,  // operands rounded to TF32 (10-bit mantissa) on the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)
};
// (No bf16 choice for fp32 arrays: cuBLAS answers CUBLAS_COMPUTE_32F_FAST_16BF on the H200 with the
// same TF32 kernels, and bf16 operands would need a converting pass over every array first. Arrays
// kept in bf16 are FfnPrecision's and AttentionBlockPrecision's.)

// How the sequence layers' feed-forward block keeps its arrays. Its hidden arrays are 4d wide, the
// widest of a sequence layer, so their bytes are a large share of the layer's.
enum class FfnPrecision {
  kFp32,  // fp32 arrays, the matmuls in MatmulPrecision
  kBf16,  // the LayerNorm's output, the hidden arrays and their gradients in bf16, the weights rounded
          // to bf16, the matmuls on the tensor cores with fp32 accumulation (linear.h); the block's
          // output and its input gradient fp32
};

// How the attention blocks over the sequences' rows keep their arrays: the sequence layers' two
// (cross-attention to the summaries, windowed self-attention) and the summaries' PMA. Their
// projections' inputs and outputs (q, k, v, the normed q and k, GDPA's output) are arrays of the
// sequences' n rows (the PMA's q and output of B k_p rows); GDPA's tensor cores take bf16 operands
// either way.
enum class AttentionBlockPrecision {
  kFp32,  // fp32 arrays, the projections in MatmulPrecision
  kBf16,  // the projections' inputs (the LayerNorm's output, or S_j and the seeds' broadcast queries
          // rounded for the PMA), q, k, v, the normed q and k, GDPA's output and their gradients in
          // bf16, the projections' weights and biases rounded to bf16 for the step, their products on
          // the tensor cores with fp32 accumulation (linear.h); the block's output (the residual
          // stream, or the PMA's output) and its input gradients fp32. Needs AttentionPrecision::kBf16.
};

// How the bf16 blocks (FfnPrecision::kBf16, AttentionBlockPrecision::kBf16) run their ops. The
// same roundings either way; only the order of the products' fp32 sums differs. With either, at d =
// 128 the feed-forward block's forward after its LayerNorm is one kernel (ffn_forward.h); with
// kSeparate, so are its backward's dg, GELU's backward and b1's gradient (ffn_hidden_grad.h).
enum class BlockKernels {
  kSeparate,  // one kernel per op: LayerNorm's, linear.h's products, the elementwise and norm kernels
  kFused,     // where the block's widths allow (d 32, 64 or 128): the feed-forward block's backward up
              // to its input gradient (ffn_fused.h), an attention block's LayerNorm, projections and
              // QK-norm (attention_input.h) and its projections' input gradient with the LayerNorm's
              // backward (projection_backward.h) one kernel each; the weight gradients stay linear.h's
              // products.
};

// How GDPA's products are taken.
enum class AttentionPrecision {
  kFp32,  // fp32 kernels summing each output's terms in the reference's order (gdpa.h)
  kBf16,  // the tensor cores, operands rounded to bf16, fp32 accumulation (gdpa_tensor_core.h)
};

struct GemModelOptions {
  MatmulPrecision matmul = MatmulPrecision::kFp32;
  AttentionPrecision attention = AttentionPrecision::kFp32;
  FfnPrecision ffn = FfnPrecision::kFp32;
  AttentionBlockPrecision attention_blocks = AttentionBlockPrecision::kFp32;
  BlockKernels block_kernels = BlockKernels::kSeparate;
};

inline const char* PrecisionName(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kFp32: return "fp32";
    case MatmulPrecision::kTf32: return "tf32";
  }
  return "?";
}
inline const char* PrecisionName(AttentionPrecision p) { return p == AttentionPrecision::kBf16 ? "bf16" : "fp32"; }
inline const char* PrecisionName(FfnPrecision p) { return p == FfnPrecision::kBf16 ? "bf16" : "fp32"; }
inline const char* PrecisionName(AttentionBlockPrecision p) {
  return p == AttentionBlockPrecision::kBf16 ? "bf16" : "fp32";
}

inline const char* BlockKernelsName(BlockKernels k) { return k == BlockKernels::kFused ? "fused" : "separate"; }

// The inverses of PrecisionName and BlockKernelsName; InvalidArgument naming `field` and the value
// otherwise.
inline absl::StatusOr<MatmulPrecision> ParseMatmulPrecision(const std::string& field, const std::string& name) {
  for (const MatmulPrecision p : {MatmulPrecision::kFp32, MatmulPrecision::kTf32}) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" (want fp32 or tf32)"));
}
inline absl::StatusOr<AttentionPrecision> ParseAttentionPrecision(const std::string& field, const std::string& name) {
  for (const AttentionPrecision p : {AttentionPrecision::kFp32, AttentionPrecision::kBf16}) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" (want fp32 or bf16)"));
}

inline absl::StatusOr<FfnPrecision> ParseFfnPrecision(const std::string& field, const std::string& name) {
  for (const FfnPrecision p : {FfnPrecision::kFp32, FfnPrecision::kBf16}) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" (want fp32 or bf16)"));
}

inline absl::StatusOr<AttentionBlockPrecision> ParseAttentionBlockPrecision(const std::string& field,
                                                                            const std::string& name) {
  for (const AttentionBlockPrecision p : {AttentionBlockPrecision::kFp32, AttentionBlockPrecision::kBf16}) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" (want fp32 or bf16)"));
}

inline absl::StatusOr<BlockKernels> ParseBlockKernels(const std::string& field, const std::string& name) {
  for (const BlockKernels k : {BlockKernels::kSeparate, BlockKernels::kFused}) {
    if (name == BlockKernelsName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" (want separate or fused)"));
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_NUMERICS_H_
