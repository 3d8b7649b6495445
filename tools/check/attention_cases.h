// Owned, randomly generated jagged attention problems, for the property suite and for the checks
// of gpu/ against reference/ (`gemtb check attention`).
//
// An AttentionCase owns every input vector, so a test may copy and edit it (permute keys,
// materialise shared rows, break a shape) and then hand the oracle a View(). Cases come from a
// CaseShape (structural choices: lengths, heads, dims, options, which inputs are present) plus a
// seed for the values, drawn here by std::mt19937_64 (RandomAttentionCase); tests/testing has the
// rapidcheck generators of the same distribution (draw_case_shape.h).
#ifndef GEMTB_TOOLS_CHECK_ATTENTION_CASES_H_
#define GEMTB_TOOLS_CHECK_ATTENTION_CASES_H_

#include <cstdint>
#include <iosfwd>
#include <random>
#include <string>
#include <vector>

#include "model/attention/attention_options.h"
#include "model/common/element_type.h"
#include "reference/attention/attention.h"

namespace gemtb::check {

template <typename T>
struct OwnedTensor {
  std::vector<T> data;
  std::vector<int64_t> shape;  // empty = absent

  bool present() const { return !shape.empty(); }
  reference::TensorView<T> View() const { return {absl::MakeConstSpan(data), shape}; }
};

enum class ValueDistribution { kNormal, kUniformSmall };  // randn, U(-0.1, 0.1)

// Structural choices of a case; the values come from `value_seed`.
struct CaseShape {
  std::vector<int64_t> q_lengths;   // one per query sequence; exactly one under broadcast_q
  std::vector<int64_t> kv_lengths;  // one per K/V sequence
  std::vector<int64_t> kv_index;    // empty = absent
  int64_t max_lq_slack = 0;         // declared maxima exceed the actual ones by this much
  int64_t max_lk_slack = 0;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  int64_t dqk = 2;
  int64_t dv = 2;
  int64_t dense_bias_heads = 0;  // Hb; 0 = no dense bias
  int64_t rel_bias_heads = 0;    // Hr; 0 = none
  int64_t time_bias_heads = 0;   // Ht; 0 = none (self-attention only)
  bool rope_qk = false;
  bool rope_v = false;
  AttentionOptions options;
  ValueDistribution values = ValueDistribution::kNormal;
  ElementType input_type = ElementType::kFloat64;
  uint64_t value_seed = 0;
};

std::ostream& operator<<(std::ostream& os, const CaseShape& shape);

struct AttentionCase {
  OwnedTensor<double> q, k, v;
  OwnedTensor<int64_t> q_offsets, kv_offsets;
  int64_t max_lq = 0;
  int64_t max_lk = 0;
  OwnedTensor<int64_t> kv_index;
  OwnedTensor<double> bias_dense, bias_rel, bias_ts;
  OwnedTensor<int64_t> ts;
  OwnedTensor<double> rope_q, rope_k, rope_v;
  ElementType input_type = ElementType::kFloat64;
  AttentionOptions options;
  CaseShape shape;  // what the case was built from; for messages only (tests may edit the tensors)

  reference::AttentionInputs View() const;

  int64_t heads() const { return q.shape.at(1); }
  int64_t kv_heads() const { return k.shape.at(1); }
  int64_t dqk() const { return q.shape.at(2); }
  int64_t dv() const { return v.shape.at(2); }
  int64_t max_l() const { return max_lq > max_lk ? max_lq : max_lk; }
};

std::ostream& operator<<(std::ostream& os, const AttentionCase& c);
std::string Describe(const AttentionCase& c);

// Output sequence b reads query rows [q_begin, q_begin+lq) and K/V rows [k_begin, k_begin+lk) and
// writes output rows [o_begin, o_begin+lq) (the pairing rule).
struct SequencePair {
  int64_t q_begin, lq, k_begin, lk, o_begin;
  int64_t kv_sequence;  // ks(b)
};
std::vector<SequencePair> PairSequences(const AttentionCase& c);
int64_t OutputRows(const AttentionCase& c);  // TO

// Effective scales (defaults applied).
double PreScale(const AttentionCase& c);
double PostScale(const AttentionCase& c);

// How output sequences pair with query and K/V sequences (the pairing rule).
enum class Pairing {
  kAny,        // any of the below, equally likely where allowed
  kSelf,       // q and K/V share the offsets (time bias possible)
  kCross,      // independent q and K/V lengths, one K/V sequence per query sequence
  kKvIndex,    // kv_index maps each query sequence to a K/V sequence
  kBroadcast,  // broadcast_q, with or without kv_index
};

// What the generators may choose.
struct CaseConfig {
  Pairing pairing = Pairing::kAny;
  int64_t max_sequences = 3;
  int64_t max_length = 6;
  int64_t max_heads = 4;  // H; Hkv divides H
  int64_t max_dim = 6;
  std::vector<Activation> acts;  // empty = all nine
  std::vector<MaskKind> masks;   // empty = all four
  bool cross = true;             // Lq != Lk, independent q and K/V lengths
  bool kv_index = true;
  bool broadcast_q = true;
  bool gqa = true;
  bool dense_bias = true;
  bool rel_bias = true;
  bool time_bias = true;
  bool rope = true;
  bool custom_scales = true;  // random pre/post scales instead of the defaults
  ElementType input_type = ElementType::kFloat64;
};

// Builds the case: q, k, v from `shape.values`, rounded to `input_type`; dense bias N(0,1) on valid
// pairs and NaN everywhere else; rel/time tables N(0,0.25); ts with log-uniform gaps that reach
// every bucket; RoPE tables as sin/cos of uniform angles. Bias tables are fp32-valued when the
// input type is not fp64.
AttentionCase BuildCase(const CaseShape& shape);

CaseShape RandomCaseShape(std::mt19937_64& rng, const CaseConfig& config);
AttentionCase RandomAttentionCase(std::mt19937_64& rng, const CaseConfig& config);

// A cotangent dO of O's shape, N(0,1) rounded to the case's input type.
std::vector<double> RandomCotangent(const AttentionCase& c, uint64_t seed);

}  // namespace gemtb::check

#endif  // GEMTB_TOOLS_CHECK_ATTENTION_CASES_H_
