#include "sim/workload/batch_draw.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/data/batch_plan.h"
#include "model/numerics/philox.h"
#include "model/numerics/philox_blocks.h"
#include "model/random/splitmix64.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"

namespace gemtb::sim {
namespace {

constexpr uint64_t kPurposeLengths = 0x4C454E47;  // "LENG"

uint64_t SubBatchStream(int rank, int64_t n) {
  return SplitMix64(SplitMix64(kPurposeLengths ^ static_cast<uint64_t>(rank)) ^ static_cast<uint64_t>(n));
}

// Two standard normals from one Philox block (Box-Muller, both branches).
void TwoNormals(uint64_t seed, uint64_t stream, uint64_t pair, double* z0, double* z1) {
  const numerics::Philox4x32 w = numerics::PhiloxBlock(seed, stream, pair);
  const double u1 = (static_cast<double>((static_cast<uint64_t>(w.v[0]) << 21) ^ w.v[1]) + 1.0) *
                    (1.0 / 9007199254740993.0);  // (0, 1]
  const double u2 = static_cast<double>(w.v[2]) * (1.0 / 4294967296.0);
  const double rad = std::sqrt(-2.0 * std::log(u1));
  const double ang = 6.283185307179586476925 * u2;
  *z0 = rad * std::cos(ang);
  *z1 = rad * std::sin(ang);
}

int64_t LengthFromNormal(const LengthLaw& law, double z, uint64_t seed, uint64_t stream, uint64_t element) {
  double l = 0;
  switch (law.kind) {
    case LengthLaw::Kind::kLognormal:
      l = std::ceil(std::exp(law.mu + law.sigma * z));
      break;
    case LengthLaw::Kind::kHistogram: {
      // Inverse CDF at the normal's CDF value, so that corr carries over to histograms too.
      const double u = 0.5 * std::erfc(-z / std::sqrt(2.0));
      double total = 0;
      for (const auto& [len, w] : law.bins) total += w;
      double acc = 0;
      l = law.bins.empty() ? 0 : law.bins.back().first;
      for (const auto& [len, w] : law.bins) {
        acc += w;
        if (u * total < acc) { l = len; break; }
      }
      break;
    }
    case LengthLaw::Kind::kZipf: {
      // Truncated zipf on [min, max] by inverse CDF of the continuous law (s != 1).
      const double u = 0.5 * std::erfc(-z / std::sqrt(2.0));
      const double a = static_cast<double>(std::max<int64_t>(1, law.min));
      const double b = static_cast<double>(std::max<int64_t>(law.min, law.max)) + 1.0;
      const double e = 1.0 - law.s;
      if (std::abs(e) < 1e-12) {
        l = std::floor(a * std::pow(b / a, u));
      } else {
        const double pa = std::pow(a, e), pb = std::pow(b, e);
        l = std::floor(std::pow(pa + u * (pb - pa), 1.0 / e));
      }
      (void)seed; (void)stream; (void)element;
      break;
    }
  }
  l = std::min(static_cast<double>(law.max), std::max(static_cast<double>(law.min), l));
  return static_cast<int64_t>(l);
}

struct SubBatchSums {
  double count = 0, kjt = 0, load = 0;
  std::vector<double> n, p;  // per sequence
};

// P(length <= L) for L in [min, max] of a law, by the same inverse-CDF construction as the general
// path (lognormal: ceil(exp(mu + sigma z)) clamped; zipf: the discrete truncated law).
std::vector<double> LengthCdf(const LengthLaw& law) {
  const int64_t lo = law.min, hi = law.max;
  std::vector<double> cdf(static_cast<size_t>(hi - lo + 1), 1.0);
  switch (law.kind) {
    case LengthLaw::Kind::kLognormal:
      // ceil(exp(mu + sigma z)) <= L  <=>  z <= (ln L - mu) / sigma.
      for (int64_t L = lo; L < hi; ++L) {
        const double z = law.sigma > 0 ? (std::log(static_cast<double>(L)) - law.mu) / law.sigma
                                       : (std::log(static_cast<double>(L)) >= law.mu ? 1e300 : -1e300);
        cdf[L - lo] = 0.5 * std::erfc(-z / std::sqrt(2.0));
      }
      break;
    case LengthLaw::Kind::kHistogram: {
      double total = 0;
      for (const auto& [len, w] : law.bins) total += w;
      for (int64_t L = lo; L < hi; ++L) {
        double acc = 0;
        for (const auto& [len, w] : law.bins) if (len <= static_cast<double>(L)) acc += w;
        cdf[L - lo] = total > 0 ? acc / total : 1.0;
      }
      break;
    }
    case LengthLaw::Kind::kZipf: {
      double total = 0;
      for (int64_t L = std::max<int64_t>(1, lo); L <= hi; ++L) total += std::pow(static_cast<double>(L), -law.s);
      double acc = 0;
      for (int64_t L = lo; L < hi; ++L) {
        if (L >= 1) acc += std::pow(static_cast<double>(L), -law.s);
        cdf[L - lo] = acc / total;
      }
      break;
    }
  }
  return cdf;
}

// The bucket table of a threshold list (threshold.back() = 2^32): for each of the 2^bits equal word
// ranges, the first index i with (range's first word) < threshold[i], flagged `pure` when the whole
// range lies below that threshold, so that a lookup needs no scan.
std::vector<uint32_t> BucketTable(const std::vector<uint64_t>& threshold, int bits, uint32_t pure) {
  const uint64_t buckets = uint64_t{1} << bits;
  const int shift = 32 - bits;
  std::vector<uint32_t> bucket(buckets);
  size_t i = 0;
  for (uint64_t b = 0; b < buckets; ++b) {
    const uint64_t first = b << shift, last = first + ((uint64_t{1} << shift) - 1);
    while (first >= threshold[i]) ++i;  // threshold.back() = 2^32 stops it
    bucket[b] = static_cast<uint32_t>(i) | (last < threshold[i] ? pure : 0u);
  }
  return bucket;
}

// A class of sequences with the same law, CLS count and mask: with one shared draw per sample
// (corr = 1) they all get the same length, so one lookup serves them all. The draw is a 32-bit
// word w (u = w / 2^32); thresholds are kept as integers so that a lookup is a table read plus,
// rarely, a short scan: bucket[w >> 16] holds the first candidate index, with the top bit set when
// the whole bucket maps to that one index.
struct LengthClass {
  LengthLaw law;
  int64_t n_s = 0;
  AttentionMask mask;
  std::vector<int> seqs;            // j of the sequences in the class
  std::vector<uint64_t> threshold;  // index i is the length iff w < threshold[i] (and not for i - 1)
  std::vector<double> pairs;        // pairs of a sample of length min + i (CLS included)
  std::vector<uint32_t> bucket;     // kBuckets entries
  static constexpr int kBucketBits = 16;  // small enough to stay in cache with the thresholds
  static constexpr uint32_t kPure = 0x80000000u;

