// Sequence lengths of the benchmark shapes, drawn from Philox so that gemtb,
// its peers and the simulator see the same batch for the same (seed, stream).
#ifndef GEMTB_MODEL_ATTENTION_BENCHMARK_LENGTHS_H_
#define GEMTB_MODEL_ATTENTION_BENCHMARK_LENGTHS_H_

#include <cstdint>
#include <vector>

#include "model/numerics/philox.h"

namespace gemtb {

// Length rule (gdpa/utils/utils.py): for sparsity s >= 0.5 uniform in [max(1, floor((2s-1)M)), M],
// otherwise uniform in [1, floor(2sM)]. Draw b is lo + floor(u * (hi - lo + 1)), u = word_b / 2^32.
inline std::vector<int64_t> BenchmarkLengths(int64_t batch, int64_t max_len, double sparsity,
                                             uint64_t seed = 0, uint64_t stream = 0) {
  int64_t lo = 1;
  int64_t hi = max_len;
  if (sparsity >= 0.5) {
    const int64_t floor_lo = static_cast<int64_t>((2.0 * sparsity - 1.0) * static_cast<double>(max_len));
    lo = floor_lo > 1 ? floor_lo : 1;
  } else {
    const int64_t floor_hi = static_cast<int64_t>(2.0 * sparsity * static_cast<double>(max_len));
    hi = floor_hi > 1 ? floor_hi : 1;
  }
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const double u = static_cast<double>(numerics::PhiloxWord(seed, stream, static_cast<uint64_t>(b))) /
                     4294967296.0;
    lengths[b] = lo + static_cast<int64_t>(u * static_cast<double>(hi - lo + 1));
  }
  return lengths;
}

inline std::vector<int64_t> OffsetsFromLengths(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> offsets(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); ++b) offsets[b + 1] = offsets[b] + lengths[b];
  return offsets;
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_ATTENTION_BENCHMARK_LENGTHS_H_
