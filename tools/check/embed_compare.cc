#include "tools/check/embed_compare.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/numerics/float_formats.h"
#include "reference/embedding/kjt.h"
#include "reference/embedding/tbe.h"

namespace gemtb::check {
namespace {

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Differing bytes of two arrays (a length mismatch counts every byte of the longer one).
int64_t DiffBytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::string& what,
                  std::vector<std::string>& messages) {
  if (a.size() != b.size()) {
    messages.push_back(absl::StrCat(what, ": ", a.size(), " bytes from the oracle, ", b.size(), " from the GPU"));
    return static_cast<int64_t>(std::max(a.size(), b.size()));
  }
  int64_t n = 0;
  size_t first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && n++ == 0) first = i;
  }
  if (n > 0 && messages.size() < 8) {
    messages.push_back(absl::StrCat(what, ": ", n, " of ", a.size(), " bytes differ, first at byte ", first));
  }
  return n;
}

}  // namespace

std::vector<uint8_t> StorageBytes(const std::vector<float>& widened, ElementType dtype) {
  if (dtype == ElementType::kFloat32) return Bytes(widened);
  std::vector<uint16_t> bits(widened.size());
  for (size_t i = 0; i < widened.size(); ++i) {
    bits[i] = dtype == ElementType::kBFloat16 ? numerics::FloatToBf16BitsRne(widened[i])
                                              : numerics::FloatToFp16BitsRne(widened[i]);
  }
  return Bytes(bits);
}

EmbedRun EmbedRunOf(const EmbeddingConfig& config, const reference::EmbeddingOutput& output,
                    const reference::EmbeddingState& after) {
  EmbedRun run;
  run.pooled = output.pooled;
  run.sequence = output.sequence;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const reference::TableState& ts = after.tables[t];
    run.table_bytes.push_back(StorageBytes(ts.weights, config.tables[t].dtype));
    std::vector<float> st = ts.adagrad;
    st.insert(st.end(), ts.adam_m.begin(), ts.adam_m.end());
    st.insert(st.end(), ts.adam_v.begin(), ts.adam_v.end());
    st.push_back(ts.adam_step.b1);
    st.push_back(ts.adam_step.b2);
    run.state.push_back(std::move(st));
  }
  return run;
}

EmbedRun RunEmbedOracle(const EmbedCase& c, const reference::SumPartition& partition) {
  EmbedRun run;
  if (absl::Status s = reference::ValidateKjt(c.kjt, c.config, nullptr); !s.ok()) {
    run.error = std::string(s.message());
    return run;
  }
  absl::StatusOr<reference::EmbeddingOutput> out = reference::EmbeddingForward(c.config, c.state, c.kjt, partition, 1);
  if (!out.ok()) {
    run.error = std::string(out.status().message());
    return run;
  }
  reference::EmbeddingState state = c.state;
  if (absl::Status s = reference::EmbeddingBackwardStep(c.config, state, c.kjt, c.grads, partition, 1); !s.ok()) {
    run.error = std::string(s.message());
    return run;
  }
  return EmbedRunOf(c.config, *out, state);
}

EmbedDiff CompareEmbedRuns(const EmbedRun& oracle, const EmbedRun& gpu) {
  EmbedDiff d;
  if (oracle.error != gpu.error) {
    d.error_differs = true;
    d.messages.push_back(absl::StrCat("input error: oracle '", oracle.error, "', GPU '", gpu.error, "'"));
    return d;
  }
  d.forward_bytes += DiffBytes(Bytes(oracle.pooled), Bytes(gpu.pooled), "pooled", d.messages);
  if (oracle.sequence.size() != gpu.sequence.size()) {
    d.forward_bytes += 1;
    d.messages.push_back(absl::StrCat("sequence outputs: ", oracle.sequence.size(), " vs ", gpu.sequence.size()));
  } else {
    for (size_t i = 0; i < oracle.sequence.size(); ++i) {
      d.forward_bytes += DiffBytes(Bytes(oracle.sequence[i]), Bytes(gpu.sequence[i]), absl::StrCat("sequence[", i, "]"), d.messages);
    }
  }
  if (oracle.table_bytes.size() != gpu.table_bytes.size() || oracle.state.size() != gpu.state.size()) {
    d.table_bytes += 1;
    d.messages.push_back("different table counts");
    return d;
  }
  for (size_t t = 0; t < oracle.table_bytes.size(); ++t) {
    d.table_bytes += DiffBytes(oracle.table_bytes[t], gpu.table_bytes[t], absl::StrCat("table ", t), d.messages);
    d.state_bytes += DiffBytes(Bytes(oracle.state[t]), Bytes(gpu.state[t]), absl::StrCat("state of table ", t), d.messages);
  }
  return d;
}

}  // namespace gemtb::check
