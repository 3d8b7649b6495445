#include "tools/check/embed_gpu.h"

#include "gpu/embedding/api.h"

namespace gemtb::check {

namespace {

namespace ge = gpu::embedding;

ge::KjtView KjtViewOf(const reference::KeyedJaggedTensor& k) {
  ge::KjtView v;
  v.keys = k.keys;
  v.batch = k.stride;
  v.lengths = k.lengths;
  v.values = k.values;
  v.weights = k.weights;
  v.has_weights = k.has_weights;
  v.offsets = k.offsets;
  return v;
}

}  // namespace

EmbedRun RunEmbedGpu(const EmbedCase& c) {
  EmbedRun run;
  auto fail = [&](const absl::Status& s) {
    run.error = s.code() == absl::StatusCode::kInvalidArgument ? std::string(s.message())
                                                                : "CUDA: " + std::string(s.message());
    return run;
  };
  std::vector<ge::HostTable> tables(c.state.tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const reference::TableState& ts = c.state.tables[t];
    tables[t] = {ts.weights, ts.adagrad, ts.adam_m, ts.adam_v, ts.adam_step};
  }
  absl::StatusOr<std::unique_ptr<ge::DeviceTbe>> tbe = ge::DeviceTbe::Create(c.config, tables, c.state.step);
  if (!tbe.ok()) return fail(tbe.status());
  if (absl::Status s = (*tbe)->SetInput(KjtViewOf(c.kjt)); !s.ok()) return fail(s);
  if (absl::Status s = (*tbe)->Forward(); !s.ok()) return fail(s);
  absl::StatusOr<ge::HostOutput> out = (*tbe)->DownloadOutput();
  if (!out.ok()) return fail(out.status());
  run.pooled = out->pooled;
  run.sequence = out->sequence;
  if (absl::Status s = (*tbe)->SetGrads(c.grads.pooled, c.grads.sequence); !s.ok()) return fail(s);
  if (absl::Status s = (*tbe)->BackwardStep(); !s.ok()) return fail(s);
  absl::StatusOr<std::vector<ge::HostTable>> after = (*tbe)->DownloadTables();
  if (!after.ok()) return fail(after.status());
  for (size_t t = 0; t < after->size(); ++t) {
    const ge::HostTable& h = (*after)[t];
    run.table_bytes.push_back(StorageBytes(h.weights, c.config.tables[t].dtype));
    std::vector<float> st = h.adagrad;
    st.insert(st.end(), h.adam_m.begin(), h.adam_m.end());
    st.insert(st.end(), h.adam_v.begin(), h.adam_v.end());
    st.push_back(h.adam_step.b1);
    st.push_back(h.adam_step.b2);
    run.state.push_back(std::move(st));
  }
  return run;
}

}  // namespace gemtb::check
