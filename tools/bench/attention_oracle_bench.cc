// CPU benchmark of the attention oracle (fp64 oracle-of-record mode) on CPU-sized versions of the
// self- and cross-attention benchmark shapes (H=4, D=128, sparsity 0.5, lengths
// from the Philox length rule). Reports effective GFLOP/s over valid pairs (backward counts
// 2.5x the forward's FLOPs) for 1 and 2 threads.
//
// Before timing, each shape is checked: the 1-thread and 2-thread outputs must be bitwise equal,
// so a benchmark never times a configuration that breaks the oracle's contract.
// Results: bash tools/bench/run_cpu_bench.sh attention_oracle_bench.
#include <benchmark/benchmark.h>

#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "model/attention/benchmark_lengths.h"
#include "model/random/normal.h"
#include "reference/attention/attention.h"

namespace {

using gemtb::reference::AttentionBackward;
using gemtb::reference::AttentionForward;
using gemtb::reference::AttentionForwardResult;
using gemtb::reference::AttentionInputs;
using gemtb::reference::ExecutionOptions;

constexpr int64_t kHeads = 4;
constexpr int64_t kDim = 128;

struct Shape {
  std::string name;
  int64_t batch, max_len;
  int64_t kv_len;  // 0 = self-attention, else a dense K/V length per sequence
};

struct Problem {
  std::vector<double> q, k, v, d_o;
  std::vector<int64_t> q_off, kv_off;
  AttentionInputs in;
  gemtb::AttentionOptions options;
  double flops = 0;
  AttentionForwardResult fwd;
};

std::vector<double> Normal(int64_t n, uint64_t stream) {
  std::vector<double> x(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) x[e] = gemtb::PhiloxNormal(0, stream, e);
  return x;
}

std::unique_ptr<Problem> MakeProblem(const Shape& s) {
  auto p = std::make_unique<Problem>();
  const std::vector<int64_t> lq = gemtb::BenchmarkLengths(s.batch, s.max_len, 0.5);
  std::vector<int64_t> lk = lq;
  if (s.kv_len > 0) lk.assign(lq.size(), s.kv_len);
  p->q_off = gemtb::OffsetsFromLengths(lq);
  p->kv_off = gemtb::OffsetsFromLengths(lk);
  const int64_t tq = p->q_off.back(), tk = p->kv_off.back();
  p->q = Normal(tq * kHeads * kDim, 1);
  p->k = Normal(tk * kHeads * kDim, 2);
  p->v = Normal(tk * kHeads * kDim, 3);
  p->d_o = Normal(tq * kHeads * kDim, 4);
  p->in.q = {p->q, {tq, kHeads, kDim}};
  p->in.k = {p->k, {tk, kHeads, kDim}};
  p->in.v = {p->v, {tk, kHeads, kDim}};
  p->in.q_offsets = {p->q_off, {static_cast<int64_t>(p->q_off.size())}};
  p->in.kv_offsets = {p->kv_off, {static_cast<int64_t>(p->kv_off.size())}};
  p->in.max_lq = s.max_len;
  p->in.max_lk = s.kv_len > 0 ? s.kv_len : s.max_len;
  p->flops = *gemtb::reference::AttentionForwardFlops(p->in, p->options);
  return p;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {"self_softmax", 32, 512, 0},    // B=32, max 512, s=0.5, self-attention
      {"cross_softmax", 32, 512, 256}, // 256 dense K/V per sequence
  };
  return shapes;
}

Problem& GetProblem(int index) {
  static std::map<int, std::unique_ptr<Problem>> cache;
  auto& slot = cache[index];
  if (!slot) {
    slot = MakeProblem(Shapes()[index]);
    // Check before timing: 1 and 2 threads give the same bytes, forward and backward.
    auto f1 = AttentionForward(slot->in, slot->options, ExecutionOptions{{}, 1});
    auto f2 = AttentionForward(slot->in, slot->options, ExecutionOptions{{}, 2});
    const gemtb::reference::TensorView<double> d_o{slot->d_o, f1->o_shape};
    auto b1 = AttentionBackward(slot->in, slot->options, d_o, *f1, ExecutionOptions{{}, 1});
    auto b2 = AttentionBackward(slot->in, slot->options, d_o, *f2, ExecutionOptions{{}, 2});
    if (!f1.ok() || !f2.ok() || !b1.ok() || !b2.ok() || f1->o != f2->o || f1->lse != f2->lse ||
        b1->dq != b2->dq || b1->dk != b2->dk || b1->dv != b2->dv) {
      std::cerr << "attention_oracle_bench: 1 vs 2 threads differ on " << Shapes()[index].name << "\n";
      std::abort();
    }
    slot->fwd = *std::move(f1);
  }
  return *slot;
}

void BM_OracleForward(benchmark::State& state) {
  Problem& p = GetProblem(static_cast<int>(state.range(0)));
  const ExecutionOptions exec{gemtb::reference::Precision::kOracle, static_cast<int>(state.range(1))};
  for (auto _ : state) {
    auto out = AttentionForward(p.in, p.options, exec);
    benchmark::DoNotOptimize(out->o.data());
  }
  state.SetLabel(Shapes()[state.range(0)].name);
  state.counters["GFLOP/s"] = benchmark::Counter(p.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(state.range(1));
}

void BM_OracleBackward(benchmark::State& state) {
  Problem& p = GetProblem(static_cast<int>(state.range(0)));
  const ExecutionOptions exec{gemtb::reference::Precision::kOracle, static_cast<int>(state.range(1))};
  const gemtb::reference::TensorView<double> d_o{p.d_o, p.fwd.o_shape};
  for (auto _ : state) {
    auto out = AttentionBackward(p.in, p.options, d_o, p.fwd, exec);
    benchmark::DoNotOptimize(out->dq.data());
  }
  state.SetLabel(Shapes()[state.range(0)].name);
  // Backward FLOPs = 2.5 x forward.
  state.counters["GFLOP/s"] = benchmark::Counter(2.5 * p.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = static_cast<double>(state.range(1));
}

BENCHMARK(BM_OracleForward)->ArgsProduct({{0, 1}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_OracleBackward)->ArgsProduct({{0, 1}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
