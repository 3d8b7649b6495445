#include "sim/engine/engine.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"
#include "sim/engine/event_queue.h"

namespace gemtb::sim {
namespace {

constexpr uint64_t kPurposeJitter = 0x4A495454;  // "JITT"

double StdNormal(uint64_t seed, uint64_t stream, uint64_t element) {
  const numerics::Philox4x32 w = numerics::PhiloxBlock(seed, stream, element);
  const double u1 = (static_cast<double>((static_cast<uint64_t>(w.v[0]) << 21) ^ w.v[1]) + 1.0) *
                    (1.0 / 9007199254740993.0);
  const double u2 = static_cast<double>(w.v[2]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

class Engine {
 public:
  explicit Engine(const EngineInput& in)
      : in_(in), tpl_(*in.tpl), R_(in.world), T_(static_cast<int>(tpl_.tasks.size())),
        width_(tpl_.layout.size()) {}

  absl::StatusOr<EngineOutput> Run();

 private:
  struct Running {
    int task = -1, step = 0;
    double start = 0, base = 0, rec = 0, main = 0, work_left = 0, last_t = 0, c = 1;
    uint32_t version = 0;
    bool contended = false;  // ran at c > 1 for some time
  };
  const double* Stats(int step, int r) const {
    return in_.stats->data() + (static_cast<size_t>(step) * R_ + r) * width_;
  }
  int Slot(int r, int stream) const { return r * kNumStreams + stream; }
  bool Measured(int step) const { return step >= in_.warmup; }
  bool Traced(int r, int step) const { return !in_.traced.empty() && in_.traced[r] && step == in_.trace_step; }

  bool Ready(int r, int i, int step) const {
    const TaskTemplate& t = tpl_.tasks[i];
    const int16_t* done = done_.data() + static_cast<size_t>(r) * T_;
    for (int d : t.deps) if (done[d] < step) return false;
    if (step > 0) for (int d : t.prev_deps) if (done[d] < step - 1) return false;
    return true;
  }
  void TryStart(int r, int stream);
  void StartCompute(int r, int i, int step);
  void Arrive(int r, int i, int step);
  void StartCollective(int i, int g, int step);
  void Complete(int r, int i, int step);
  void SetSm(int r, int delta);
  void OnComputeEnd(int r, uint32_t version);
  void OnCollEnd(int i, int g);
  void AddTrace(int r, int stream, const std::string& name, const char* cat, double start, double dur) {
    if (dur <= 0 && std::string_view(cat) == "wait") return;
    out_.trace.push_back(TraceEvent{r, stream, name, cat, start, dur});
  }

  const EngineInput& in_;
  const StepTemplate& tpl_;
  const int R_, T_, width_;
  EventQueue q_;
  double now_ = 0;
  EngineOutput out_;
  std::vector<int16_t> done_;       // [rank][task]: last step completed
  std::vector<int32_t> pos_;        // [rank][stream]: head position in stream_tasks
  std::vector<int16_t> sstep_;      // [rank][stream]: head's step
  std::vector<uint8_t> busy_;       // [rank][stream]
  std::vector<double> arrival_;     // [rank][stream]: when the head collective arrived
  std::vector<Running> run_;        // [rank]: the running compute task
  std::vector<int32_t> sm_;         // [rank]: SM-based collectives running
  std::vector<double> idle_since_;  // [rank]: compute stream idle since (-1: busy)
  std::vector<double> last_arr_, last_start_;
  std::vector<int32_t> last_task_;
  std::vector<int64_t> coll_off_;   // per task: offset into the per-group state
  std::vector<int32_t> arrived_;
  std::vector<double> max_bytes_, coll_start_, coll_dur_;
  std::vector<int16_t> coll_step_;
  std::vector<int64_t> done_count_;  // per step: (rank, task) completions
};

void Engine::TryStart(int r, int stream) {
  const int slot = Slot(r, stream);
  if (busy_[slot]) return;
  const int step = sstep_[slot];
  if (step >= in_.steps) return;
  const std::vector<int>& list = tpl_.stream_tasks[stream];
  if (list.empty()) return;
  const int i = list[pos_[slot]];
  if (!Ready(r, i, step)) return;
  busy_[slot] = 1;
  const TaskTemplate& t = tpl_.tasks[i];
  if (!t.collective) {
    StartCompute(r, i, step);
  } else if (t.period > 1 && (step + 1) % t.period != 0) {
    q_.Push(now_, EventType::kTaskEnd, r, i, UINT32_MAX);  // not this step: a no-op
  } else {
    Arrive(r, i, step);
  }
}

void Engine::StartCompute(int r, int i, int step) {
  const TaskTemplate& t = tpl_.tasks[i];
  const absl::Span<const double> stats(Stats(step, r), width_);
  Running& x = run_[r];
  x.task = i;
  x.step = step;
  x.start = now_;
  x.main = EvalTime(t.time, t.curve_terms, stats);
  x.rec = 0;
  if (t.recompute_region >= 0 && in_.checkpointed != nullptr) {
    const size_t regions = tpl_.regions.size();
    if ((*in_.checkpointed)[(static_cast<size_t>(step) * R_ + r) * regions + t.recompute_region]) {
      const RegionTemplate& reg = tpl_.regions[t.recompute_region];
      x.rec = EvalTime(reg.fwd_time, reg.fwd_curve_terms, stats);
    }
  }
  const double n = in_.noise != nullptr ? (*in_.noise)[static_cast<size_t>(step) * R_ + r] : 1.0;
  x.base = (x.main + x.rec) * n;
  x.work_left = x.base;
  x.last_t = now_;
  x.c = sm_[r] > 0 ? 1.0 + in_.kappa : 1.0;
  x.contended = x.c > 1.0;
  ++x.version;
  q_.Push(now_ + x.work_left * x.c, EventType::kTaskEnd, r, i, x.version);
  // Compute idle time ends here: charge it to the collective that unblocked it (spec §5).
  if (idle_since_[r] >= 0) {
    const double idle = now_ - idle_since_[r];
    if (Measured(step) && idle > 0) {
      double wait = 0;
      if (last_task_[r] >= 0) {
        const double lo = std::max(idle_since_[r], last_arr_[r]), hi = std::min(now_, last_start_[r]);
        wait = std::max(0.0, hi - lo);
        out_.sites[last_task_[r]].exposed_s += idle - wait;
      }
      out_.ranks[r].wait_s += wait;
      out_.ranks[r].exposed_comm_s += idle - wait;
    }
    idle_since_[r] = -1;
  }
}

void Engine::SetSm(int r, int delta) {
  const double c_old = sm_[r] > 0 ? 1.0 + in_.kappa : 1.0;
  sm_[r] += delta;
  const double c_new = sm_[r] > 0 ? 1.0 + in_.kappa : 1.0;
  Running& x = run_[r];
  if (c_new == c_old || x.task < 0) return;
  // Reschedule the running task's remaining work at the new rate (spec §2.5).
  x.work_left -= (now_ - x.last_t) / x.c;
  if (x.work_left < 0) x.work_left = 0;
  x.last_t = now_;
  x.c = c_new;
  x.contended = x.contended || c_new > 1.0;
  ++x.version;
  q_.Push(now_ + x.work_left * x.c, EventType::kTaskEnd, r, x.task, x.version);
}

void Engine::Arrive(int r, int i, int step) {
  const TaskTemplate& t = tpl_.tasks[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  const int g = l.GroupOf(r);
  const int64_t k = coll_off_[i] + g;
  arrival_[Slot(r, t.stream)] = now_;
  const double bytes = t.bytes.Eval(absl::Span<const double>(Stats(step, r), width_));
  if (arrived_[k] == 0 || bytes > max_bytes_[k]) max_bytes_[k] = bytes;
  if (++arrived_[k] == l.size) {
    coll_step_[k] = static_cast<int16_t>(step);
    StartCollective(i, g, step);
  }
}

void Engine::StartCollective(int i, int g, int step) {
  const TaskTemplate& t = tpl_.tasks[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  const int64_t k = coll_off_[i] + g;
  arrived_[k] = 0;
  const double bytes = max_bytes_[k];
  const CollectiveCost cost = in_.timing->Cost(t.layout, t.op, bytes, t.a2av);
  double dur = cost.duration_s;
  if (in_.jitter_sigma > 0 && dur > 0) {
    const uint64_t stream = SplitMix64(SplitMix64(kPurposeJitter ^ static_cast<uint64_t>(i)) ^ static_cast<uint64_t>(g));
    const double z = StdNormal(in_.seed, stream, static_cast<uint64_t>(step));
    dur *= std::exp(in_.jitter_sigma * z - 0.5 * in_.jitter_sigma * in_.jitter_sigma);
  }
  coll_start_[k] = now_;
  coll_dur_[k] = dur;
  const bool holds_sms = in_.kappa > 0 && dur > 0;
  if (holds_sms) {
    for (int p = 0; p < l.size; ++p) SetSm(l.Member(g, p), +1);
  }
  if (Measured(step)) {
    EngineOutput::CollSite& s = out_.sites[i];
    s.calls += 1;
    s.duration_s += dur;
    s.bytes += bytes;
    s.member_time_s += dur * l.size;
    if (s.algo.empty()) s.algo = AlgoLabel(cost.algo, cost.proto);
  }
  if (in_.ideal_network) {
    // No time on the dependency path; SM-based collectives still hold their SMs for `dur`.
    if (holds_sms) q_.Push(now_ + dur, EventType::kSmRelease, i, g);
    q_.Push(now_, EventType::kCollEnd, i, g);
  } else {
    q_.Push(now_ + dur, EventType::kCollEnd, i, g);
  }
}

void Engine::OnCollEnd(int i, int g) {
  const TaskTemplate& t = tpl_.tasks[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  const int64_t k = coll_off_[i] + g;
  const int step = coll_step_[k];
  const double start = coll_start_[k], dur = coll_dur_[k];
  const bool release = in_.kappa > 0 && dur > 0 && !in_.ideal_network;
  for (int p = 0; p < l.size; ++p) {
    const int r = l.Member(g, p);
    if (release) SetSm(r, -1);
    const double arr = arrival_[Slot(r, t.stream)];
    last_arr_[r] = arr;
    last_start_[r] = start;
    last_task_[r] = i;
    if (Measured(step)) out_.comm_s[r] += in_.ideal_network ? 0.0 : dur;
    if (Traced(r, step)) {
      AddTrace(r, t.stream, t.name, "wait", arr, start - arr);
      AddTrace(r, t.stream, t.name, in_.kappa > 0 ? "comm" : "copy", start, now_ - start);
    }
    Complete(r, i, step);
  }
}

void Engine::OnComputeEnd(int r, uint32_t version) {
  Running& x = run_[r];
  if (x.task < 0 || version != x.version) return;  // stale (rescheduled)
  const TaskTemplate& t = tpl_.tasks[x.task];
  // Uncontended, a task takes exactly its base time (not end - start, which rounds per rank).
  const double actual = x.contended ? now_ - x.start : x.base;
  out_.step_work_s[static_cast<size_t>(x.step) * R_ + r] += actual;
  if (Measured(x.step)) {
    RankStats& s = out_.ranks[r];
    const double share = x.base > 0 ? actual / x.base : 1.0;
    const double noise_share = (x.main + x.rec) > 0 ? x.base / (x.main + x.rec) : 1.0;
    s.work_s += actual;
    if (x.contended) s.contention_s += actual - x.base;
    if (t.nonlayer) {
      s.nonlayer_compute_s += actual;
    } else {
      s.compute_s += x.main * noise_share * share;
      s.recompute_s += x.rec * noise_share * share;
    }
  }
  if (Traced(r, x.step)) {
    const double split = x.base > 0 ? actual * (x.rec / (x.main + x.rec)) : 0.0;
    if (split > 0) AddTrace(r, kComputeStream, t.name, "recompute", x.start, split);
    AddTrace(r, kComputeStream, t.name, "compute", x.start + split, actual - split);
  }
  const int i = x.task, step = x.step;
  x.task = -1;
  Complete(r, i, step);
}

void Engine::Complete(int r, int i, int step) {
  const TaskTemplate& t = tpl_.tasks[i];
  done_[static_cast<size_t>(r) * T_ + i] = static_cast<int16_t>(step);
  const int slot = Slot(r, t.stream);
  busy_[slot] = 0;
  if (++pos_[slot] == static_cast<int32_t>(tpl_.stream_tasks[t.stream].size())) {
    pos_[slot] = 0;
    ++sstep_[slot];
  }
  if (++done_count_[step] == static_cast<int64_t>(R_) * T_) out_.step_end_s[step] = now_;
  TryStart(r, t.stream);
  for (int d : tpl_.dependents[i]) TryStart(r, tpl_.tasks[d].stream);
  for (int d : tpl_.next_step_dependents[i]) TryStart(r, tpl_.tasks[d].stream);
  if (t.stream == kComputeStream && !busy_[Slot(r, kComputeStream)] && idle_since_[r] < 0) idle_since_[r] = now_;
}

absl::StatusOr<EngineOutput> Engine::Run() {
  if (in_.steps > 32000) return absl::InvalidArgumentError("batches: more than 32000 steps");
  const size_t RS = static_cast<size_t>(R_) * kNumStreams;
  done_.assign(static_cast<size_t>(R_) * T_, -1);
  pos_.assign(RS, 0);
  sstep_.assign(RS, 0);
  busy_.assign(RS, 0);
  arrival_.assign(RS, 0.0);
  run_.assign(R_, Running{});
  sm_.assign(R_, 0);
  idle_since_.assign(R_, 0.0);
  last_arr_.assign(R_, 0.0);
  last_start_.assign(R_, 0.0);
  last_task_.assign(R_, -1);
  coll_off_.assign(T_, -1);
  int64_t total = 0;
  for (int i = 0; i < T_; ++i) {
    if (!tpl_.tasks[i].collective) continue;
    coll_off_[i] = total;
    total += tpl_.layouts[tpl_.tasks[i].layout].count;
  }
  arrived_.assign(total, 0);
  max_bytes_.assign(total, 0.0);
  coll_start_.assign(total, 0.0);
  coll_dur_.assign(total, 0.0);
  coll_step_.assign(total, 0);
  done_count_.assign(in_.steps, 0);
  out_.step_end_s.assign(in_.steps, 0.0);
  out_.ranks.assign(R_, RankStats{});
  out_.comm_s.assign(R_, 0.0);
  out_.step_work_s.assign(static_cast<size_t>(in_.steps) * R_, 0.0);
  out_.sites.assign(T_, EngineOutput::CollSite{});

  for (int r = 0; r < R_; ++r) {
    for (int s = 0; s < kNumStreams; ++s) TryStart(r, s);
  }
  uint64_t events = 0;
  while (!q_.Empty()) {
    const Event e = q_.Pop();
    now_ = e.time;
    ++events;
    switch (e.type) {
      case EventType::kTaskEnd:
        if (e.version == UINT32_MAX) {
          Complete(e.a, e.b, sstep_[Slot(e.a, tpl_.tasks[e.b].stream)]);
        } else {
          OnComputeEnd(e.a, e.version);
        }
        break;
      case EventType::kCollEnd:
        OnCollEnd(e.a, e.b);
        break;
      case EventType::kSmRelease: {
        const GroupLayout& l = tpl_.layouts[tpl_.tasks[e.a].layout];
        for (int p = 0; p < l.size; ++p) SetSm(l.Member(e.b, p), -1);
        break;
      }
    }
  }
  out_.events = events;
  for (int s = 0; s < in_.steps; ++s) {
    if (done_count_[s] != static_cast<int64_t>(R_) * T_) {
      return absl::InternalError(absl::StrCat("sim engine: step ", s, " did not finish (", done_count_[s], " of ",
                                              static_cast<int64_t>(R_) * T_, " tasks): the task graph deadlocks"));
    }
  }
  return std::move(out_);
}

}  // namespace

absl::StatusOr<EngineOutput> RunEngine(const EngineInput& in) {
  if (in.tpl == nullptr || in.timing == nullptr || in.stats == nullptr) {
    return absl::InvalidArgumentError("sim engine: missing template, timing or stats");
  }
  Engine e(in);
  return e.Run();
}

}  // namespace gemtb::sim
