#include "sim/workload/batch_draw.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"
#include "sim/workload/pairs.h"

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

class Drawer {
 public:
  Drawer(const BatchDrawConfig& c, const Batches& b) : c_(c), b_(b), layout_{static_cast<int>(c.sequences.size())} {
    sub_ = std::max<int64_t>(1, b.assignment.sub_batch);
    k_ = (b.local_batch + sub_ - 1) / sub_;
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
    lengths.resize(J);
    for (int64_t s = 0; s < size; ++s) {
      DrawSampleLengths(b_, c_.seed, rank, n, static_cast<int>(s), lengths.data());
      double tokens = 0;
      for (int j = 0; j < J; ++j) {
        const int64_t t = lengths[j] + c_.sequences[j].n_s;
        out.n[j] += static_cast<double>(t);
        out.p[j] += PairsUnderMask(c_.sequences[j].mask, t);
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
  const BatchDrawConfig& c_;
  const Batches& b_;
  StatLayout layout_;
  int64_t sub_ = 128, k_ = 1;
};

// BBS (embeddings-and-model.md §5): sort the pooled sub-batches by load descending (ties by index),
// deal them to the G batches in snake order. Returns the batch of each pooled sub-batch.
std::vector<int> BbsDeal(const std::vector<double>& loads, int groups) {
  std::vector<int> order(loads.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return loads[a] > loads[b]; });
  std::vector<int> batch_of(loads.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t round = i / groups, pos = i % groups;
    batch_of[order[i]] = static_cast<int>(round % 2 == 0 ? pos : groups - 1 - pos);
  }
  return batch_of;
}

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
          x[layout.P(j)] = static_cast<double>(batches.local_batch) * PairsUnderMask(config.sequences[j].mask, t);
        }
      }
    }
    return stats;
  }

  tbb::task_arena arena(std::max(1, threads));
  if (policy == "random" || policy == "bbs") {
    const int G = policy == "bbs" ? std::max(1, batches.assignment.pool_factor) : 1;
    arena.execute([&] {
      tbb::parallel_for(0, R, [&](int r) {
        SubBatchSums sums;
        std::vector<int64_t> lengths;
        std::vector<SubBatchSums> pool;
        std::vector<double> loads;
        for (int block = 0; block * G < config.steps; ++block) {
          const int64_t first = static_cast<int64_t>(block) * G * k;
          pool.resize(static_cast<size_t>(G * k));
          loads.resize(pool.size());
          for (int64_t i = 0; i < G * k; ++i) {
            drawer.Sum(r, first + i, pool[i], lengths);
            loads[i] = pool[i].load;
          }
          // random: sub-batch i goes to step i / k of the block; bbs: the snake deal.
          std::vector<int> batch_of(pool.size());
          if (G == 1) {
            std::fill(batch_of.begin(), batch_of.end(), 0);
          } else {
            batch_of = BbsDeal(loads, G);
          }
          for (size_t i = 0; i < pool.size(); ++i) {
            const int step = block * G + batch_of[i];
            if (step < config.steps) drawer.Add(pool[i], row(step, r));
          }
        }
      });
    });
    return stats;
  }

  // global: per step, every rank's k sub-batches longest-first to the least-loaded rank with room.
  for (int s = 0; s < config.steps; ++s) {
    std::vector<SubBatchSums> all(static_cast<size_t>(R) * k);
    arena.execute([&] {
      tbb::parallel_for(0, R, [&](int r) {
        std::vector<int64_t> lengths;
        for (int64_t i = 0; i < k; ++i) drawer.Sum(r, s * k + i, all[static_cast<size_t>(r) * k + i], lengths);
      });
    });
    std::vector<int> order(all.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return all[a].load > all[b].load; });
    using Slot = std::pair<double, int>;  // (load, rank): the smallest first, ties lowest rank
    std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
    for (int r = 0; r < R; ++r) heap.push({0.0, r});
    std::vector<int> taken(R, 0);
    std::vector<double> sent(R, 0.0), received(R, 0.0);
    for (int q : order) {
      Slot slot = heap.top();
      heap.pop();
      const int r = slot.second;
      const int reader = q / static_cast<int>(k);
      drawer.Add(all[q], row(s, r));
      if (reader != r) {
        sent[reader] += all[q].kjt;
        received[r] += all[q].kjt;
      }
      if (++taken[r] < k) heap.push({slot.first + all[q].load, r});
    }
    for (int r = 0; r < R; ++r) row(s, r)[StatLayout::kX] = std::max(sent[r], received[r]);
  }
  return stats;
}

}  // namespace gemtb::sim
