// The structural draw of a random attention case, written once against a "picker" (Int(lo, hi)
// inclusive, Bool(), Seed()) so that the std::mt19937_64 generator (attention_cases.cc) and the
// rapidcheck generator (tests/testing/attention_cases.cc) draw the same distribution, and
// rapidcheck knows how to shrink each choice.
#ifndef GEMTB_TOOLS_CHECK_DRAW_CASE_SHAPE_H_
#define GEMTB_TOOLS_CHECK_DRAW_CASE_SHAPE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/attention/attention_options.h"
#include "tools/check/attention_cases.h"

namespace gemtb::check {
namespace draw_internal {

inline const std::vector<Activation>& AllActs() {
  static const std::vector<Activation> acts = [] {
    std::vector<Activation> v;
    for (int a = 0; a < kNumActivations; ++a) v.push_back(static_cast<Activation>(a));
    return v;
  }();
  return acts;
}

inline const std::vector<MaskKind>& AllMasks() {
  static const std::vector<MaskKind> masks = {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                                              MaskKind::kBlock};
  return masks;
}

inline int64_t MaxOf(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = x > m ? x : m;
  return m;
}

}  // namespace draw_internal

// Draws every structural choice of a case from `pick` within `config`.
template <typename Picker>
CaseShape DrawCaseShape(Picker& pick, const CaseConfig& config) {
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
      std::max(draw_internal::MaxOf(s.q_lengths) + s.max_lq_slack, draw_internal::MaxOf(s.kv_lengths) + s.max_lk_slack);
  if (config.rel_bias && pick.Bool() && declared_max_l > 0) {
    s.rel_bias_heads = pick.Bool() ? s.heads : 1;
  }
  if (config.time_bias && mode == kSelf && pick.Bool()) {
    s.time_bias_heads = pick.Bool() ? s.heads : 1;
  }

  const auto& acts = config.acts.empty() ? draw_internal::AllActs() : config.acts;
  const auto& masks = config.masks.empty() ? draw_internal::AllMasks() : config.masks;
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

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_DRAW_CASE_SHAPE_H_
