// The attention mask as a value: which keys each query may see. The op
// graph (model/description) stores it per attention op; AttentionOptions carries the same fields
// (MaskOf / SetMask convert), and PairsUnderMask counts what it keeps.
#ifndef GEMTB_MODEL_ATTENTION_ATTENTION_MASK_H_
#define GEMTB_MODEL_ATTENTION_ATTENTION_MASK_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/common/enum_names.h"

namespace gemtb {

enum class MaskKind { kNone, kCausal, kWindow, kBlock };

inline constexpr EnumName<MaskKind> kMaskKindNames[] = {
    {MaskKind::kNone, "none"},
    {MaskKind::kCausal, "causal"},
    {MaskKind::kWindow, "window"},
    {MaskKind::kBlock, "block"},
};

constexpr std::string_view MaskKindName(MaskKind mask) { return NameIn(kMaskKindNames, mask); }
constexpr std::optional<MaskKind> ParseMaskKind(std::string_view name) { return ParseIn(kMaskKindNames, name); }

struct AttentionMask {
  MaskKind kind = MaskKind::kNone;
  int64_t left = -1, right = -1;  // kWindow: window(l, r), -1 = unbounded
  int64_t block = 0;              // kBlock: block(n), n >= 1
  friend bool operator==(const AttentionMask&, const AttentionMask&) = default;
};

namespace mask_detail {
// Keys cut off on one side of a window of reach `w` over L rows: sum_i max(0, w - i), i < L.
constexpr int64_t Truncated(int64_t w, int64_t length) {
  const int64_t m = w < length ? w : length;
  return m * w - m * (m - 1) / 2;
}
}  // namespace mask_detail

// Pairs (query, key) of one sample's self-attention over `tokens` tokens (Lq = Lk, so both
// alignments agree) that the mask keeps. O(1) and exact in int64 for tokens < 2^31: the simulator
// evaluates it for every sample of every rank and step, `gemtb model` for its totals.
constexpr int64_t PairsUnderMask(const AttentionMask& mask, int64_t tokens) {
  if (tokens <= 0) return 0;
  const int64_t L = tokens;
  switch (mask.kind) {
    case MaskKind::kNone:
      return L * L;
    case MaskKind::kBlock: {
      // A block past the end holds all; block(n) has n >= 1 wherever a mask is parsed.
      const int64_t n = mask.block < 1 ? 1 : mask.block > L ? L : mask.block;
      const int64_t full = L / n, rest = L % n;
      return full * n * n + rest * rest;
    }
    case MaskKind::kCausal:
      return L * (L + 1) / 2;
    case MaskKind::kWindow: {
      // Row i keeps [max(0, i-l), min(L-1, i+r)]: (l + r + 1) keys less what falls off each end;
      // an unbounded side reaches the whole row (l = L - 1 is as good as unbounded).
      const int64_t l = mask.left < 0 ? L - 1 : (mask.left < L - 1 ? mask.left : L - 1);
      const int64_t r = mask.right < 0 ? L - 1 : (mask.right < L - 1 ? mask.right : L - 1);
      return L * (l + r + 1) - mask_detail::Truncated(l, L) - mask_detail::Truncated(r, L);
    }
  }
  return 0;
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_ATTENTION_ATTENTION_MASK_H_
