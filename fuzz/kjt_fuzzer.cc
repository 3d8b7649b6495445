// KJT validation and the embedding lookup (reference/embedding/kjt.h, tbe.h).
//
// The bytes decode to a small embedding config (tables, features, optimizers; some fields may be
// invalid or extreme), a KeyedJaggedTensor against it (keys, stride, lengths, ids, weights,
// offsets, each possibly inconsistent) and a sum partition of small blocks.
//
// Promises checked:
//  * ValidateEmbeddingConfig and ValidateKjt return OK or InvalidArgument, the KJT error naming its
//    E_* code; forward and backward refuse what validation refuses.
//  * On a valid config and KJT the layout is consistent (F*B+1 offsets ending at |values|), and
//    forward and the fused backward step succeed for every partition CheckPartition accepts; with
//    finite weights the pooled and sequence outputs are finite.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/byte_reader.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"

namespace {

using gemtb::ElementType;
using gemtb::EmbeddingConfig;
using gemtb::FeatureConfig;
using gemtb::TableConfig;
using gemtb::fuzz::ByteReader;
using gemtb::fuzz::Check;
using gemtb::fuzz::Fail;
using gemtb::fuzz::kExtremes;
using gemtb::fuzz::SizeCode;
using gemtb::reference::KeyedJaggedTensor;

// Lookups run only on tables this small (Init touches every row) and batches this small.
constexpr int64_t kMaxTableElements = 1 << 12;
constexpr int64_t kMaxBags = 256;
constexpr int64_t kMaxValues = 1024;

int64_t RangeCode(uint8_t b, int64_t lo, int64_t hi) {
  return b < 240 ? lo + static_cast<int64_t>(b) % (hi - lo + 1) : kExtremes[b - 240];
}

float FloatCode(uint8_t b) {
  constexpr float kSpecial[8] = {std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 0.0f, -0.0f, 1e-30f, std::numeric_limits<float>::denorm_min(), 1e4f};
  return b < 248 ? (static_cast<float>(b) - 124) / 64 : kSpecial[b - 248];
}

const char* const kKeys[] = {"a", "b", "c", "d", "e"};

std::string Key(ByteReader& r) {
  const uint8_t b = r.U8();
  return b < 250 ? kKeys[b % 5] : r.String();
}

EmbeddingConfig DecodeConfig(ByteReader& r) {
  EmbeddingConfig config;
  config.seed = r.U8();
  const int tables = 1 + r.U8() % 3;
  for (int t = 0; t < tables; ++t) {
    TableConfig tc;
    tc.name = absl::StrCat("t", t);
    tc.rows = RangeCode(r.U8(), 0, 12);  // 0 is invalid
    const uint8_t dim = r.U8();
    tc.dim = dim < 240 ? 4 * (dim % 4) + (dim % 11 == 10 ? 2 : 0) : kExtremes[dim - 240];
    const uint8_t kinds = r.U8();
    constexpr ElementType kTypes[4] = {ElementType::kFloat32, ElementType::kFloat16,
                                       ElementType::kBFloat16, ElementType::kFloat64};
    tc.dtype = kTypes[kinds & 3];
    tc.hashing = static_cast<gemtb::Hashing>((kinds >> 2) % 3);
    tc.bounds = static_cast<gemtb::BoundsMode>((kinds >> 4) % 3);
    tc.stochastic_rounding = (kinds & 64) != 0;
    tc.hash_seed = r.U8();
    const uint8_t opt = r.U8();
    tc.optimizer.kind = static_cast<gemtb::OptimizerKind>(opt % 3);
    tc.optimizer.decay_mode = static_cast<gemtb::WeightDecayMode>((opt / 3) % 3);
    if (opt & 32) {
      tc.optimizer.lr = FloatCode(r.U8());
      tc.optimizer.weight_decay = FloatCode(r.U8());
      tc.optimizer.eps = FloatCode(r.U8());
      tc.optimizer.beta1 = FloatCode(r.U8());
      tc.optimizer.beta2 = FloatCode(r.U8());
    }
    config.tables.push_back(tc);
  }
  const int features = r.U8() % 5;
  for (int f = 0; f < features; ++f) {
    FeatureConfig fc;
    fc.key = Key(r);
    fc.table = static_cast<int>(RangeCode(r.U8(), -1, tables) % 1000);  // -1 and `tables` are bad
    fc.pooling = static_cast<gemtb::Pooling>(r.U8() % 4);
    fc.max_len = RangeCode(r.U8(), -1, 6);
    config.features.push_back(fc);
  }
  return config;
}

KeyedJaggedTensor DecodeKjt(ByteReader& r) {
  KeyedJaggedTensor kjt;
  kjt.keys.resize(r.U8() % 5);
  for (std::string& k : kjt.keys) k = Key(r);
  kjt.stride = SizeCode(r.U8(), 5);
  const uint8_t shape = r.U8();  // which counts are made inconsistent
  const int64_t f = kjt.NumKeys();
  int64_t bags = 0;
  if (__builtin_mul_overflow(f, kjt.stride, &bags) || bags < 0 || bags > kMaxBags) {
    bags = r.U8() % 4;  // |lengths| != F*B: validation must say so without computing F*B wrongly
  }
  if (shape & 1) bags += 1;
  kjt.lengths.resize(static_cast<size_t>(bags));
  int64_t total = 0;
  for (int32_t& l : kjt.lengths) {
    const uint8_t b = r.U8();
    l = b < 240 ? static_cast<int32_t>(b % 6) - 1 : static_cast<int32_t>(kExtremes[b - 240]);
    if (l > 0) total += l;
  }
  int64_t values = total > kMaxValues ? r.U8() % 8 : total;
  if (shape & 2) values += (r.U8() % 3) - 1;
  kjt.values.resize(static_cast<size_t>(values < 0 ? 0 : values));
  for (int64_t& v : kjt.values) {
    const uint8_t b = r.U8();
    v = b < 240 ? static_cast<int64_t>(b % 16) - 2 : kExtremes[b - 240];
  }
  kjt.has_weights = (shape & 4) != 0;
  if (kjt.has_weights) {
    const int64_t n = static_cast<int64_t>(kjt.values.size()) + ((shape & 8) ? 1 : 0);
    kjt.weights.resize(static_cast<size_t>(n));
    for (float& w : kjt.weights) w = FloatCode(r.U8());
  }
  if (shape & 16) {  // explicit offsets, possibly off by one somewhere
    kjt.offsets.push_back(0);
    for (int32_t l : kjt.lengths) kjt.offsets.push_back(kjt.offsets.back() + l);
    if (shape & 32) kjt.offsets[r.U8() % kjt.offsets.size()] += (r.U8() % 3) - 1;
  }
  return kjt;
}

gemtb::reference::SumPartition DecodePartition(ByteReader& r, int64_t batch, size_t tables) {
  gemtb::reference::SumPartition p;
  const uint8_t which = r.U8();
  if (which & 1) {  // batch blocks: a split of the batch, or (rarely) one that does not add up
    int64_t left = batch >= 0 && batch <= kMaxBags ? batch : 0;
    while (left > 0) {
      const int64_t s = 1 + r.U8() % 3;
      p.batch_blocks.push_back(s < left ? s : left);
      left -= p.batch_blocks.back();
    }
    if (which & 8) p.batch_blocks.push_back(r.U8() % 2);
  }
  if (which & 2) {
    for (size_t t = 0; t < tables; ++t) p.pool_row_blocks.push_back({r.U8() % 5, r.U8() % 4});
  }
  if (which & 4) {
    for (size_t t = 0; t < tables; ++t) p.norm_col_shards.push_back(r.U8() % 5);
  }
  return p;
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteReader r(data, size);
  const EmbeddingConfig config = DecodeConfig(r);
  const KeyedJaggedTensor kjt = DecodeKjt(r);
  const gemtb::reference::SumPartition partition = DecodePartition(r, kjt.stride, config.tables.size());
  const gemtb::reference::EmbeddingState empty;

  const absl::Status config_ok = gemtb::reference::ValidateEmbeddingConfig(config);
  if (!config_ok.ok()) {
    Check(absl::IsInvalidArgument(config_ok), "config error is not InvalidArgument");
    Check(!gemtb::reference::EmbeddingForward(config, empty, kjt, partition, 1).ok(),
          "forward accepted an invalid config");
    return 0;
  }
  gemtb::reference::KjtLayout layout;
  const absl::Status kjt_ok = gemtb::reference::ValidateKjt(kjt, config, &layout);
  if (!kjt_ok.ok()) {
    Check(absl::IsInvalidArgument(kjt_ok) && absl::StartsWith(kjt_ok.message(), "E_"),
          absl::StrCat("KJT error without its code: ", kjt_ok.ToString()));
    const auto fwd = gemtb::reference::EmbeddingForward(config, empty, kjt, partition, 1);
    Check(!fwd.ok() && fwd.status() == kjt_ok, "forward does not report validation's KJT error");
    return 0;
  }
  const int64_t bags = kjt.NumKeys() * kjt.stride;
  Check(static_cast<int64_t>(layout.offsets.size()) == bags + 1 && layout.offsets.front() == 0 &&
            layout.offsets.back() == static_cast<int64_t>(kjt.values.size()),
        "layout offsets disagree with the KJT");
  Check(static_cast<int64_t>(layout.feature.size()) == kjt.NumKeys(), "layout: one feature per key");

  for (const TableConfig& t : config.tables) {
    int64_t elements = 0;
    if (__builtin_mul_overflow(t.rows, t.dim, &elements) || elements > kMaxTableElements) {
      return 0;  // valid, but too big to initialise here
    }
  }
  gemtb::reference::EmbeddingState state = gemtb::reference::InitEmbeddingState(config);
  absl::StatusOr<gemtb::reference::EmbeddingOutput> out =
      gemtb::reference::EmbeddingForward(config, state, kjt, partition, 1);
  if (!out.ok()) {
    // Only the partition may still be refused; then the backward refuses it too.
    Check(absl::StartsWith(out.status().message(), "partition:"),
          absl::StrCat("validated, then forward failed: ", out.status().ToString()));
    return 0;
  }
  Check(static_cast<int64_t>(out->pooled.size()) == kjt.stride * out->pooled_width,
        "pooled output is not [B, W]");
  if (!kjt.has_weights || AllFinite(kjt.weights)) {
    Check(AllFinite(out->pooled), "non-finite pooled output from finite weights");
    for (const auto& s : out->sequence) Check(AllFinite(s), "non-finite sequence output");
  }
  gemtb::reference::EmbeddingGrads grads;
  grads.pooled.resize(out->pooled.size());
  for (size_t i = 0; i < grads.pooled.size(); ++i) grads.pooled[i] = static_cast<float>(i % 7) - 3;
  for (const auto& s : out->sequence) grads.sequence.emplace_back(s.size(), 0.5f);
  const absl::Status step = gemtb::reference::EmbeddingBackwardStep(config, state, kjt, grads, partition, 1);
  if (!step.ok()) Fail(absl::StrCat("validated, then backward failed: ", step.ToString()));
  return 0;
}
