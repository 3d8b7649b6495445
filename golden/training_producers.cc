// Golden vectors of the CPU reference trainer (reference/model/trainer.h): a few steps of a model
// config from a fresh init. Per step the batch's loss, predictions, labels and masks; after the last
// step the dense parameters (with Adam's bias products, not its m and v), and of every table the
// rows training touched (their ids, weights and rowwise-Adagrad state; untouched rows keep their
// Philox init, which the trainer recreates). Storing touched rows only keeps the tiny model's
// 18k-row tables out of the repository.
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_config.h"
#include "reference/model/trainer.h"
#include "golden/params.h"
#include "golden/registry.h"

namespace gemtb::golden {
namespace {

using nlohmann::json;

std::string ArrayFileName(const std::string& state_name) {
  std::string name = state_name;
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name + ".npy";
}

absl::StatusOr<std::vector<GoldenFile>> Run(const json& j) {
  const golden::Params p(j);
  std::string config_name = "tiny";
  int64_t steps = 3, batch = 8, seed = 1, data_seed = 1, total_steps = 4000, grad_blocks = 16;
  double lr = 2e-3, table_lr = 0.05, table_decay = 1.0;
  bool linear_decay = true;
  GEMTB_RETURN_IF_ERROR(p.String("config", &config_name));
  GEMTB_RETURN_IF_ERROR(p.Int("steps", &steps));
  GEMTB_RETURN_IF_ERROR(p.Int("batch", &batch));
  GEMTB_RETURN_IF_ERROR(p.Int("seed", &seed));
  GEMTB_RETURN_IF_ERROR(p.Int("data_seed", &data_seed));
  GEMTB_RETURN_IF_ERROR(p.Number("lr", &lr));
  GEMTB_RETURN_IF_ERROR(p.Number("table_lr", &table_lr));
  GEMTB_RETURN_IF_ERROR(p.Bool("linear_decay", &linear_decay));
  GEMTB_RETURN_IF_ERROR(p.Int("total_steps", &total_steps));
  GEMTB_RETURN_IF_ERROR(p.Number("table_decay", &table_decay));
  GEMTB_RETURN_IF_ERROR(p.Int("grad_blocks", &grad_blocks));
  absl::StatusOr<gemtb::model::ModelConfig> config = gemtb::model::LoadModelConfig(config_name);
  if (!config.ok()) return config.status();
  reference::model::TrainOptions options;
  options.batch = batch;
  options.seed = static_cast<uint64_t>(seed);
  options.data_seed = static_cast<uint64_t>(data_seed);
  // Every option that shapes the numbers is pinned here, so a change of the trainer's defaults does
  // not silently change what this set means.
  options.lr = static_cast<float>(lr);
  options.table_lr = static_cast<float>(table_lr);
  options.linear_decay = linear_decay;
  options.total_steps = total_steps;
  options.table_decay = static_cast<float>(table_decay);
  options.grad_blocks = static_cast<int>(grad_blocks);
  absl::StatusOr<std::unique_ptr<reference::model::Trainer>> trainer = reference::model::Trainer::Create(*config, options);
  if (!trainer.ok()) return trainer.status();

  std::vector<double> losses, predictions;
  std::vector<uint8_t> labels, masks;
  int64_t tasks = 0;
  for (int64_t s = 0; s < steps; ++s) {
    absl::StatusOr<reference::model::StepResult> r = (*trainer)->Step();
    if (!r.ok()) return r.status();
    losses.push_back(r->loss);
    tasks = batch > 0 ? static_cast<int64_t>(r->predictions.size()) / batch : 0;
    predictions.insert(predictions.end(), r->predictions.begin(), r->predictions.end());
    labels.insert(labels.end(), r->labels.begin(), r->labels.end());
    masks.insert(masks.end(), r->masks.begin(), r->masks.end());
  }
  std::vector<GoldenFile> files;
  files.push_back(OutputFile("losses.npy", io::EncodeFloat(losses, {steps}, io::NpyDType::kFloat64)));
  files.push_back(OutputFile("predictions.npy", io::EncodeFloat(predictions, {steps, batch, tasks}, io::NpyDType::kFloat64)));
  files.push_back(InputFile("labels.npy", io::EncodeUInt8(labels, {steps, batch, tasks})));
  files.push_back(InputFile("masks.npy", io::EncodeUInt8(masks, {steps, batch, tasks})));

  // The state after the last step; tables reduced to the rows training touched.
  const std::vector<std::pair<std::string, io::NpyArray>> state = (*trainer)->StateArrays();
  for (const auto& [name, array] : state) {
    // Adam's m and v (two more copies of the 228k dense parameters of tiny) are left out to keep
    // golden/ small: any error in them reaches the parameters by the last step.
    if (name == "adam.m" || name == "adam.v") continue;
    if (!absl::StartsWith(name, "table.")) {
      files.push_back(OutputFile(ArrayFileName(name), array));
      continue;
    }
    if (!absl::EndsWith(name, ".weights")) continue;
    const std::string table = name.substr(6, name.size() - 6 - 8);
    const std::string adagrad_name = absl::StrCat("table.", table, ".adagrad");
    const io::NpyArray* adagrad = nullptr;
    for (const auto& [other, other_array] : state) {
      if (other == adagrad_name) adagrad = &other_array;
    }
    if (array.dtype != io::NpyDType::kFloat32 || array.shape.size() != 2 || !adagrad ||
        adagrad->dtype != io::NpyDType::kFloat32 || adagrad->shape != std::vector<int64_t>{array.shape[0]}) {
      return absl::InternalError(absl::StrCat("state array '", name, "': expected f32 [rows, dim] with its adagrad [rows]"));
    }
    // A row is touched iff its rowwise-Adagrad sum grew: a zero gradient leaves the row unchanged.
    const int64_t rows = array.shape[0], dim = array.shape[1];
    std::vector<int64_t> touched;
    io::NpyArray weights{io::NpyDType::kFloat32, {0, dim}, {}};
    io::NpyArray sums{io::NpyDType::kFloat32, {0}, {}};
    for (int64_t r = 0; r < rows; ++r) {
      float m;
      std::memcpy(&m, adagrad->data.data() + 4 * r, 4);
      if (m == 0.0f) continue;
      touched.push_back(r);
      weights.data.insert(weights.data.end(), array.data.begin() + 4 * r * dim, array.data.begin() + 4 * (r + 1) * dim);
      sums.data.insert(sums.data.end(), adagrad->data.begin() + 4 * r, adagrad->data.begin() + 4 * (r + 1));
    }
    const int64_t n = static_cast<int64_t>(touched.size());
    weights.shape[0] = n;
    sums.shape[0] = n;
    files.push_back(OutputFile(absl::StrCat("table_", table, "_rows.npy"), io::EncodeInt64(touched, {n})));
    files.push_back(OutputFile(absl::StrCat("table_", table, "_weights.npy"), std::move(weights)));
    files.push_back(OutputFile(absl::StrCat("table_", table, "_adagrad.npy"), std::move(sums)));
  }
  return files;
}

}  // namespace

absl::StatusOr<std::vector<GoldenFile>> RunTrainingProducer(const json& params) { return Run(params); }

void AddTrainingProducers(std::vector<GoldenProducer>& out) {
  out.push_back({"training/tiny_3_steps", "training",
                 {{"config", "tiny"}, {"steps", 3}, {"batch", 8}, {"seed", 3}, {"data_seed", 5}, {"lr", 2e-3},
                  {"table_lr", 0.05}, {"linear_decay", true}, {"total_steps", 4000}, {"table_decay", 1.0},
                  {"grad_blocks", 16}}});
}

}  // namespace gemtb::golden
