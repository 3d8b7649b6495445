// The interleaved RoPE table of the GEM-like model's self-attention: row p holds sin(p theta_m) in
// columns m < dh/2 and cos(p theta_m) in columns dh/2 + m, theta_m = 10000^(-2m/dh), computed in
// double and rounded once to T. Every executor reads this one table (the oracle's model, the GPU
// trainer), so their rotations start from the same values.
#ifndef GEMTB_MODEL_ATTENTION_ROPE_TABLE_H_
#define GEMTB_MODEL_ATTENTION_ROPE_TABLE_H_

#include <cmath>
#include <cstddef>
#include <vector>

namespace gemtb::model {

template <typename T>
std::vector<T> RopeTable(int positions, int dh) {
  std::vector<T> table(static_cast<size_t>(positions) * dh);
  const int half = dh / 2;
  for (int p = 0; p < positions; ++p) {
    for (int m = 0; m < half; ++m) {
      const double angle = p * std::pow(10000.0, -2.0 * m / dh);
      table[static_cast<size_t>(p) * dh + m] = static_cast<T>(std::sin(angle));
      table[static_cast<size_t>(p) * dh + half + m] = static_cast<T>(std::cos(angle));
    }
  }
  return table;
}

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_ATTENTION_ROPE_TABLE_H_
