// CPU benchmark of the embedding oracle: pooled lookup forward and the backward fused with rowwise
// Adagrad, reported as GB/s of embedding rows touched (occurrences x dim x 4 bytes: what a lookup
// reads; the backward reads and writes touched rows once per unique row, reported the same way for
// comparability). Before timing, 1 and 2 threads must give identical bytes. Results: bash
// tools/bench/run_cpu_bench.sh embedding_oracle_bench.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "reference/embedding/tbe.h"

namespace {

using gemtb::reference::EmbeddingBackwardStep;
using gemtb::reference::EmbeddingForward;

struct Problem {
  gemtb::EmbeddingConfig config;
  gemtb::reference::EmbeddingState state;
  gemtb::reference::KeyedJaggedTensor kjt;
  gemtb::reference::EmbeddingGrads grads;
  double bytes = 0;  // rows touched x dim x 4
};

// 4 tables of 200k rows x 64 (fp32), one SUM feature each, B = 2048, bag lengths uniform in
// [1, 40], ids Zipf-like (a few hot rows, a long tail).
Problem& GetProblem() {
  static std::unique_ptr<Problem> p;
  if (p) return *p;
  p = std::make_unique<Problem>();
  constexpr int kTables = 4;
  constexpr int64_t kRows = 200000, kDim = 64, kBatch = 2048;
  for (int t = 0; t < kTables; ++t) {
    gemtb::TableConfig tc;
    tc.name = absl::StrCat("t", t);
    tc.rows = kRows;
    tc.dim = kDim;
    tc.optimizer.kind = gemtb::OptimizerKind::kRowwiseAdagrad;
    p->config.tables.push_back(tc);
    gemtb::FeatureConfig fc;
    fc.key = absl::StrCat("f", t);
    fc.table = t;
    p->config.features.push_back(fc);
    p->kjt.keys.push_back(fc.key);
  }
  p->kjt.stride = kBatch;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int> len(1, 40);
  std::uniform_real_distribution<double> u(0, 1);
  for (int t = 0; t < kTables; ++t) {
    for (int64_t b = 0; b < kBatch; ++b) {
      const int l = len(rng);
      p->kjt.lengths.push_back(l);
      for (int k = 0; k < l; ++k) {
        p->kjt.values.push_back(static_cast<int64_t>(std::pow(static_cast<double>(kRows), u(rng))) - 1);
      }
    }
  }
  p->bytes = static_cast<double>(p->kjt.values.size()) * kDim * 4;
  p->state = gemtb::reference::InitEmbeddingState(p->config);
  p->grads.pooled.assign(static_cast<size_t>(kBatch * kTables * kDim), 0.001f);
  auto f1 = EmbeddingForward(p->config, p->state, p->kjt, {}, 1);
  auto f2 = EmbeddingForward(p->config, p->state, p->kjt, {}, 2);
  auto s1 = p->state, s2 = p->state;
  const bool ok = f1.ok() && f2.ok() && f1->pooled == f2->pooled &&
                  EmbeddingBackwardStep(p->config, s1, p->kjt, p->grads, {}, 1).ok() &&
                  EmbeddingBackwardStep(p->config, s2, p->kjt, p->grads, {}, 2).ok() &&
                  s1.tables[0].weights == s2.tables[0].weights && s1.tables[3].adagrad == s2.tables[3].adagrad;
  if (!ok) {
    std::cerr << "embedding_oracle_bench: 1 and 2 threads differ\n";
    std::abort();
  }
  return *p;
}

void BM_EmbeddingForward(benchmark::State& state) {
  Problem& p = GetProblem();
  for (auto _ : state) {
    auto out = EmbeddingForward(p.config, p.state, p.kjt, {}, static_cast<int>(state.range(0)));
    benchmark::DoNotOptimize(out->pooled.data());
  }
  state.counters["GB/s"] = benchmark::Counter(p.bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(state.range(0));
}

void BM_EmbeddingBackwardRowwiseAdagrad(benchmark::State& state) {
  Problem& p = GetProblem();
  gemtb::reference::EmbeddingState s = p.state;
  for (auto _ : state) {
    auto status = EmbeddingBackwardStep(p.config, s, p.kjt, p.grads, {}, static_cast<int>(state.range(0)));
    benchmark::DoNotOptimize(status.ok());
  }
  state.counters["GB/s"] = benchmark::Counter(p.bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(state.range(0));
}

BENCHMARK(BM_EmbeddingForward)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmbeddingBackwardRowwiseAdagrad)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
