#include "reference/model/trainer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/data/batch.h"
#include "model/data/generator.h"
#include "model/data/parallel_batch.h"
#include "model/data/shape_from_config.h"
#include "model/embedding/embedding_math.h"
#include "model/metrics/ne.h"
#include "model/sharding/sharding_plan_json.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"
#include "reference/model/batch.h"
#include "reference/model/pipeline_arrays.h"
#include "reference/model/batch_pass.h"
#include "reference/sharding/sharded_executor.h"

namespace gemtb::reference::model {

struct Trainer::Impl {
  explicit Impl(data::Generator g) : generator(std::move(g)) {}
  data::Generator generator;
  std::unique_ptr<tbb::task_arena> arena;
  std::shared_ptr<const NpyDataset> training_set;
  DataParallelGroup* data_parallel = nullptr;
  // Sharded tables: the plan, its world, and the executor (made at the first Step from the tables then).
  std::optional<ShardingPlanSpec> plan;
  int plan_world = 1, plan_gpus_per_host = 1;
  Collectives* plan_collectives = nullptr;
  std::unique_ptr<ShardedExecutor> sharded;
  // The semi-synchronous pipeline's next step: its batch and lookups, made during the step before
  // (or loaded from a checkpoint, `routed` false: a sharded executor has not seen the batch yet).
  struct Pending {
    int64_t step = 0;
    data::Batch batch;
    EmbeddingOutput output;
    bool routed = true;
  };
  std::optional<Pending> pending;

  data::Batch StepBatch(const TrainOptions& options, int64_t step) {
    return training_set ? DatasetBatch(*training_set, step * options.batch, options.batch)
                        : Generate(options.data_seed, step * options.batch, options.batch);
  }