  void Build() {
    const std::vector<double> cdf = LengthCdf(law);
    threshold.resize(cdf.size());
    for (size_t i = 0; i < cdf.size(); ++i) {
      // u < cdf  <=>  w < cdf * 2^32 (w an integer): the smallest integer not below cdf * 2^32.
      const double t = std::ceil(cdf[i] * 4294967296.0);
      threshold[i] = i + 1 == cdf.size() ? (uint64_t{1} << 32) : static_cast<uint64_t>(std::min(t, 4294967296.0));
    }
    pairs.resize(cdf.size());
    for (size_t i = 0; i < cdf.size(); ++i) pairs[i] = static_cast<double>(PairsUnderMask(mask, law.min + static_cast<int64_t>(i) + n_s));
    bucket = BucketTable(threshold, kBucketBits, kPure);
  }
  // The length index of word w: the first i with w < threshold[i].
  uint32_t Lookup(uint32_t w) const {
    uint32_t e = bucket[w >> (32 - kBucketBits)];
    if (e & kPure) return e & ~kPure;
    while (w >= threshold[e]) ++e;
    return e;
  }
};

// All classes at once: the word ranges on which every class's length is constant (the union of
// their thresholds), each with a row of (length, pairs) per class, found through the same bucket
// scheme. One row read per sample instead of a bucket, threshold and pairs read per class.
struct MergedClasses {
  size_t classes = 0;
  std::vector<uint64_t> threshold;  // range k holds the words below threshold[k] (and not below k - 1's)
  std::vector<double> rows;         // [range][class][length, pairs]
  std::vector<uint32_t> bucket;     // first candidate range per bucket (kPure: the only one)
  std::vector<uint16_t> bucket16;   // the same in half the bytes when fewer than 2^15 ranges
  std::vector<double> seqs;         // per class: its sequence count (load weight)
  // 2^18 buckets (512 KiB of uint16): fewer ranges share a bucket, so fewer samples scan (a
  // mispredicted branch); measured fastest of 14-20 bits on gem-default's laws.
  static constexpr int kBucketBits = 18;
  static constexpr uint32_t kPure = LengthClass::kPure;

