#include "tools/check/embed_gpu.h"

#include "gpu/embedding/api.h"
#include "tools/check/kjt_view.h"
#include "model/common/status_macros.h"

namespace gemtb::check {

namespace {

namespace ge = gpu::embedding;


}  // namespace

absl::Status ValidateEmbedKjtOnGpuHost(const EmbedCase& c) {
  absl::StatusOr<ge::KjtLayout> layout = ge::CheckKjt(c.config, KjtViewOf(c.kjt));
  return layout.ok() ? absl::OkStatus() : layout.status();
}

absl::StatusOr<EmbedGpuResult> RunEmbedGpuCase(const EmbedCase& c, bool step, const EmbedGpuOptions& options) {
  std::vector<ge::HostTable> tables(c.state.tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const reference::TableState& ts = c.state.tables[t];
    tables[t] = {ts.weights, ts.adagrad, ts.adam_m, ts.adam_v, ts.adam_step};
  }
  ge::TbeOptions tbe_options;
  tbe_options.batch_block = options.batch_block;
  tbe_options.split_update = options.split_update;
  absl::StatusOr<std::unique_ptr<ge::DeviceTbe>> tbe = ge::DeviceTbe::Create(c.config, tables, c.state.step, tbe_options);
  if (!tbe.ok()) return tbe.status();
  GEMTB_RETURN_IF_ERROR((*tbe)->SetInput(KjtViewOf(c.kjt)));
  GEMTB_RETURN_IF_ERROR((*tbe)->Forward());
  absl::StatusOr<ge::HostOutput> out = (*tbe)->DownloadOutput();
  if (!out.ok()) return out.status();
  EmbedGpuResult r;
  r.output.pooled = std::move(out->pooled);
  r.output.pooled_width = out->pooled_width;
  r.output.sequence_keys = std::move(out->sequence_keys);
  r.output.sequence = std::move(out->sequence);
  r.state = c.state;
  if (!step) return r;
  GEMTB_RETURN_IF_ERROR((*tbe)->SetGrads(c.grads.pooled, c.grads.sequence));
  GEMTB_RETURN_IF_ERROR((*tbe)->BackwardStep());
  if (options.split_update) {
    absl::StatusOr<const float*> sums = (*tbe)->RunSquareSums();
    if (!sums.ok()) return sums.status();
    GEMTB_RETURN_IF_ERROR((*tbe)->ApplyRows(*sums));
  }
  absl::StatusOr<std::vector<ge::HostTable>> after = (*tbe)->DownloadTables();
  if (!after.ok()) return after.status();
  for (size_t t = 0; t < after->size(); ++t) {
    ge::HostTable& h = (*after)[t];
    reference::TableState& ts = r.state.tables[t];
    ts.weights = std::move(h.weights);
    ts.adagrad = std::move(h.adagrad);
    ts.adam_m = std::move(h.adam_m);
    ts.adam_v = std::move(h.adam_v);
    ts.adam_step = h.adam_step;
  }
  r.state.step = (*tbe)->step();
  return r;
}

EmbedRun RunEmbedGpu(const EmbedCase& c, const EmbedGpuOptions& options) {
  EmbedRun run;
  absl::StatusOr<EmbedGpuResult> r = RunEmbedGpuCase(c, true, options);
  if (!r.ok()) {
    const absl::Status& s = r.status();
    run.error = s.code() == absl::StatusCode::kInvalidArgument ? std::string(s.message())
                                                                : "CUDA: " + std::string(s.message());
    return run;
  }
  return EmbedRunOf(c.config, r->output, r->state);
}

}  // namespace gemtb::check
