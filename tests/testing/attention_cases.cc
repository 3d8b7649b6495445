#include "tests/testing/attention_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testing/criteria.h"
#include "tests/testing/padded_attention.h"

namespace gemtb::testing {
namespace {

// The shape drawing is written once against a "picker" so that the mt19937 and the rapidcheck
// generators draw the same distribution (rapidcheck then also knows how to shrink each choice).
struct Mt19937Picker {
  std::mt19937_64& rng;
  int64_t Int(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool Bool() { return Int(0, 1) == 1; }
  uint64_t Seed() { return rng(); }
};

struct RapidcheckPicker {
  int64_t Int(int64_t lo, int64_t hi) { return *rc::gen::inRange<int64_t>(lo, hi + 1); }
  bool Bool() { return *rc::gen::arbitrary<bool>(); }
  uint64_t Seed() { return *rc::gen::arbitrary<uint64_t>(); }
};

const std::vector<Activation>& AllActs() {
  static const std::vector<Activation> acts = [] {
    std::vector<Activation> v;
    for (int a = 0; a < kNumActivations; ++a) v.push_back(static_cast<Activation>(a));
    return v;
  }();
  return acts;
}

const std::vector<MaskKind>& AllMasks() {
  static const std::vector<MaskKind> masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                                              MaskKind::kBlock};
  return masks;
}

std::vector<int64_t> OffsetsOf(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> off(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) off[i + 1] = off[i] + lengths[i];
  return off;
}

int64_t MaxOf(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = x > m ? x : m;
  return m;
}

template <typename Picker>
CaseShape DrawShape(Picker& pick, const CaseConfig& config) {
  CaseShape s;
  const int64_t max_len = config.max_length;
  const int64_t max_seq = config.max_sequences;
  auto draw_lengths = [&](int64_t n) {
    std::vector<int64_t> v(n);
    for (auto& l : v) l = pick.Int(0, max_len);
    return v;
  };

  enum Mode { kSelf = 0, kCross = 1, kKvIndex = 2, kBroadcast = 3 };
  int mode = static_cast<int>(pick.Int(0, 3));
  switch (config.pairing) {
    case Pairing::kAny:
      break;
    case Pairing::kSelf:
      mode = kSelf;
      break;
    case Pairing::kCross:
      mode = kCross;
      break;
    case Pairing::kKvIndex:
      mode = kKvIndex;
      break;
    case Pairing::kBroadcast:
      mode = kBroadcast;
      break;
  }
  if (config.pairing == Pairing::kAny &&
      ((mode == kCross && !config.cross) || (mode == kKvIndex && !config.kv_index) ||
       (mode == kBroadcast && !config.broadcast_q))) {
    mode = kSelf;
  }
  const int64_t nkv = pick.Int(1, max_seq);
  s.kv_lengths = draw_lengths(nkv);
  switch (mode) {
    case kSelf:
      s.q_lengths = s.kv_lengths;
      break;
    case kCross:
      s.q_lengths = draw_lengths(nkv);
      break;
    case kKvIndex: {
      const int64_t b = pick.Int(1, max_seq + 1);
      s.kv_index.resize(b);
      for (auto& x : s.kv_index) x = pick.Int(0, nkv - 1);
      if (config.cross) {
        s.q_lengths = draw_lengths(b);
      } else {
        for (int64_t x : s.kv_index) s.q_lengths.push_back(s.kv_lengths[x]);
      }
      break;
    }
    case kBroadcast: {
      s.options.broadcast_q = true;
      s.q_lengths = {pick.Int(0, max_len)};
      if (pick.Bool()) {
        const int64_t b = pick.Int(1, max_seq + 1);
        s.kv_index.resize(b);
        for (auto& x : s.kv_index) x = pick.Int(0, nkv - 1);
      }
      break;
    }
  }
  s.max_lq_slack = pick.Int(0, 2);
  s.max_lk_slack = pick.Int(0, 2);

  s.kv_heads = pick.Int(1, config.max_heads);
  const int64_t max_group = config.gqa ? config.max_heads / s.kv_heads : 1;
  s.heads = s.kv_heads * pick.Int(1, max_group < 1 ? 1 : max_group);

  if (config.rope && config.max_dim >= 2 && pick.Bool()) {
    s.rope_qk = true;
    s.dqk = 2 * pick.Int(1, config.max_dim / 2);
    s.rope_v = pick.Bool();
    s.dv = s.rope_v ? 2 * pick.Int(1, config.max_dim / 2) : pick.Int(1, config.max_dim);
  } else {
    s.dqk = pick.Int(1, config.max_dim);
    s.dv = pick.Int(1, config.max_dim);
  }

  if (config.dense_bias && pick.Bool()) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= s.heads; ++d) {
      if (s.heads % d == 0) divisors.push_back(d);
    }
    s.dense_bias_heads = divisors[pick.Int(0, static_cast<int64_t>(divisors.size()) - 1)];
  }
  // The rel-pos table [Hr, 2·maxL-1] needs maxL >= 1.
  const int64_t declared_max_l =
      std::max(MaxOf(s.q_lengths) + s.max_lq_slack, MaxOf(s.kv_lengths) + s.max_lk_slack);
  if (config.rel_bias && pick.Bool() && declared_max_l > 0) {
    s.rel_bias_heads = pick.Bool() ? s.heads : 1;
  }
  if (config.time_bias && mode == kSelf && pick.Bool()) {
    s.time_bias_heads = pick.Bool() ? s.heads : 1;
  }

