#include "tools/check/scale_case.h"

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "model/attention/benchmark_lengths.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/philox.h"
#include "tools/check/criteria.h"
#include "tools/check/scale_sample.h"

namespace gemtb::check {
namespace {

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

std::string LengthStats(const std::vector<int64_t>& v) {
  if (v.empty()) return "none";
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return absl::StrFormat("%d..%d mean %.0f", *lo, *hi,
                         static_cast<double>(Sum(v)) / static_cast<double>(v.size()));
}

std::string MaskText(const AttentionOptions& o) {
  switch (o.mask) {
    case MaskKind::kNone:
      return "none";
    case MaskKind::kCausal:
      return "causal";
    case MaskKind::kWindow:
      return absl::StrFormat("window(%d,%d)", o.window_left, o.window_right);
    case MaskKind::kBlock:
      return absl::StrFormat("block(%d)", o.block);
  }
  return "?";
}

// The Philox stream of a case's tensor. Element i's words: a uniform value takes word i; the normal
// values of elements 2p and 2p+1 are the two Box-Muller outputs of words 2p and 2p+1 (radius from
// the first, angle from the second; the cosine for the even element, the sine for the odd one), so
// that one Philox block and one logarithm serve four and two elements.
uint64_t StreamOf(ScaleTensor t) { return static_cast<uint64_t>(t); }

double UnitOpen(uint32_t word) { return (static_cast<double>(word) + 0.5) / 4294967296.0; }

struct Rng {
  std::mt19937_64 rng;
  int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  // log-uniform integer in [lo, hi]
  int64_t LogInt(int64_t lo, int64_t hi) {
    const double x = std::uniform_real_distribution<double>(std::log(lo), std::log(hi + 1.0))(rng);
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::exp(x))), lo, hi);
  }
};

// Benchmark-rule lengths for `batch` sequences whose mean is about `mean` (the rule's mean is s * M),
// with M at most `cap`; records M and s.
std::vector<int64_t> RuleLengths(Rng& r, int64_t batch, double mean, int64_t cap, uint64_t seed,
                                 uint64_t stream, int64_t* m_out, double* s_out) {
  const double s = static_cast<double>(r.Int(1, 20)) / 20;  // 0.05 .. 1
  const int64_t m = std::clamp<int64_t>(std::llround(mean / s), 1, cap);
  *m_out = m;
  *s_out = s;
  return BenchmarkLengths(batch, m, s, seed, stream);
}

double Uniform(uint32_t w) { return -0.1 + 0.2 * UnitOpen(w); }
// The two Box-Muller outputs of a pair of words: {radius * cos(angle), radius * sin(angle)}.
std::pair<double, double> NormalPair(uint32_t w_radius, uint32_t w_angle) {
  const double radius = std::sqrt(-2.0 * std::log(UnitOpen(w_radius)));
  const double angle = 2.0 * std::numbers::pi * UnitOpen(w_angle);
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

}  // namespace

std::string_view ScalePairingName(ScalePairing p) {
  switch (p) {
    case ScalePairing::kSelf:
      return "self";
    case ScalePairing::kCross:
      return "cross";
    case ScalePairing::kKvIndex:
      return "kv_index";
    case ScalePairing::kBroadcast:
      return "broadcast_q";
  }
  return "?";
}

