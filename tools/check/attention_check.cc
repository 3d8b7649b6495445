#include "tools/check/attention_check.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "model/attention/activation_table.h"
#include "tools/check/criteria.h"
#include "tools/check/oracle_run.h"

namespace gemtb::check {

std::string Family::Name() const {
  return absl::StrCat(std::string(ActivationName(act)), "/", std::string(MaskKindName(mask)));
}

const std::vector<Family>& AllFamilies() {
  static const std::vector<Family> families = [] {
    std::vector<Family> f;
    for (Activation act : {Activation::kSoftmax, Activation::kSilu, Activation::kGeluTanh,
                           Activation::kGelu, Activation::kRelu, Activation::kIdentity}) {
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBlock}) {
        f.push_back({act, mask});
      }
    }
    return f;
  }();
  return families;
}

size_t FamilyIndex(const Family& family) {
  size_t index = 0;
  for (size_t a = 0; a < AllFamilies().size(); ++a) {
    if (AllFamilies()[a].Name() == family.Name()) index = a;
  }
  return index;
}

absl::StatusOr<std::vector<Family>> ParseFamilies(const std::string& text) {
  if (text == "all") return AllFamilies();
  std::vector<Family> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::vector<std::string> parts = absl::StrSplit(item, '/');
    std::optional<Activation> act = parts.size() == 2 ? ParseActivation(parts[0]) : std::nullopt;
    std::optional<MaskKind> mask = parts.size() == 2 ? ParseMaskKind(parts[1]) : std::nullopt;
    if (!act || !mask) {
      return absl::InvalidArgumentError(
          absl::StrCat("--family=", text, ": '", item, "' is not act/mask (e.g. silu/causal) or all"));
    }
    out.push_back({*act, *mask});
  }
  return out;
}

int64_t CaseSeed(int64_t seed, size_t family, int64_t index) {
  uint64_t z = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + family * 0xBF58476D1CE4E5B9ull +
               static_cast<uint64_t>(index) * 0x94D049BB133111EBull + 0x2545F4914F6CDD1Dull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int64_t>((z ^ (z >> 31)) >> 1);
}

AttentionCase DrawCase(int64_t case_seed, const Family& family, int64_t max_length) {
  std::mt19937_64 rng(static_cast<uint64_t>(case_seed));
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  CaseConfig config;
  config.acts = {family.act};
  config.masks = {family.mask};
  config.max_sequences = 3;
  config.max_heads = 4;
  config.max_dim = 2;  // replaced below
  config.dense_bias = config.rel_bias = config.time_bias = config.rope = false;
  config.input_type = pick(0, 1) ? ElementType::kBFloat16 : ElementType::kFloat16;
  // The length scale: one of 8, 40, 100, 200 (each cut to max_length) or max_length itself, so
  // that the longest sequence drawn is max_length (the default 300 gives the historical draw).
  const int64_t scales[] = {8, 40, 100, 200, max_length};
  config.max_length = std::min(max_length, scales[pick(0, 4)]);
  CaseShape shape = RandomCaseShape(rng, config);
  shape.dqk = shape.dv = kCheckHeadDims[pick(0, kNumCheckHeadDims - 1)];
  // Softmax scales relative to the default 1/sqrt(Dqk): randn rows of 128 dims with pre = 1.5
  // give logits of standard deviation 17, where even a plain same-precision kernel misses the
  // secondary bound (see Judge).
  if (family.act == Activation::kSoftmax && shape.options.pre_scale) {
    *shape.options.pre_scale /= std::sqrt(static_cast<double>(shape.dqk));
  }
  if (pick(0, 3) == 0) {
    // A function of the length, so that lengths which were equal (self-attention) stay equal.
    const int64_t edges[] = {0, 1, 2, 63, 64, 65, 127, 128, 129};
    auto edge = [&](int64_t l) { return std::min(max_length, edges[l % 9]); };
    for (int64_t& l : shape.q_lengths) l = edge(l);
    for (int64_t& l : shape.kv_lengths) l = edge(l);
  }
  return BuildCase(shape);
}

bool ScoreNearKink(const AttentionCase& c) {
  const double pre = PreScale(c);
  const int64_t h_count = c.heads(), group = c.heads() / c.kv_heads(), d = c.dqk();
  const ActivationInfo& info = InfoOf(c.options.act);  // the kinks from the one activation table
  const std::vector<double> kinks(info.kinks, info.kinks + info.num_kinks);
  for (const SequencePair& s : PairSequences(c)) {
    for (int64_t h = 0; h < h_count; ++h) {
      for (int64_t i = 0; i < s.lq; ++i) {
        const KeyRange r = ValidKeys(c.options, i, s.lq, s.lk);
        const double* q = c.q.data.data() + ((s.q_begin + i) * h_count + h) * d;
        for (int64_t j = r.begin; j < r.end; ++j) {
          const double* k = c.k.data.data() + ((s.k_begin + j) * c.kv_heads() + h / group) * d;
          double dot = 0, mag = 0;
          for (int64_t e = 0; e < d; ++e) {
            dot += q[e] * k[e];
            mag += std::fabs(q[e] * k[e]);
          }
          for (double kink : kinks) {
            if (std::fabs(pre * dot - kink) <= 1e-5 * std::fabs(pre) * mag) return true;
          }
        }
      }
    }
  }
  return false;
}

