#include "gpu/train/loss.h"

#include "absl/strings/str_cat.h"
#include "gpu/common/dependent_launch.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

constexpr int kSumThreads = 1024;

// sum of values[0 .. n) in fp64 in a fixed order: thread i adds elements i, i + 1024, ... in order,
// then the 1024 partial sums pairwise in shared memory. One block.
__device__ double BlockSum(const float* values, int64_t n, double* shared) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) s = __dadd_rn(s, static_cast<double>(values[i]));
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  return shared[0];
}

__global__ void MaskCountKernel(const float* masks, int64_t n, double* count) {
  AwaitPriorGrids();
  __shared__ double shared[kSumThreads];
  const double total = BlockSum(masks, n, shared);
  if (threadIdx.x == 0) *count = total;
}

__global__ void SetCountKernel(double value, double* count) {
  AwaitPriorGrids();
  *count = value;
}

// Overflow-safe sigmoid, as ops.h's: exp of a non-positive argument only.
__device__ float Sigmoid(float z) {
  if (z >= 0.0f) return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
  const float e = expf(z);
  return __fdiv_rn(e, __fadd_rn(1.0f, e));
}

__global__ void SampleLossKernel(const float* logits, const float* labels, const float* masks, int64_t samples,
                                 int tasks, const double* count, float* dlogits, float* sample_loss) {
  AwaitPriorGrids();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= samples) return;
  const float inv = static_cast<float>(1.0 / fmax(1.0, *count));
  float loss = 0.0f;
  for (int t = 0; t < tasks; ++t) {
    const int64_t e = b * tasks + t;
    const float z = logits[e], y = labels[e], m = masks[e];
    const float l = __fadd_rn(__fsub_rn(fmaxf(z, 0.0f), __fmul_rn(z, y)), log1pf(expf(-fabsf(z))));
    loss = __fadd_rn(loss, __fmul_rn(m, l));
    dlogits[e] = __fmul_rn(__fmul_rn(m, __fsub_rn(Sigmoid(z), y)), inv);
  }
  sample_loss[b] = loss;
}

__global__ void BatchLossKernel(const float* sample_loss, int64_t samples, const double* count, double* loss) {
  AwaitPriorGrids();
  __shared__ double shared[kSumThreads];
  const double total = BlockSum(sample_loss, samples, shared);
  if (threadIdx.x == 0) *loss = __ddiv_rn(total, fmax(1.0, *count));
}

}  // namespace

absl::Status ValidateLossShape(const LossShape& s) {
  if (s.samples < 1 || s.samples >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("samples=", s.samples, ": want 1 .. 2^31-1"));
  }
  if (s.tasks < 1 || s.tasks > 1024) return absl::InvalidArgumentError(absl::StrCat("tasks=", s.tasks, ": want 1 .. 1024"));
  if (!(s.mask_count < 0) && !(s.mask_count <= 1e300)) {
    return absl::InvalidArgumentError(absl::StrCat("mask_count=", s.mask_count, ": want a finite value (< 0: count)"));
  }
  return absl::OkStatus();
}

absl::Status BceWithLogitsLoss(const LossShape& s, const float* logits, const float* labels, const float* masks,
                               float* dlogits, float* sample_loss, double* loss, double* workspace,
                               cudaStream_t stream) {
  if (absl::Status v = ValidateLossShape(s); !v.ok()) return v;
  if (s.mask_count < 0) {
    LaunchDependent(MaskCountKernel, 1, kSumThreads, 0, stream, masks, s.samples * s.tasks, workspace);
  } else {
    LaunchDependent(SetCountKernel, 1, 1, 0, stream, s.mask_count, workspace);
  }
  if (absl::Status l = Launched("mask count"); !l.ok()) return l;
  constexpr int kThreads = 256;
  LaunchDependent(SampleLossKernel, static_cast<unsigned>((s.samples + kThreads - 1) / kThreads), kThreads, 0, stream,
                  logits, labels, masks, s.samples, static_cast<int>(s.tasks), workspace, dlogits, sample_loss);
  if (absl::Status l = Launched("sample loss"); !l.ok()) return l;
  LaunchDependent(BatchLossKernel, 1, kSumThreads, 0, stream, sample_loss, s.samples, workspace, loss);
  return Launched("batch loss");
}

}  // namespace gemtb::gpu::train
