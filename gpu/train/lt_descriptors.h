// What the trainer's two cuBLASLt users (gemm.cc's linear product, linear.cc's bf16 layers) share:
// the descriptors of one call, destroyed with it, the alignment a pointer gives the heuristic, and the
// row count the heuristic is asked at, with the check that its algorithm runs the actual rows.
#ifndef GEMTB_GPU_TRAIN_LT_DESCRIPTORS_H_
#define GEMTB_GPU_TRAIN_LT_DESCRIPTORS_H_

#include <cublasLt.h>

#include <bit>
#include <cstdint>

namespace gemtb::gpu::train {

struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two up to 256 that divides the address: what the heuristic may assume of it
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES). Offsets into jagged arrays and into the flat
// parameter array are not 256-byte aligned.
inline uint32_t AlignmentBytes(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// The row count a product's algorithm is chosen at: its rows rounded up to a power of two. A row count
// cuBLASLt's heuristic has not seen costs it milliseconds on the host with the GPU idle
// (tools/bench/NOTES.md), and every batch of jagged sequences brings new ones; so the heuristic is
// asked once per rounded description and its algorithm checked at the actual rows (AlgoRuns). The
// choice depends on the rounded rows only, never on which batch came first: a run and a resumed run
// pick alike.
inline int64_t HeuristicRows(int64_t rows) { return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(rows))); }

// Whether `algo` runs the product that `desc` describes (C laid out as D) in `workspace_bytes`.
inline bool AlgoRuns(cublasLtHandle_t lt, const LtDescriptors& desc, const cublasLtMatmulAlgo_t& algo,
                     size_t workspace_bytes) {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(lt, desc.op, desc.a, desc.b, desc.d, desc.d, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= workspace_bytes;
}

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LT_DESCRIPTORS_H_