  void Build(const std::vector<LengthClass>& cls) {
    classes = cls.size();
    seqs.clear();
    for (const LengthClass& cl : cls) seqs.push_back(static_cast<double>(cl.seqs.size()));
    threshold.clear();
    for (const LengthClass& cl : cls) threshold.insert(threshold.end(), cl.threshold.begin(), cl.threshold.end());
    std::sort(threshold.begin(), threshold.end());
    threshold.erase(std::unique(threshold.begin(), threshold.end()), threshold.end());
    // A threshold of 0 names an empty range (no word is below it): drop it.
    threshold.erase(std::remove(threshold.begin(), threshold.end(), uint64_t{0}), threshold.end());
    rows.assign(threshold.size() * 2 * classes, 0.0);
    uint64_t lo = 0;
    for (size_t k = 0; k < threshold.size(); ++k) {
      for (size_t c = 0; c < classes; ++c) {
        const uint32_t i = cls[c].Lookup(static_cast<uint32_t>(lo));
        rows[(k * classes + c) * 2] = static_cast<double>(cls[c].law.min + i);
        rows[(k * classes + c) * 2 + 1] = cls[c].pairs[i];
      }
      lo = threshold[k];
    }
    bucket = BucketTable(threshold, kBucketBits, kPure);
    const uint64_t buckets = bucket.size();
    bucket16.clear();
    if (threshold.size() < (size_t{1} << 15)) {
      // The bucket table is read once per sample at a random place: half the bytes, fewer misses.
      bucket16.resize(buckets);
      for (uint64_t b = 0; b < buckets; ++b) {
        bucket16[b] = static_cast<uint16_t>((bucket[b] & ~kPure) | ((bucket[b] & kPure) ? 0x8000u : 0u));
      }
      bucket.clear();
    }
  }
  static uint32_t BucketOf(uint32_t w) { return w >> (32 - kBucketBits); }
  // Which table a lookup reads is fixed per draw: kNarrow = bucket16 (a template argument, so the
  // per-sample lookup does not test it).
  bool Narrow() const { return !bucket16.empty(); }
  template <bool kNarrow>
  void PrefetchBucket(uint32_t w) const {
    if constexpr (kNarrow) {
      __builtin_prefetch(bucket16.data() + BucketOf(w));
    } else {
      __builtin_prefetch(bucket.data() + BucketOf(w));
    }
  }
  // The range of word w: its row starts at rows[range * 2 * classes].
  template <bool kNarrow>
  uint32_t RangeOf(uint32_t w) const {
    uint32_t e;
    bool pure;
    if constexpr (kNarrow) {
      const uint16_t v = bucket16[BucketOf(w)];
      e = v & 0x7FFFu;
      pure = (v & 0x8000u) != 0;
    } else {
      const uint32_t v = bucket[BucketOf(w)];
      e = v & ~kPure;
      pure = (v & kPure) != 0;
    }
    if (!pure) {
      while (w >= threshold[e]) ++e;
    }
    return e;
  }
};

class Drawer {
 public:
  Drawer(const BatchDrawConfig& c, const Batches& b) : c_(c), b_(b), layout_{static_cast<int>(c.sequences.size())} {
    sub_ = std::max<int64_t>(1, b.assignment.sub_batch);
    k_ = (b.local_batch + sub_ - 1) / sub_;
    // Table path: every law shares the sample's draw and has a bounded range.
    fast_ = true;
    for (const LengthLaw& law : b.features) {
      fast_ = fast_ && law.corr >= 1.0 && law.min >= 0 && law.max >= law.min && law.max - law.min <= (1 << 20);
    }
    if (!fast_) return;
    for (int j = 0; j < layout_.sequences; ++j) {
      const LengthLaw& law = b.features[j];
      const SequenceCostInfo& sq = c.sequences[j];
      LengthClass* found = nullptr;
      for (LengthClass& cl : classes_) {
        const LengthLaw& o = cl.law;
        if (o.kind == law.kind && o.bins == law.bins && o.mu == law.mu && o.sigma == law.sigma && o.s == law.s &&
            o.min == law.min && o.max == law.max && cl.n_s == sq.n_s && cl.mask == sq.mask) {
          found = &cl;
        }
      }
      if (found == nullptr) {
        classes_.push_back(LengthClass{law, sq.n_s, sq.mask, {}, {}, {}, {}});
        found = &classes_.back();
      }
      found->seqs.push_back(j);
    }
    for (LengthClass& cl : classes_) cl.Build();
    merged_.Build(classes_);
    // The largest load a sub-batch can sum: every sample at every class's longest length.
    double most = 0;
    for (const LengthClass& cl : classes_) {
      most += static_cast<double>(sub_) * static_cast<double>(cl.law.max) * static_cast<double>(cl.seqs.size());
    }
    load_exact_ = most < 9007199254740992.0;  // 2^53
  }
  int64_t k() const { return k_; }
  StatLayout layout() const { return layout_; }

