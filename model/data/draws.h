// The random draws of the synthetic data generator, host and
// device. Every draw is a pure function of (seed, stream, word index) through Philox4x32-10, so a
// sample's bits do not depend on the rank, the device, the batch it lands in or the thread that makes
// it. Transcendentals come from model/numerics/det_math.h, never from libm.
#pragma once

#include <cstdint>

#include "model/numerics/det_math.h"
#include "model/numerics/host_device.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"

namespace gemtb::data {

// Field kinds of the per-sample data stream S(DATA, field, i): field = kind << 32 | index.
enum class FieldKind : uint64_t { kSample = 0, kSparse = 1, kSequence = 2, kDense = 3 };

GEMTB_HD inline uint64_t FieldId(FieldKind kind, uint64_t index) {
  return (static_cast<uint64_t>(kind) << 32) | index;
}

// The stream of field `field` of sample `index` (Philox(seed, S(DATA, f, i), k)).
GEMTB_HD inline uint64_t DataStream(uint64_t field, uint64_t index) {
  return StreamId(StreamTag::kData, field, index);
}

// A uniform double in (0, 1) from two words: 53 random bits, offset by half a step so that neither 0
// nor 1 occurs (log and the Zipf inverse stay finite).
GEMTB_HD inline double UniformOpen53(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return numerics::DMul(numerics::DAdd(static_cast<double>(bits), 0.5), 1.1102230246251565404e-16);  // 2^-53
}

// A uniform double in [0, 1) from one word (32 bits; exact).
GEMTB_HD inline double Uniform32(uint32_t w) {
  return numerics::DMul(static_cast<double>(w), 2.3283064365386962890625e-10);  // 2^-32
}

// Irwin-Hall(4) standardised to mean 0 and variance 1: (sum of 4 uniforms - 2) * sqrt(3). One
// Philox block. Bounded (|x| <= 2 sqrt 3), which keeps teacher logits bounded too.
GEMTB_HD inline double IrwinHall4(const numerics::Philox4x32& block) {
  using numerics::DAdd;
  double sum = Uniform32(block.v[0]);
  sum = DAdd(sum, Uniform32(block.v[1]));
  sum = DAdd(sum, Uniform32(block.v[2]));
  sum = DAdd(sum, Uniform32(block.v[3]));
  return numerics::DMul(numerics::DSub(sum, 2.0), 1.7320508075688772935);
}

// Irwin-Hall(12) - 6: mean 0, variance 1, within 0.01 of the normal CDF everywhere; three Philox
// blocks (words 0..11 of `block0`.. of the stream). Used for the log-normal lengths, where the exact
// tail shape beyond 6 sigma does not matter and no transcendental is needed.
GEMTB_HD inline double IrwinHall12(uint64_t seed, uint64_t stream, uint64_t first_block) {
  double sum = 0.0;
  for (uint64_t b = 0; b < 3; ++b) {
    const numerics::Philox4x32 w = numerics::PhiloxBlock(seed, stream, first_block + b);
    for (int k = 0; k < 4; ++k) sum = numerics::DAdd(sum, Uniform32(w.v[k]));
  }
  return numerics::DSub(sum, 6.0);
}

// A bag / sequence length: with probability `empty_prob` 0, else min(lmax, ceil(e^(mu + sigma n))),
// n ~ Irwin-Hall(12) - 6. Uses blocks first_block .. first_block + 3 of the stream.
struct LengthLaw {
  int64_t lmax = 1;
  double mu = 0.0;     // log-scale location
  double sigma = 1.0;  // log-scale spread
  double empty_prob = 0.0;
};

GEMTB_HD inline int64_t DrawLength(const LengthLaw& law, uint64_t seed, uint64_t stream, uint64_t first_block) {
  const numerics::Philox4x32 w = numerics::PhiloxBlock(seed, stream, first_block + 3);
  if (Uniform32(w.v[0]) < law.empty_prob) return 0;
  const double n = IrwinHall12(seed, stream, first_block);
  const double x = numerics::DetExp(numerics::DAdd(law.mu, numerics::DMul(law.sigma, n)));
  if (!(x < static_cast<double>(law.lmax))) return law.lmax;
  const int64_t floor_x = static_cast<int64_t>(x);  // x >= 0
  const int64_t ceil_x = static_cast<double>(floor_x) == x ? floor_x : floor_x + 1;
  return ceil_x < 1 ? 1 : ceil_x;
}

// (a * b) mod m for a, b < m < 2^63, without overflow.
GEMTB_HD inline uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  if (m <= (1ull << 32)) return (a * b) % m;  // a, b < 2^32: the product fits
#if defined(__CUDA_ARCH__)
  uint64_t result = 0;
  a %= m;
  while (b != 0) {  // double-and-add; only tables above 2^32 rows reach this
    if (b & 1u) result = (result >= m - a) ? result - (m - a) : result + a;
    a = (a >= m - a) ? a - (m - a) : a + a;
    b >>= 1;
  }
  return result;
#else
  __extension__ using U128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<U128>(a) * b) % m);