std::string DescribeScale(const ScaleCase& c) {
  std::string s = c.name.empty() ? "" : c.name + ": ";
  absl::StrAppendFormat(&s, "%s act=%s mask=%s align=%s", ScalePairingName(c.pairing),
                        ActivationName(c.options.act), MaskText(c.options),
                        AlignmentName(c.options.align));
  if (c.options.pre_scale) absl::StrAppendFormat(&s, " pre=%g", *c.options.pre_scale);
  if (c.options.post_scale) absl::StrAppendFormat(&s, " post=%g", *c.options.post_scale);
  absl::StrAppendFormat(&s, " B=%d q_lengths=[%s]", PairScaleSequences(c).size(),
                        LengthStats(c.q_lengths));
  if (c.rule_max_q > 0) absl::StrAppendFormat(&s, "(M=%d s=%.2f)", c.rule_max_q, c.rule_sparsity_q);
  absl::StrAppendFormat(&s, " kv_sequences=%d kv_lengths=[%s]", c.kv_lengths.size(),
                        LengthStats(c.kv_lengths));
  if (c.rule_max_kv > 0) absl::StrAppendFormat(&s, "(M=%d s=%.2f)", c.rule_max_kv, c.rule_sparsity_kv);
  if (!c.kv_index.empty()) s += " kv_index";
  absl::StrAppendFormat(&s, " declared=%d/%d H=%d Hkv=%d D=%d values=%s dtype=%s value_seed=%d",
                        c.max_lq, c.max_lk, c.heads, c.kv_heads, c.head_dim,
                        c.values == ValueDistribution::kNormal ? "randn" : "U(-0.1,0.1)",
                        ElementTypeName(c.input_type), c.value_seed);
  return s;
}

std::vector<SequencePair> PairScaleSequences(const ScaleCase& c) {
  const std::vector<int64_t> qo = OffsetsFromLengths(c.q_lengths);
  const std::vector<int64_t> ko = OffsetsFromLengths(c.kv_lengths);
  const int64_t nkv = static_cast<int64_t>(c.kv_lengths.size());
  const bool indexed = !c.kv_index.empty();
  std::vector<SequencePair> pairs;
  if (c.pairing == ScalePairing::kBroadcast) {
    const int64_t lq = c.q_lengths.at(0);
    const int64_t b_count = indexed ? static_cast<int64_t>(c.kv_index.size()) : nkv;
    for (int64_t b = 0; b < b_count; ++b) {
      const int64_t ks = indexed ? c.kv_index[b] : b;
      pairs.push_back({0, lq, ko[ks], c.kv_lengths[ks], b * lq, ks});
    }
    return pairs;
  }
  for (size_t b = 0; b < c.q_lengths.size(); ++b) {
    const int64_t ks = indexed ? c.kv_index[b] : static_cast<int64_t>(b);
    pairs.push_back({qo[b], c.q_lengths[b], ko[ks], c.kv_lengths[ks], qo[b], ks});
  }
  return pairs;
}

int64_t ScaleQueryTokens(const ScaleCase& c) { return Sum(c.q_lengths); }
int64_t ScaleKvTokens(const ScaleCase& c) { return Sum(c.kv_lengths); }
int64_t ScaleOutputTokens(const ScaleCase& c) {
  if (c.pairing != ScalePairing::kBroadcast) return ScaleQueryTokens(c);
  return static_cast<int64_t>(PairScaleSequences(c).size()) * c.q_lengths.at(0);
}

double ScaleValue(const ScaleCase& c, ScaleTensor tensor, int64_t index) {
  const uint64_t e = static_cast<uint64_t>(index);
  const numerics::Philox4x32 block = numerics::PhiloxBlock(c.value_seed, StreamOf(tensor), e >> 2);
  double x;
  if (c.values == ValueDistribution::kNormal) {
    const auto [even, odd] = NormalPair(block.v[e & 2u], block.v[(e & 2u) + 1]);
    x = (e & 1u) ? odd : even;
  } else {
    x = Uniform(block.v[e & 3u]);
  }
  return RoundTo(c.input_type, x);
}

