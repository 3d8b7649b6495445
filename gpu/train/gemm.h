// The GPU model's GEMMs on fp32 arrays, on cuBLAS (and the linear layers' forward on cuBLASLt, for
// its epilogue): row-major, strided-batched, the same bytes on
// every run, in one of two precisions (MatmulPrecision): true fp32 arithmetic (every product and
// sum an IEEE fp32 operation: no TF32, no bf16x9 emulation), which the trainer's checks against the
// fp64 oracle use so that results differ by fp32 rounding alone; or the tensor cores with operands
// rounded to TF32 and fp32 accumulation, for speed.
//
// Row-major on cuBLAS (column-major): a row-major [r, c] array with row stride ld is, in the same
// memory, the column-major [c, r] matrix (its transpose) with leading dimension ld. So instead of
// C = op(A) op(B) cuBLAS computes C^T = op(B)^T op(A)^T in column-major terms: its first operand is
// B's memory, its second A's, its m and n are our n and m (gemm.cc).
//
// Determinism (cuBLAS's "results reproducibility": the same bits on every run for a given cuBLAS
// version, GPU model and SM count): the handle forbids atomics (no sums in the order blocks finish),
// the algorithm is cuBLAS's default heuristic, a function of the shape (never CUBLAS_GEMM_AUTOTUNE,
// which times candidates), and each call gets the object's own workspace (cuBLAS's shared pool is what
// lets concurrent streams change its choice of kernels). That workspace is shared by every call of
// one Fp32Matmul, so calls on different streams must not overlap: order them, or give each stream
// its own Fp32Matmul (as with any cuBLAS handle).
#ifndef GEMTB_GPU_TRAIN_GEMM_H_
#define GEMTB_GPU_TRAIN_GEMM_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/train/numerics.h"

namespace gemtb::gpu::train {

// A linear layer's forward product in reference/model/layers.h's convention, row-major: x [n, in]
// (row stride ldx), W [in, out] (packed), y [n, out] (row stride ldy).
struct LinearF32 {
  int64_t n = 0, in = 0, out = 0;
  int64_t ldx = 0, ldy = 0;
};

// n, in, out in 1 .. 2^31-1, ldx >= in, ldy >= out; errors name the field.
absl::Status ValidateLinearF32(const LinearF32& s);

// C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b] for b < batch, all row-major fp32 device arrays:
// op(A) is [m, k] (A stored [m, k] with row stride lda, or [k, m] when trans_a), op(B) is [k, n]
// (B stored [k, n], or [n, k] when trans_b), C [m, n] with row stride ldc; stride_* = elements
// between batch entries (0 = the same matrix for every b). beta 0 never reads C.
struct GemmF32 {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int64_t batch = 1;
  float alpha = 1.0f, beta = 0.0f;
};

// m, n, k and batch in 1 .. 2^31-1; each ld from its stored matrix's row width to 2^31-1; strides
// >= 0; with batch > 1, C's entries must not overlap (each its own block, stride_c >= (m-1) ldc + n,
// or interleaved within C's rows, n <= stride_c and (batch-1) stride_c + n <= ldc, such as one head
// of [m, heads, n]). Errors name the field and its value.
absl::Status ValidateGemmF32(const GemmF32& g);

class Fp32Matmul {
 public:
  // A cuBLAS handle set up as above and its workspace, on the current device.
  static absl::StatusOr<std::unique_ptr<Fp32Matmul>> Create(MatmulPrecision precision = MatmulPrecision::kFp32);
  MatmulPrecision precision() const;
  ~Fp32Matmul();
  Fp32Matmul(const Fp32Matmul&) = delete;
  Fp32Matmul& operator=(const Fp32Matmul&) = delete;

  // Checks g (and that a, b, c are not null), then enqueues the product on `stream`.
  absl::Status Run(const GemmF32& g, const float* a, const float* b, float* c, cudaStream_t stream);

  // y = x W + bias + residual as one cuBLASLt product in this object's precision (TF32 operands on
  // the tensor cores, or IEEE fp32): the bias (null: none) is added by the epilogue and the residual
  // (null: none; it may be y itself, in y's layout) as the beta term, so y is written once and read
  // never, where a bias pass before the product writes it once and the product reads it again. The
  // bias must be 16-byte aligned (cuBLASLt's epilogue reads it in vectors): InvalidArgument naming
  // it otherwise, so callers with an unaligned bias use Run. The same bytes on every run: the
  // heuristic's choice for the shape, the pointers' alignments and this object's workspace, with
  // split-K only where its partial sums are reduced in fp32 by a separate pass. Unimplemented when
  // cuBLASLt offers no algorithm for the setup (then the caller's bias pass and Run do the work).
  absl::Status Linear(const LinearF32& s, const float* x, const float* w, const float* bias, const float* residual,
                      float* y, cudaStream_t stream);

 private:
  struct Handles;
  Fp32Matmul(std::unique_ptr<Handles> h, MatmulPrecision precision);
  std::unique_ptr<Handles> h_;
  MatmulPrecision precision_;
};

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GEMM_H_
