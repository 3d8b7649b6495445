// What the trainer's two cuBLASLt users (gemm.cc's linear product, linear.cc's bf16 layers) share:
// the descriptors of one call, destroyed with it, and the alignment a pointer gives the heuristic.
#ifndef GEMTB_GPU_TRAIN_LT_DESCRIPTORS_H_
#define GEMTB_GPU_TRAIN_LT_DESCRIPTORS_H_

#include <cublasLt.h>

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

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LT_DESCRIPTORS_H_
