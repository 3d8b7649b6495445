#include "gpu/train/qk_norm_rope.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/train/kernel_utils.cuh"
#include "gpu/train/qk_norm_rope_kernels.cuh"

namespace gemtb::gpu::train {
namespace {

using qkr::kRowsPerBlock;
using qkr::kThreads;
using qkr::QkNormRopeKernelFor;

dim3 Grid(const RopeRows& r) {
  return dim3(static_cast<unsigned>(r.batch), static_cast<unsigned>((r.max_rows + kRowsPerBlock - 1) / kRowsPerBlock));
}

bool Empty(const RopeRows& r) { return r.batch == 0 || r.max_rows == 0; }

// The row stride of x and dx (RopeRows::ld, 0: dense).
int64_t RowStride(const RopeRows& r) { return r.ld > 0 ? r.ld : int64_t{r.heads} * r.dh; }

}  // namespace

absl::Status ValidateRopeRows(const RopeRows& r) {
  if (r.batch < 0 || r.batch > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch=", r.batch, ": want 0 .. 2^31-1"));
  }
  if (r.max_rows < 0 || r.max_rows > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("max_rows=", r.max_rows, ": want 0 .. 1048576"));
  }
  if (r.heads < 1 || r.heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("heads=", r.heads, ": want 1 .. 65535"));
  }
  if (r.dh < 2 || r.dh > qkr::kLanes * qkr::kMaxPerLane || r.dh % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dh=", r.dh, ": want an even number 2 .. 64"));
  }
  if (r.ld != 0 && (r.ld < int64_t{r.heads} * r.dh || r.ld >= (int64_t{1} << 31))) {
    return absl::InvalidArgumentError(
        absl::StrCat("ld=", r.ld, ": want 0 (dense) or heads*dh=", int64_t{r.heads} * r.dh, " .. 2^31-1"));
  }
  if (Empty(r)) return absl::OkStatus();
  return NotNull({{r.offsets, "offsets"}, {r.table, "table"}});
}

namespace {

template <typename T>
absl::Status Forward(const RopeRows& rows, const T* x, T* y, float* inv, cudaStream_t stream) {
  if (absl::Status s = ValidateRopeRows(rows); !s.ok()) return s;
  if (Empty(rows)) return absl::OkStatus();
  if (absl::Status s = NotNull({{x, "x"}, {y, "y"}, {inv, "inv"}}); !s.ok()) return s;
  LaunchDependent(QkNormRopeKernelFor<false, T>(rows.dh), Grid(rows), kThreads, 0, stream, rows.offsets, rows.heads,
                  rows.dh, RowStride(rows), rows.table, x, nullptr, nullptr, y, inv);
  return Launched("QkNormRopeForward");
}

template <typename T>
absl::Status Backward(const RopeRows& rows, const T* x, const float* inv, const T* dy, T* dx, cudaStream_t stream) {
  if (absl::Status s = ValidateRopeRows(rows); !s.ok()) return s;
  if (Empty(rows)) return absl::OkStatus();
  if (absl::Status s = NotNull({{x, "x"}, {inv, "inv"}, {dy, "dy"}, {dx, "dx"}}); !s.ok()) return s;
  LaunchDependent(QkNormRopeKernelFor<true, T>(rows.dh), Grid(rows), kThreads, 0, stream, rows.offsets, rows.heads,
                  rows.dh, RowStride(rows), rows.table, x, dy, inv, dx, nullptr);
  return Launched("QkNormRopeBackward");
}

}  // namespace

absl::Status QkNormRopeForward(const RopeRows& rows, const float* x, float* y, float* inv, cudaStream_t stream) {
  return Forward(rows, x, y, inv, stream);
}

absl::Status QkNormRopeForward(const RopeRows& rows, const __nv_bfloat16* x, __nv_bfloat16* y, float* inv,
                               cudaStream_t stream) {
  return Forward(rows, Bf16Bits(x), Bf16Bits(y), inv, stream);
}

absl::Status QkNormRopeBackward(const RopeRows& rows, const float* x, const float* inv, const float* dy, float* dx,
                                cudaStream_t stream) {
  return Backward(rows, x, inv, dy, dx, stream);
}

absl::Status QkNormRopeBackward(const RopeRows& rows, const __nv_bfloat16* x, const float* inv,
                                const __nv_bfloat16* dy, __nv_bfloat16* dx, cudaStream_t stream) {
  return Backward(rows, Bf16Bits(x), inv, Bf16Bits(dy), Bf16Bits(dx), stream);
}

}  // namespace gemtb::gpu::train
