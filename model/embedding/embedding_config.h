// Table-batched embeddings as data: tables, features, pooling,
// hashing, bounds handling and fused optimizers. Executor-independent: the oracle, the GPU kernels
// and the simulator read the same description.
#ifndef GEMTB_MODEL_EMBEDDING_EMBEDDING_CONFIG_H_
#define GEMTB_MODEL_EMBEDDING_EMBEDDING_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/common/element_type.h"
#include "model/common/enum_names.h"

namespace gemtb {

enum class Pooling { kSum, kMean, kWeightedSum, kNone };
enum class Hashing { kIdentity, kMod, kSplitMix64 };
// error: an invalid id fails validation; zero: it contributes nothing (no term, not counted in MEAN's
// n, no gradient, a +0 row under NONE); remap0: it reads and updates row 0.
enum class BoundsMode { kError, kZero, kRemap0 };
enum class OptimizerKind { kSgd, kRowwiseAdagrad, kAdam };
// none; L2 (gradient += lambda*w, FBGEMM weight_decay_mode=1); decoupled (AdamW / FBGEMM mode 2).
enum class WeightDecayMode { kNone, kL2, kDecoupled };

// The names of these enums in every JSON file (model configs, model.json, embedding specs).
inline constexpr EnumName<Pooling> kPoolingNames[] = {
    {Pooling::kSum, "sum"}, {Pooling::kMean, "mean"}, {Pooling::kWeightedSum, "weighted_sum"}, {Pooling::kNone, "none"}};
inline constexpr EnumName<Hashing> kHashingNames[] = {
    {Hashing::kIdentity, "identity"}, {Hashing::kMod, "mod"}, {Hashing::kSplitMix64, "splitmix64"}};
inline constexpr EnumName<BoundsMode> kBoundsModeNames[] = {
    {BoundsMode::kError, "error"}, {BoundsMode::kZero, "zero"}, {BoundsMode::kRemap0, "remap0"}};
inline constexpr EnumName<OptimizerKind> kOptimizerKindNames[] = {
    {OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kRowwiseAdagrad, "rowwise_adagrad"}, {OptimizerKind::kAdam, "adam"}};
inline constexpr EnumName<WeightDecayMode> kWeightDecayModeNames[] = {
    {WeightDecayMode::kNone, "none"}, {WeightDecayMode::kL2, "l2"}, {WeightDecayMode::kDecoupled, "decoupled"}};
// Table storage formats: the executor types an embedding table may hold.
inline constexpr EnumName<ElementType> kTableDtypeNames[] = {
    {ElementType::kFloat32, DtypeName(Dtype::kFp32)},
    {ElementType::kFloat16, DtypeName(Dtype::kFp16)},
    {ElementType::kBFloat16, DtypeName(Dtype::kBf16)}};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.01f;
  float weight_decay = 0.0f;  // lambda
  WeightDecayMode decay_mode = WeightDecayMode::kNone;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
};

struct TableConfig {
  std::string name;
  int64_t rows = 0;
  int64_t dim = 0;  // a multiple of 4
  ElementType dtype = ElementType::kFloat32;  // fp32, fp16 or bf16 storage
  Hashing hashing = Hashing::kIdentity;
  BoundsMode bounds = BoundsMode::kError;
  uint64_t hash_seed = 0;          // seed_t of splitmix64 hashing (default h(t))
  bool stochastic_rounding = true; // fp16/bf16 updates: SR from Philox, else RNE
  OptimizerConfig optimizer;
};

struct FeatureConfig {
  std::string key;
  int table = 0;  // feature -> table map; several features may share a table
  Pooling pooling = Pooling::kSum;
  int64_t max_len = 1 << 20;  // E_KJT_LENGTH_CAP
};

struct EmbeddingConfig {
  std::vector<TableConfig> tables;
  std::vector<FeatureConfig> features;  // in key order
  uint64_t seed = 0;                     // Philox key for init and stochastic rounding
};

}  // namespace gemtb

#endif  // GEMTB_MODEL_EMBEDDING_EMBEDDING_CONFIG_H_