  // Sums of sub-batch n read by rank r (its position n mod k sets its size).
  void Sum(int rank, int64_t n, SubBatchSums& out, std::vector<int64_t>& lengths) const {
    const int J = layout_.sequences;
    out.n.assign(J, 0.0);
    out.p.assign(J, 0.0);
    out.count = 0;
    out.kjt = 0;
    out.load = 0;
    const int64_t pos = n % k_;
    const int64_t size = std::min(sub_, b_.local_batch - pos * sub_);
    if (fast_) {
      SumFast(rank, n, size, out);
      return;
    }
    lengths.resize(J);
    for (int64_t s = 0; s < size; ++s) {
      DrawSampleLengths(b_, c_.seed, rank, n, static_cast<int>(s), lengths.data());
      double tokens = 0;
      for (int j = 0; j < J; ++j) {
        const int64_t t = lengths[j] + c_.sequences[j].n_s;
        out.n[j] += static_cast<double>(t);
        out.p[j] += static_cast<double>(PairsUnderMask(c_.sequences[j].mask, t));
        tokens += static_cast<double>(lengths[j]);
      }
      out.count += 1;
      out.load += tokens;
      out.kjt += c_.kjt_per_sample + c_.kjt_per_token * tokens;
    }
  }

  void Add(const SubBatchSums& s, double* row) const {
    row[StatLayout::kOne] = 1.0;
    row[StatLayout::kB] += s.count;
    for (int j = 0; j < layout_.sequences; ++j) {
      row[layout_.N(j)] += s.n[j];
      row[layout_.P(j)] += s.p[j];
    }
  }

