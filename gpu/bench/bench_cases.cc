#include "gpu/bench/bench_cases.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "gpu/attention/params.h"
#include "model/numerics/philox.h"

namespace gemtb::gpu::bench {
namespace {

BenchCase Make(std::string name, int64_t batch, int64_t max_lq, int64_t max_lk, double s, Activation act) {
  BenchCase c;
  c.name = std::move(name);
  c.batch = batch;
  c.max_lq = max_lq;
  c.max_lk = max_lk;
  c.sparsity = s;
  c.options.act = act;
  return c;
}

std::vector<int64_t> RuleLengths(int64_t batch, int64_t m, double s) {
  int64_t lo = 1, hi = m;
  if (s >= 0.5) {
    lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor((2 * s - 1) * static_cast<double>(m))));
  } else {
    hi = static_cast<int64_t>(std::floor(2 * s * static_cast<double>(m)));
  }
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const double u = numerics::PhiloxWord(0, 0, static_cast<uint64_t>(b)) / 4294967296.0;
    out.push_back(lo + static_cast<int64_t>(std::floor(u * static_cast<double>(hi - lo + 1))));
  }
  return out;
}

}  // namespace

const std::vector<BenchCase>& SpecCases() {
  static const std::vector<BenchCase>* cases = [] {
    auto* v = new std::vector<BenchCase>;
    v->push_back(Make("self_softmax", 1152, 1024, 1024, 0.5, Activation::kSoftmax));
    v->push_back(Make("self_gdpa_silu", 1152, 1024, 1024, 0.5, Activation::kSilu));
    BenchCase cross_gelu = Make("cross_gdpa_gelu", 1152, 1024, 256, 0.5, Activation::kGeluTanh);
    cross_gelu.dense_kv = 256;
    v->push_back(cross_gelu);
    BenchCase cross_softmax = Make("cross_softmax", 1152, 1024, 256, 0.5, Activation::kSoftmax);
    cross_softmax.dense_kv = 256;
    v->push_back(cross_softmax);
    BenchCase swa = Make("swa_causal_512", 32, 8192, 8192, 0.75, Activation::kSoftmax);
    swa.options.mask = MaskKind::kWindow;
    swa.options.window_left = 512;
    swa.options.window_right = 0;
    v->push_back(swa);
    BenchCase block = Make("block64_softmax", 1152, 4096, 4096, 0.7, Activation::kSoftmax);
    block.options.mask = MaskKind::kBlock;
    block.options.block = 64;
    v->push_back(block);
    BenchCase pma = Make("pma_gdpa_silu", 1152, 32, 1024, 0.5, Activation::kSilu);
    pma.seeds = 32;
    pma.options.broadcast_q = true;
    v->push_back(pma);
    v->push_back(Make("dense_gdpa_silu", 1152, 1024, 1024, 1.0, Activation::kSilu));
    return v;
  }();
  return *cases;
}

absl::StatusOr<BenchCase> FindCase(const std::string& name) {
  for (const BenchCase& c : SpecCases()) {
    if (c.name == name) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("--cases: unknown case '", name, "'"));
}

CaseLengths DrawLengths(const BenchCase& c) {
  CaseLengths l;
  if (c.seeds > 0) {
    // PMA reads self_softmax's K/V.
    l.kv = RuleLengths(c.batch, c.max_lk, c.sparsity);
    l.q.assign(l.kv.size(), c.seeds);
  } else if (c.dense_kv > 0) {
    l.q = RuleLengths(c.batch, c.max_lq, c.sparsity);
    l.kv.assign(l.q.size(), c.dense_kv);
  } else {
    l.q = RuleLengths(c.batch, c.max_lq, c.sparsity);
    l.kv = l.q;
  }
  return l;
}

int64_t ValidPairs(const BenchCase& c, const CaseLengths& lengths) {
  int64_t pairs = 0;
  for (size_t b = 0; b < lengths.q.size(); ++b) {
    for (int64_t i = 0; i < lengths.q[b]; ++i) {
      const RowKeyRange r = ClampedKeys(c.options, i, lengths.q[b], lengths.kv[b]);
      pairs += r.end - r.begin;
    }
  }
  return pairs;
}

}  // namespace gemtb::gpu::bench
