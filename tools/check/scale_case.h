// The scale tier of `gemtb check attention`: batches at the benchmark's sizes (hundreds to
// thousands of sequences, lengths to 8,192), large enough that every persistent CTA of the forward
// takes many (tile, head) items. A ScaleCase holds only the structure; its input values are a
// function of (value seed, tensor, element) through Philox, so the kernels get the whole batch as
// 16-bit patterns (ScaleBits, in parallel) while the oracle sees only the sampled sequences
// (scale_sample.h), and the batch is never held in fp64.
#ifndef GEMTB_TOOLS_CHECK_SCALE_CASE_H_
#define GEMTB_TOOLS_CHECK_SCALE_CASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/attention/attention_options.h"
#include "model/common/element_type.h"
#include "tools/check/attention_cases.h"
#include "tools/check/attention_check.h"

namespace gemtb::check {

enum class ScalePairing { kSelf, kCross, kKvIndex, kBroadcast };
inline constexpr ScalePairing kAllScalePairings[] = {ScalePairing::kSelf, ScalePairing::kCross,
                                                     ScalePairing::kKvIndex, ScalePairing::kBroadcast};
std::string_view ScalePairingName(ScalePairing p);  // "self", "cross", "kv_index", "broadcast_q"

struct ScaleCase {
  std::string name;  // a benchmark case's name; empty for a drawn case
  ScalePairing pairing = ScalePairing::kSelf;
  std::vector<int64_t> q_lengths;   // one per query sequence; exactly one under broadcast_q
  std::vector<int64_t> kv_lengths;  // one per K/V sequence
  std::vector<int64_t> kv_index;    // empty = absent
  int64_t max_lq = 0, max_lk = 0;   // declared maxima
  int64_t heads = 1, kv_heads = 1, head_dim = 64;  // Dqk = Dv
  AttentionOptions options;
  ValueDistribution values = ValueDistribution::kNormal;
  ElementType input_type = ElementType::kBFloat16;
  uint64_t value_seed = 0;
  // How the lengths were drawn (max M, sparsity s), for the description.
  int64_t rule_max_q = 0, rule_max_kv = 0;
  double rule_sparsity_q = 0, rule_sparsity_kv = 0;
};

// One line: pairing, act, mask, B, lengths (rule, min/mean/max), heads, D, dtype, seed.
std::string DescribeScale(const ScaleCase& c);

// The pairing of the whole batch, as for an AttentionCase.
std::vector<SequencePair> PairScaleSequences(const ScaleCase& c);
int64_t ScaleQueryTokens(const ScaleCase& c);   // TQ
int64_t ScaleKvTokens(const ScaleCase& c);      // TK
int64_t ScaleOutputTokens(const ScaleCase& c);  // TO

// The inputs; each element is a function of (value_seed, tensor, element index) alone.
enum class ScaleTensor { kQ = 0, kK = 1, kV = 2, kDo = 3 };
// Element `index` of `tensor` (row-major [T, heads, D]), a value of the case's input type.
double ScaleValue(const ScaleCase& c, ScaleTensor tensor, int64_t index);
// The whole tensor as 16-bit patterns of the input type, computed in parallel (every element from
// its own Philox words, so the thread count and the split never change a bit).
std::vector<uint16_t> ScaleBits(const ScaleCase& c, ScaleTensor tensor);
// A bf16 or fp16 pattern as its exact value.
double BitsValue(uint16_t bits, ElementType type);

// Query tiles of 128 rows (the Hopper forward's) that hold a valid pair, times the query heads:
// the forward's persistent CTAs deal these items; the mma.sync kernel's 64-row tiles are more.
int64_t ForwardItems(const ScaleCase& c);
// Valid (query, key) pairs of output sequence `pair` per head.
int64_t ValidPairsOf(const AttentionOptions& options, const SequencePair& pair);

// The H200's SMs: the scale tier draws at least kScaleMinItemsPerSm of them worth of items.
inline constexpr int64_t kH200Sms = 132;
inline constexpr int64_t kScaleMinItemsPerSm = 4;
// The most valid pairs x heads that the smallest possible sample of a drawn case may cost
// (MinimumSampleCost in scale_sample.h): about ten seconds of the oracle on one core.
inline constexpr int64_t kScaleMaxSampleCost = int64_t{1} << 22;

// The scale tier's draw for `family`, a function of `case_seed` alone: bf16 or fp16, D in
// kCheckHeadDims, H in {1, 2, 4, 8} with Hkv dividing H; the pairing (uniform unless `pairing` is
// given):
//   self, cross, kv_index: B in [64, 2048] query sequences, lengths by the benchmark rule with a random
//     sparsity and a maximum M chosen so that about 2^16..2^18 query rows (tokens x H) result, capped
//     at 8,192 for window and block masks and 4,096 for none and causal (and at `max_length`); a
//     quarter of them with H = 1 and 64..96 sequences, whose lengths reach the caps;
//     cross draws the K/V lengths the same way on their own budget; kv_index maps B outputs to
//     B/1..B/16 K/V sequences;
//   broadcast_q: 1..48 shared query rows, B in [1000, 2048] outputs, with or without kv_index,
//     K/V lengths by the rule with a mean that puts 2^19..2^21 valid pairs (without mask) on one
//     K/V head's group (the oracle runs every output there, see scale_sample.h).
// Window and block parameters, alignment, scales and value distribution as in the small tier.
// Draws until the case has at least kScaleMinItemsPerSm * kH200Sms forward items and its smallest
// sample costs at most kScaleMaxSampleCost (this rules out, e.g., 2,048 tokens of full attention in
// every sequence with a GQA group of 8; shorter sequences of the same batch keep long ones in).
ScaleCase DrawScaleCase(int64_t case_seed, const Family& family, int64_t max_length,
                        std::optional<ScalePairing> pairing = std::nullopt);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_SCALE_CASE_H_
