// KeyedJaggedTensor input (as TorchRec's KJT) and its validation.
#ifndef GEMTB_REFERENCE_EMBEDDING_KJT_H_
#define GEMTB_REFERENCE_EMBEDDING_KJT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/embedding/embedding_config.h"

namespace gemtb::reference {

struct KeyedJaggedTensor {
  std::vector<std::string> keys;   // F feature keys, a permutation-free subset of the config's
  int64_t stride = 0;              // B samples
  std::vector<int32_t> lengths;    // [F*B], key-major: lengths[f*B + b]
  std::vector<int64_t> values;     // ids, ordered key -> sample -> position
  std::vector<float> weights;      // optional, one per value
  bool has_weights = false;        // weights given (possibly empty, when there are no values)
  std::vector<int64_t> offsets;    // optional [F*B+1]; must equal the exclusive cumsum of lengths

  int64_t NumKeys() const { return static_cast<int64_t>(keys.size()); }
};

// Validation codes in the order they are checked.
enum class KjtErrorCode {
  kShape,          // E_KJT_SHAPE
  kNegativeLength, // E_KJT_NEG_LENGTH
  kLengthCap,      // E_KJT_LENGTH_CAP
  kOffsets,        // E_KJT_OFFSETS
  kWeight,         // E_KJT_WEIGHT
  kIdOutOfRange,   // E_ID_OUT_OF_RANGE
};
const char* KjtErrorName(KjtErrorCode code);

// The first failure at its smallest flat index; key/b/p are -1 where they do not apply.
struct InputError {
  KjtErrorCode code;
  int64_t index = -1;
  std::string key;
  int64_t b = -1;
  int64_t p = -1;
  std::string detail;
};

// The feature index (into config.features) of each KJT key, after validation.
struct KjtLayout {
  std::vector<int> feature;       // per KJT key f: index into config.features
  std::vector<int64_t> offsets;   // [F*B+1], derived
};

// Checks every KJT rule in order; returns the first error, or the derived layout.
std::optional<InputError> FindKjtError(const KeyedJaggedTensor& kjt, const EmbeddingConfig& config,
                                       KjtLayout* layout);

// The same as a Status: InvalidArgument "E_KJT_NEG_LENGTH at index 3 (key 'f1', b 1): ...".
absl::Status ValidateKjt(const KeyedJaggedTensor& kjt, const EmbeddingConfig& config, KjtLayout* layout);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_EMBEDDING_KJT_H_