CaseResult Judge(const AttentionCase& c, const std::vector<double>& d_o, const GpuOutputs& gpu,
                 int oracle_threads) {
  CaseResult res;
  res.description = Describe(c);
  auto fail = [&](std::string message) {
    res.pass = false;
    res.failures.push_back(std::move(message));
  };
  if (!gpu.status.ok()) {
    fail(absl::StrCat("GPU: ", gpu.status.ToString()));
    return res;
  }
  const reference::ExecutionOptions oracle{reference::Precision::kOracle, oracle_threads};
  const reference::ExecutionOptions emulate{reference::Precision::kEmulate, oracle_threads};
  absl::StatusOr<OracleRun> ref = RunOracle(c, d_o, oracle);
  absl::StatusOr<OracleRun> emu = RunOracle(c, d_o, emulate);
  if (!ref.ok() || !emu.ok()) {
    fail(absl::StrCat("oracle: ", ref.status().ToString(), " / ", emu.status().ToString()));
    return res;
  }
  const ElementType dtype = c.input_type;
  const std::vector<double>* got[kNumTensors] = {&gpu.o, &gpu.lse, &gpu.dq, &gpu.dk, &gpu.dv};
  const std::vector<double>* want[kNumTensors] = {&ref->fwd.o, &ref->fwd.lse, &ref->bwd.dq,
                                                  &ref->bwd.dk, &ref->bwd.dv};
  const std::vector<double>* emulated[kNumTensors] = {&emu->fwd.o, &emu->fwd.lse, &emu->bwd.dq,
                                                      &emu->bwd.dk, &emu->bwd.dv};
  bool kink_only = true;  // every failure so far is a dQ/dK one
  for (int t = 0; t < kNumTensors; ++t) {
    std::vector<Verdict> verdicts;
    if (t == 1) {
      if (c.options.act != Activation::kSoftmax) continue;
      verdicts.push_back(LseMatches(kTensors[t], *got[t], *want[t]));
      verdicts.push_back(verdicts.back());
    } else {
      const double tolerance = t == 0 ? kForwardRelL2Tolerance : kGradientRelL2Tolerance;
      verdicts.push_back(GpuPrimary(kTensors[t], *got[t], *emulated[t], *want[t], dtype));
      verdicts.push_back(GpuSecondaryRelL2(kTensors[t], *got[t], *want[t], tolerance));
      // Where the emulate mode (a plain same-precision kernel) misses the secondary bound itself,
      // the case is too ill-conditioned for it (e.g. very peaked softmax rows, where dS cancels);
      // the GPU must then stay within 2x the emulate's rel-L2, and the case is counted.
      // A reference that is exactly zero (softmax rows with one key: dS = 0) has no relative error;
      // there the primary bound, absolute, is the criterion.
      const double emu_rel = RelL2(*emulated[t], *want[t]);
      if (std::isinf(emu_rel)) {
        verdicts.back() = {true, 0.0, 0.0, absl::StrCat(kTensors[t], ": rel-L2 not applicable, reference is 0")};
        ++res.relaxed;
      } else if (emu_rel > tolerance) {
        verdicts.back() = GpuSecondaryRelL2(kTensors[t], *got[t], *want[t], 2 * emu_rel);
        verdicts.back().message += " (bound = 2x emulate rel-L2)";
        ++res.relaxed;
      }
    }
    for (int k = 0; k < 2; ++k) {
      const Verdict& v = verdicts[k];
      res.ratio[t][k] = v.bound > 0 ? v.measured / v.bound : (v.measured > 0 ? INFINITY : 0.0);
      if (std::isnan(res.ratio[t][k])) res.ratio[t][k] = INFINITY;
      if (!v.pass && (k == 0 || t != 1)) {
        // What a plain same-precision kernel (emulate mode) measures on the same criterion.
        const double emu_measured = t == 1 ? LseMatches("", *emulated[t], *want[t]).measured
                                    : k == 0 ? MaxAbsDiff(*emulated[t], *want[t])
                                             : RelL2(*emulated[t], *want[t]);
        fail(absl::StrFormat("%s [emulate: %.6g]", v.message, emu_measured));
        kink_only = kink_only && (t == 2 || t == 3);
      }
    }
  }
  if (!res.pass && kink_only && InfoOf(c.options.act).num_kinks > 0 && ScoreNearKink(c)) {
    res.excused = true;
    res.pass = true;
  }
  return res;
}

void Tally(ElementType dtype, int64_t dqk, const CaseResult& r, FamilyStats& st) {
  ++st.cases;
  st.bf16 += dtype == ElementType::kBFloat16 ? 1 : 0;
  for (int i = 0; i < kNumCheckHeadDims; ++i) st.by_dim[i] += dqk == kCheckHeadDims[i] ? 1 : 0;
  st.relaxed += r.relaxed > 0 ? 1 : 0;
  for (int t = 0; t < kNumTensors; ++t) {
    for (int k = 0; k < 2; ++k) st.worst[t][k] = std::max(st.worst[t][k], r.ratio[t][k]);
  }
  if (r.pass && !r.excused) {
    ++st.pass;
  } else {
    (r.excused ? st.excused : st.fail) += 1;
  }
}

}  // namespace gemtb::check
