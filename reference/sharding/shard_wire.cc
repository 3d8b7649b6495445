#include "reference/sharding/shard_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemtb::reference {
namespace {

class Writer {
 public:
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void Floats(const std::vector<float>& v) {
    U64(v.size());
    Raw(v.data(), v.size() * sizeof(float));
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  void Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  absl::StatusOr<uint64_t> U64() {
    uint64_t v = 0;
    if (!Raw(&v, sizeof(v))) return Short();
    return v;
  }
  absl::StatusOr<std::vector<float>> Floats() {
    absl::StatusOr<uint64_t> n = U64();
    if (!n.ok()) return n.status();
    if (*n > (bytes_.size() - at_) / sizeof(float)) return Short();
    std::vector<float> v(*n);
    Raw(v.data(), *n * sizeof(float));
    return v;
  }
  absl::Status Done() const {
    if (at_ == bytes_.size()) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat("shard wire: ", bytes_.size() - at_, " bytes left over"));
  }

 private:
  bool Raw(void* p, size_t n) {
    if (n > bytes_.size() - at_) return false;
    if (n > 0) std::memcpy(p, bytes_.data() + at_, n);  // an empty vector's data() may be null
    at_ += n;
    return true;
  }
  absl::Status Short() const {
    return absl::DataLossError(absl::StrCat("shard wire: ", bytes_.size(), " bytes end early (at byte ", at_, ")"));
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> SerializeShards(const std::vector<ShardState>& shards) {
  Writer w;
  w.U64(shards.size());
  for (const ShardState& s : shards) {
    w.Floats(s.weights);
    w.Floats(s.adagrad);
    w.Floats(s.adam_m);
    w.Floats(s.adam_v);
    w.Floats({s.adam_step.b1, s.adam_step.b2});
    w.Floats(s.stored);
  }
  return w.Take();
}

absl::StatusOr<std::vector<ShardState>> DeserializeShards(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  absl::StatusOr<uint64_t> n = r.U64();
  if (!n.ok()) return n.status();
  if (*n > bytes.size())
    return absl::DataLossError(absl::StrCat("shard wire: ", *n, " shards in ", bytes.size(), " bytes"));
  std::vector<ShardState> shards(*n);
  for (ShardState& s : shards) {
    std::vector<float>* fields[] = {&s.weights, &s.adagrad, &s.adam_m, &s.adam_v};
    for (std::vector<float>* f : fields) {
      absl::StatusOr<std::vector<float>> v = r.Floats();
      if (!v.ok()) return v.status();
      *f = *std::move(v);
    }
    absl::StatusOr<std::vector<float>> step = r.Floats();
    if (!step.ok()) return step.status();
    if (step->size() != 2)
      return absl::DataLossError(absl::StrCat("shard wire: adam step of ", step->size(), " values"));
    s.adam_step = {(*step)[0], (*step)[1]};
    absl::StatusOr<std::vector<float>> stored = r.Floats();
    if (!stored.ok()) return stored.status();
    s.stored = *std::move(stored);
  }
  if (absl::Status s = r.Done(); !s.ok()) return s;
  return shards;
}

std::vector<uint8_t> SerializeOutput(const EmbeddingOutput& output) {
  Writer w;
  w.U64(static_cast<uint64_t>(output.pooled_width));
  w.Floats(output.pooled);
  w.U64(output.sequence_keys.size());
  for (int k : output.sequence_keys) w.U64(static_cast<uint64_t>(k));
  for (const std::vector<float>& s : output.sequence) w.Floats(s);
  return w.Take();
}

absl::StatusOr<EmbeddingOutput> DeserializeOutput(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  EmbeddingOutput out;
  absl::StatusOr<uint64_t> width = r.U64();
  if (!width.ok()) return width.status();
  out.pooled_width = static_cast<int64_t>(*width);
  absl::StatusOr<std::vector<float>> pooled = r.Floats();
  if (!pooled.ok()) return pooled.status();
  out.pooled = *std::move(pooled);
  absl::StatusOr<uint64_t> keys = r.U64();
  if (!keys.ok()) return keys.status();
  if (*keys > bytes.size())
    return absl::DataLossError(absl::StrCat("shard wire: ", *keys, " sequence keys in ", bytes.size(), " bytes"));
  for (uint64_t k = 0; k < *keys; ++k) {
    absl::StatusOr<uint64_t> key = r.U64();
    if (!key.ok()) return key.status();
    out.sequence_keys.push_back(static_cast<int>(*key));
  }
  for (uint64_t k = 0; k < *keys; ++k) {
    absl::StatusOr<std::vector<float>> s = r.Floats();
    if (!s.ok()) return s.status();
    out.sequence.push_back(*std::move(s));
  }
  if (absl::Status s = r.Done(); !s.ok()) return s;
  return out;
}

}  // namespace gemtb::reference
