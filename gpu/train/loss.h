// The trainer's loss, as reference/model/batch_pass.cc defines it, on the device: for sample b and
// task t with logit z, label y and mask m (all fp32, [B, T] row-major),
//   l = m (max(z, 0) - z y + log1p(exp(-|z|))),   dl/dz = m (sigmoid(z) - y) / max(1, sum m),
// and the batch loss sum_b sum_t l / max(1, sum m). The mask count and the batch sum are fp64 sums in
// a fixed order; a sample's loss sums its tasks in order; so every run gives the same bytes.
// A rank of a data-parallel job gives the global batch's mask count (LossShape::mask_count): its
// samples' dlogits are then the single process's bytes, and its loss the share of the global loss
// its samples carry.
#ifndef GEMTB_GPU_TRAIN_LOSS_H_
#define GEMTB_GPU_TRAIN_LOSS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

struct LossShape {
  int64_t samples = 0;  // B, 1 .. 2^31-1
  int64_t tasks = 0;    // T, 1 .. 1024
  double mask_count = -1;  // sum m of the denominator: < 0 counts this batch's masks; else a finite value
};

absl::Status ValidateLossShape(const LossShape& shape);

// Writes dlogits [B, T], sample_loss [B] (fp32) and loss [1] (fp64, the batch loss); `workspace`
// holds one double (the mask count).
absl::Status BceWithLogitsLoss(const LossShape& s, const float* logits, const float* labels, const float* masks,
                               float* dlogits, float* sample_loss, double* loss, double* workspace,
                               cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_LOSS_H_
