#include "reference/model/generated_set.h"

#include <cmath>
#include <optional>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "model/data/batch.h"
#include "model/data/generator.h"
#include "model/data/shape_from_config.h"
#include "nlohmann/json.hpp"

namespace gemtb::reference::model {
namespace {

// Shortest round-trip text of a double (nlohmann prints doubles that way); null when not finite.
nlohmann::ordered_json Number(double x) { return std::isfinite(x) ? nlohmann::ordered_json(x) : nullptr; }

}  // namespace

absl::StatusOr<GeneratedSet> GenerateSet(const ::gemtb::model::ModelConfig& config, const data::DataParams& params,
                                         int64_t samples, int64_t first, int64_t seed, int threads) {
  absl::StatusOr<data::Generator> generator = data::Generator::Create(params, data::ShapeFromConfig(config));
  if (!generator.ok()) return generator.status();

  // One sample per task, each with its own slot, so threads only change the timing.
  std::vector<data::Sample> generated(static_cast<size_t>(samples));
  {
    std::optional<tbb::global_control> limit;
    if (threads > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    tbb::parallel_for(int64_t{0}, samples, [&](int64_t b) {
      generator->Generate(static_cast<uint64_t>(seed), first + b, &generated[static_cast<size_t>(b)]);
    });
  }
  data::Batch batch;
  data::AssembleBatch(generator->shape(), generated.data(), samples, &batch);

  const data::DataShape& shape = generator->shape();
  const int64_t T = static_cast<int64_t>(shape.tasks.size()), J = static_cast<int64_t>(shape.sequences.size());
  const int64_t K = static_cast<int64_t>(batch.keys.size());
  GeneratedSet set;
  nlohmann::ordered_json meta;
  meta["config"] = config.name;
  meta["gen_version"] = params.version;
  meta["seed"] = seed;
  meta["first"] = first;
  meta["samples"] = samples;
  meta["keys"] = batch.keys;
  std::vector<std::string> sequence_names;
  for (const data::SequenceShape& s : shape.sequences) sequence_names.push_back(s.name);
  meta["sequences"] = sequence_names;
  meta["dense"] = shape.dense;
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
  for (int64_t t = 0; t < T; ++t) {
    const metrics::NeUnit unit = metrics::MakeNeUnit(batch.prob.data() + t, batch.label.data() + t,
                                                     batch.mask.data() + t, samples, T);
    GeneratedTask task{shape.tasks[static_cast<size_t>(t)].name, metrics::EvaluateNe(&unit, 1), false};
    const metrics::NeResult& ne = task.oracle;
    // NE divides by the entropy of the mean label: with no positives or no negatives it has no meaning.
    task.defined = ne.positives > 0 && ne.positives < ne.count;
    nlohmann::ordered_json entry;
    entry["name"] = task.name;
    entry["masked"] = ne.count;
    entry["positives"] = ne.positives;
    entry["mean_label"] = Number(ne.mean_label);
    entry["oracle_ne"] = task.defined ? Number(ne.ne) : nullptr;
    entry["oracle_calibration"] = Number(ne.calibration);
    tasks.push_back(entry);
    set.tasks.push_back(std::move(task));
  }
  meta["tasks"] = tasks;
  set.meta_json = meta.dump(2) + "\n";

  set.arrays.emplace_back("lengths", io::EncodeInt32(batch.lengths, {K * samples}));
  set.arrays.emplace_back("ids", io::EncodeInt64(batch.values, {static_cast<int64_t>(batch.values.size())}));
  set.arrays.emplace_back("seq_lengths", io::EncodeInt32(batch.seq_lengths, {J, samples}));
  set.arrays.emplace_back("dense", io::EncodeFloat(std::vector<double>(batch.dense.begin(), batch.dense.end()),
                                                   {samples, shape.dense}, io::NpyDType::kFloat32));
  set.arrays.emplace_back("surface", io::EncodeInt32(batch.surface, {samples}));
  set.arrays.emplace_back("labels", io::EncodeUInt8(batch.label, {samples, T}));
  set.arrays.emplace_back("masks", io::EncodeUInt8(batch.mask, {samples, T}));
  set.arrays.emplace_back("probs", io::EncodeFloat(batch.prob, {samples, T}, io::NpyDType::kFloat64));
  return set;
}

}  // namespace gemtb::reference::model