std::vector<uint16_t> ScaleBits(const ScaleCase& c, ScaleTensor tensor) {
  int64_t rows = 0, heads = c.heads;
  switch (tensor) {
    case ScaleTensor::kQ:
      rows = ScaleQueryTokens(c);
      break;
    case ScaleTensor::kK:
    case ScaleTensor::kV:
      rows = ScaleKvTokens(c);
      heads = c.kv_heads;
      break;
    case ScaleTensor::kDo:
      rows = ScaleOutputTokens(c);
      break;
  }
  const int64_t n = rows * heads * c.head_dim;
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  const bool bf16 = c.input_type == ElementType::kBFloat16;
  auto encode = [bf16](double x) {  // one round to nearest even, as RoundTo's
    return bf16 ? numerics::DoubleToBf16BitsRne(x) : numerics::DoubleToFp16BitsRne(x);
  };
  // ScaleValue's elements, four per Philox block and two per logarithm (StreamOf says how).
  const int64_t blocks = (n + 3) / 4;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, blocks, 1 << 14), [&](const tbb::blocked_range<int64_t>& r) {
    double x[4];
    for (int64_t b = r.begin(); b < r.end(); ++b) {
      const numerics::Philox4x32 block =
          numerics::PhiloxBlock(c.value_seed, StreamOf(tensor), static_cast<uint64_t>(b));
      if (c.values == ValueDistribution::kNormal) {
        for (int p = 0; p < 4; p += 2) std::tie(x[p], x[p + 1]) = NormalPair(block.v[p], block.v[p + 1]);
      } else {
        for (int k = 0; k < 4; ++k) x[k] = Uniform(block.v[k]);
      }
      for (int64_t k = 0; k < 4 && 4 * b + k < n; ++k) bits[4 * b + k] = encode(x[k]);
    }
  });
  return bits;
}

double BitsValue(uint16_t bits, ElementType type) {
  return type == ElementType::kBFloat16 ? numerics::Bf16BitsToFloat(bits)
                                        : numerics::Fp16BitsToFloat(bits);
}

int64_t ValidPairsOf(const AttentionOptions& options, const SequencePair& p) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < p.lq; ++i) {
    const KeyRange r = ValidKeys(options, i, p.lq, p.lk);
    pairs += std::max<int64_t>(0, std::min(r.end, p.lk) - std::max<int64_t>(r.begin, 0));
  }
  return pairs;
}

int64_t ForwardItems(const ScaleCase& c) {
  constexpr int64_t kTileRows = 128;
  int64_t tiles = 0;
  for (const SequencePair& p : PairScaleSequences(c)) {
    for (int64_t i0 = 0; i0 < p.lq; i0 += kTileRows) {
      for (int64_t i = i0; i < std::min(p.lq, i0 + kTileRows); ++i) {
        const KeyRange r = ValidKeys(c.options, i, p.lq, p.lk);
        if (std::min(r.end, p.lk) > std::max<int64_t>(r.begin, 0)) {
          ++tiles;
          break;
        }
      }
    }
  }
  return tiles * c.heads;
}

