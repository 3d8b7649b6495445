// The bit-exact arithmetic of table-batched embeddings: id
// hashing, table init, stochastic-rounding words and the fused optimizer updates, each a fixed
// sequence of correctly rounded fp32 operations. Host and device code: the oracle and the GPU
// kernels share these definitions, so they produce the same bits.
#ifndef GEMTB_MODEL_EMBEDDING_EMBEDDING_MATH_H_
#define GEMTB_MODEL_EMBEDDING_EMBEDDING_MATH_H_

#include <cstdint>

#include "model/embedding/embedding_config.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/fp32_ops.h"
#include "model/numerics/host_device.h"
#include "model/numerics/philox.h"
#include "model/numerics/stochastic_rounding.h"
#include "model/random/splitmix64.h"

namespace gemtb::embedding {

using numerics::AddRn;
using numerics::DivRn;
using numerics::MulRn;
using numerics::SqrtRn;
using numerics::SubRn;

// Id -> row under `hashing`; false when the id is invalid (identity: outside [0, rows); mod: negative).
GEMTB_HD inline bool IdToRow(int64_t id, Hashing hashing, int64_t rows, uint64_t hash_seed, int64_t* row) {
  switch (hashing) {
    case Hashing::kIdentity:
      if (id < 0 || id >= rows) return false;
      *row = id;
      return true;
    case Hashing::kMod:
      if (id < 0) return false;
      *row = id % rows;
      return true;
    case Hashing::kSplitMix64:
      *row = static_cast<int64_t>(SplitMix64(static_cast<uint64_t>(id) ^ hash_seed) % static_cast<uint64_t>(rows));
      return true;
  }
  return false;
}

// Default seed_t of table t: h(t).
GEMTB_HD inline uint64_t DefaultHashSeed(int table) { return SplitMix64(static_cast<uint64_t>(table)); }

// W[r][j] = (2*u24(w) - 1) * (1 / sqrt(N_t)), w = Philox(seed, S(INIT, t, 0), r*D_t + j), as fp32
// ops, then rounded to the storage type by the caller (RNE).
GEMTB_HD inline float InitValue(uint64_t seed, int table, int64_t rows, int64_t dim, int64_t r, int64_t j) {
  const uint32_t w = numerics::PhiloxWord(seed, StreamId(StreamTag::kInit, static_cast<uint64_t>(table), 0),
                                          static_cast<uint64_t>(r * dim + j));
  const float centred = SubRn(MulRn(2.0f, U24(w)), 1.0f);
  const float scale = DivRn(1.0f, SqrtRn(static_cast<float>(rows)));
  return MulRn(centred, scale);
}

// The 16 SR bits of element j of row r of table t at step s (global r, j: any sharding draws the same).
GEMTB_HD inline uint16_t SrBits(uint64_t seed, int table, int64_t step, int64_t dim, int64_t r, int64_t j) {
  return numerics::PhiloxSrBits(seed, StreamId(StreamTag::kStochasticRounding, static_cast<uint64_t>(table),
                                               static_cast<uint64_t>(step)),
                                static_cast<uint64_t>(r * dim + j));
}

// The SR words of elements j..j+3 of row r, when r*dim + j is a multiple of 4 (D and j are, for a
// 4-column chunk): one Philox block, whose word k's low half is SrBits(..., j + k).
GEMTB_HD inline numerics::Philox4x32 SrBlock(uint64_t seed, int table, int64_t step, int64_t dim, int64_t r,
                                             int64_t j) {
  return numerics::PhiloxBlock(seed, StreamId(StreamTag::kStochasticRounding, static_cast<uint64_t>(table),
                                              static_cast<uint64_t>(step)),
                               static_cast<uint64_t>(r * dim + j) >> 2);
}

// Rounds an updated fp32 value to the storage type: SR with `bits` when `stochastic`, else RNE.
// Returns the stored value widened back to fp32 (what the table holds afterwards).
GEMTB_HD inline float StoreUpdated(float w, ElementType dtype, bool stochastic, uint16_t bits) {
  switch (dtype) {
    case ElementType::kBFloat16:
      return numerics::Bf16BitsToFloat(stochastic ? numerics::FloatToBf16BitsSr(w, bits)
                                                  : numerics::FloatToBf16BitsRne(w));
    case ElementType::kFloat16:
      return numerics::Fp16BitsToFloat(stochastic ? numerics::FloatToFp16BitsSr(w, bits)
                                                  : numerics::FloatToFp16BitsRne(w));
    default:
      return w;
  }
}

GEMTB_HD inline float StoreRne(float w, ElementType dtype) { return StoreUpdated(w, dtype, false, 0); }

// ---- fused optimizers: one row, fp32, op by op ----

// SGD: w <- w - lr*G.
GEMTB_HD inline void SgdRow(float* w, const float* g, int64_t n, float lr) {
  for (int64_t j = 0; j < n; ++j) w[j] = SubRn(w[j], MulRn(lr, g[j]));
}

// Rowwise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD), split in two so that a column-sharded row can sum
// its norm over shards: first each slice's seqsum of g~^2 (g~ = G + lambda*w in L2 mode, else G) ...
GEMTB_HD inline float RowwiseAdagradSquareSum(const float* w, const float* g, int64_t n, const OptimizerConfig& o) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float gt = o.decay_mode == WeightDecayMode::kL2 ? AddRn(g[j], MulRn(o.weight_decay, w[j])) : g[j];
    sum = AddRn(sum, MulRn(gt, gt));
  }
  return sum;
}

