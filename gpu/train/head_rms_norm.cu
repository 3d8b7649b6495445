#include "gpu/train/head_rms_norm.h"

#include "absl/strings/str_cat.h"
#include "gpu/train/head_rms_norm_kernels.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

using hrn::HeadRmsNormBackwardKernel;
using hrn::HeadRmsNormForwardKernel;
using hrn::RowsPerBlock;
using hrn::kRowsPerPass;
using hrn::kThreads;
using hrn::kWarp;

// Launches the forward kernel over `rows` rows, a staged tensor of T.
template <typename T, int kLanes, typename Kernel, typename... Args>
absl::Status LaunchStaged(Kernel* kernel, const HeadRowsShape& s, cudaStream_t stream, const char* what,
                          Args... args) {
  const int64_t block_rows = RowsPerBlock<kLanes>(s.dh);
  const size_t bytes = static_cast<size_t>(block_rows * s.dh) * sizeof(T);
  if (bytes > 48 * 1024) {  // rows longer than 512 values
    if (absl::Status a = AllowSharedMemory(kernel, bytes, what); !a.ok()) return a;
  }
  const auto blocks = static_cast<unsigned>((s.rows + block_rows - 1) / block_rows);
  LaunchDependent(kernel, blocks, kThreads, bytes, stream, args..., static_cast<int>(block_rows));
  return Launched(what);
}

template <int kLanes>
unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerPass<kLanes> - 1) / kRowsPerPass<kLanes>);
}

// Head dims up to 64 take 8 lanes per row, longer rows a whole warp.
bool ShortRows(int64_t dh) { return dh <= 64; }

// x's and dx's token stride (HeadRowsShape::ld, 0: dense).
int64_t RowStride(const HeadRowsShape& s) { return s.ld > 0 ? s.ld : s.heads * s.dh; }

}  // namespace

absl::Status ValidateHeadRowsShape(const HeadRowsShape& s) {
  if (s.rows < 1 || s.rows >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("rows=", s.rows, ": want 1 .. 2^31-1"));
  }
  if (s.dh < 1 || s.dh > 1024) return absl::InvalidArgumentError(absl::StrCat("dh=", s.dh, ": want 1 .. 1024"));
  if (s.heads < 1 || s.heads > 65535 || s.rows % s.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heads=", s.heads, ": want 1 .. 65535 and a divisor of rows=", s.rows));
  }
  if (s.ld != 0 && (s.ld < s.heads * s.dh || s.ld >= (int64_t{1} << 31))) {
    return absl::InvalidArgumentError(
        absl::StrCat("ld=", s.ld, ": want 0 (dense) or heads*dh=", s.heads * s.dh, " .. 2^31-1"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status HeadRmsNormForward(const HeadRowsShape& s, const T* x, T* y, float* inv, cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  using E = typename BitsOf<T>::type;
  const E* xe = reinterpret_cast<const E*>(x);
  E* ye = reinterpret_cast<E*>(y);
  const int dh = static_cast<int>(s.dh);
  constexpr const char* kWhat = "HeadRmsNormForward";
  const int heads = static_cast<int>(s.heads);
  const int64_t ld = RowStride(s);
  return ShortRows(s.dh) ? LaunchStaged<E, 8>(HeadRmsNormForwardKernel<E, 8>, s, stream, kWhat, xe, s.rows, dh, heads,
                                              ld, ye, inv)
                         : LaunchStaged<E, kWarp>(HeadRmsNormForwardKernel<E, kWarp>, s, stream, kWhat, xe, s.rows,
                                                  dh, heads, ld, ye, inv);
}

template <typename T>
absl::Status HeadRmsNormBackward(const HeadRowsShape& s, const T* x, const float* inv, const T* dy, T* dx,
                                 cudaStream_t stream) {
  if (absl::Status v = ValidateHeadRowsShape(s); !v.ok()) return v;
  using E = typename BitsOf<T>::type;
  const E* xe = reinterpret_cast<const E*>(x);
  const E* dye = reinterpret_cast<const E*>(dy);
  E* dxe = reinterpret_cast<E*>(dx);
  const int dh = static_cast<int>(s.dh), heads = static_cast<int>(s.heads);
  const int64_t ld = RowStride(s);
  if (ShortRows(s.dh)) {
    LaunchDependent(HeadRmsNormBackwardKernel<E, 8>, RowBlocks<8>(s.rows), kThreads, 0, stream, xe, inv, dye, s.rows,
                    dh, heads, ld, dxe);
  } else {
    LaunchDependent(HeadRmsNormBackwardKernel<E, kWarp>, RowBlocks<kWarp>(s.rows), kThreads, 0, stream, xe, inv, dye,
                    s.rows, dh, heads, ld, dxe);
  }
  return Launched("HeadRmsNormBackward");
}

template absl::Status HeadRmsNormForward<float>(const HeadRowsShape&, const float*, float*, float*, cudaStream_t);
template absl::Status HeadRmsNormForward<__nv_bfloat16>(const HeadRowsShape&, const __nv_bfloat16*, __nv_bfloat16*,
                                                        float*, cudaStream_t);
template absl::Status HeadRmsNormBackward<float>(const HeadRowsShape&, const float*, const float*, const float*,
                                                 float*, cudaStream_t);
template absl::Status HeadRmsNormBackward<__nv_bfloat16>(const HeadRowsShape&, const __nv_bfloat16*, const float*,
                                                         const __nv_bfloat16*, __nv_bfloat16*, cudaStream_t);

}  // namespace gemtb::gpu::train
