// Jagged attention validation and the oracle, differential against the padded-and-masked reference
// (reference/attention/attention.h, tests/testing/padded_attention.h).
//
// The bytes decode to a small jagged problem: options, heads and dims, sequence lengths and
// pairing (self, cross, kv_index, broadcast_q), maxima, the optional biases and RoPE tables, then
// up to three corruptions (an offset, a shape entry, a tensor's size, an index, a dropped tensor)
// and finally the values. Byte codes let any count or dimension become an int64 extreme, so
// validation sees overflowing shapes and offsets as often as plausible ones.
//
// Promises checked:
//  * ValidateAttention returns InvalidArgument or OK; forward refuses what validation refuses.
//  * OK means forward and backward cannot fail (attention.h), in oracle and in emulate precision.
//  * Where the padded reference applies (small shapes, finite moderate scales, timestamps whose
//    differences fit in int64), forward and backward agree with it to 1e-9 relative:
//    max|jagged - padded| <= 1e-9 * max(max|padded|, 1) per tensor (tests/testing's AllClose).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fuzz/byte_reader.h"
#include "reference/attention/attention.h"
#include "tests/testing/attention_cases.h"
#include "tests/testing/oracle_harness.h"
#include "tests/testing/padded_attention.h"

namespace {

using gemtb::Activation;
using gemtb::Alignment;
using gemtb::ElementType;
using gemtb::MaskKind;
using gemtb::fuzz::ByteReader;
using gemtb::fuzz::Check;
using gemtb::fuzz::Fail;
using gemtb::fuzz::kExtremes;
using gemtb::fuzz::SignedCode;
using gemtb::fuzz::SizeCode;
using gemtb::check::AttentionCase;
using gemtb::check::OwnedTensor;

constexpr double kTolerance = 1e-9;
// No tensor is allocated larger than this: a shape whose product is larger (or overflows) gets a
// short buffer, which validation must reject by its size.
constexpr int64_t kMaxElements = 1 << 14;

// The product of `shape`, or -1 when a dim is negative, it overflows, or it exceeds kMaxElements.
int64_t BoundedCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) return 0;  // the product is 0 whatever the other dims are
  }
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) return -1;
  }
  return n;
}

// A byte as a small integer in [lo, hi] below 240, else an extreme.
int64_t RangeCode(uint8_t b, int64_t lo, int64_t hi) {
  return b < 240 ? lo + static_cast<int64_t>(b) % (hi - lo + 1) : kExtremes[b - 240];
}

// Moderate scales (multiples of 1/32 in [-3.75, 3.72]) below 240, else the non-finite and
// overflowing ones; `*moderate` tells which.
double ScaleCode(uint8_t b, bool* moderate) {
  constexpr double kSpecial[16] = {
      std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
      -std::numeric_limits<double>::infinity(), 0.0, -0.0, 1e300, -1e300, 1e-300,
      std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(), 1e8, 1e-8,
      65504.0, 3.4e38, 1e154, -1e154};
  *moderate = b < 240;
  return b < 240 ? (static_cast<double>(b) - 120) / 32 : kSpecial[b - 240];
}

// Timestamps: +-(2^k + small) for k up to 57, so that every time bucket can be reached, or an
// extreme (differences of extremes overflow int64 unless computed as the oracle does).
int64_t TimestampCode(uint8_t b) {
  if (b >= 240) return kExtremes[b - 240];
  const int64_t mag = (int64_t{1} << ((b / 2) % 58)) + (b % 7) - 3;
  return (b % 2) ? -mag : mag;
}

void Fill(OwnedTensor<double>& t, std::vector<int64_t> shape, ByteReader& r, double unit) {
  const int64_t n = BoundedCount(shape);
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(n < 0 ? 1 : n), 0.0);  // 1 value for an impossible shape
  for (double& x : t.data) x = r.I8() * unit;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> off(1, 0);
  for (int64_t l : lengths) {
    int64_t next = 0;
    if (__builtin_add_overflow(off.back(), l, &next)) next = std::numeric_limits<int64_t>::max();
    off.push_back(next);
  }
  return off;
}

int64_t MaxOf(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = x > m ? x : m;
  return m;
}

void SetIntTensor(OwnedTensor<int64_t>& t, std::vector<int64_t> values) {
  t.shape = {static_cast<int64_t>(values.size())};
  t.data = std::move(values);
}

struct Decoded {
  AttentionCase c;
  bool moderate_scales = true;
  bool corrupted = false;
};

