#include "tools/check/attention_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/check/criteria.h"
#include "tools/check/draw_case_shape.h"
#include "tools/check/spec_mask.h"

namespace gemtb::check {
namespace {

// Draws the structural choices from a std::mt19937_64 (see draw_case_shape.h).
struct Mt19937Picker {
  std::mt19937_64& rng;
  int64_t Int(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool Bool() { return Int(0, 1) == 1; }
  uint64_t Seed() { return rng(); }
};

std::vector<int64_t> OffsetsOf(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> off(lengths.size() + 1, 0);
  for (size_t i = 0; i < lengths.size(); ++i) off[i + 1] = off[i] + lengths[i];
  return off;
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
  c.max_lq = draw_internal::MaxOf(s.q_lengths) + s.max_lq_slack;
  c.max_lk = draw_internal::MaxOf(s.kv_lengths) + s.max_lk_slack;

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
  return DrawCaseShape(pick, config);
}

AttentionCase RandomAttentionCase(std::mt19937_64& rng, const CaseConfig& config) {
  return BuildCase(RandomCaseShape(rng, config));
}

std::vector<double> RandomCotangent(const AttentionCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> d_o(OutputRows(c) * c.heads() * c.dv());
  for (auto& x : d_o) x = RoundTo(c.input_type, normal(rng));
  return d_o;
}

}  // namespace gemtb::check