ScaleCase DrawScaleCase(int64_t case_seed, const Family& family, int64_t max_length,
                        std::optional<ScalePairing> pairing) {
  Rng r{std::mt19937_64(static_cast<uint64_t>(case_seed))};
  const bool local = family.mask == MaskKind::kWindow || family.mask == MaskKind::kBlock;
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(max_length, local ? 8192 : 4096));
  for (;;) {
    ScaleCase c;
    c.options.act = family.act;
    c.options.mask = family.mask;
    c.input_type = r.Int(0, 1) ? ElementType::kBFloat16 : ElementType::kFloat16;
    c.head_dim = kCheckHeadDims[r.Int(0, kNumCheckHeadDims - 1)];
    c.pairing = pairing ? *pairing : kAllScalePairings[r.Int(0, 3)];
    // A quarter of the other pairings take one head and 64..96 sequences, so that the row budget
    // goes into long sequences (up to the cap) rather than many short ones.
    const bool long_sequences = c.pairing != ScalePairing::kBroadcast && r.Int(0, 3) == 0;
    c.heads = long_sequences ? 1 : int64_t{1} << r.Int(0, 3);
    c.kv_heads = c.heads >> r.Int(0, std::countr_zero(static_cast<uint64_t>(c.heads)));
    const uint64_t length_seed = r.rng();
    if (c.pairing == ScalePairing::kBroadcast) {
      const int64_t b = r.Int(1000, 2048);
      c.q_lengths = {r.Int(1, std::min<int64_t>(48, cap))};
      int64_t nkv = b;
      if (r.Int(0, 1)) {
        nkv = r.LogInt(64, b);
        c.kv_index.resize(b);
        for (auto& x : c.kv_index) x = r.Int(0, nkv - 1);
      }
      // Every output is in the oracle's sample (the shared query's dQ reads all of them), on one
      // K/V head's group of query heads: the K/V lengths are chosen so that this sample holds
      // 2^19..2^21 valid pairs (without mask) and costs seconds.
      const double sample_pairs = static_cast<double>(r.LogInt(1 << 19, 1 << 21));
      const double mean_kv = sample_pairs / static_cast<double>(b * c.q_lengths[0] * (c.heads / c.kv_heads));
      c.kv_lengths = RuleLengths(r, nkv, std::max(1.0, mean_kv), cap, length_seed, 1, &c.rule_max_kv,
                                 &c.rule_sparsity_kv);
      c.options.broadcast_q = true;
    } else {
      const int64_t b = long_sequences ? r.LogInt(64, 96) : r.LogInt(64, 2048);
      const double q_rows = static_cast<double>(r.LogInt(1 << 16, 1 << 18));
      c.q_lengths = RuleLengths(r, b, q_rows / static_cast<double>(b * c.heads), cap, length_seed, 0,
                                &c.rule_max_q, &c.rule_sparsity_q);
      switch (c.pairing) {
        case ScalePairing::kSelf:
          c.kv_lengths = c.q_lengths;
          break;
        case ScalePairing::kCross: {
          const double kv_rows = static_cast<double>(r.LogInt(1 << 15, 1 << 18));
          c.kv_lengths = RuleLengths(r, b, kv_rows / static_cast<double>(b * c.kv_heads), cap,
                                     length_seed, 1, &c.rule_max_kv, &c.rule_sparsity_kv);
          break;
        }
        case ScalePairing::kKvIndex: {
          const int64_t nkv = std::max<int64_t>(1, b / r.LogInt(1, 16));
          const double kv_rows = static_cast<double>(r.LogInt(1 << 15, 1 << 18));
          c.kv_lengths = RuleLengths(r, nkv, kv_rows / static_cast<double>(nkv * c.kv_heads), cap,
                                     length_seed, 1, &c.rule_max_kv, &c.rule_sparsity_kv);
          c.kv_index.resize(b);
          for (auto& x : c.kv_index) x = r.Int(0, nkv - 1);
          break;
        }
        case ScalePairing::kBroadcast:
          break;
      }
    }
    const auto max_of = [](const std::vector<int64_t>& v) { return *std::max_element(v.begin(), v.end()); };
    c.max_lq = std::max(c.rule_max_q, max_of(c.q_lengths));
    c.max_lk = std::max(c.pairing == ScalePairing::kSelf ? c.rule_max_q : c.rule_max_kv, max_of(c.kv_lengths));
    if (c.pairing == ScalePairing::kSelf) c.rule_max_kv = 0;  // the same lengths as q

    if (c.options.mask == MaskKind::kWindow) {
      auto side = [&] { return r.Int(0, 3) == 0 ? int64_t{-1} : r.LogInt(1, 2048) - 1; };
      c.options.window_left = side();
      c.options.window_right = side();
    }
    if (c.options.mask == MaskKind::kBlock) {
      const int64_t sizes[] = {16, 32, 64, 128, 256};
      c.options.block = r.Int(0, 1) ? sizes[r.Int(0, 4)] : r.Int(1, 300);
    }
    c.options.align = r.Int(0, 1) ? Alignment::kTopLeft : Alignment::kBottomRight;
    if (r.Int(0, 1)) {
      c.options.pre_scale = static_cast<double>(r.Int(2, 12)) / 8;   // 0.25 .. 1.5
      c.options.post_scale = static_cast<double>(r.Int(2, 16)) / 8;  // 0.25 .. 2
      // Relative to softmax's default 1/sqrt(D), as in the small tier (attention_check.cc).
      if (c.options.act == Activation::kSoftmax) {
        *c.options.pre_scale /= std::sqrt(static_cast<double>(c.head_dim));
      }
    }
    c.values = r.Int(0, 1) ? ValueDistribution::kUniformSmall : ValueDistribution::kNormal;
    c.value_seed = r.rng();
    if (ForwardItems(c) >= kScaleMinItemsPerSm * kH200Sms && MinimumSampleCost(c) <= kScaleMaxSampleCost) {
      return c;
    }
  }
}

}  // namespace gemtb::check
