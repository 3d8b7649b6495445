// The GEM-like model's configuration as data: one JSON per config
// (model/configs/<name>.json), parsed and validated into ModelConfig. The data generator, the CPU
// trainer and the op-graph expansion (model_graph.h) all read this struct; nothing else hard-codes
// the model.
//
// Compact groups: a table, feature or sequence entry in the JSON may carry "count": n, which the
// loader expands into n entries named <name>_0 .. <name>_{n-1} (a feature group over a table group of
// the same count maps feature i to table i; over a single table, every feature shares it). So
// ModelConfig always lists every table, feature and sequence individually, in JSON order.
#ifndef GEMTB_MODEL_DESCRIPTION_MODEL_CONFIG_H_
#define GEMTB_MODEL_DESCRIPTION_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/attention/activation_table.h"
#include "model/common/element_type.h"
#include "model/common/enum_names.h"
#include "model/embedding/embedding_config.h"
#include "nlohmann/json.hpp"

namespace gemtb::model {

// One embedding table. `pooling` is the default for features reading it; sequences read it with
// NONE pooling regardless.
struct TableSpec {
  std::string name;
  int64_t rows = 0;
  int64_t dim = 0;                              // a multiple of 4; equals d in every shipped config
  ElementType dtype = ElementType::kFloat32;    // storage: fp32 | fp16 | bf16
  Pooling pooling = Pooling::kMean;             // JSON "sum" | "mean" | "weighted_sum" | "none"
  Hashing hashing = Hashing::kMod;              // JSON "identity" | "mod" | "splitmix64"
  OptimizerKind optimizer = OptimizerKind::kRowwiseAdagrad;  // "sgd" | "rowwise_adagrad" | "adam"
};

// One non-sequence sparse feature (a multi-hot bag per sample).
struct SparseFeatureSpec {
  std::string name;
  std::string table;      // a TableSpec name
  int table_index = 0;    // index into ModelConfig::tables (resolved by the loader)
  Pooling pooling = Pooling::kMean;  // the table's pooling unless the JSON overrides it
  int64_t max_len = 1;    // ids per bag at most (E_KJT_LENGTH_CAP)
};

enum class SeqAttentionKind { kWindow, kBlock };  // window |i-t| <= w, or 64-token blocks
enum class RopeKind { kNone, kPosition, kLogDt };  // RoPE angle: token position or log(1+dt)
inline constexpr EnumName<RopeKind> kRopeKindNames[] = {
    {RopeKind::kNone, "none"}, {RopeKind::kPosition, "position"}, {RopeKind::kLogDt, "log_dt"}};
// The sequence self-attention acts the model is defined for: pointwise SiLU (GDPA) or softmax.
inline constexpr EnumName<Activation> kSequenceActNames[] = {
    {Activation::kSilu, ActivationName(Activation::kSilu)},
    {Activation::kSoftmax, ActivationName(Activation::kSoftmax)}};

// One event sequence j: (item, action, dt-bucket) per event, the latest Lmax kept.
struct SequenceSpec {
  std::string name;
  int64_t lmax = 0;
  std::string item_table, action_table, dt_table;  // TableSpec names (tables may be shared)
  int item_table_index = 0, action_table_index = 0, dt_table_index = 0;
  SeqAttentionKind attention = SeqAttentionKind::kWindow;
  int64_t window = 0;       // w (kWindow): keys with |i - t| <= w
  int64_t block = 64;       // block size (kBlock)
  Activation act = Activation::kSilu;  // self-attention (b): SiLU scale 1/(2w+1) (1/block) or softmax
  RopeKind rope = RopeKind::kPosition;
};

struct DenseSpec {
  int64_t m = 0;    // dense floats per sample
  int64_t n_d = 0;  // Linear(m -> n_d * d) gives n_d tokens
};

struct ExpertsSpec {
  int64_t count = 1;        // 1 = a plain Wukong MLP; >1: y = sum_e MLP_e(x), each H / count wide
  int64_t shard_group = 1;  // S_E: ranks an expert's params are FSDP-sharded over (sim only)
};

struct WukongSpec {
  int64_t k = 0;    // Y in R^{n_z x k}
  int64_t n_f = 0;  // FMB output tokens
  int64_t n_l = 0;  // LCB output tokens (n_f + n_l = n_x)
  int64_t hidden = 0;  // H: the FMB MLP's hidden width, summed over experts
  ExpertsSpec experts;
};

struct ArchSpec {
  int64_t n_x = 0;  // non-sequence tokens
  int64_t n_s = 0;  // summary (CLS) tokens X_sum
  int64_t k_p = 0;  // PMA seeds per sequence
  int64_t k_r = 0;  // K_r: recent tokens kept per sequence
  WukongSpec wukong;
  int64_t f = 0;    // FFN width multiplier (f * d)
  int64_t layers = 0;  // L
  bool compskip = false;  // alternate seq (a) [odd layers] / (b) [even layers] instead of both
};

struct HeadSpec {
  // MLP widths from input to output, e.g. {448, 128, 64, 2}: the first equals
  // n_s*d + J*(n_s+k_p+K_r)*d, the last the number of tasks (both validated).
  std::vector<int64_t> widths;
};

enum class TaskObjective { kCtr, kConversion };
inline constexpr EnumName<TaskObjective> kTaskObjectiveNames[] = {
    {TaskObjective::kCtr, "ctr"}, {TaskObjective::kConversion, "conversion"}};

struct TaskSpec {
  std::string name;
  TaskObjective objective = TaskObjective::kCtr;
  std::vector<int> surfaces;  // surface ids in [0, ModelConfig::surfaces); mask_t = [surface in surfaces]
};

struct ModelConfig {
  int version = 1;
  std::string name;    // "tiny", "small", "gem-scale", ...
  int64_t d = 0;       // token width
  int64_t heads = 0;   // attention heads (Dqk = Dv = d / heads)
  std::vector<TableSpec> tables;
  std::vector<SparseFeatureSpec> features;  // non-sequence features, in key order
  DenseSpec dense;
  std::vector<SequenceSpec> sequences;       // j = index
  ArchSpec arch;
  HeadSpec head;
  std::vector<TaskSpec> tasks;
  int surfaces = 1;