  const auto& acts = config.acts.empty() ? AllActs() : config.acts;
  const auto& masks = config.masks.empty() ? AllMasks() : config.masks;
  s.options.act = acts[pick.Int(0, static_cast<int64_t>(acts.size()) - 1)];
  s.options.mask = masks[pick.Int(0, static_cast<int64_t>(masks.size()) - 1)];
  const int64_t max_l = max_len + 2;
  if (s.options.mask == MaskKind::kWindow) {
    s.options.window_left = pick.Int(-1, max_l);
    s.options.window_right = pick.Int(-1, max_l);
  }
  if (s.options.mask == MaskKind::kBlock) s.options.block = pick.Int(1, max_l);
  s.options.align = pick.Bool() ? Alignment::kTopLeft : Alignment::kBottomRight;
  if (config.custom_scales && pick.Bool()) {
    s.options.pre_scale = static_cast<double>(pick.Int(2, 12)) / 8;   // 0.25 .. 1.5
    s.options.post_scale = static_cast<double>(pick.Int(2, 16)) / 8;  // 0.25 .. 2
  }
  s.values = pick.Bool() ? ValueDistribution::kUniformSmall : ValueDistribution::kNormal;
  s.input_type = config.input_type;
  s.value_seed = pick.Seed();
  return s;
}

std::string MaskText(const AttentionOptions& o) {
  switch (o.mask) {
    case MaskKind::kNone:
      return "none";
    case MaskKind::kCausal:
      return "causal";
    case MaskKind::kWindow:
      return absl::StrCat("window(", o.window_left, ",", o.window_right, ")");
    case MaskKind::kBlock:
      return absl::StrCat("block(", o.block, ")");
  }
  return "?";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const CaseShape& s) {
  os << "act=" << ActivationName(s.options.act) << " mask=" << MaskText(s.options)
     << " align=" << AlignmentName(s.options.align);
  if (s.options.pre_scale) os << " pre=" << *s.options.pre_scale;
  if (s.options.post_scale) os << " post=" << *s.options.post_scale;
  os << " H=" << s.heads << " Hkv=" << s.kv_heads << " Dqk=" << s.dqk << " Dv=" << s.dv
     << " q_lengths=[" << absl::StrJoin(s.q_lengths, ",") << "] kv_lengths=["
     << absl::StrJoin(s.kv_lengths, ",") << "]";
  if (!s.kv_index.empty()) os << " kv_index=[" << absl::StrJoin(s.kv_index, ",") << "]";
  if (s.options.broadcast_q) os << " broadcast_q";
  os << " slack=" << s.max_lq_slack << "/" << s.max_lk_slack;
  if (s.dense_bias_heads) os << " Hb=" << s.dense_bias_heads;
  if (s.rel_bias_heads) os << " Hr=" << s.rel_bias_heads;
  if (s.time_bias_heads) os << " Ht=" << s.time_bias_heads;
  if (s.rope_qk) os << (s.rope_v ? " rope=qkv" : " rope=qk");
  os << " values=" << (s.values == ValueDistribution::kNormal ? "randn" : "U(-0.1,0.1)")
     << " dtype=" << ElementTypeName(s.input_type) << " seed=" << s.value_seed;
  return os;
}

std::ostream& operator<<(std::ostream& os, const AttentionCase& c) { return os << c.shape; }

std::string Describe(const AttentionCase& c) {
  std::ostringstream os;
  os << c;
  return os.str();
}

