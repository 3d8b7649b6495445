// Forward (and backward) of the model over a batch with the multi-task masked BCE:
// L = sum_t sum_b m_tb l(z_tb, y_tb) / max(1, sum m), l(z,y) = max(z,0) - z y + log1p(exp(-|z|)).
//
// Determinism: the batch is split into `blocks` consecutive sample ranges, a number that does not
// depend on the thread count. Each block runs its samples in order and accumulates its own parameter
// gradient; blocks run in parallel (oneTBB) and their gradients are summed in block order. So the
// bits are the same for any thread count.
#ifndef GEMTB_REFERENCE_MODEL_BATCH_PASS_H_
#define GEMTB_REFERENCE_MODEL_BATCH_PASS_H_

#include <vector>

#include "reference/model/gem_model.h"

namespace gemtb::reference::model {

template <typename T>
struct BatchPassResult {
  double loss = 0;                              // L, accumulated in fp64 in sample order
  double mask_count = 0;                        // sum m
  std::vector<T> logits;                        // [B, T]
  std::vector<T> param_grad;                    // dL/dparams (backward only)
  std::vector<SampleInputGrad<T>> input_grads;  // per sample (backward only)
  std::vector<T> sample_loss;                   // [B] sum_t m_tb l(z_tb, y_tb), before the division
  // With a block range (BatchPassOptions::block_end >= 0): the range's block gradients in block
  // order instead of param_grad, and loss, logits, sample_loss and input_grads only for the range's
  // samples (loss is then 0). The caller continues the block-order sum (reference/model/data_parallel.h).
  std::vector<std::vector<T>> block_grads;
};

struct BatchPassOptions {
  bool backward = true;
  int threads = 0;   // 0 = oneTBB's default; the result does not depend on it
  int blocks = 16;   // gradient blocks (fixed: part of the numerics, not of the parallelism)
  // Only blocks [block_begin, block_end) when block_end >= 0: one rank's share of a data-parallel
  // step, the other ranks running the other blocks of the same batch.
  int block_begin = 0;
  int block_end = -1;
};

// Samples [first, end) of block `blk` of `blocks` over a batch of B samples.
inline int BlockFirstSample(int B, int blk, int blocks) { return static_cast<int>(static_cast<int64_t>(B) * blk / blocks); }

// labels, masks: [B, T] with B = inputs.size().
template <typename T>
BatchPassResult<T> RunBatch(const GemModel& model, const T* params, const std::vector<SampleInput<T>>& inputs,
                            const std::vector<float>& labels, const std::vector<float>& masks,
                            const BatchPassOptions& options);

// The per-element loss and its derivative dl/dz = sigmoid(z) - y.
template <typename T>
T BceWithLogits(T z, T y);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_BATCH_PASS_H_