  // Derived sizes.
  int64_t NumSequences() const { return static_cast<int64_t>(sequences.size()); }
  int64_t NumTasks() const { return static_cast<int64_t>(tasks.size()); }
  // Tokens per sequence summary S_sum,j: n_s + k_p + K_r.
  int64_t SummaryTokens() const { return arch.n_s + arch.k_p + arch.k_r; }
  // Wukong's input tokens n_z = n_x + J (n_s + k_p + K_r).
  int64_t InteractionTokens() const { return arch.n_x + NumSequences() * SummaryTokens(); }
  // Head input width n_s d + J (n_s + k_p + K_r) d.
  int64_t HeadInputWidth() const { return (arch.n_s + NumSequences() * SummaryTokens()) * d; }
  int64_t HeadDim() const { return heads > 0 ? d / heads : 0; }
};

// Parses and validates a config JSON object. Unknown keys are errors; every error names the JSON
// path and the bad value (e.g. `arch.wukong.n_f: 5 + n_l 4 != n_x 8`).
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& json);
absl::StatusOr<ModelConfig> ParseModelConfigText(std::string_view text);

// `name_or_path` is "tiny" | "small" | "gem-scale" (the committed model/configs/<name>.json in
// the data folder, data_dir.h) or a path to a JSON file.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& name_or_path);

// The committed configs' path for a built-in name, or "" if the name is not built in.
std::string BuiltinConfigPath(std::string_view name);

// Parameter counts by the counting rules (weights + biases). Sparse = sum of rows * dim.
int64_t SparseParamCount(const ModelConfig& config);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_MODEL_CONFIG_H_
