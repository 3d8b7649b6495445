#include "tools/check/scale_sample.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/attention/benchmark_lengths.h"

namespace gemtb::check {
namespace {

constexpr int64_t kMaxSampledKvSequences = 16;

// Appends rows [begin, begin + count) of a [rows, heads, d] tensor at `heads` to `out`.
template <typename Get>
void AppendRows(int64_t begin, int64_t count, int64_t head_count, int64_t d,
                const std::vector<int64_t>& heads, Get get, std::vector<double>& out) {
  for (int64_t t = begin; t < begin + count; ++t) {
    for (int64_t h : heads) {
      for (int64_t e = 0; e < d; ++e) out.push_back(get((t * head_count + h) * d + e));
    }
  }
}

int64_t MaxOf(const std::vector<int64_t>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

}  // namespace

ScaleSample DrawSample(const ScaleCase& c, uint64_t sample_seed, int64_t pair_budget) {
  std::mt19937_64 rng(sample_seed);
  ScaleSample s;
  const int64_t group = c.heads / c.kv_heads;
  const int64_t kvh = std::uniform_int_distribution<int64_t>(0, c.kv_heads - 1)(rng);
  s.kv_heads = {kvh};
  for (int64_t g = 0; g < group; ++g) s.heads.push_back(kvh * group + g);
  const int64_t head_count = static_cast<int64_t>(s.heads.size());

  const std::vector<SequencePair> pairs = PairScaleSequences(c);
  const int64_t nkv = static_cast<int64_t>(c.kv_lengths.size());
  std::vector<std::vector<int64_t>> readers(static_cast<size_t>(nkv));
  for (int64_t b = 0; b < static_cast<int64_t>(pairs.size()); ++b) readers[pairs[b].kv_sequence].push_back(b);

  if (c.pairing == ScalePairing::kBroadcast) {
    s.whole_batch = true;
    s.kv_sequences.resize(static_cast<size_t>(nkv));
    std::iota(s.kv_sequences.begin(), s.kv_sequences.end(), 0);
    s.outputs.resize(pairs.size());
    std::iota(s.outputs.begin(), s.outputs.end(), 0);
    for (const SequencePair& p : pairs) s.pairs += ValidPairsOf(c.options, p) * head_count;
    return s;
  }
  std::vector<int64_t> order(static_cast<size_t>(nkv));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> cost(static_cast<size_t>(nkv), 0);
  for (int64_t k = 0; k < nkv; ++k) {
    for (int64_t b : readers[k]) cost[k] += ValidPairsOf(c.options, pairs[b]) * head_count;
  }
  auto take = [&](int64_t k) {
    s.kv_sequences.push_back(k);
    s.outputs.insert(s.outputs.end(), readers[k].begin(), readers[k].end());
    s.pairs += cost[k];
  };
  for (int64_t k : order) {
    if (static_cast<int64_t>(s.kv_sequences.size()) == kMaxSampledKvSequences) break;
    if (s.pairs + cost[k] <= pair_budget) take(k);
  }
  if (s.outputs.empty()) {
    // Every read sequence alone is over the budget (or only unread ones were met): the cheapest
    // read one joins with its readers.
    int64_t cheapest = -1;
    for (int64_t k = 0; k < nkv; ++k) {
      if (!readers[k].empty() && (cheapest < 0 || cost[k] < cost[cheapest])) cheapest = k;
    }
    if (cheapest >= 0) take(cheapest);
  }
  std::sort(s.kv_sequences.begin(), s.kv_sequences.end());
  std::sort(s.outputs.begin(), s.outputs.end());
  return s;
}

int64_t MinimumSampleCost(const ScaleCase& c) {
  const int64_t group = c.heads / c.kv_heads;
  std::vector<int64_t> cost(c.kv_lengths.size(), 0);
  int64_t total = 0;
  for (const SequencePair& p : PairScaleSequences(c)) {
    const int64_t pairs = ValidPairsOf(c.options, p) * group;
    cost[p.kv_sequence] += pairs;
    total += pairs;
  }
  if (c.pairing == ScalePairing::kBroadcast) return total;
  return *std::min_element(cost.begin(), cost.end());
}

std::string DescribeSample(const ScaleCase& c, const ScaleSample& s) {
  return absl::StrFormat("%d of %d K/V sequences (%d of %d outputs%s), K/V heads [%s] (query heads [%s]), %.3g pairs",
                         s.kv_sequences.size(), c.kv_lengths.size(), s.outputs.size(),
                         PairScaleSequences(c).size(), s.whole_batch ? ": the whole batch" : "",
                         absl::StrJoin(s.kv_heads, ","), absl::StrJoin(s.heads, ","),
                         static_cast<double>(s.pairs));
}

AttentionCase SampledCase(const ScaleCase& c, const ScaleSample& s) {
  const std::vector<SequencePair> pairs = PairScaleSequences(c);
  const std::vector<int64_t> ko = OffsetsFromLengths(c.kv_lengths);
  const int64_t d = c.head_dim;
  AttentionCase out;
  CaseShape& shape = out.shape;
  for (int64_t k : s.kv_sequences) {
    shape.kv_lengths.push_back(c.kv_lengths[k]);
    AppendRows(ko[k], c.kv_lengths[k], c.kv_heads, d, s.kv_heads,
               [&](int64_t i) { return ScaleValue(c, ScaleTensor::kK, i); }, out.k.data);
    AppendRows(ko[k], c.kv_lengths[k], c.kv_heads, d, s.kv_heads,
               [&](int64_t i) { return ScaleValue(c, ScaleTensor::kV, i); }, out.v.data);
  }
  auto q_value = [&](int64_t i) { return ScaleValue(c, ScaleTensor::kQ, i); };
  if (c.pairing == ScalePairing::kBroadcast) {
    shape.q_lengths = c.q_lengths;
    AppendRows(0, c.q_lengths[0], c.heads, d, s.heads, q_value, out.q.data);
    shape.kv_index = c.kv_index;  // the whole batch
  } else {
    for (int64_t b : s.outputs) {
      shape.q_lengths.push_back(pairs[b].lq);
      AppendRows(pairs[b].q_begin, pairs[b].lq, c.heads, d, s.heads, q_value, out.q.data);
      if (!c.kv_index.empty()) {
        const auto at = std::lower_bound(s.kv_sequences.begin(), s.kv_sequences.end(), pairs[b].kv_sequence);
        shape.kv_index.push_back(at - s.kv_sequences.begin());
      }
    }
  }
  const int64_t tq = static_cast<int64_t>(out.q.data.size()) / (static_cast<int64_t>(s.heads.size()) * d);
  const int64_t tk = static_cast<int64_t>(out.k.data.size()) / (static_cast<int64_t>(s.kv_heads.size()) * d);
  shape.heads = static_cast<int64_t>(s.heads.size());
  shape.kv_heads = static_cast<int64_t>(s.kv_heads.size());
  shape.dqk = shape.dv = d;
  shape.options = c.options;
  shape.values = c.values;
  shape.input_type = c.input_type;
  shape.value_seed = c.value_seed;
  shape.max_lq_slack = c.max_lq - MaxOf(shape.q_lengths);
  shape.max_lk_slack = c.max_lk - MaxOf(shape.kv_lengths);

  out.q.shape = {tq, shape.heads, d};
  out.k.shape = {tk, shape.kv_heads, d};
  out.v.shape = {tk, shape.kv_heads, d};
  out.q_offsets.data = OffsetsFromLengths(shape.q_lengths);
  out.q_offsets.shape = {static_cast<int64_t>(out.q_offsets.data.size())};
  out.kv_offsets.data = OffsetsFromLengths(shape.kv_lengths);
  out.kv_offsets.shape = {static_cast<int64_t>(out.kv_offsets.data.size())};
  if (!c.kv_index.empty()) {
    out.kv_index.data = shape.kv_index;
    out.kv_index.shape = {static_cast<int64_t>(shape.kv_index.size())};
  }
  out.max_lq = c.max_lq;
  out.max_lk = c.max_lk;
  out.input_type = c.input_type;
  out.options = c.options;
  return out;
}

std::vector<double> SampledCotangent(const ScaleCase& c, const ScaleSample& s) {
  const std::vector<SequencePair> pairs = PairScaleSequences(c);
  std::vector<double> d_o;
  for (int64_t b : s.outputs) {
    AppendRows(pairs[b].o_begin, pairs[b].lq, c.heads, c.head_dim, s.heads,
               [&](int64_t i) { return ScaleValue(c, ScaleTensor::kDo, i); }, d_o);
  }
  return d_o;
}

GpuOutputs GatherSample(const ScaleCase& c, const ScaleSample& s, const ScaleOutputs& out) {
  GpuOutputs g;
  g.status = out.status;
  if (!out.status.ok()) return g;
  const std::vector<SequencePair> pairs = PairScaleSequences(c);
  const std::vector<int64_t> ko = OffsetsFromLengths(c.kv_lengths);
  const int64_t d = c.head_dim;
  const ElementType type = c.input_type;
  auto from = [&](const std::vector<uint16_t>& bits) {
    return [&bits, type](int64_t i) { return BitsValue(bits.at(static_cast<size_t>(i)), type); };
  };
  for (int64_t b : s.outputs) {
    AppendRows(pairs[b].o_begin, pairs[b].lq, c.heads, d, s.heads, from(out.o), g.o);
  }
  if (c.options.act == Activation::kSoftmax) {
    const int64_t to = ScaleOutputTokens(c);
    for (int64_t h : s.heads) {
      for (int64_t b : s.outputs) {
        for (int64_t i = 0; i < pairs[b].lq; ++i) g.lse.push_back(out.lse.at(static_cast<size_t>(h * to + pairs[b].o_begin + i)));
      }
    }
  }
  if (c.pairing == ScalePairing::kBroadcast) {
    AppendRows(0, c.q_lengths[0], c.heads, d, s.heads, from(out.dq), g.dq);
  } else {
    for (int64_t b : s.outputs) {
      AppendRows(pairs[b].q_begin, pairs[b].lq, c.heads, d, s.heads, from(out.dq), g.dq);
    }
  }
  for (int64_t k : s.kv_sequences) {
    AppendRows(ko[k], c.kv_lengths[k], c.kv_heads, d, s.kv_heads, from(out.dk), g.dk);
    AppendRows(ko[k], c.kv_lengths[k], c.kv_heads, d, s.kv_heads, from(out.dv), g.dv);
  }
  return g;
}

CaseResult JudgeSample(const ScaleCase& c, const ScaleSample& s, const GpuOutputs& gathered,
                       int oracle_threads) {
  const AttentionCase sampled = SampledCase(c, s);
  CaseResult r = Judge(sampled, SampledCotangent(c, s), gathered, oracle_threads);
  r.description = absl::StrCat(DescribeScale(c), "; sample: ", DescribeSample(c, s));
  return r;
}

}  // namespace gemtb::check
