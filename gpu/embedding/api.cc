#include "gpu/embedding/api.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "gpu/common/device_buffer.h"
#include "gpu/embedding/host_tables.h"
#include "gpu/embedding/launch.h"
#include "gpu/embedding/tbe_params.h"
#include "gpu/embedding/tbe_row_ops.h"
#include "model/common/status_macros.h"
#include "model/embedding/optimizer_rules.h"

namespace gemtb::gpu::embedding {
namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

// Overwrites an allocated array of the same size (Upload would allocate again).
template <typename T>
absl::Status CopyToDevice(DeviceArray<T>& dst, const std::vector<T>& src, absl::string_view what) {
  if (src.empty()) return absl::OkStatus();
  return CudaOk(cudaMemcpy(dst.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice),
                absl::StrCat("copy of ", what, " to the device"));
}

int BitsFor(uint64_t max_key) { return max_key == 0 ? 1 : 64 - std::countl_zero(max_key); }

absl::Status FindEmbeddingDevice() {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", cudaGetErrorString(e)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device on this machine");
  int device = 0;
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetDevice(&device), "cudaGetDevice"));
  cudaDeviceProp prop{};
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties"));
  if (prop.major != 9) {
    return absl::FailedPreconditionError(absl::StrCat("device ", device, " (", prop.name, ") has compute capability ", prop.major,
                                                      ".", prop.minor, "; the kernels are built for sm_90a"));
  }
  return absl::OkStatus();
}

// LaunchBackward between events at its phase boundaries; waits for the last one.
absl::Status TimedBackward(const LaunchParams& p, int64_t num_values, BackwardBuffers b, BackwardPhaseTimes& times) {
  cudaEvent_t events[kBackwardPhases + 1] = {};
  absl::Status status;
  for (cudaEvent_t& e : events) {
    if (status.ok()) status = CudaOk(cudaEventCreate(&e), "cudaEventCreate");
  }
  if (status.ok()) {
    b.phase_events = events;
    status = LaunchBackward(p, num_values, b);
  }
  if (status.ok()) status = CudaOk(cudaEventSynchronize(events[kBackwardPhases]), "timed backward step");
  float ms[kBackwardPhases] = {};
  for (int i = 0; i < kBackwardPhases && status.ok(); ++i) {
    status = CudaOk(cudaEventElapsedTime(&ms[i], events[i], events[i + 1]), "cudaEventElapsedTime");
  }
  for (cudaEvent_t e : events) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  GEMTB_RETURN_IF_ERROR(status);
  times = {ms[0], ms[1], ms[2], ms[3], ms[4]};
  return absl::OkStatus();
}

}  // namespace