reference::AttentionInputs AttentionCase::View() const {
  reference::AttentionInputs in;
  in.q = q.View();
  in.k = k.View();
  in.v = v.View();
  in.q_offsets = q_offsets.View();
  in.kv_offsets = kv_offsets.View();
  in.max_lq = max_lq;
  in.max_lk = max_lk;
  in.kv_index = kv_index.View();
  in.bias_dense = bias_dense.View();
  in.bias_rel = bias_rel.View();
  in.bias_ts = bias_ts.View();
  in.ts = ts.View();
  in.rope_q = rope_q.View();
  in.rope_k = rope_k.View();
  in.rope_v = rope_v.View();
  in.input_type = input_type;
  return in;
}

std::vector<SequencePair> PairSequences(const AttentionCase& c) {
  const auto& qo = c.q_offsets.data;
  const auto& ko = c.kv_offsets.data;
  const int64_t nkv = static_cast<int64_t>(ko.size()) - 1;
  std::vector<SequencePair> pairs;
  if (c.options.broadcast_q) {
    const int64_t lq = qo.at(1) - qo.at(0);
    const int64_t b_count =
        c.kv_index.present() ? static_cast<int64_t>(c.kv_index.data.size()) : nkv;
    for (int64_t b = 0; b < b_count; ++b) {
      const int64_t ks = c.kv_index.present() ? c.kv_index.data[b] : b;
      pairs.push_back({qo[0], lq, ko[ks], ko[ks + 1] - ko[ks], b * lq, ks});
    }
    return pairs;
  }
  const int64_t nq = static_cast<int64_t>(qo.size()) - 1;
  for (int64_t b = 0; b < nq; ++b) {
    const int64_t ks = c.kv_index.present() ? c.kv_index.data[b] : b;
    pairs.push_back({qo[b], qo[b + 1] - qo[b], ko[ks], ko[ks + 1] - ko[ks], qo[b], ks});
  }
  return pairs;
}

int64_t OutputRows(const AttentionCase& c) {
  if (!c.options.broadcast_q) return c.q.shape.at(0);
  const auto pairs = PairSequences(c);
  return pairs.empty() ? 0 : static_cast<int64_t>(pairs.size()) * pairs[0].lq;
}

double PreScale(const AttentionCase& c) {
  if (c.options.pre_scale) return *c.options.pre_scale;
  return c.options.act == Activation::kSoftmax ? 1.0 / std::sqrt(static_cast<double>(c.dqk()))
                                               : 1.0;
}

double PostScale(const AttentionCase& c) { return c.options.post_scale.value_or(1.0); }