// ... then, with the row's total (seqsum over slices in order) and full dim D: a = total/D; m += a;
// mu = lr/(sqrt(m)+eps); c by decay mode; w_j <- c*w_j - mu*G_j (raw G).
GEMTB_HD inline void RowwiseAdagradApply(float* w, const float* g, int64_t n, float square_sum, int64_t full_dim,
                                         float* state, const OptimizerConfig& o) {
  const float a = DivRn(square_sum, static_cast<float>(full_dim));
  *state = AddRn(*state, a);
  const float mu = DivRn(o.lr, AddRn(SqrtRn(*state), o.eps));
  float c = 1.0f;
  if (o.decay_mode == WeightDecayMode::kL2) c = SubRn(1.0f, MulRn(mu, o.weight_decay));
  if (o.decay_mode == WeightDecayMode::kDecoupled) c = SubRn(1.0f, MulRn(o.lr, o.weight_decay));
  for (int64_t j = 0; j < n; ++j) w[j] = SubRn(MulRn(c, w[j]), MulRn(mu, g[j]));
}

// Adam's per-step bias products: b1 <- b1*beta1, b2 <- b2*beta2, from 1 (once per step per table).
struct AdamStep {
  float b1 = 1.0f;
  float b2 = 1.0f;
};
GEMTB_HD inline AdamStep NextAdamStep(AdamStep s, const OptimizerConfig& o) {
  return {MulRn(s.b1, o.beta1), MulRn(s.b2, o.beta2)};
}

// Adam / AdamW on one row with element states m, v (lazy on tables: only touched rows call this).
GEMTB_HD inline void AdamRow(float* w, const float* g, int64_t n, float* m, float* v, AdamStep step,
                             const OptimizerConfig& o) {
  const float one_m_b1 = SubRn(1.0f, o.beta1);
  const float one_m_b2 = SubRn(1.0f, o.beta2);
  const float corr1 = SubRn(1.0f, step.b1);
  const float corr2 = SubRn(1.0f, step.b2);
  for (int64_t j = 0; j < n; ++j) {
    m[j] = AddRn(MulRn(o.beta1, m[j]), MulRn(one_m_b1, g[j]));
    v[j] = AddRn(MulRn(o.beta2, v[j]), MulRn(one_m_b2, MulRn(g[j], g[j])));
    if (o.decay_mode == WeightDecayMode::kDecoupled) w[j] = SubRn(w[j], MulRn(MulRn(o.lr, o.weight_decay), w[j]));
    const float update = DivRn(DivRn(m[j], corr1), AddRn(SqrtRn(DivRn(v[j], corr2)), o.eps));
    w[j] = SubRn(w[j], MulRn(o.lr, update));
  }
}

}  // namespace gemtb::embedding

#endif  // GEMTB_MODEL_EMBEDDING_EMBEDDING_MATH_H_
