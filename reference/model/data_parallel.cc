#include "reference/model/data_parallel.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemtb::reference::model {
namespace {

void Append(std::string& out, const float* v, size_t n) {
  if (n > 0) out.append(reinterpret_cast<const char*>(v), n * sizeof(float));
}

// Reads n floats at `at`, advancing it; false past the end.
bool Take(const std::string& in, size_t& at, float* v, size_t n) {
  if (in.size() - at < n * sizeof(float)) return false;
  if (n > 0) std::memcpy(v, in.data() + at, n * sizeof(float));  // an empty sequence's data() may be null
  at += n * sizeof(float);
  return true;
}

}  // namespace

std::pair<int, int> RankBlocks(int grad_blocks, int rank, int world_size) {
  const int per = grad_blocks / world_size;
  return {rank * per, (rank + 1) * per};
}

absl::Status CheckDataParallel(int grad_blocks, int64_t batch, int world_size) {
  if (grad_blocks % world_size != 0)
    return absl::InvalidArgumentError(absl::StrCat("--grad-blocks: ", grad_blocks, " is not a multiple of the world size ",
                                                   world_size, " (each rank runs grad_blocks / world size blocks)"));
  if (grad_blocks > batch)
    return absl::InvalidArgumentError(absl::StrCat("--grad-blocks: ", grad_blocks, " > --batch ", batch,
                                                   " (across processes every block must hold a sample)"));
  return absl::OkStatus();
}

absl::Status CombineDataParallel(const gemtb::model::ModelConfig& config, const data::Batch& batch, int grad_blocks,
                                 DataParallelGroup& group, BatchPassResult<float>& r) {
  const int B = static_cast<int>(batch.size);
  const int R = group.world_size();
  const size_t nt = config.NumTasks();
  const size_t pooled = config.features.size() * static_cast<size_t>(config.d);
  const size_t J = config.sequences.size();
  auto samples_of = [&](int rank) {
    const auto [b0, b1] = RankBlocks(grad_blocks, rank, R);
    return std::pair<int, int>(BlockFirstSample(B, b0, grad_blocks), BlockFirstSample(B, b1, grad_blocks));
  };
  auto event_floats = [&](int b, size_t j) { return static_cast<size_t>(batch.seq_lengths[j * B + b]) * config.d; };

  std::string mine;
  const auto [s0, s1] = samples_of(group.rank());
  for (int b = s0; b < s1; ++b) {
    Append(mine, &r.sample_loss[b], 1);
    Append(mine, r.logits.data() + b * nt, nt);
    Append(mine, r.input_grads[b].pooled.data(), pooled);
    for (size_t j = 0; j < J; ++j) Append(mine, r.input_grads[b].events[j].data(), event_floats(b, j));
  }
  absl::StatusOr<std::vector<std::string>> all = group.AllGather(mine);
  if (!all.ok()) return all.status();
  for (int q = 0; q < R; ++q) {
    const std::string& in = (*all)[q];
    size_t at = 0;
    bool ok = true;
    const auto [q0, q1] = samples_of(q);
    for (int b = q0; b < q1 && ok; ++b) {
      SampleInputGrad<float>& g = r.input_grads[b];
      g.pooled.resize(pooled);
      g.events.resize(J);
      ok = Take(in, at, &r.sample_loss[b], 1) && Take(in, at, r.logits.data() + b * nt, nt) &&
           Take(in, at, g.pooled.data(), pooled);
      for (size_t j = 0; j < J && ok; ++j) {
        g.events[j].resize(event_floats(b, j));
        ok = Take(in, at, g.events[j].data(), g.events[j].size());
      }
    }
    if (!ok || at != in.size())
      return absl::DataLossError(absl::StrCat("data parallel: rank ", q, " sent ", in.size(),
                                              " bytes, not its samples' parts (ranks on different inputs?)"));
  }
  double total = 0;  // fp64 in sample order, as RunBatch sums it
  for (int b = 0; b < B; ++b) total += static_cast<double>(r.sample_loss[b]);
  r.loss = total / std::max(1.0, r.mask_count);
  absl::StatusOr<std::vector<float>> grad = group.ChainSum(r.block_grads);
  if (!grad.ok()) return grad.status();
  r.param_grad = *std::move(grad);
  r.block_grads.clear();
  return absl::OkStatus();
}

}  // namespace gemtb::reference::model