AttentionCase BuildCase(const CaseShape& s) {
  AttentionCase c;
  c.shape = s;
  c.options = s.options;
  c.input_type = s.input_type;
  std::mt19937_64 rng(s.value_seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> small(-0.1, 0.1);
  const ElementType table_type =
      s.input_type == ElementType::kFloat64 ? ElementType::kFloat64 : ElementType::kFloat32;
  auto value = [&] {
    const double x = s.values == ValueDistribution::kNormal ? normal(rng) : small(rng);
    return RoundTo(s.input_type, x);
  };
  auto fill = [&](OwnedTensor<double>& t, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t.shape = std::move(shape);
    t.data.resize(n);
    for (auto& x : t.data) x = value();
  };

  int64_t tq = 0;
  for (int64_t l : s.q_lengths) tq += l;
  int64_t tk = 0;
  for (int64_t l : s.kv_lengths) tk += l;
  fill(c.q, {tq, s.heads, s.dqk});
  fill(c.k, {tk, s.kv_heads, s.dqk});
  fill(c.v, {tk, s.kv_heads, s.dv});
  c.q_offsets.data = OffsetsOf(s.q_lengths);
  c.q_offsets.shape = {static_cast<int64_t>(c.q_offsets.data.size())};
  c.kv_offsets.data = OffsetsOf(s.kv_lengths);
  c.kv_offsets.shape = {static_cast<int64_t>(c.kv_offsets.data.size())};
  if (!s.kv_index.empty()) {
    c.kv_index.data = s.kv_index;
    c.kv_index.shape = {static_cast<int64_t>(s.kv_index.size())};
  }
  c.max_lq = MaxOf(s.q_lengths) + s.max_lq_slack;
  c.max_lk = MaxOf(s.kv_lengths) + s.max_lk_slack;

  if (s.rope_qk) {
    std::uniform_real_distribution<double> angle(-std::numbers::pi, std::numbers::pi);
    auto table = [&](OwnedTensor<double>& t, int64_t rows, int64_t d) {
      t.shape = {rows, d};
      t.data.assign(rows * d, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t m = 0; m < d / 2; ++m) {
          const double theta = angle(rng);
          t.data[r * d + m] = std::sin(theta);
          t.data[r * d + d / 2 + m] = std::cos(theta);
        }
      }
    };
    table(c.rope_q, tq, s.dqk);
    table(c.rope_k, tk, s.dqk);
    if (s.rope_v) table(c.rope_v, tk, s.dv);
  }

  const auto pairs = PairSequences(c);
  const int64_t b_count = static_cast<int64_t>(pairs.size());
  if (s.dense_bias_heads > 0) {
    const int64_t hb = s.dense_bias_heads;
    c.bias_dense.shape = {b_count, hb, c.max_lq, c.max_lk};
    c.bias_dense.data.assign(b_count * hb * c.max_lq * c.max_lk,
                             std::numeric_limits<double>::quiet_NaN());
    for (int64_t b = 0; b < b_count; ++b) {
      for (int64_t h = 0; h < hb; ++h) {
        for (int64_t i = 0; i < pairs[b].lq; ++i) {
          for (int64_t j = 0; j < pairs[b].lk; ++j) {
            if (!PairIsValid(c.options, i, j, pairs[b].lq, pairs[b].lk)) continue;
            c.bias_dense.data[((b * hb + h) * c.max_lq + i) * c.max_lk + j] =
                RoundTo(table_type, normal(rng));
          }
        }
      }
    }
  }
  if (s.rel_bias_heads > 0 && c.max_l() > 0) {  // no table of width 2·0-1
    const int64_t width = 2 * c.max_l() - 1;
    c.bias_rel.shape = {s.rel_bias_heads, width};
    c.bias_rel.data.resize(s.rel_bias_heads * width);
    for (auto& x : c.bias_rel.data) x = RoundTo(table_type, 0.5 * normal(rng));
  }
  if (s.time_bias_heads > 0) {
    c.bias_ts.shape = {s.time_bias_heads, 129};
    c.bias_ts.data.resize(s.time_bias_heads * 129);
    for (auto& x : c.bias_ts.data) x = RoundTo(table_type, 0.5 * normal(rng));
    // Log-uniform magnitudes up to e^40 (~2.4e17) reach every bucket (T_128 ~ 5.4e16) while
    // differences stay far from int64 overflow; repeated stamps give delta = 0.
    std::uniform_real_distribution<double> log_mag(0.0, 40.0);
    c.ts.shape = {tq};
    c.ts.data.resize(tq);
    // A third of the stamps sit at T_k - 1, T_k or T_k + 1 from the previous one, so that the
    // `|delta| >= T_k` boundaries are exercised (between neighbours, which the "next row" rule
    // pairs up).
    for (int64_t t = 0; t < tq; ++t) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (t > 0 && kind == 0) {
        c.ts.data[t] = c.ts.data[t - 1];
        continue;
      }
      if (t > 0 && kind <= 3) {
        const int k = std::uniform_int_distribution<int>(1, 128)(rng);
        const int64_t step = TimeThreshold(k) + std::uniform_int_distribution<int>(-1, 1)(rng);
        const int64_t prev = c.ts.data[t - 1];
        c.ts.data[t] = prev > 0 ? prev - step : prev + step;  // stays within ±(2^58 + step)
        continue;
      }
      const auto mag = static_cast<int64_t>(std::floor(std::exp(log_mag(rng))));
      c.ts.data[t] = std::uniform_int_distribution<int>(0, 1)(rng) ? mag : -mag;
    }
  }
  return c;
}

CaseShape RandomCaseShape(std::mt19937_64& rng, const CaseConfig& config) {
  Mt19937Picker pick{rng};
  return DrawShape(pick, config);
}

AttentionCase RandomAttentionCase(std::mt19937_64& rng, const CaseConfig& config) {
  return BuildCase(RandomCaseShape(rng, config));
}

rc::Gen<CaseShape> GenCaseShape(const CaseConfig& config) {
  return rc::gen::exec([config] {
    RapidcheckPicker pick;
    return DrawShape(pick, config);
  });
}

rc::Gen<AttentionCase> GenAttentionCase(const CaseConfig& config) {
  return rc::gen::map(GenCaseShape(config), [](const CaseShape& s) { return BuildCase(s); });
}

std::vector<double> RandomCotangent(const AttentionCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> d_o(OutputRows(c) * c.heads() * c.dv());
  for (auto& x : d_o) x = RoundTo(c.input_type, normal(rng));
  return d_o;
}

}  // namespace gemtb::testing