 private:
  // Per sample: one Philox word (4 samples per block) and every class's (length, pairs) from one
  // merged row; the same values added in the same order as one lookup per class. The load (tokens
  // weighted by each class's sequence count) is the classes' token sums times their counts, added
  // once at the end: every term is an integer and every sum stays below 2^53, so the doubles add
  // exactly and the result is the per-sample sum's, bit for bit. (Where a sub-batch's load could
  // reach 2^53, kLoadPerSample keeps the per-sample sum.) kC > 0 fixes the
  // class count at compile time, so the sums stay in registers (gem-default has two classes).
  // Samples go in chunks of kChunk: first every word and bucket entry of the chunk, then every row,
  // then the sums in sample order. The bucket table alone is 512 KiB, and one sample's loads depend
  // on each other, so a sample at a time waited for two loads in a row; a chunk's loads are
  // independent and overlap (prefetched), and the sums run in the same order as before.
  template <int kC, bool kNarrow, bool kLoadPerSample = false>
  void SumRows(uint64_t stream, int64_t size, double* t_acc, double* p_acc, double& load) const {
    constexpr int64_t kChunk = 32;
    static_assert(kChunk % 4 == 0, "a chunk is whole Philox blocks");
    const size_t C = kC > 0 ? static_cast<size_t>(kC) : classes_.size();
    const double* seqs_per_class = merged_.seqs.data();
    const double* const all_rows = merged_.rows.data();
    double t[kC > 0 ? kC : 1] = {}, p[kC > 0 ? kC : 1] = {};
    double ld = 0;
    uint32_t words[kChunk];
    const double* rows[kChunk];
    for (int64_t s0 = 0; s0 < size; s0 += kChunk) {
      const int64_t n = std::min(kChunk, size - s0);
      // s0 is a multiple of 4: the chunk starts on a Philox block (kChunk words hold its blocks).
      numerics::PhiloxBlocks(c_.seed, stream, static_cast<uint64_t>(s0 / 4), static_cast<int>((n + 3) / 4), words);
      for (int64_t k = 0; k < n; ++k) merged_.PrefetchBucket<kNarrow>(words[k]);
      for (int64_t k = 0; k < n; ++k) {
        rows[k] = all_rows + static_cast<size_t>(merged_.RangeOf<kNarrow>(words[k])) * (2 * C);
        __builtin_prefetch(rows[k]);
        __builtin_prefetch(rows[k] + 2 * C - 1);  // a row may straddle two lines
      }
      for (int64_t k = 0; k < n; ++k) {
        const double* row = rows[k];
        for (size_t c = 0; c < C; ++c) {
          if constexpr (kC > 0) {
            t[c] += row[2 * c];
            p[c] += row[2 * c + 1];
          } else {
            t_acc[c] += row[2 * c];
            p_acc[c] += row[2 * c + 1];
          }
          if constexpr (kLoadPerSample) ld += row[2 * c] * seqs_per_class[c];
        }
      }
    }
    if constexpr (kC > 0) {
      for (size_t c = 0; c < C; ++c) {
        t_acc[c] = t[c];
        p_acc[c] = p[c];
      }
    }
    if constexpr (!kLoadPerSample) {
      for (size_t c = 0; c < C; ++c) ld += t_acc[c] * seqs_per_class[c];
    }
    load = ld;
  }

  void SumFast(int rank, int64_t n, int64_t size, SubBatchSums& out) const {
    const uint64_t stream = SubBatchStream(rank, n);
    const size_t C = classes_.size();
    double tok[16] = {0}, prs[16] = {0};
    std::vector<double> tok_v, prs_v;
    double* t_acc = tok;
    double* p_acc = prs;
    if (C > 16) {
      tok_v.assign(C, 0.0);
      prs_v.assign(C, 0.0);
      t_acc = tok_v.data();
      p_acc = prs_v.data();
    }
    double load = 0;
    const auto sum = [&]<bool kNarrow>() {
      if (!load_exact_) {
        SumRows<0, kNarrow, true>(stream, size, t_acc, p_acc, load);
      } else if (C == 2) {
        SumRows<2, kNarrow>(stream, size, t_acc, p_acc, load);
      } else if (C == 1) {
        SumRows<1, kNarrow>(stream, size, t_acc, p_acc, load);
      } else {
        SumRows<0, kNarrow>(stream, size, t_acc, p_acc, load);
      }
    };
    if (merged_.Narrow()) {
      sum.template operator()<true>();
    } else {
      sum.template operator()<false>();
    }
    for (size_t c = 0; c < C; ++c) {
      const LengthClass& cl = classes_[c];
      for (int j : cl.seqs) {
        out.n[j] = t_acc[c] + static_cast<double>(size * cl.n_s);
        out.p[j] = p_acc[c];
      }
    }
    out.count = static_cast<double>(size);
    out.load = load;
    out.kjt = c_.kjt_per_sample * static_cast<double>(size) + c_.kjt_per_token * load;
  }