Decoded Decode(ByteReader& r) {
  Decoded d;
  AttentionCase& c = d.c;
  gemtb::AttentionOptions& o = c.options;
  o.act = static_cast<Activation>(r.U8() % 10);  // 9 is not an activation: validation says so
  const uint8_t flags = r.U8();
  o.mask = static_cast<MaskKind>(flags & 3);
  o.align = (flags & 4) ? Alignment::kTopLeft : Alignment::kBottomRight;
  o.broadcast_q = (flags & 8) != 0;
  constexpr ElementType kTypes[4] = {ElementType::kFloat64, ElementType::kFloat32,
                                     ElementType::kFloat16, ElementType::kBFloat16};
  c.input_type = kTypes[flags >> 6];
  o.window_left = RangeCode(r.U8(), -2, 9);
  o.window_right = RangeCode(r.U8(), -2, 9);
  o.block = RangeCode(r.U8(), 0, 9);
  bool moderate = true;
  if (flags & 16) o.pre_scale = ScaleCode(r.U8(), &moderate);
  d.moderate_scales = d.moderate_scales && moderate;
  if (flags & 32) o.post_scale = ScaleCode(r.U8(), &moderate);
  d.moderate_scales = d.moderate_scales && moderate;

  const int64_t kv_heads = SizeCode(r.U8(), 4);
  const uint8_t group = r.U8();
  int64_t heads = group < 240 ? 1 + group % 3 : kExtremes[group - 240];
  if (group < 240 && __builtin_mul_overflow(kv_heads, heads, &heads)) heads = kv_heads;
  const int64_t dqk = SizeCode(r.U8(), 7);
  const int64_t dv = SizeCode(r.U8(), 7);

  std::vector<int64_t> kv_lengths(r.U8() % 5);
  for (int64_t& l : kv_lengths) l = SizeCode(r.U8(), 7);
  const int64_t nkv = static_cast<int64_t>(kv_lengths.size());
  std::vector<int64_t> q_lengths;
  std::vector<int64_t> kv_index;
  const uint8_t pairing = r.U8();
  bool self = false;
  if (o.broadcast_q) {
    q_lengths = {SizeCode(r.U8(), 7)};
    if (pairing & 4) kv_index.resize(r.U8() % 6);
  } else {
    switch (pairing & 3) {
      case 0: q_lengths = kv_lengths; self = true; break;
      case 1: q_lengths.resize(kv_lengths.size()); break;
      case 2: kv_index.resize(r.U8() % 6); q_lengths.resize(kv_index.size()); break;
      case 3: q_lengths.resize(r.U8() % 5); break;
    }
    if (!self) {
      for (int64_t& l : q_lengths) l = SizeCode(r.U8(), 7);
    }
  }
  for (int64_t& x : kv_index) x = RangeCode(r.U8(), -1, nkv);  // -1 and nkv are out of range
  const std::vector<int64_t> q_off = Offsets(q_lengths);
  const std::vector<int64_t> kv_off = Offsets(kv_lengths);
  SetIntTensor(c.q_offsets, q_off);
  SetIntTensor(c.kv_offsets, kv_off);
  if (!kv_index.empty() || (pairing & 8)) SetIntTensor(c.kv_index, kv_index);
  const uint8_t lq_slack = r.U8();
  const uint8_t lk_slack = r.U8();
  auto declared = [](int64_t longest, uint8_t slack) {
    int64_t m = 0;
    if (slack >= 240) return kExtremes[slack - 240];
    return __builtin_add_overflow(longest, slack % 4 - 1, &m) ? longest : m;
  };
  c.max_lq = declared(MaxOf(q_lengths), lq_slack);
  c.max_lk = declared(MaxOf(kv_lengths), lk_slack);
  const int64_t tq = q_off.back();
  const int64_t tk = kv_off.back();

  const uint8_t extras = r.U8();
  const int64_t num_out = c.kv_index.present() ? static_cast<int64_t>(kv_index.size()) : nkv;
  const int64_t max_l = c.max_lq > c.max_lk ? c.max_lq : c.max_lk;
  if (extras & 1) {
    const int64_t hb = SizeCode(r.U8(), 5);
    Fill(c.bias_dense, {num_out, hb, c.max_lq, c.max_lk}, r, 0.125);
  }
  if (extras & 2) {
    const uint8_t b = r.U8();
    const int64_t hr = b < 240 ? ((b & 1) ? heads : 1) : kExtremes[b - 240];
    int64_t width = 0;
    if (__builtin_mul_overflow(max_l, 2, &width)) width = std::numeric_limits<int64_t>::max();
    Fill(c.bias_rel, {hr, width > 0 ? width - 1 : 0}, r, 0.125);
  }
  if ((extras & 4) && (self || (extras & 64))) {
    const uint8_t b = r.U8();
    const int64_t ht = b < 240 ? ((b & 1) ? heads : 1) : kExtremes[b - 240];
    Fill(c.bias_ts, {ht, 129}, r, 0.125);
    std::vector<int64_t> ts(static_cast<size_t>(tq >= 0 && tq <= kMaxElements ? tq : 0));
    for (int64_t& t : ts) t = TimestampCode(r.U8());
    SetIntTensor(c.ts, std::move(ts));
  }
  if (extras & 8) {
    Fill(c.rope_q, {tq, dqk}, r, 1.0 / 128);
    Fill(c.rope_k, {tk, dqk}, r, 1.0 / 128);
    if (extras & 16) Fill(c.rope_v, {tk, dv}, r, 1.0 / 128);
  }

  // Corruptions: each breaks one thing that validation must notice (or that is still valid).
  const uint8_t corruptions = r.U8();
  const int count = corruptions < 160 ? 0 : corruptions % 4;
  d.corrupted = count > 0;
  std::vector<int64_t> q_shape = {tq, heads, dqk};
  std::vector<int64_t> k_shape = {tk, kv_heads, dqk};
  std::vector<int64_t> v_shape = {tk, kv_heads, dv};
  std::vector<OwnedTensor<double>*> optional = {&c.bias_dense, &c.bias_rel, &c.bias_ts,
                                                &c.rope_q,     &c.rope_k,   &c.rope_v};
  int drop_size = -1;  // which of q, k, v gets one value too few
  for (int i = 0; i < count; ++i) {
    const uint8_t op = r.U8();
    const uint8_t at = r.U8();
    const uint8_t value = r.U8();
    auto pick = [&](std::vector<int64_t>& v) -> int64_t* {
      return v.empty() ? nullptr : &v[at % v.size()];
    };
    switch (op % 10) {
      case 0: if (int64_t* p = pick(c.q_offsets.data)) *p = SignedCode(value); break;
      case 1: if (int64_t* p = pick(c.kv_offsets.data)) *p = SignedCode(value); break;
      case 2: *pick(q_shape) = SizeCode(value, 8); break;
      case 3: *pick(k_shape) = SizeCode(value, 8); break;
      case 4: *pick(v_shape) = SizeCode(value, 8); break;
      case 5: drop_size = at % 3; break;
      case 6: if (int64_t* p = pick(c.kv_index.data)) *p = SignedCode(value); break;
      case 7: {  // drop an optional tensor (rope_q without rope_k, bias_ts without ts, ...)
        OwnedTensor<double>* t = optional[at % optional.size()];
        *t = {};
        break;
      }
      case 8: if (int64_t* p = pick(c.ts.data)) *p = kExtremes[value % 16]; break;
      case 9: {  // a rank error: one more dim on an offsets or shape vector
        if (at % 2) c.q_offsets.shape.push_back(1); else q_shape.push_back(SizeCode(value, 3));
        break;
      }
    }
  }
  Fill(c.q, q_shape, r, 0.125);
  Fill(c.k, k_shape, r, 0.125);
  Fill(c.v, v_shape, r, 0.125);
  if (drop_size >= 0) {
    std::vector<double>& data = drop_size == 0 ? c.q.data : (drop_size == 1 ? c.k.data : c.v.data);
    if (!data.empty()) data.pop_back();
  }
  return d;
}