  // Samples [first, first + count) of `seed`, generated in parallel (each is a pure function of its index).
  data::Batch Generate(uint64_t seed, int64_t first, int64_t count) {
    auto run = [&] { return data::GenerateBatchParallel(generator, seed, first, count); };
    return arena ? arena->execute(run) : run();
  }
};

namespace {

// The model's inputs from the TBE output: pooled rows as they are, events = (item + action) + dt.
struct FloatInputs {
  std::vector<std::vector<float>> events;  // per j: [sum_b len, d]
  std::vector<float> dense;
  std::vector<SampleInput<float>> inputs;
};

FloatInputs MakeInputs(const gemtb::model::ModelConfig& config, const data::Batch& batch, const EmbeddingOutput& out) {
  const int64_t B = batch.size;
  const int d = static_cast<int>(config.d);
  const int J = static_cast<int>(config.sequences.size());
  FloatInputs f;
  f.events.resize(J);
  for (int j = 0; j < J; ++j) {
    const std::vector<float>& it = out.sequence[3 * j];
    const std::vector<float>& ac = out.sequence[3 * j + 1];
    const std::vector<float>& dt = out.sequence[3 * j + 2];
    f.events[j].resize(it.size());
    for (size_t e = 0; e < it.size(); ++e) f.events[j][e] = (it[e] + ac[e]) + dt[e];
  }
  f.dense = batch.dense;
  f.inputs.resize(B);
  std::vector<int64_t> offset(J, 0);
  for (int64_t b = 0; b < B; ++b) {
    SampleInput<float>& in = f.inputs[b];
    in.pooled = out.pooled.data() + static_cast<size_t>(b) * out.pooled_width;
    in.dense = f.dense.data() + static_cast<size_t>(b) * config.dense.m;
    for (int j = 0; j < J; ++j) {
      const int len = batch.seq_lengths[static_cast<size_t>(j) * B + b];
      in.events.push_back(f.events[j].data() + offset[j] * d);
      in.lengths.push_back(len);
      offset[j] += len;
    }
  }
  return f;
}

std::vector<float> ToFloat(const std::vector<uint8_t>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const gemtb::model::ModelConfig& config,
                                                         const TrainOptions& options) {
  GEMTB_RETURN_IF_ERROR(gemtb::model::ValidateTrainOptions(options));
  if (options.grad_blocks < 1)
    return absl::InvalidArgumentError(absl::StrCat("grad_blocks: ", options.grad_blocks, " must be >= 1"));
  if (options.threads < 0) return absl::InvalidArgumentError(absl::StrCat("threads: ", options.threads, " must be >= 0"));
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  t->options_ = options;
  absl::StatusOr<GemModel> model = GemModel::Create(config);
  if (!model.ok()) return model.status();
  t->model_ = *std::move(model);
  absl::StatusOr<data::DataParams> params = data::LoadDataParams(options.data.empty() ? config.name : options.data);
  if (!params.ok()) return params.status();
  absl::StatusOr<data::Generator> gen = data::Generator::Create(*params, data::ShapeFromConfig(config));
  if (!gen.ok()) return gen.status();
  t->impl_ = std::make_unique<Impl>(*std::move(gen));
  if (options.threads > 0) t->impl_->arena = std::make_unique<tbb::task_arena>(options.threads);
  t->emb_ = ModelEmbeddingConfig(config, options.table_lr, options.seed);
  GEMTB_RETURN_IF_ERROR(ValidateEmbeddingConfig(t->emb_));
  t->state_.params = InitParams(t->model_.layout(), options.seed);
  t->state_.adam_m.assign(t->state_.params.size(), 0.0f);
  t->state_.adam_v.assign(t->state_.params.size(), 0.0f);
  t->state_.tables = InitEmbeddingState(t->emb_);
  return t;
}

absl::StatusOr<StepResult> Trainer::Step() {
  const int64_t B = options_.batch;
  const float table_lr = ScheduledRate(options_.table_lr, options_.table_decay, state_.step, options_.total_steps,
                                       options_.linear_decay);
  for (TableConfig& t : emb_.tables) t.optimizer.lr = table_lr;
  Impl& im = *impl_;
  const bool semi_sync = options_.pipeline == gemtb::model::SparsePipeline::kSemiSync;
  if (im.plan && !im.sharded) {
    absl::StatusOr<std::unique_ptr<ShardedExecutor>> e = ShardedExecutor::Create(
        emb_, *im.plan, im.plan_world, im.plan_gpus_per_host, state_.tables, im.plan_collectives);
    if (!e.ok()) return e.status();
    im.sharded = *std::move(e);
  }
  auto forward = [&](const KeyedJaggedTensor& kjt) -> absl::StatusOr<EmbeddingOutput> {
    auto run = [&]() -> absl::StatusOr<EmbeddingOutput> {
      if (im.sharded) return im.sharded->Forward(kjt);
      return EmbeddingForward(emb_, state_.tables, kjt, {}, options_.threads);
    };
    return im.arena ? im.arena->execute(run) : run();
  };
  // The step's batch and lookups: made during the last step under the semi-synchronous pipeline.
  std::optional<Impl::Pending> pending;
  if (im.pending && im.pending->step == state_.step) pending = std::move(im.pending);
  im.pending.reset();
  const data::Batch batch = pending ? std::move(pending->batch) : im.StepBatch(options_, state_.step);
  const KeyedJaggedTensor kjt = KjtOfBatch(batch);
  EmbeddingOutput emb_out;
  if (pending) {
    emb_out = std::move(pending->output);
    // A checkpoint's lookups: the executor takes the batch again for its backward's routing (the
    // lookups it returns now read updated tables; the checkpoint's are the step's).
    if (!pending->routed && im.sharded) GEMTB_RETURN_IF_ERROR(forward(kjt).status());
  } else {
    absl::StatusOr<EmbeddingOutput> emb = forward(kjt);
    if (!emb.ok()) return emb.status();
    emb_out = *std::move(emb);
  }
  const FloatInputs in = MakeInputs(config_, batch, emb_out);
  const std::vector<float> labels = ToFloat(batch.label), masks = ToFloat(batch.mask);
  BatchPassOptions pass;
  pass.threads = options_.threads;
  pass.blocks = options_.grad_blocks;
  DataParallelGroup* dp = impl_->data_parallel;
  if (dp != nullptr) std::tie(pass.block_begin, pass.block_end) = RankBlocks(options_.grad_blocks, dp->rank(), dp->world_size());
  BatchPassResult<float> r = RunBatch(model_, state_.params.data(), in.inputs, labels, masks, pass);
  if (dp != nullptr) GEMTB_RETURN_IF_ERROR(CombineDataParallel(config_, batch, options_.grad_blocks, *dp, r));

  // The semi-synchronous pipeline: the next step's lookups, before this step's table update.
  if (semi_sync) {
    Impl::Pending next;
    next.step = state_.step + 1;
    next.batch = im.StepBatch(options_, next.step);
    absl::StatusOr<EmbeddingOutput> emb = forward(KjtOfBatch(next.batch));
    if (!emb.ok()) return emb.status();
    next.output = *std::move(emb);
    im.pending = std::move(next);
  }

  // Table gradients in the TBE's layout; a sequence event's gradient goes to its item, action and dt rows.
  const int d = static_cast<int>(config_.d);
  const int F = static_cast<int>(config_.features.size());
  const int J = static_cast<int>(config_.sequences.size());
  EmbeddingGrads grads;
  grads.pooled.resize(static_cast<size_t>(B) * F * d);
  for (int64_t b = 0; b < B; ++b)
    std::copy(r.input_grads[b].pooled.begin(), r.input_grads[b].pooled.end(), grads.pooled.begin() + b * F * d);
  for (int j = 0; j < J; ++j) {
    std::vector<float> g;
    g.reserve(in.events[j].size());
    for (int64_t b = 0; b < B; ++b) g.insert(g.end(), r.input_grads[b].events[j].begin(), r.input_grads[b].events[j].end());
    for (int k = 0; k < 3; ++k) grads.sequence.push_back(g);
  }
  if (im.sharded) {
    // The executor's backward takes its oldest outstanding forward: this step's batch.
    absl::Status s =
        im.arena ? im.arena->execute([&] { return im.sharded->Backward(grads); }) : im.sharded->Backward(grads);
    GEMTB_RETURN_IF_ERROR(s);
    // The shards hold the tables now; a copy comes back with GatherTables.
    ++state_.tables.step;
    for (TableState& t : state_.tables.tables) t = TableState{};
  } else {
    GEMTB_RETURN_IF_ERROR(EmbeddingBackwardStep(emb_, state_.tables, kjt, grads, {}, options_.threads));
  }

  // Dense Adam, fp32 op by op.
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  adam.lr = ScheduledRate(options_.lr, 1.0f, state_.step, options_.total_steps, options_.linear_decay);
  adam.beta1 = options_.beta1;
  adam.beta2 = options_.beta2;
  adam.eps = options_.eps;
  const embedding::AdamStep bias = embedding::NextAdamStep({state_.adam_b1, state_.adam_b2}, adam);
  state_.adam_b1 = bias.b1;
  state_.adam_b2 = bias.b2;
  embedding::AdamRow(state_.params.data(), r.param_grad.data(), static_cast<int64_t>(state_.params.size()),
                     state_.adam_m.data(), state_.adam_v.data(), bias, adam);
  ++state_.step;

  StepResult out;
  out.step = state_.step;
  out.loss = r.loss;
  out.predictions.resize(r.logits.size());
  for (size_t e = 0; e < r.logits.size(); ++e) out.predictions[e] = Sigmoid(static_cast<double>(r.logits[e]));
  out.labels = batch.label;
  out.masks = batch.mask;
  out.true_p = batch.prob;
  if (keep_gradients_) {
    out.param_grad = std::move(r.param_grad);
    out.pooled_grad = std::move(grads.pooled);
    for (int j = 0; j < J; ++j) out.event_grads.push_back(std::move(grads.sequence[static_cast<size_t>(3 * j)]));
  }
  return out;
}

void Trainer::UseTrainingSet(std::shared_ptr<const NpyDataset> set) { impl_->training_set = std::move(set); }

absl::Status Trainer::UseDataParallel(DataParallelGroup* group) {
  GEMTB_RETURN_IF_ERROR(CheckDataParallel(options_.grad_blocks, options_.batch, group->world_size()));
  impl_->data_parallel = group;
  return absl::OkStatus();
}

absl::Status Trainer::UseShardedTables(const ShardingPlanSpec& plan, int world_size, int gpus_per_host,
                                       Collectives* collectives) {
  GEMTB_RETURN_IF_ERROR(ValidateShardingPlan(plan, PlanTablesOf(emb_), world_size, gpus_per_host));
  if (collectives != nullptr && plan.fully_sharded && plan.gather == GatherMode::kTouched)
    return absl::InvalidArgumentError(
        "plan.gather: 'touched' runs in one process only (each replica group's ids would have to reach every "
        "rank); use 'all' across processes");
  if (options_.batch % world_size != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--batch: ", options_.batch, " is not divisible by the plan's world size ", world_size));
  if (options_.pipeline == gemtb::model::SparsePipeline::kSemiSync && plan.fully_sharded)
    return absl::InvalidArgumentError(
        "plan.fully_sharded: the semi-synchronous pipeline does not run with fully sharded 2D tables (the next "
        "batch's gather would precede this batch's update of the gathered copy); use a 1D or 2D (V2) plan");
  impl_->plan = plan;
  impl_->plan_world = world_size;
  impl_->plan_gpus_per_host = gpus_per_host;
  impl_->plan_collectives = collectives;
  impl_->sharded.reset();
  return absl::OkStatus();
}

absl::Status Trainer::GatherTables() {
  if (!impl_->sharded) return absl::OkStatus();
  absl::StatusOr<ShardedRun> run = impl_->sharded->Result();
  if (!run.ok()) return run.status();
  const int64_t step = state_.tables.step;
  state_.tables = std::move(run->state);
  state_.tables.step = step;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Trainer::Evaluate(int64_t first, int64_t count) {
  return EvaluateBatches(count, [&](int64_t at, int64_t n) {
    return impl_->Generate(options_.data_seed, kHeldOutFirstIndex + first + at, n);
  });
}

absl::StatusOr<EvalResult> Trainer::Evaluate(const NpyDataset& set) {
  return EvaluateBatches(set.size, [&](int64_t at, int64_t n) { return DatasetBatch(set, at, n); });
}

absl::StatusOr<EvalResult> Trainer::EvaluateBatches(int64_t count,
                                                    const std::function<data::Batch(int64_t, int64_t)>& batch_at) {
  const int T = static_cast<int>(config_.NumTasks());
  constexpr int64_t kChunk = 256;
  std::vector<double> pred, prob;
  std::vector<uint8_t> label, mask;
  for (int64_t at = 0; at < count; at += kChunk) {
    const int64_t n = std::min(kChunk, count - at);
    const data::Batch batch = batch_at(at, n);
    absl::StatusOr<EmbeddingOutput> emb = EmbeddingForward(emb_, state_.tables, KjtOfBatch(batch), {}, options_.threads);
    if (!emb.ok()) return emb.status();
    const FloatInputs in = MakeInputs(config_, batch, *emb);
    BatchPassOptions pass;
    pass.backward = false;
    pass.threads = options_.threads;
    pass.blocks = options_.grad_blocks;
    const BatchPassResult<float> r = RunBatch(model_, state_.params.data(), in.inputs, ToFloat(batch.label),
                                              ToFloat(batch.mask), pass);
    for (float z : r.logits) pred.push_back(Sigmoid(static_cast<double>(z)));
    prob.insert(prob.end(), batch.prob.begin(), batch.prob.end());
    label.insert(label.end(), batch.label.begin(), batch.label.end());
    mask.insert(mask.end(), batch.mask.begin(), batch.mask.end());
  }
  const bool has_prob = std::all_of(prob.begin(), prob.end(), [](double p) { return !std::isnan(p); });
  EvalResult e;
  e.samples = count;
  for (int t = 0; t < T; ++t) {
    const metrics::NeUnit model_unit = metrics::MakeNeUnit(pred.data() + t, label.data() + t, mask.data() + t, count, T);
    const metrics::NeResult m = metrics::EvaluateNe(&model_unit, 1);
    double oracle = std::nan("");
    if (has_prob) {
      const metrics::NeUnit oracle_unit = metrics::MakeNeUnit(prob.data() + t, label.data() + t, mask.data() + t, count, T);
      oracle = metrics::EvaluateNe(&oracle_unit, 1).ne;
    }
    e.ne.push_back(m.ne);
    e.oracle_ne.push_back(oracle);
    e.calibration.push_back(m.calibration);
    e.positives.push_back(m.positives);
    e.count.push_back(m.count);
  }
  return e;
}

namespace {

absl::StatusOr<std::vector<float>> AsF32(const io::NpyArray& a, const std::string& name, size_t count) {
  if (a.dtype != io::NpyDType::kFloat32 || static_cast<size_t>(a.NumElements()) != count)
    return absl::FailedPreconditionError(absl::StrCat(name, ": expected float32 with ", count, " elements, got ",
                                                      io::NpyDTypeName(a.dtype), " ", io::ShapeString(a.shape)));
  std::vector<float> v(count);
  std::memcpy(v.data(), a.data.data(), count * sizeof(float));
  return v;
}

// The entries of the "options" array, in order, by the TrainOptions field (or model property) each holds.
constexpr const char* kOptionNames[] = {"seed",          "data_seed",  "batch",       "lr",    "table_lr",
                                        "beta1",         "beta2",      "eps",         "grad_blocks",
                                        "linear_decay",  "table_decay", "total_steps", "parameter count"};

std::string OptionName(size_t i) {
  return i < std::size(kOptionNames) ? kOptionNames[i] : absl::StrCat("entry ", i);
}

// Shortest text that reads back to `v`; as a float when `v` is one (the learning rates are), so 1e-3f prints 0.001.
std::string OptionText(double v) {
  char buf[64];
  const float f = static_cast<float>(v);
  const std::to_chars_result r = static_cast<double>(f) == v ? std::to_chars(buf, buf + sizeof(buf), f)
                                                             : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Names the first option the checkpoint was made with that this trainer does not have, with both values.
absl::Status CompareOptions(const io::NpyArray& saved, const io::NpyArray& mine) {
  absl::StatusOr<std::vector<double>> a = io::DecodeFloat(saved, "state.options");
  absl::StatusOr<std::vector<double>> b = io::DecodeFloat(mine, "options");
  if (!a.ok()) return absl::FailedPreconditionError(a.status().message());
  if (!b.ok()) return absl::FailedPreconditionError(b.status().message());
  if (a->size() != b->size())
    return absl::FailedPreconditionError(absl::StrCat("state.options: ", a->size(), " entries, this version keeps ",
                                                      b->size(), " (a checkpoint of another gemtb version)"));
  for (size_t i = 0; i < a->size(); ++i) {
    // Bit comparison: the options are stored as the fp64 of what was used, so equal runs match exactly.
    if (std::memcmp(&(*a)[i], &(*b)[i], sizeof(double)) != 0)
      return absl::FailedPreconditionError(absl::StrCat("state.options: ", OptionName(i), " differs: the checkpoint has ",
                                                        OptionText((*a)[i]), ", this run ", OptionText((*b)[i]),
                                                        " (resume needs the options it was made with)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::pair<std::string, io::NpyArray>> Trainer::StateArrays() const {
  std::vector<std::pair<std::string, io::NpyArray>> out;
  out.emplace_back("step", io::EncodeInt64(std::vector<int64_t>{state_.step}, {1}));
  const std::vector<double> opts = {static_cast<double>(options_.seed), static_cast<double>(options_.data_seed),
                                    static_cast<double>(options_.batch), options_.lr, options_.table_lr,
                                    options_.beta1, options_.beta2, options_.eps,
                                    static_cast<double>(options_.grad_blocks),
                                    options_.linear_decay ? 1.0 : 0.0, options_.table_decay,
                                    static_cast<double>(options_.total_steps),
                                    static_cast<double>(model_.layout().total())};
  out.emplace_back("options", io::EncodeFloat(opts, {static_cast<int64_t>(opts.size())}, io::NpyDType::kFloat64));
  const int64_t P = static_cast<int64_t>(state_.params.size());
  out.emplace_back("params", io::EncodeFloat32(state_.params, {P}));
  out.emplace_back("adam.m", io::EncodeFloat32(state_.adam_m, {P}));
  out.emplace_back("adam.v", io::EncodeFloat32(state_.adam_v, {P}));
  out.emplace_back("adam.bias_products", io::EncodeFloat32({state_.adam_b1, state_.adam_b2}, {2}));
  out.emplace_back("tables.step", io::EncodeInt64(std::vector<int64_t>{state_.tables.step}, {1}));
  for (size_t t = 0; t < emb_.tables.size(); ++t) {
    const TableConfig& tc = emb_.tables[t];
    out.emplace_back(absl::StrCat("table.", tc.name, ".weights"),
                     io::EncodeFloat32(state_.tables.tables[t].weights, {tc.rows, tc.dim}));
    out.emplace_back(absl::StrCat("table.", tc.name, ".adagrad"),
                     io::EncodeFloat32(state_.tables.tables[t].adagrad, {tc.rows}));
  }
  if (impl_->pending) {
    const Impl::Pending& p = *impl_->pending;
    AppendPipelineArrays(emb_, p.batch.size, {p.output.pooled, p.output.sequence}, &out);
  }
  return out;
}

absl::Status Trainer::LoadStateArrays(const std::vector<std::pair<std::string, io::NpyArray>>& arrays) {
  auto find = [&](const std::string& name) -> const io::NpyArray* {
    for (const auto& [n, a] : arrays)
      if (n == name) return &a;
    return nullptr;
  };
  const std::vector<std::pair<std::string, io::NpyArray>> mine = StateArrays();
  for (const auto& [name, a] : mine)
    if (!find(name)) return absl::FailedPreconditionError(absl::StrCat("state: array '", name, "' is missing"));
  GEMTB_RETURN_IF_ERROR(CompareOptions(*find("options"), mine[1].second));
  TrainState s;
  absl::StatusOr<std::vector<int64_t>> step = io::DecodeInt(*find("step"), "step");
  if (!step.ok()) return step.status();
  s.step = step->at(0);
  const size_t P = state_.params.size();
  auto load = [&](const std::string& name, size_t n, std::vector<float>* dst) -> absl::Status {
    absl::StatusOr<std::vector<float>> v = AsF32(*find(name), name, n);
    if (!v.ok()) return v.status();
    *dst = *std::move(v);
    return absl::OkStatus();
  };
  std::vector<float> bias;
  GEMTB_RETURN_IF_ERROR(load("params", P, &s.params));
  GEMTB_RETURN_IF_ERROR(load("adam.m", P, &s.adam_m));
  GEMTB_RETURN_IF_ERROR(load("adam.v", P, &s.adam_v));
  GEMTB_RETURN_IF_ERROR(load("adam.bias_products", 2, &bias));
  s.adam_b1 = bias[0];
  s.adam_b2 = bias[1];
  absl::StatusOr<std::vector<int64_t>> tstep = io::DecodeInt(*find("tables.step"), "tables.step");
  if (!tstep.ok()) return tstep.status();
  s.tables = state_.tables;
  s.tables.step = tstep->at(0);
  for (size_t t = 0; t < emb_.tables.size(); ++t) {
    const TableConfig& tc = emb_.tables[t];
    const std::string w = absl::StrCat("table.", tc.name, ".weights"), g = absl::StrCat("table.", tc.name, ".adagrad");
    GEMTB_RETURN_IF_ERROR(load(w, static_cast<size_t>(tc.rows * tc.dim), &s.tables.tables[t].weights));
    GEMTB_RETURN_IF_ERROR(load(g, static_cast<size_t>(tc.rows), &s.tables.tables[t].adagrad));
  }
  // The semi-synchronous pipeline's lookups of the next step, made before the last update.
  absl::StatusOr<std::optional<PipelineLookups>> lookups =
      ReadPipelineArrays(arrays, emb_, options_.pipeline == gemtb::model::SparsePipeline::kSemiSync, s.step);
  if (!lookups.ok()) return lookups.status();
  std::optional<Impl::Pending> pending;
  if (*lookups) {
    Impl::Pending p;
    p.step = s.step;
    p.routed = false;
    p.batch = impl_->StepBatch(options_, s.step);
    absl::StatusOr<EmbeddingOutput> shape = EmbeddingOutputShape(emb_, KjtOfBatch(p.batch));
    if (!shape.ok()) return shape.status();
    p.output = *std::move(shape);
    PipelineLookups& l = **lookups;
    if (l.pooled.size() != p.output.pooled.size())
      return absl::FailedPreconditionError(absl::StrCat("state: array 'pipeline.pooled' holds ", l.pooled.size(),
                                                        " values, step ", s.step, "'s lookups ", p.output.pooled.size()));
    for (size_t k = 0; k < p.output.sequence.size(); ++k) {
      if (l.sequence[k].size() != p.output.sequence[k].size())
        return absl::FailedPreconditionError(
            absl::StrCat("state: array 'pipeline.sequence.", p.batch.keys[p.output.sequence_keys[k]], "' holds ",
                         l.sequence[k].size(), " values, step ", s.step, "'s lookups ", p.output.sequence[k].size()));
    }
    p.output.pooled = std::move(l.pooled);
    p.output.sequence = std::move(l.sequence);
    pending = std::move(p);
  }
  state_ = std::move(s);
  impl_->pending = std::move(pending);
  impl_->sharded.reset();  // re-placed from the loaded tables at the next Step
  return absl::OkStatus();
}

absl::StatusOr<TrainState> TrainSteps(const gemtb::model::ModelConfig& config, const TrainOptions& options, int steps) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config, options);
  if (!t.ok()) return t.status();
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepResult> r = (*t)->Step();
    if (!r.ok()) return r.status();
  }
  return (*t)->state();
}

absl::StatusOr<std::vector<std::pair<std::string, io::NpyArray>>> TrainStepsArrays(
    const gemtb::model::ModelConfig& config, const TrainOptions& options, int steps) {
  absl::StatusOr<std::unique_ptr<Trainer>> t = Trainer::Create(config, options);
  if (!t.ok()) return t.status();
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepResult> r = (*t)->Step();
    if (!r.ok()) return r.status();
  }
  return (*t)->StateArrays();
}

}  // namespace gemtb::reference::model