absl::Status CanRun(const EmbeddingConfig& config) {
  int64_t total_rows = 0;
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const TableConfig& c = config.tables[t];
    const std::string name = absl::StrCat("tables[", t, "] '", c.name, "'");
    if (c.rows < 1) return Bad(absl::StrCat(name, ": rows=", c.rows, " must be >= 1"));
    if (c.dim < 4 || c.dim % 4 != 0 || c.dim > kMaxDim) {
      return Bad(absl::StrCat(name, ": dim=", c.dim, " must be a multiple of 4 in [4, ", kMaxDim, "] on the GPU"));
    }
    if (c.dtype == ElementType::kFloat64) return Bad(absl::StrCat(name, ": dtype must be fp32, fp16 or bf16"));
    if (c.rows > (int64_t{1} << 40)) return Bad(absl::StrCat(name, ": rows=", c.rows, " exceeds 2^40"));
    total_rows += c.rows;
    GEMTB_RETURN_IF_ERROR(ValidateOptimizerConfig(c.optimizer, name));
  }
  if (total_rows > (int64_t{1} << 42)) return Bad(absl::StrCat("tables: ", total_rows, " rows in all exceed 2^42"));
  for (size_t f = 0; f < config.features.size(); ++f) {
    const FeatureConfig& c = config.features[f];
    if (c.table < 0 || c.table >= static_cast<int>(config.tables.size())) {
      return Bad(absl::StrCat("features[", f, "] '", c.key, "': table=", c.table, " does not exist"));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingDeviceAvailable() {
  // Asked once per process: cudaGetDeviceProperties is slow, and every DeviceTbe asks.
  static const absl::Status available = FindEmbeddingDevice();
  return available;
}

// The options' rules: a placement per table inside its whole table, on 4-column boundaries.
absl::Status CheckOptions(const EmbeddingConfig& config, const TbeOptions& o) {
  if (o.batch_block < 0) return Bad(absl::StrCat("options.batch_block=", o.batch_block, ": must be >= 0"));
  if (o.placement.empty()) return absl::OkStatus();
  if (o.placement.size() != config.tables.size()) {
    return Bad(absl::StrCat("options.placement: ", o.placement.size(), " given, the config has ", config.tables.size(), " tables"));
  }
  for (size_t t = 0; t < o.placement.size(); ++t) {
    const ShardPlacement& sp = o.placement[t];
    const TableConfig& c = config.tables[t];
    const std::string name = absl::StrCat("options.placement[", t, "] (table '", c.name, "')");
    if (sp.table < 0) return Bad(absl::StrCat(name, ": table=", sp.table, " must be >= 0"));
    if (sp.row_begin < 0 || sp.row_begin + c.rows > sp.rows) {
      return Bad(absl::StrCat(name, ": rows [", sp.row_begin, ", ", sp.row_begin + c.rows, ") are not inside the whole table's ", sp.rows));
    }
    if (sp.col_begin < 0 || sp.col_begin % 4 != 0 || sp.dim % 4 != 0 || sp.col_begin + c.dim > sp.dim) {
      return Bad(absl::StrCat(name, ": columns [", sp.col_begin, ", ", sp.col_begin + c.dim, ") are not 4-aligned inside the whole table's D=", sp.dim));
    }
    if (sp.norm_dim < c.dim || sp.norm_dim > sp.dim) {
      return Bad(absl::StrCat(name, ": norm_dim=", sp.norm_dim, " must be in [", c.dim, ", ", sp.dim, "]"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The input, its outputs and gradients, and the backward's scratch: replaced as a whole by
// SetInput (device arrays are not reassignable).
struct TbeInput {
  DeviceArray<FeatureParams> d_features;
  DeviceArray<int64_t> offsets, values;
  DeviceArray<float> weights_kjt, pooled;
  std::deque<DeviceArray<float>> sequence;
  DeviceArray<uint64_t> keys_in, keys_out;
  DeviceArray<int64_t> order_in, order_out, value_bag, run_start;
  DeviceArray<int32_t> bag_count, run_head, run_index, num_runs, hot_runs, num_hot_runs;
  DeviceArray<uint8_t> cub_temp;
  DeviceArray<float> hot_grads;                   // [HotRunCapacity][max_dim]
  DeviceArray<float> run_grads, run_square_sums;  // split update only
};
struct TbeGrads {
  DeviceArray<float> pooled;
  std::deque<DeviceArray<float>> sequence;
};

// What belongs to one input (batch) of a DeviceTbe: a second one waits aside between its forward
// and its backward under the semi-synchronous pipeline (SwapInput).
struct InputBound {
  bool awaiting_apply = false;  // a split BackwardStep ran; ApplyRows is next
  std::unique_ptr<TbeInput> in;
  std::unique_ptr<TbeGrads> grads;
  const float* pooled_grad = nullptr;  // grads->pooled, or the caller's (SetDeviceGrads)
  bool has_input = false;
  bool has_grads = false;
  // No input, outputs or gradients held: what SetInput starts from, and leaves if it fails.
  void Drop() {
    has_input = has_grads = awaiting_apply = false;
    grads.reset();
    pooled_grad = nullptr;
  }
  KjtLayout layout;
  int64_t batch = 0;
  int64_t num_values = 0;
  int64_t pooled_width = 0;
  std::vector<int> sequence_keys;
  std::vector<FeatureParams> features;
};

}  // namespace

struct DeviceTbe::State : InputBound {
  using Input = TbeInput;
  using Grads = TbeGrads;
  EmbeddingConfig config;
  TbeOptions options;
  int64_t step = 0;
  int64_t total_rows = 0;
  int64_t max_dim = 4;
  std::vector<TableParams> tables;  // host copies; pointers into the arrays below
  std::deque<DeviceArray<uint8_t>> weights;
  std::deque<DeviceArray<float>> adagrad, adam_m, adam_v;
  DeviceArray<TableParams> d_tables;
  InputBound aside;  // the input held aside by SwapInput
  void SwapInput() { std::swap(static_cast<InputBound&>(*this), aside); }

  // Page-locked copies of checked KJTs' values (CheckInput, on any thread), two slots taken in turn.
  // A slot's generation names the check whose values it holds (0: none); `copied`
  // is recorded after SetInput's asynchronous upload from it, and a check waits for it before it
  // overwrites the slot.
  struct Staging {
    int64_t* host = nullptr;
    size_t capacity = 0;
    uint64_t generation = 0;
    cudaEvent_t copied = nullptr;
  };
  int device = 0;  // the module's GPU: a check on another thread stages for it
  mutable std::mutex staging_mu;
  mutable std::array<Staging, 2> staging;
  mutable uint64_t checks_staged = 0;
  ~State() {
    for (Staging& st : staging) {
      if (st.copied != nullptr) {
        cudaEventSynchronize(st.copied);
        cudaEventDestroy(st.copied);
      }
      if (st.host != nullptr) cudaFreeHost(st.host);
    }
  }

  LaunchParams Params() const {
    LaunchParams p;
    p.tables = d_tables.get();
    p.features = in->d_features.get();
    p.num_tables = static_cast<int>(tables.size());
    p.kjt = {in->offsets.get(), in->values.get(), in->weights_kjt.get(), batch, static_cast<int64_t>(layout.feature.size())};
    p.pooled = in->pooled.get();
    p.pooled_grad = pooled_grad;
    p.pooled_width = pooled_width;
    p.seed = config.seed;
    p.step = step;
    p.forward_kinds = ForwardKindsOf(features.data(), static_cast<int64_t>(features.size()), tables.data());
    return p;
  }

  BackwardBuffers Buffers() const {
    BackwardBuffers b;
    b.keys_in = in->keys_in.get();
    b.keys_out = in->keys_out.get();
    b.order_in = in->order_in.get();
    b.order_out = in->order_out.get();
    b.value_bag = in->value_bag.get();
    b.bag_count = in->bag_count.get();
    b.run_head = in->run_head.get();
    b.run_index = in->run_index.get();
    b.run_start = in->run_start.get();
    b.num_runs = in->num_runs.get();
    b.cub_temp = in->cub_temp.get();
    b.cub_temp_bytes = in->cub_temp.size();
    b.total_rows = total_rows;
    b.key_samples = SortKeySamples(features.data(), static_cast<int64_t>(features.size()), static_cast<int>(tables.size()), batch);
    b.sort_end_bit = BitsFor(static_cast<uint64_t>(total_rows) * static_cast<uint64_t>(b.key_samples));
    b.max_dim = max_dim;
    b.hot_runs = in->hot_runs.get();
    b.num_hot_runs = in->num_hot_runs.get();
    b.hot_grads = in->hot_grads.get();
    if (options.batch_block > 0) {
      b.batch_block = options.batch_block;
      b.num_batch_blocks = batch / options.batch_block;
    }
    if (options.split_update) {
      b.run_grads = in->run_grads.get();
      b.run_square_sums = in->run_square_sums.get();
    }
    return b;
  }
};

DeviceTbe::DeviceTbe(std::unique_ptr<State> state) : s_(std::move(state)) {}
DeviceTbe::~DeviceTbe() = default;
int64_t DeviceTbe::step() const { return s_->step; }
int64_t DeviceTbe::pooled_width() const { return s_->pooled_width; }
int64_t DeviceTbe::num_values() const { return s_->num_values; }

absl::StatusOr<std::unique_ptr<DeviceTbe>> DeviceTbe::Create(const EmbeddingConfig& config,
                                                             absl::Span<const HostTable> tables, int64_t step,
                                                             const TbeOptions& options) {
  GEMTB_RETURN_IF_ERROR(CanRun(config));
  GEMTB_RETURN_IF_ERROR(CheckOptions(config, options));
  if (!tables.empty() && tables.size() != config.tables.size()) {
    return Bad(absl::StrCat("tables: ", tables.size(), " given, the config has ", config.tables.size()));
  }
  if (step < 0) return Bad(absl::StrCat("step=", step, ": must be >= 0"));
  GEMTB_RETURN_IF_ERROR(EmbeddingDeviceAvailable());
  auto s = std::make_unique<State>();
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetDevice(&s->device), "cudaGetDevice"));
  s->config = config;
  s->options = options;
  s->step = step;
  const size_t num_tables = config.tables.size();
  s->weights.resize(num_tables);
  s->adagrad.resize(num_tables);
  s->adam_m.resize(num_tables);
  s->adam_v.resize(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const TableConfig& c = config.tables[t];
    const std::string name = absl::StrCat("table '", c.name, "'");
    const size_t elements = static_cast<size_t>(c.rows * c.dim);
    const HostTable* prior = tables.empty() ? nullptr : &tables[t];
    absl::StatusOr<TableParams> p = TableParamsOf(c, static_cast<int>(t), s->total_rows, prior);
    if (!p.ok()) return p.status();
    if (!options.placement.empty()) {
      const ShardPlacement& sp = options.placement[t];
      p->table = sp.table;
      p->global_rows = sp.rows;
      p->global_dim = sp.dim;
      p->row_base = sp.row_begin;
      p->col_base = sp.col_begin;
      p->norm_dim = sp.norm_dim;
    }
    s->total_rows += c.rows;
    s->max_dim = std::max(s->max_dim, c.dim);
    if (prior == nullptr) {
      GEMTB_RETURN_IF_ERROR(s->weights[t].Allocate(elements * ElementBytes(c.dtype), name));
      if (KeepsAdagrad(c)) {
        GEMTB_RETURN_IF_ERROR(s->adagrad[t].Allocate(static_cast<size_t>(c.rows), name + " state"));
        GEMTB_RETURN_IF_ERROR(s->adagrad[t].Zero(name + " state"));
      }
      if (KeepsAdam(c)) {
        for (DeviceArray<float>* a : {&s->adam_m[t], &s->adam_v[t]}) {
          GEMTB_RETURN_IF_ERROR(a->Allocate(elements, name + " Adam state"));
          GEMTB_RETURN_IF_ERROR(a->Zero(name + " Adam state"));
        }
      }
    } else {
      GEMTB_RETURN_IF_ERROR(s->weights[t].Upload(ToStorage(prior->weights, c.dtype), name));
      if (KeepsAdagrad(c)) GEMTB_RETURN_IF_ERROR(s->adagrad[t].Upload(prior->adagrad, name + " state"));
      if (KeepsAdam(c)) {
        GEMTB_RETURN_IF_ERROR(s->adam_m[t].Upload(prior->adam_m, name + " Adam m"));
        GEMTB_RETURN_IF_ERROR(s->adam_v[t].Upload(prior->adam_v, name + " Adam v"));
      }
    }
    p->weights = s->weights[t].get();
    p->adagrad = s->adagrad[t].get();
    p->adam_m = s->adam_m[t].get();
    p->adam_v = s->adam_v[t].get();
    if (prior == nullptr) GEMTB_RETURN_IF_ERROR(LaunchInitTable(*p, config.seed));
    s->tables.push_back(*p);
  }
  GEMTB_RETURN_IF_ERROR(s->d_tables.Upload(s->tables, "table parameters"));
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaDeviceSynchronize(), "table setup"));
  return std::unique_ptr<DeviceTbe>(new DeviceTbe(std::move(s)));
}

void DeviceTbe::SwapInput() { s_->SwapInput(); }

namespace {

// The spans a CheckedKjt remembers of its KJT.
void SpansOf(const KjtView& kjt, const void* (&data)[5], size_t (&sizes)[5]) {
  data[0] = kjt.keys.data(), sizes[0] = kjt.keys.size();
  data[1] = kjt.lengths.data(), sizes[1] = kjt.lengths.size();
  data[2] = kjt.values.data(), sizes[2] = kjt.values.size();
  data[3] = kjt.weights.data(), sizes[3] = kjt.weights.size();
  data[4] = kjt.offsets.data(), sizes[4] = kjt.offsets.size();
}

}  // namespace

absl::StatusOr<CheckedKjt> DeviceTbe::CheckInput(const KjtView& kjt) const {
  absl::StatusOr<CheckedKjt> checked = Check(kjt);
  if (checked.ok()) StageValues(kjt.values, *checked);
  return checked;
}

absl::StatusOr<CheckedKjt> DeviceTbe::Check(const KjtView& kjt) const {
  absl::StatusOr<KjtLayout> layout = CheckKjt(s_->config, kjt);
  if (!layout.ok()) return layout.status();
  CheckedKjt checked;
  checked.layout_ = *std::move(layout);
  checked.module_ = this;
  checked.batch_ = kjt.batch;
  checked.has_weights_ = kjt.has_weights;
  SpansOf(kjt, checked.spans_, checked.sizes_);
  return checked;
}

// Best effort: where page-locked memory or an event cannot be had, the check carries no staged copy
// and SetInput uploads from the KJT's arrays. The copy is made under the lock (a few milliseconds for
// millions of ids), so that no upload or other check sees a slot half filled.
void DeviceTbe::StageValues(absl::Span<const int64_t> values, CheckedKjt& checked) const {
  if (values.empty()) return;
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.staging_mu);
  if (cudaSetDevice(s.device) != cudaSuccess) return;  // this thread's device (a data thread's may differ)
  const uint64_t id = ++s.checks_staged;
  const int slot = static_cast<int>(id % 2);
  State::Staging& st = s.staging[slot];
  st.generation = 0;
  if (st.copied == nullptr && cudaEventCreateWithFlags(&st.copied, cudaEventDisableTiming) != cudaSuccess) {
    st.copied = nullptr;
    return;
  }
  if (cudaEventSynchronize(st.copied) != cudaSuccess) return;  // its last upload has finished
  if (st.capacity < values.size()) {
    if (st.host != nullptr) cudaFreeHost(st.host);
    st.host = nullptr;
    st.capacity = 0;
    const size_t want = values.size() + values.size() / 4;  // room for the next batches' variation
    if (cudaMallocHost(reinterpret_cast<void**>(&st.host), want * sizeof(int64_t)) != cudaSuccess) {
      st.host = nullptr;
      return;
    }
    st.capacity = want;
  }
  std::memcpy(st.host, values.data(), values.size() * sizeof(int64_t));
  st.generation = id;
  checked.staged_slot_ = slot;
  checked.staged_generation_ = id;
}

// The values to `dst` (allocated for them): asynchronously from the check's staged copy where its
// slot still holds it (the slot then holds nothing), else synchronously from the KJT's arrays.
absl::Status DeviceTbe::UploadValues(absl::Span<const int64_t> values, const CheckedKjt& checked,
                                     int64_t* dst) const {
  State& s = *s_;
  if (values.empty()) return absl::OkStatus();
  if (checked.staged_slot_ >= 0) {
    std::lock_guard<std::mutex> lock(s.staging_mu);
    State::Staging& st = s.staging[checked.staged_slot_];
    if (st.generation != 0 && st.generation == checked.staged_generation_) {
      st.generation = 0;
      GEMTB_RETURN_IF_ERROR(CudaOk(cudaMemcpyAsync(dst, st.host, values.size() * sizeof(int64_t),
                                                   cudaMemcpyHostToDevice, nullptr),
                                   "copy of KJT values to the device"));
      return CudaOk(cudaEventRecord(st.copied, nullptr), "event after the KJT values' copy");
    }
  }
  return CudaOk(cudaMemcpy(dst, values.data(), values.size() * sizeof(int64_t), cudaMemcpyHostToDevice),
                "copy of KJT values to the device");
}

// The check without staging: the ids go up at once, straight from the KJT's arrays (a copy into
// page-locked memory first would only add a host pass).
absl::Status DeviceTbe::SetInput(const KjtView& kjt) {
  absl::StatusOr<CheckedKjt> checked = Check(kjt);
  if (!checked.ok()) {
    s_->Drop();
    return checked.status();
  }
  return SetInput(kjt, *checked);
}

absl::Status DeviceTbe::SetInput(const KjtView& kjt, const CheckedKjt& checked) {
  State& s = *s_;
  s.Drop();
  const void* data[5];
  size_t sizes[5];
  SpansOf(kjt, data, sizes);
  if (checked.module_ != this || checked.batch_ != kjt.batch || checked.has_weights_ != kjt.has_weights ||
      !std::equal(data, data + 5, checked.spans_) || !std::equal(sizes, sizes + 5, checked.sizes_)) {
    return Bad("checked KJT: made by another module's CheckInput or from another KJT's arrays");
  }
  if (s.options.batch_block > 0 && kjt.batch % s.options.batch_block != 0) {
    return Bad(absl::StrCat("batch B=", kjt.batch, ": not a multiple of options.batch_block=", s.options.batch_block));
  }
  const int64_t num_values = static_cast<int64_t>(kjt.values.size());
  if (num_values >= (int64_t{1} << 31)) return Bad(absl::StrCat("values: ", num_values, " ids exceed the GPU's 2^31"));
  if (kjt.batch > 0 && s.total_rows + 1 > std::numeric_limits<int64_t>::max() / kjt.batch) {
    return Bad(absl::StrCat("batch B=", kjt.batch, ": (rows+1)*B overflows the sort key"));
  }
  s.layout = checked.layout();
  s.in = std::make_unique<State::Input>();
  s.batch = kjt.batch;
  s.num_values = num_values;
  const int64_t num_keys = static_cast<int64_t>(kjt.keys.size());
  s.features = FeatureParamsOf(s.config, s.layout, s.batch, &s.pooled_width);
  s.sequence_keys.clear();
  for (int64_t f = 0; f < num_keys; ++f) {
    FeatureParams& p = s.features[f];
    if (p.pooling != Pooling::kNone) continue;
    s.sequence_keys.push_back(static_cast<int>(f));
    s.in->sequence.emplace_back();
    const int64_t n = (s.layout.offsets[(f + 1) * s.batch] - p.value_begin) * s.config.tables[p.table].dim;
    GEMTB_RETURN_IF_ERROR(s.in->sequence.back().Allocate(static_cast<size_t>(n), absl::StrCat("sequence output of '", kjt.keys[f], "'")));
    p.sequence = s.in->sequence.back().get();
  }
  GEMTB_RETURN_IF_ERROR(s.in->d_features.Upload(s.features, "feature parameters"));
  GEMTB_RETURN_IF_ERROR(s.in->offsets.Upload(s.layout.offsets, "KJT offsets"));
  GEMTB_RETURN_IF_ERROR(s.in->values.Allocate(kjt.values.size(), "KJT values"));
  GEMTB_RETURN_IF_ERROR(UploadValues(kjt.values, checked, s.in->values.get()));
  if (kjt.has_weights || !kjt.weights.empty()) {
    GEMTB_RETURN_IF_ERROR(s.in->weights_kjt.Upload(kjt.weights, "KJT weights"));
  } else {
    GEMTB_RETURN_IF_ERROR(s.in->weights_kjt.Allocate(0, "KJT weights"));
  }
  GEMTB_RETURN_IF_ERROR(s.in->pooled.Allocate(static_cast<size_t>(s.batch * s.pooled_width), "pooled output"));
  // Backward scratch, sized once per input.
  const size_t n = static_cast<size_t>(num_values);
  GEMTB_RETURN_IF_ERROR(s.in->keys_in.Allocate(n, "sort keys"));
  GEMTB_RETURN_IF_ERROR(s.in->keys_out.Allocate(n, "sorted keys"));
  GEMTB_RETURN_IF_ERROR(s.in->order_in.Allocate(n, "occurrence order"));
  GEMTB_RETURN_IF_ERROR(s.in->order_out.Allocate(n, "sorted occurrence order"));
  GEMTB_RETURN_IF_ERROR(s.in->value_bag.Allocate(n, "bag of each value"));
  GEMTB_RETURN_IF_ERROR(s.in->run_head.Allocate(n, "run heads"));
  GEMTB_RETURN_IF_ERROR(s.in->run_index.Allocate(n, "run index"));
  GEMTB_RETURN_IF_ERROR(s.in->run_start.Allocate(n + 1, "run starts"));
  GEMTB_RETURN_IF_ERROR(s.in->num_runs.Allocate(1, "run count"));
  GEMTB_RETURN_IF_ERROR(s.in->hot_runs.Allocate(static_cast<size_t>(HotRunCapacity(num_values)), "hot-run list"));
  GEMTB_RETURN_IF_ERROR(s.in->num_hot_runs.Allocate(1, "hot-run count"));
  GEMTB_RETURN_IF_ERROR(s.in->hot_grads.Allocate(static_cast<size_t>(HotRunCapacity(num_values)) *
                                                     static_cast<size_t>(s.max_dim),
                                                 "hot rows' gradients"));
  GEMTB_RETURN_IF_ERROR(s.in->bag_count.Allocate(static_cast<size_t>(num_keys * s.batch), "bag counts"));
  absl::StatusOr<size_t> temp = BackwardTempBytes(num_values);
  if (!temp.ok()) return temp.status();
  GEMTB_RETURN_IF_ERROR(s.in->cub_temp.Allocate(*temp, "sort scratch"));
  if (s.options.split_update) {
    GEMTB_RETURN_IF_ERROR(s.in->run_grads.Allocate(n * static_cast<size_t>(s.max_dim), "row gradients of the split update"));
    GEMTB_RETURN_IF_ERROR(s.in->run_square_sums.Allocate(std::max<size_t>(n, 1), "partial square sums"));
  }
  s.has_input = true;
  return absl::OkStatus();
}

absl::Status DeviceTbe::Forward() {
  if (!s_->has_input) return absl::FailedPreconditionError("Forward: no input (SetInput first)");
  return LaunchForward(s_->Params());
}

absl::StatusOr<HostOutput> DeviceTbe::DownloadOutput() const {
  if (!s_->has_input) return absl::FailedPreconditionError("DownloadOutput: no input (SetInput first)");
  HostOutput out;
  out.pooled_width = s_->pooled_width;
  GEMTB_RETURN_IF_ERROR(s_->in->pooled.Download(out.pooled, "pooled output"));
  out.sequence_keys = s_->sequence_keys;
  for (const DeviceArray<float>& a : s_->in->sequence) {
    out.sequence.emplace_back();
    GEMTB_RETURN_IF_ERROR(a.Download(out.sequence.back(), "sequence output"));
  }
  return out;
}

absl::Status DeviceTbe::SetGrads(absl::Span<const float> pooled, absl::Span<const std::vector<float>> sequence) {
  State& s = *s_;
  if (!s.has_input) return absl::FailedPreconditionError("SetGrads: no input (SetInput first)");
  if (static_cast<int64_t>(pooled.size()) != s.batch * s.pooled_width) {
    return Bad(absl::StrCat("grads.pooled: ", pooled.size(), " values, expected B*W = ", s.batch, "*", s.pooled_width));
  }
  if (sequence.size() != s.in->sequence.size()) {
    return Bad(absl::StrCat("grads.sequence: ", sequence.size(), " arrays, expected one per NONE key (", s.in->sequence.size(), ")"));
  }
  s.grads = std::make_unique<State::Grads>();
  GEMTB_RETURN_IF_ERROR(s.grads->pooled.Upload(pooled, "pooled gradient"));
  s.pooled_grad = s.grads->pooled.get();
  s.grads->sequence.resize(sequence.size());
  for (size_t i = 0; i < sequence.size(); ++i) {
    if (sequence[i].size() != s.in->sequence[i].size()) {
      return Bad(absl::StrCat("grads.sequence[", i, "]: ", sequence[i].size(), " values, expected ", s.in->sequence[i].size()));
    }
    GEMTB_RETURN_IF_ERROR(s.grads->sequence[i].Upload(sequence[i], "sequence gradient"));
    s.features[s.sequence_keys[i]].sequence_grad = s.grads->sequence[i].get();
  }
  GEMTB_RETURN_IF_ERROR(CopyToDevice(s.in->d_features, s.features, "feature parameters"));
  s.has_grads = true;
  return absl::OkStatus();
}

absl::StatusOr<DeviceOutputView> DeviceTbe::DeviceOutput() const {
  if (!s_->has_input) return absl::FailedPreconditionError("DeviceOutput: no input (SetInput first)");
  DeviceOutputView out;
  out.pooled = s_->in->pooled.get();
  out.pooled_width = s_->pooled_width;
  out.sequence_keys = s_->sequence_keys;
  for (const DeviceArray<float>& a : s_->in->sequence) {
    out.sequence.push_back(a.get());
    out.sequence_size.push_back(static_cast<int64_t>(a.size()));
  }
  return out;
}

absl::Status DeviceTbe::SetDeviceGrads(const float* pooled, absl::Span<const float* const> sequence) {
  State& s = *s_;
  if (!s.has_input) return absl::FailedPreconditionError("SetDeviceGrads: no input (SetInput first)");
  if (sequence.size() != s.in->sequence.size()) {
    return Bad(absl::StrCat("grads.sequence: ", sequence.size(), " arrays, expected one per NONE key (", s.in->sequence.size(), ")"));
  }
  if (pooled == nullptr && s.batch * s.pooled_width > 0) return Bad("grads.pooled: null");
  for (size_t i = 0; i < sequence.size(); ++i) {
    if (sequence[i] == nullptr && s.in->sequence[i].size() > 0) return Bad(absl::StrCat("grads.sequence[", i, "]: null"));
  }
  s.grads.reset();
  s.pooled_grad = pooled;
  for (size_t i = 0; i < sequence.size(); ++i) s.features[s.sequence_keys[i]].sequence_grad = sequence[i];
  GEMTB_RETURN_IF_ERROR(CopyToDevice(s.in->d_features, s.features, "feature parameters"));
  s.has_grads = true;
  return absl::OkStatus();
}

absl::Status DeviceTbe::SetLearningRate(float lr) {
  if (!(std::isfinite(lr) && lr >= 0)) return absl::InvalidArgumentError(absl::StrCat("lr: ", lr, " must be finite and >= 0"));
  State& s = *s_;
  for (size_t t = 0; t < s.tables.size(); ++t) {
    s.tables[t].optimizer.lr = lr;
    s.config.tables[t].optimizer.lr = lr;
  }
  return CopyToDevice(s.d_tables, s.tables, "table parameters");
}

absl::Status DeviceTbe::BackwardStep(BackwardPhaseTimes* times) {
  State& s = *s_;
  if (!s.has_grads) return absl::FailedPreconditionError("BackwardStep: no upstream gradients (SetGrads first)");
  if (AdvanceAdamSteps(s.config, s.tables)) {
    GEMTB_RETURN_IF_ERROR(CopyToDevice(s.d_tables, s.tables, "table parameters"));
  }
  if (s.awaiting_apply) return absl::FailedPreconditionError("BackwardStep: the split update's ApplyRows has not run");
  const BackwardBuffers b = s.Buffers();
  if (times == nullptr) {
    GEMTB_RETURN_IF_ERROR(LaunchBackward(s.Params(), s.num_values, b));
  } else {
    GEMTB_RETURN_IF_ERROR(TimedBackward(s.Params(), s.num_values, b, *times));
  }
  if (s.options.split_update) {
    s.awaiting_apply = true;
  } else {
    ++s.step;
  }
  return absl::OkStatus();
}

int64_t DeviceTbe::RunCapacity() const { return s_->has_input ? std::max<int64_t>(s_->num_values, 1) : 0; }

absl::StatusOr<const float*> DeviceTbe::RunSquareSums() const {
  if (!s_->awaiting_apply) return absl::FailedPreconditionError("RunSquareSums: no split BackwardStep is waiting for ApplyRows");
  return s_->in->run_square_sums.get();
}

absl::Status DeviceTbe::ApplyRows(const float* whole_square_sums) {
  State& s = *s_;
  if (!s.awaiting_apply) return absl::FailedPreconditionError("ApplyRows: no split BackwardStep is waiting");
  if (whole_square_sums == nullptr) return Bad("ApplyRows: whole_square_sums is null");
  GEMTB_RETURN_IF_ERROR(LaunchApplyRows(s.Params(), s.num_values, s.Buffers(), whole_square_sums));
  s.awaiting_apply = false;
  ++s.step;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float*>> DeviceTbe::DeviceOptimizerState(int table) const {
  if (table < 0 || table >= static_cast<int>(s_->tables.size())) {
    return Bad(absl::StrCat("table=", table, ": the module has ", s_->tables.size(), " tables"));
  }
  const TableParams& t = s_->tables[static_cast<size_t>(table)];
  return std::vector<float*>{t.adagrad, t.adam_m, t.adam_v};
}

absl::StatusOr<void*> DeviceTbe::DeviceWeights(int table) const {
  if (table < 0 || table >= static_cast<int>(s_->tables.size())) {
    return Bad(absl::StrCat("table=", table, ": the module has ", s_->tables.size(), " tables"));
  }
  return s_->tables[static_cast<size_t>(table)].weights;
}

absl::StatusOr<HostTable> DeviceTbe::DownloadTable(int table) const {
  const State& s = *s_;
  if (table < 0 || table >= static_cast<int>(s.tables.size())) {
    return Bad(absl::StrCat("table=", table, ": the module has ", s.tables.size(), " tables"));
  }
  const size_t t = static_cast<size_t>(table);
  std::vector<uint8_t> bytes;
  std::vector<float> adagrad, adam_m, adam_v;
  GEMTB_RETURN_IF_ERROR(s.weights[t].Download(bytes, "table weights"));
  GEMTB_RETURN_IF_ERROR(s.adagrad[t].Download(adagrad, "Adagrad state"));
  GEMTB_RETURN_IF_ERROR(s.adam_m[t].Download(adam_m, "Adam m"));
  GEMTB_RETURN_IF_ERROR(s.adam_v[t].Download(adam_v, "Adam v"));
  return HostTableOf(s.tables[t], bytes, std::move(adagrad), std::move(adam_m), std::move(adam_v));
}

absl::StatusOr<std::vector<HostTable>> DeviceTbe::DownloadTables() const {
  std::vector<HostTable> out;
  for (size_t t = 0; t < s_->tables.size(); ++t) {
    absl::StatusOr<HostTable> one = DownloadTable(static_cast<int>(t));
    if (!one.ok()) return one.status();
    out.push_back(*std::move(one));
  }
  return out;
}

}  // namespace gemtb::gpu::embedding