// Small enough for the padded reference ([B,H,maxLq,maxLk] blocks) and inside its assumptions.
bool PaddedApplies(const Decoded& d) {
  const AttentionCase& c = d.c;
  if (!d.moderate_scales) return false;
  if (c.heads() > 16 || c.dqk() > 16 || c.dv() > 16 || c.max_lq > 64 || c.max_lk > 64) {
    return false;
  }
  for (int64_t t : c.ts.data) {
    if (t > (int64_t{1} << 61) || t < -(int64_t{1} << 61)) return false;  // differences must fit
  }
  return gemtb::check::PairSequences(c).size() <= 16;
}

std::string Shape(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

// The case in one line, for the crash report (the values are in the input file).
std::string CaseSummary(const AttentionCase& c) {
  const gemtb::AttentionOptions& o = c.options;
  std::string s = absl::StrCat(
      "act=", static_cast<int>(o.act), " mask=", std::string(gemtb::MaskKindName(o.mask)), "(", o.window_left,
      ",", o.window_right, ",", o.block, ") align=", std::string(gemtb::AlignmentName(o.align)),
      o.broadcast_q ? " broadcast_q" : "", " pre=", o.pre_scale.value_or(-999),
      " post=", o.post_scale.value_or(-999), " q", Shape(c.q.shape), " k", Shape(c.k.shape), " v",
      Shape(c.v.shape), " q_offsets=", Shape(c.q_offsets.data), " kv_offsets=",
      Shape(c.kv_offsets.data), " max_lq=", c.max_lq, " max_lk=", c.max_lk);
  if (c.kv_index.present()) absl::StrAppend(&s, " kv_index=", Shape(c.kv_index.data));
  if (c.bias_dense.present()) absl::StrAppend(&s, " bias_dense", Shape(c.bias_dense.shape));
  if (c.bias_rel.present()) absl::StrAppend(&s, " bias_rel", Shape(c.bias_rel.shape));
  if (c.bias_ts.present()) absl::StrAppend(&s, " bias_ts", Shape(c.bias_ts.shape), " ts=", Shape(c.ts.data));
  if (c.rope_q.present()) absl::StrAppend(&s, " rope_q", Shape(c.rope_q.shape));
  if (c.rope_v.present()) absl::StrAppend(&s, " rope_v", Shape(c.rope_v.shape));
  return s;
}

// dO of O's shape (which the caller has bounded).
std::vector<double> Cotangent(const std::vector<int64_t>& o_shape, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : o_shape) n *= d;
  std::vector<double> d_o(static_cast<size_t>(n));
  for (size_t i = 0; i < d_o.size(); ++i) d_o[i] = static_cast<double>((i * 37 + seed) % 17) / 8 - 1;
  return d_o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader r(data, size);
  const Decoded d = Decode(r);
  const AttentionCase& c = d.c;
  if (std::getenv("GEMTB_FUZZ_PRINT")) std::fprintf(stderr, "case: %s\n", CaseSummary(c).c_str());
  const gemtb::reference::AttentionInputs in = c.View();
  const absl::Status valid = gemtb::reference::ValidateAttention(in, c.options);
  gemtb::reference::ExecutionOptions exec;
  exec.threads = 1;
  if (!valid.ok()) {
    Check(absl::IsInvalidArgument(valid), absl::StrCat("validation error is not InvalidArgument: ",
                                                       valid.ToString()));
    Check(!gemtb::reference::AttentionForward(in, c.options, exec).ok(),
          absl::StrCat("forward accepted what validation rejected: ", valid.ToString()));
    return 0;
  }

  // A valid call may still have a large output (many query rows times a large Dv over an empty
  // K/V): the oracle would compute it honestly, but not in a fuzzer's time and memory.
  int64_t out_elements = 0;
  if (__builtin_mul_overflow(gemtb::check::OutputRows(c), c.heads() * c.dv(), &out_elements) ||
      out_elements > (int64_t{1} << 22)) {
    return 0;
  }
  absl::StatusOr<gemtb::check::OracleRun> run = gemtb::check::RunOracleForward(c, exec);
  if (!run.ok()) {
    Fail(absl::StrCat("validated, then forward failed: ", run.status().ToString(), "\n  case: ",
                      CaseSummary(c)));
  }
  const std::vector<double> d_o = Cotangent(run->fwd.o_shape, size);
  run = gemtb::check::RunOracle(c, d_o, exec);
  if (!run.ok()) Fail(absl::StrCat("validated, then backward failed: ", run.status().ToString()));

  exec.precision = gemtb::reference::Precision::kEmulate;
  absl::StatusOr<gemtb::check::OracleRun> emulated = gemtb::check::RunOracle(c, d_o, exec);
  if (!emulated.ok()) {
    Fail(absl::StrCat("validated, then emulate mode failed: ", emulated.status().ToString()));
  }

  if (PaddedApplies(d)) {
    // The padded reference's block floor division overflows for a block near INT64_MAX
    // (regressions/attention/padded_block_near_int64_max). Any block of at least 2^32 keeps the
    // same keys here (|a| <= 64), so the reference gets that one.
    AttentionCase padded_case = c;
    padded_case.options.block = std::min<int64_t>(c.options.block, int64_t{1} << 32);
    const gemtb::testing::PaddedResult padded = gemtb::testing::PaddedAttention(padded_case, d_o);
    const ::testing::AssertionResult same = gemtb::testing::MatchesPadded(*run, padded, kTolerance);
    if (!same) {
      Fail(absl::StrCat("jagged != padded: ", same.message(), "\n  case: ",
                        CaseSummary(c)));
    }
  }
  return 0;
}