  const BatchDrawConfig& c_;
  const Batches& b_;
  StatLayout layout_;
  int64_t sub_ = 128, k_ = 1;
  bool fast_ = false;
  bool load_exact_ = true;  // a sub-batch's load sums exactly in any order (below 2^53)
  std::vector<LengthClass> classes_;
  MergedClasses merged_;
};

}  // namespace

void DrawSampleLengths(const Batches& batches, uint64_t seed, int rank, int64_t sub_batch_index, int sample,
                       int64_t* lengths) {
  const int J = static_cast<int>(batches.features.size());
  const uint64_t stream = SubBatchStream(rank, sub_batch_index);
  // One shared normal per sample (element 2*sample) plus J independent ones mixed by corr.
  double z_shared = 0, spare = 0;
  TwoNormals(seed, stream, static_cast<uint64_t>(sample) * static_cast<uint64_t>(J + 1), &z_shared, &spare);
  bool have_spare = true;
  uint64_t pair = static_cast<uint64_t>(sample) * static_cast<uint64_t>(J + 1) + 1;
  for (int j = 0; j < J; ++j) {
    const LengthLaw& law = batches.features[j];
    double z = z_shared;
    if (law.corr < 1.0) {
      double own = 0;
      if (have_spare) {
        own = spare;
        have_spare = false;
      } else {
        TwoNormals(seed, stream, pair++, &own, &spare);
        have_spare = true;
      }
      z = std::sqrt(std::max(0.0, law.corr)) * z_shared + std::sqrt(std::max(0.0, 1.0 - law.corr)) * own;
    }
    lengths[j] = LengthFromNormal(law, z, seed, stream, static_cast<uint64_t>(j));
  }
}

absl::StatusOr<std::vector<double>> DrawBatchStats(const BatchDrawConfig& config, const Batches& batches,
                                                   int threads) {
  const int J = static_cast<int>(config.sequences.size());
  if (static_cast<int>(batches.features.size()) != J) {
    return absl::InvalidArgumentError(absl::StrCat("batches.features: ", batches.features.size(),
                                                   " length laws for a model with ", J, " sequences"));
  }
  if (batches.local_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batches.local_batch: ", batches.local_batch, " must be >= 1"));
  }
  const std::string& policy = batches.assignment.policy;
  const bool padded = policy == "padded" || policy == "none";
  if (!padded && policy != "random" && policy != "bbs" && policy != "global") {
    return absl::InvalidArgumentError(absl::StrCat("batches.assignment.policy: \"", policy,
                                                   "\" is not random, bbs, global or padded"));
  }
  Drawer drawer(config, batches);
  const StatLayout layout = drawer.layout();
  const int width = layout.size();
  const int R = config.world;
  const int64_t k = drawer.k();
  std::vector<double> stats(static_cast<size_t>(config.steps) * R * width, 0.0);
  auto row = [&](int step, int rank) { return stats.data() + (static_cast<size_t>(step) * R + rank) * width; };

  if (padded) {
    for (int s = 0; s < config.steps; ++s) {
      for (int r = 0; r < R; ++r) {
        double* x = row(s, r);
        x[StatLayout::kOne] = 1;
        x[StatLayout::kB] = static_cast<double>(batches.local_batch);
        for (int j = 0; j < J; ++j) {
          const int64_t cap = batches.assignment.max_len > 0 ? batches.assignment.max_len
                                                             : std::max(config.sequences[j].lmax, batches.features[j].max);
          const int64_t t = cap + config.sequences[j].n_s;
          x[layout.N(j)] = static_cast<double>(batches.local_batch) * static_cast<double>(t);
          x[layout.P(j)] = static_cast<double>(batches.local_batch) * static_cast<double>(PairsUnderMask(config.sequences[j].mask, t));
        }
      }
    }
    return stats;
  }

  tbb::task_arena arena(std::max(1, threads));
  if (policy == "random" || policy == "bbs") {
    const int G = policy == "bbs" ? std::max(1, batches.assignment.pool_factor) : 1;
    std::vector<absl::Status> errors(R);
    arena.execute([&] {
      // Each range of ranks reuses one set of scratch buffers (a rank's draws do not depend on the
      // range it falls in).
      tbb::parallel_for(tbb::blocked_range<int>(0, R), [&](const tbb::blocked_range<int>& ranks) {
        std::vector<int64_t> lengths, loads;
        std::vector<SubBatchSums> pool;
        std::vector<int32_t> plan;
        data::PlanScratch scratch;
        for (int r = ranks.begin(); r < ranks.end(); ++r) {
          for (int block = 0; block * G < config.steps; ++block) {
            const int64_t first = static_cast<int64_t>(block) * G * k;
            pool.resize(static_cast<size_t>(G * k));
            loads.resize(pool.size());
            plan.resize(pool.size());
            for (int64_t i = 0; i < G * k; ++i) {
              drawer.Sum(r, first + i, pool[i], lengths);
              loads[i] = static_cast<int64_t>(pool[i].load);
            }
            // model/data's plans: plan[g * k + s] is the s-th sub-batch of step g of the block.
            const absl::Status st = G == 1 ? data::RandomPlanInto(loads, 1, absl::MakeSpan(plan))
                                           : data::BbsPlanInto(loads, G, absl::MakeSpan(plan), scratch);
            if (!st.ok()) {
              errors[r] = st;
              return;  // the range's later ranks cannot hold an earlier error than this one
            }
            for (size_t i = 0; i < plan.size(); ++i) {
              const int step = block * G + static_cast<int>(i / k);
              if (step < config.steps) drawer.Add(pool[plan[i]], row(step, r));
            }
          }
        }
      });
    });
    for (const absl::Status& e : errors) if (!e.ok()) return e;
    return stats;
  }

  // global: per step, every rank's k sub-batches longest-first to the least-loaded rank with room.
  data::PlanScratch scratch;
  std::vector<int64_t> loads;
  std::vector<int32_t> plan;
  for (int s = 0; s < config.steps; ++s) {
    std::vector<SubBatchSums> all(static_cast<size_t>(R) * k);
    arena.execute([&] {
      tbb::parallel_for(0, R, [&](int r) {
        std::vector<int64_t> lengths;
        for (int64_t i = 0; i < k; ++i) drawer.Sum(r, s * k + i, all[static_cast<size_t>(r) * k + i], lengths);
      });
    });
    loads.resize(all.size());
    plan.resize(all.size());
    for (size_t q = 0; q < all.size(); ++q) loads[q] = static_cast<int64_t>(all[q].load);
    if (absl::Status st = data::GlobalBalancePlanInto(loads, R, k, absl::MakeSpan(plan), scratch); !st.ok()) return st;
    std::vector<double> sent(R, 0.0), received(R, 0.0);
    for (size_t i = 0; i < plan.size(); ++i) {
      const int r = static_cast<int>(i / k);
      const int q = plan[i];
      const int reader = q / static_cast<int>(k);
      drawer.Add(all[q], row(s, r));
      if (reader != r) {
        sent[reader] += all[q].kjt;
        received[r] += all[q].kjt;
      }
    }
    for (int r = 0; r < R; ++r) row(s, r)[StatLayout::kX] = std::max(sent[r], received[r]);
  }
  return stats;
}

}  // namespace gemtb::sim
