// A batch generated on oneTBB's threads: each sample is a pure function of (seed, index), so the
// batch has GenerateBatch's bits for any thread count. Host only; callers link oneTBB. The trainers
// (the oracle's and the GPU's) make their steps' batches here: one thread makes fewer than 2,000
// `small` samples per second (tools/bench/NOTES.md), fewer than a GPU step consumes.
#pragma once

#include <tbb/parallel_for.h>

#include <cstdint>
#include <vector>

#include "model/data/batch.h"
#include "model/data/generator.h"

namespace gemtb::data {

// Samples first .. first + count - 1 of `seed` as one batch, in the calling thread's task arena.
inline Batch GenerateBatchParallel(const Generator& generator, uint64_t seed, int64_t first, int64_t count) {
  std::vector<Sample> samples(static_cast<size_t>(count));
  tbb::parallel_for(int64_t{0}, count,
                    [&](int64_t b) { generator.Generate(seed, first + b, &samples[static_cast<size_t>(b)]); });
  Batch batch;
  AssembleBatch(generator.shape(), samples.data(), count, &batch);
  return batch;
}

}  // namespace gemtb::data
