#include "reference/model/batch_pass.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"

namespace gemtb::reference::model {

template <typename T>
T BceWithLogits(T z, T y) {
  return std::max(z, T(0)) - z * y + std::log1p(std::exp(-std::abs(z)));
}

template <typename T>
BatchPassResult<T> RunBatch(const GemModel& model, const T* params, const std::vector<SampleInput<T>>& inputs,
                            const std::vector<float>& labels, const std::vector<float>& masks,
                            const BatchPassOptions& options) {
  const int B = static_cast<int>(inputs.size());
  const int nt = model.num_tasks();
  BatchPassResult<T> r;
  double count = 0;
  for (int e = 0; e < B * nt; ++e) count += masks[e];
  r.mask_count = count;
  const T inv = T(1) / static_cast<T>(std::max(1.0, count));
  r.logits.assign(static_cast<size_t>(B) * nt, T(0));
  const size_t np = model.layout().total();
  const int blocks = std::max(1, std::min(options.blocks, std::max(B, 1)));
  // The block gradients are reused from call to call on this thread: 16 fresh ~1 MB arrays per step
  // cost a page fault per 4 KiB (about 7% of a training run's CPU, as system time). Referenced through
  // `block_grad` so that the parallel blocks, run on other threads, all use this thread's arrays.
  // A nested call on the same thread (a oneTBB worker that steals another RunBatch while it waits) uses
  // arrays of its own.
  thread_local std::vector<std::vector<T>> block_grad_pool;
  thread_local bool pool_in_use = false;
  std::vector<std::vector<T>> own;
  const bool use_pool = !pool_in_use;
  std::vector<std::vector<T>>& block_grad = use_pool ? block_grad_pool : own;
  struct Release {
    bool active;
    bool& flag;
    ~Release() {
      if (active) flag = false;
    }
  } release{use_pool, pool_in_use};
  pool_in_use = true;
  if (options.backward && block_grad.size() < static_cast<size_t>(blocks)) block_grad.resize(blocks);
  if (options.backward) r.input_grads.resize(B);
  const bool ranged = options.block_end >= 0;
  const int blk_begin = ranged ? std::clamp(options.block_begin, 0, blocks) : 0;
  const int blk_end = ranged ? std::clamp(options.block_end, blk_begin, blocks) : blocks;
  r.sample_loss.assign(B, T(0));
  std::vector<T>& sample_loss = r.sample_loss;
  const std::vector<T> transposed = options.backward ? TransposedParams(model.layout(), params) : std::vector<T>();

  auto run_block = [&](int blk) {
    const int b0 = BlockFirstSample(B, blk, blocks);
    const int b1 = BlockFirstSample(B, blk + 1, blocks);
    std::unique_ptr<SampleTape<T>, void (*)(SampleTape<T>*)> tape(GemModel::NewTape<T>(), &GemModel::DeleteTape<T>);
    ParamView<T> view{params, nullptr, options.backward ? transposed.data() : nullptr};
    if (options.backward) {
      block_grad[blk].assign(np, T(0));
      view.g = block_grad[blk].data();
    }
    std::vector<T> dlogits(nt);
    for (int b = b0; b < b1; ++b) {
      T* z = r.logits.data() + static_cast<size_t>(b) * nt;
      model.Forward(view, inputs[b], *tape, z);
      T loss = 0;
      for (int t = 0; t < nt; ++t) {
        const T m = static_cast<T>(masks[b * nt + t]);
        const T y = static_cast<T>(labels[b * nt + t]);
        loss += m * BceWithLogits(z[t], y);
        dlogits[t] = m * (Sigmoid(z[t]) - y) * inv;
      }
      sample_loss[b] = loss;
      if (options.backward) model.Backward(view, inputs[b], *tape, dlogits.data(), r.input_grads[b]);
    }
  };
  auto run_all = [&] { tbb::parallel_for(blk_begin, blk_end, run_block); };
  if (options.threads > 0) {
    tbb::task_arena arena(options.threads);
    arena.execute(run_all);
  } else {
    run_all();
  }
  if (ranged) {
    if (options.backward)
      for (int blk = blk_begin; blk < blk_end; ++blk) r.block_grads.push_back(block_grad[blk]);
    return r;
  }
  double total = 0;
  for (int b = 0; b < B; ++b) total += static_cast<double>(sample_loss[b]);
  r.loss = total / std::max(1.0, count);
  if (options.backward) {
    r.param_grad = block_grad[0];
    for (int blk = 1; blk < blocks; ++blk)
      for (size_t e = 0; e < np; ++e) r.param_grad[e] += block_grad[blk][e];
  }
  return r;
}

template float BceWithLogits<float>(float, float);
template double BceWithLogits<double>(double, double);
template BatchPassResult<float> RunBatch<float>(const GemModel&, const float*, const std::vector<SampleInput<float>>&,
                                                const std::vector<float>&, const std::vector<float>&,
                                                const BatchPassOptions&);
template BatchPassResult<double> RunBatch<double>(const GemModel&, const double*,
                                                  const std::vector<SampleInput<double>>&, const std::vector<float>&,
                                                  const std::vector<float>&, const BatchPassOptions&);

}  // namespace gemtb::reference::model
