// The learning-rate schedule of the GEM-like model's trainers (the oracle's and the GPU's): constant,
// or linear decay from the full rate at step 0 to (1 - fraction) of it at `total_steps`. Part of the
// numerics: both trainers evaluate these fp32 operations, so their rates have the same bits.
#ifndef GEMTB_MODEL_DESCRIPTION_TRAIN_SCHEDULE_H_
#define GEMTB_MODEL_DESCRIPTION_TRAIN_SCHEDULE_H_

#include <algorithm>
#include <cstdint>

namespace gemtb::model {

// lr * (1 - fraction * min(1, step / total_steps)), fp32 ops; lr when decay is off.
inline float ScheduledRate(float lr, float fraction, int64_t step, int64_t total_steps, bool linear_decay) {
  if (!linear_decay || total_steps <= 0) return lr;
  const float done = std::min(1.0f, static_cast<float>(step) / static_cast<float>(total_steps));
  return lr * (1.0f - fraction * done);
}

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_TRAIN_SCHEDULE_H_