#endif
}

// Where a feature's ids come from, prepared for drawing. A draw picks a popularity
// rank k: with probability heavy_prob one of heavy_count heavy hitters (scattered ranks), else
// k ~ Zipf(s) on 1..vocab by inverting the continuous power law on [1, vocab + 1). The raw id is a
// keyed bijection of the rank, id = (mul * (k - 1) + add) mod vocab with gcd(mul, vocab) = 1: it
// spreads hot ids over the table as a hash h(k ^ salt) would, but maps distinct ranks to distinct
// ids inside [0, vocab), so a table of vocab rows under identity or mod hashing gives each id its
// own row and the teacher's per-id terms stay learnable [proj].
struct IdLaw {
  int64_t vocab = 1;
  double zipf_s = 1.1;
  double zipf_a = 0.0;          // (vocab + 1)^(1 - s) - 1, or log(vocab + 1) when s == 1
  double inv_one_minus_s = 0.0; // 1 / (1 - s); 0 marks s == 1
  double heavy_prob = 0.0;
  int64_t heavy_count = 0;
  uint64_t salt = 0;
  uint64_t mul = 1;
  uint64_t add = 0;
};

// The rank (0-based) of a Zipf draw from uniform u in (0, 1).
GEMTB_HD inline int64_t ZipfRank(const IdLaw& law, double u) {
  double x;
  if (law.inv_one_minus_s == 0.0) {
    x = numerics::DetExp(numerics::DMul(u, law.zipf_a));
  } else {
    x = numerics::DetExp(numerics::DMul(numerics::DetLog1p(numerics::DMul(u, law.zipf_a)), law.inv_one_minus_s));
  }
  int64_t k = static_cast<int64_t>(x);  // floor, x >= 1
  if (k < 1) k = 1;
  if (k > law.vocab) k = law.vocab;
  return k - 1;
}

GEMTB_HD inline int64_t RankToId(const IdLaw& law, uint64_t rank) {
  const uint64_t v = static_cast<uint64_t>(law.vocab);
  const uint64_t prod = MulMod(rank % v, law.mul, v);
  return static_cast<int64_t>((prod + law.add) % v);
}

// One id from one Philox block: words 0-1 the Zipf uniform, word 2 the heavy-hitter coin, word 3
// the heavy hitter's index.
GEMTB_HD inline int64_t DrawId(const IdLaw& law, const numerics::Philox4x32& block) {
  uint64_t rank;
  if (law.heavy_count > 0 && Uniform32(block.v[2]) < law.heavy_prob) {
    const uint64_t j = static_cast<uint64_t>(block.v[3]) % static_cast<uint64_t>(law.heavy_count);
    rank = SplitMix64(j ^ law.salt ^ 0x4845415659ull) % static_cast<uint64_t>(law.vocab);  // "HEAVY"
  } else {
    rank = static_cast<uint64_t>(ZipfRank(law, UniformOpen53(block.v[0], block.v[1])));
  }
  return RankToId(law, rank);
}

}  // namespace gemtb::data
