// The host side of a DeviceTbe's tables, free of CUDA so the CPU tests run it: each table's
// parameters from its config and prior state, the storage image of its weights, the optimizer
// arrays the device keeps for it, Adam's per-step bias products, and the host image rebuilt from the
// downloaded arrays. The oracle's TableState carries Adam's bias products for every table whatever
// its optimizer (only Adam tables advance them), so they are host bookkeeping kept for every table.
#ifndef GEMTB_GPU_EMBEDDING_HOST_TABLES_H_
#define GEMTB_GPU_EMBEDDING_HOST_TABLES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/embedding/api.h"
#include "gpu/embedding/tbe_params.h"

namespace gemtb::gpu::embedding {

size_t ElementBytes(ElementType t);

// Storage bits of widened values the table can hold exactly, and back.
std::vector<uint8_t> ToStorage(const std::vector<float>& w, ElementType t);
std::vector<float> FromStorage(const std::vector<uint8_t>& bytes, ElementType t);

// Which optimizer-state arrays the device keeps for a table.
bool KeepsAdagrad(const TableConfig& c);
bool KeepsAdam(const TableConfig& c);

// Table `table`'s parameters, without device pointers. `prior` null: the Philox init (zero state,
// Adam's products 1); else its sizes are checked (the message names the table and the array) and
// its Adam products are kept whatever the optimizer.
absl::StatusOr<TableParams> TableParamsOf(const TableConfig& c, int table, int64_t row_offset, const HostTable* prior);

// Each KJT key's parameters (in key order) for a checked layout of `batch` samples, without device
// pointers (a NONE key's sequence output, the sequence gradients): table, pooling, first value, and a
// pooled key's first column in the pooled output, whose width goes to *pooled_width.
std::vector<FeatureParams> FeatureParamsOf(const EmbeddingConfig& config, const KjtLayout& layout, int64_t batch,
                                           int64_t* pooled_width);

// Adam's bias products of every Adam table advance once per backward step, touched or not (the
// oracle's EmbeddingBackwardStep); the other tables' products are left as they are. Returns whether
// any changed (the device copy of the parameters is then stale).
bool AdvanceAdamSteps(const EmbeddingConfig& config, std::vector<TableParams>& tables);

// A table's host image from its downloaded arrays (each empty where the optimizer keeps none).
HostTable HostTableOf(const TableParams& p, const std::vector<uint8_t>& weight_bytes, std::vector<float> adagrad,
                      std::vector<float> adam_m, std::vector<float> adam_v);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_HOST_TABLES_H_
