// Host-side validation of a KeyedJaggedTensor before any embedding kernel launches: the same
// checks, order, first index and message as the oracle, so a malformed KJT fails with a named error
// and nothing runs on the device.
#ifndef GEMTB_GPU_EMBEDDING_KJT_CHECK_H_
#define GEMTB_GPU_EMBEDDING_KJT_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/embedding/embedding_config.h"

namespace gemtb::gpu::embedding {

// A KJT as host views (TorchRec layout: lengths key-major [F*B], values key -> sample -> position).
struct KjtView {
  absl::Span<const std::string> keys;
  int64_t batch = 0;
  absl::Span<const int32_t> lengths;
  absl::Span<const int64_t> values;
  absl::Span<const float> weights;
  bool has_weights = false;
  absl::Span<const int64_t> offsets;  // optional [F*B+1]
};

// What validation derives: each key's feature (index into config.features) and the offsets.
struct KjtLayout {
  std::vector<int> feature;
  std::vector<int64_t> offsets;  // [F*B+1]
};

// InvalidArgument "E_KJT_NEG_LENGTH at index 3 (key 'f1', b 1): lengths[3]=-1" for the first
// failure (codes E_KJT_SHAPE, E_KJT_NEG_LENGTH, E_KJT_LENGTH_CAP, E_KJT_OFFSETS, E_KJT_WEIGHT,
// E_ID_OUT_OF_RANGE, checked in that order), else the layout.
absl::StatusOr<KjtLayout> CheckKjt(const EmbeddingConfig& config, const KjtView& kjt);

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_KJT_CHECK_H_
