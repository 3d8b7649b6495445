#include "sim/engine/engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/numerics/philox.h"
#include "model/random/splitmix64.h"
#include "sim/engine/event_queue.h"
#include "sim/engine/huge_page_allocator.h"

namespace gemtb::sim {
namespace {

constexpr int kOps = 5;  // CollectiveOp values (kappa per op)
constexpr uint64_t kPurposeJitter = 0x4A495454;  // "JITT"

// A collective's bytes are one constant when no statistic has a coefficient (weights, fixed shapes).
bool ConstantBytes(const TaskTemplate& t) {
  for (size_t k = 1; k < t.bytes.coef.size(); ++k) {
    if (t.bytes.coef[k] != 0.0) return false;
  }
  return true;
}

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
        width_(tpl_.layout.size()), steps_(in.steps) {}

  absl::StatusOr<EngineOutput> Run();

 private:
  // The running compute task's work and accounting (its end and version are in SmState).
  struct Running {
    int32_t task = -1, step = 0;
    double start = 0, base = 0, rec = 0, main = 0, work_left = 0, last_t = 0, c = 1;
  };
  static_assert(sizeof(Running) == 64);
  const double* Stats(int step, int r) const {
    return in_.stats->data() + (static_cast<size_t>(step) * R_ + r) * width_;
  }
  // c_r with collectives running: one of op o slows compute by 1 + kappa_o; each takes
  // the share f_o = kappa_o / (1 + kappa_o) of what compute runs on (SMs; HBM bandwidth for the copy
  // engine), so with several c = 1 / (1 - sum f). Compute keeps at least the smallest running share
  // (NCCL channels queue beyond that).
  // The mask of ops with a count gives the common cases (none, one) without a pass over the ops; the
  // general case adds the shares in op order.
  struct SmState;
  double Contention(const SmState& s) const {
    if (s.mask == 0) return 1.0;
    const int first = std::countr_zero(s.mask);
    if ((s.mask & (s.mask - 1)) == 0 && s.n[first] == 1) return 1.0 + in_.kappa[first];
    double sum = 0, least = 1;
    for (unsigned m = s.mask; m != 0; m &= m - 1) {
      const int o = std::countr_zero(m);
      const double f = in_.kappa[o] / (1.0 + in_.kappa[o]);
      sum += s.n[o] * f;
      least = std::min(least, f);
    }
    return 1.0 / std::max(1.0 - sum, least);
  }
  bool HoldsSms(int i) const { return in_.kappa[static_cast<int>(tpl_.tasks[i].op)] > 0; }
  bool Measured(int step) const { return step >= in_.warmup; }
  bool Traced(int r, int step) const { return !in_.traced.empty() && in_.traced[r] && step == in_.trace_step; }

  // Unfinished dependencies of (rank, task, step): one counter per step slot (step mod 2). A task
  // never lags a dependency by 2 steps: every stream's next-step work waits, in stream order or by
  // dependency, for the previous step's optimizer (the last compute task), so when a dependency of
  // step s + 1 completes, every task of step s - 1 has started. (Were it violated, a counter would
  // never reach zero and Run() reports the deadlock instead of a wrong result.) A task is ready when its counter is zero; a dependency's completion decrements its
  // dependents' counters, so readiness costs O(1) per dependency, whatever the fan-in.
  // Layout [slot][task][rank]: the ranks of a collective's group complete it together, and all ranks
  // run the same task at about the same time, so the counters in use at any moment sit on few lines
  // (task-major: one line serves 64 ranks; rank-major, every rank's counters had lines of their own,
  // a cache miss per completion at 16,384 ranks).
  uint8_t& Pending(int r, int i, int step) { return PendingColumn(r, step)[static_cast<size_t>(i) * R_]; }
  // Rank r's counters for a step's slot: task i's is at [i * R_].
  uint8_t* PendingColumn(int r, int step) { return slot_base_[step & (kSlots - 1)] + r; }
  uint8_t FullCount(int i, int step) const {
    return step > 0 ? hot_[i].full_count : hot_[i].full_count_first;
  }
  static constexpr int kSlots = 2;
  // Starts the head of r's stream if it is idle and ready. Most calls find it busy or waiting: that
  // check stays inline, and only a start pays for a call.
  void TryStart(int r, int stream) {
    const StreamState& ss = rs_[r].st[stream];
    if (ss.busy || ss.step >= steps_) return;
    const int* list = stream_list_[stream];
    if (list == nullptr) return;
    const int i = list[ss.pos];
    if (Pending(r, i, ss.step) != 0) return;
    StartHead(r, stream, i);
  }
  void StartHead(int r, int stream, int i);
  void StartCompute(int r, int i, int step);
  void EnterComputeStep(int r, int step);
  void Arrive(int r, int i, int step);
  void StartCollective(int i, int g, int step);
  void Complete(int r, int i, int step);
  // A collective of op `op` starts (+1) or ends (-1) on rank r. Most members are not computing:
  // that case stays inline, and only a rate change pays for a call.
  void SetSm(int r, int op, int delta) {
    SmState& sm = sm_[r];
    if (!sm.computing) {  // nothing runs at the old or the new rate
      sm.Add(op, delta);
      return;
    }
    SetSmComputing(r, op, delta);
  }
  void SetSmComputing(int r, int op, int delta);
  void OnComputeEnd(int r, int task, int step, uint32_t version);
  void OnCollEnd(int i, int g, uint32_t version);
  void ShareStart(int i, int g, int64_t k, double dur);
  void ShareLeave(int r, int port, int64_t k);
  void ShareMove(int64_t other, int from, int to, std::vector<int64_t>& touched);
  void Reshare(int64_t k);
  void StartPerRank(int i, int g, int step, double jitter, bool holds_sms);
  void MemberEnd(int i, int r, int step, double start, double dur, bool release_sms);
  void AddTrace(int r, int stream, const std::string& name, const char* cat, double start, double dur) {
    if (dur <= 0 && std::string_view(cat) == "wait") return;
    out_.trace.push_back(TraceEvent{r, stream, name, cat, start, dur});
  }

  const EngineInput& in_;
  const StepTemplate& tpl_;
  const int R_, T_, width_, steps_;
  EventQueue q_;
  double now_ = 0;
  EngineOutput out_;
  // Everything an event touches on one rank sits together (a rank's events are far apart in
  // time, so separate arrays would each cost a cache miss).
  struct StreamState {
    double arrival = 0;  // when the head collective arrived
    int32_t pos = 0;     // head position in stream_tasks
    int16_t step = 0;    // the head's step
    uint8_t busy = 0;
  };
  // What the loop adds up per rank (the engine's part of RankStats).
  struct Accumulated {
    double compute_s = 0, exposed_comm_s = 0, wait_s = 0, recompute_s = 0, contention_s = 0, nonlayer_compute_s = 0,
           work_s = 0;
  };
  // One rank's state: five cache lines from a line start, every field one the loop uses (a task end
  // and the next start touch most of them; the loop prefetches it line by line).
  struct alignas(64) RankState {
    Running run;
    int32_t last_task = -1;  // the collective that completed last (blocker accounting)
    int16_t cur_step = -1;   // the compute stream's step
    uint8_t contended = 0;   // the running task ran at c > 1 for some time
    double idle_since = 0;   // compute stream idle since (-1: busy)
    double last_arr = 0, last_start = 0;
    double cur_work = 0;     // its compute time so far
    double noise = 1;        // its noise factor
    double comm = 0;
    StreamState st[kNumStreams];
    Accumulated acc;
  };
  static_assert(sizeof(RankState) == 320);
  // Per rank, the collectives running that hold kappa > 0, per op, whether a compute task runs, and
  // that task's end key: apart from the rank state, so that a collective's start and end, which
  // update every member's counts, touch one small record per member (two to a cache line) and the
  // rank state only of a member whose running task changes rate; and so that a compute end event
  // that is stale or early (about 4 in 10 of them) touches this record alone.
  struct alignas(32) SmState {
    std::array<int16_t, kOps> n{};
    uint8_t computing = 0;
    uint8_t mask = 0;  // bit o: n[o] > 0
    // The running task's end event: its version, when it ends at its current rate, and when its
    // live event is queued. A rate change that moves the end later leaves that event queued (it
    // re-queues at `end` when it fires early), so only a change that moves the end before the
    // queued event queues another.
    uint32_t version = 0;
    double end = 0, queued = 0;
    void Add(int op, int delta) {
      n[op] = static_cast<int16_t>(n[op] + delta);
      mask = static_cast<uint8_t>(n[op] > 0 ? mask | (1u << op) : mask & ~(1u << op));
    }
  };
  static_assert(sizeof(SmState) == 32);
  HugeVector<SmState> sm_;
  HugeVector<double> cur_stats_;   // [rank][width]: the compute step's batch statistics
  // Compute tasks with the same time function (the same layer in every block, say: gem-default's
  // 199 compute tasks have 59) take the same time on a rank-step. Each distinct function is evaluated
  // once per rank-step, when the compute stream enters the step, into form_time_ [form][rank]: a
  // task's start reads one value (one line) instead of the statistics row (three) and a dependent
  // chain of multiply-adds. Every task's value is its own EvalTime's: the same function of the same
  // row. The same table holds the bytes of the collectives whose bytes depend on the batch (an
  // arrival read them from the statistics row, out of cache since compute starts stopped reading
  // it); a collective of constant bytes reads bytes_const_. The table costs 8 bytes per function per
  // rank (gem-default: 59 times and 5 byte counts, 512 bytes a rank, 67 MB at 131,072 ranks), so it
  // holds at most EngineInput::time_table_functions of them; a task of another evaluates its own.
  std::vector<int32_t> form_of_;    // per task: its form (-1: constant bytes, or not tabled)
  std::vector<int32_t> form_task_;  // per form: the task whose time function it evaluates
  int forms_ = 0;
  // A function without curve terms as one flat program (StatAffine::Program, the same sum in the
  // same order): evaluating it reads two small arrays, not the template's vectors scattered over the
  // heap. The forms' and the checkpoint pieces' forwards (a recompute adds its dropped pieces').
  struct FlatFn {
    double start = 0;
    int32_t begin = 0, end = -1;  // end < 0: has curve terms (EvalTime on the template)
  };
  std::vector<FlatFn> form_flat_, piece_flat_;
  std::vector<int32_t> flat_idx_;
  std::vector<double> flat_val_;
  FlatFn Flatten(const StatAffine& a) {
    FlatFn f;
    f.begin = static_cast<int32_t>(flat_idx_.size());
    f.start = a.Program(flat_idx_, flat_val_);
    f.end = static_cast<int32_t>(flat_idx_.size());
    return f;
  }
  // A flat program's value (f.end >= 0). Callers test for one themselves: resolving a template
  // function for the other case costs the hot callers instructions they mostly do not need.
  double EvalFlat(const FlatFn& f, const double* stats) const {
    double v = f.start;
    for (int32_t k = f.begin; k < f.end; ++k) v += flat_val_[k] * stats[flat_idx_[k]];
    return v;
  }
  HugeVector<double> form_time_;
  // Form f's value for rank r: [form][rank], so that a line holds 8 neighbouring ranks' values of
  // one form (they run the same task at about the same time, as the pending counters' layout).
  double& FormTime(int r, int f) { return form_time_[static_cast<size_t>(f) * R_ + r]; }
  const double* FormTimePtr(int r, int f) const { return form_time_.data() + static_cast<size_t>(f) * R_ + r; }
  // [word][rank]: the compute step's dropped checkpoint pieces, bit p % 64 of word p / 64 (word-major
  // like form_time_: a region's word of 8 neighbouring ranks on one line).
  HugeVector<uint64_t> cur_ckpt_;
  int ckpt_words_ = 1;
  uint64_t& CkptWord(int r, int w) { return cur_ckpt_[static_cast<size_t>(w) * R_ + r]; }
  HugeVector<RankState> rs_;
  HugeVector<uint8_t> pending_;     // [slot][task][rank]: unfinished dependencies
  std::vector<int64_t> coll_off_;   // per task: offset into the per-group state
  std::vector<int32_t> arrived_;
  std::vector<double> max_bytes_, coll_start_, coll_dur_;
  std::vector<int16_t> coll_step_;
  // Processor sharing: per rank and port (0 its NVLink/NVSwitch port, 1 its NIC), the
  // collectives running on it whose outermost link that is, apart from the rank state so that a
  // rendezvous's pass over its members touches little memory. A rank has at most one collective per
  // stream in flight, so kMaxShare bounds the list.
  static constexpr int kPorts = 2;
  static constexpr int kMaxShare = 8;
  static_assert(kNumStreams - 1 <= kMaxShare, "one collective per non-compute stream");
  // A rank-tier's collectives, as instance keys (coll_off_[task] + group) in start order: the
  // first in port_first_, the others in ports_. The count and the first sit apart in small arrays
  // that stay in cache, so a collective alone on a member's tier (the common case) never touches
  // the member's list, at start or at end.
  struct alignas(32) PortState {
    int32_t coll[kMaxShare - 1];  // the second, third, ... (port_n_ - 1 of them)
  };
  HugeVector<PortState> ports_;      // [port][rank]: a contiguous group's members are neighbours
  HugeVector<int32_t> port_first_;   // [port][rank]
  HugeVector<uint8_t> port_n_;       // [port][rank]
  size_t PortIndex(int r, int port) const { return static_cast<size_t>(port) * R_ + r; }
  // Per instance k under processor sharing: its sharers n (the most collectives any member has on
  // its port; 0 when not sharing), its lone-rate work left as of share_last_, the version of its
  // pending end event, and a histogram of its members' port loads (n = the highest non-empty bin).
  std::vector<int32_t> share_n_;
  std::vector<double> share_left_, share_last_;
  std::vector<uint32_t> share_ver_;
  std::vector<std::array<int32_t, kMaxShare + 1>> share_hist_;
  std::vector<uint32_t> share_mark_;
  uint32_t share_stamp_ = 0;
  // Instances whose histogram changed at a collective's start / end (deduplicated by mark; a start
  // inside an end's pass over its members can let one in twice, which Reshare makes harmless).
  std::vector<int64_t> share_touched_, share_end_touched_;
  std::vector<int32_t> inst_task_;      // per instance: its task
  // Per task: the cost of the last bytes it was costed for (the cost is a function of the bytes).
  struct CostMemo {
    double bytes = -1;
    CollectiveCost cost;
  };
  std::vector<CostMemo> cost_memo_;
  // Per layout: the port its collectives load, 0 (NVLink) for a group on one host, else 1 (the
  // NIC, which in-zone and cross-zone traffic share; the zone uplink's smaller share is the
  // oversubscription already in the cross-zone bandwidth).
  std::vector<int8_t> layout_port_;
  std::vector<int64_t> done_count_;  // per step: (rank, task) completions
  // a2av_end per_rank: each member's bytes and duration of the all-to-allv heading a stream
  // ([rank][stream]; empty otherwise).
  std::vector<double> a2av_bytes_, a2av_dur_;
  double& MemberSlot(std::vector<double>& v, int r, int stream) {
    return v[static_cast<size_t>(r) * kNumStreams + stream];
  }
  // What the event loop reads of a task, in one small record per task (a TaskTemplate is hundreds
  // of bytes of names, vectors and cost terms: the loop read a few scattered fields of it), and the
  // same-step and next-step dependents of all tasks in one array, each with its counter's offset in
  // a slot and its stream.
  struct HotTask {
    int32_t stream = 0, layout = 0, period = 1, stream_len = 0;
    int32_t dep_begin = 0, dep_end = 0, next_begin = 0, next_end = 0;  // into deps_
    int32_t stream_next = 0;  // the task after it on its stream (the stream wraps to the next step)
    uint8_t collective = 0, a2av = 0, nonlayer = 0, full_count = 0, full_count_first = 0;
    uint8_t wraps = 0;        // stream_next is the next step's
    uint8_t recompute = 0;    // a compute task with a recompute region (reads the statistics row)
    uint8_t const_bytes = 0;  // a collective whose bytes are one constant (bytes_const_)
    uint8_t reads_stats = 0;  // its start reads the statistics row (a recompute, or no table entry)
    int16_t ckpt_word = 0;    // a recompute's first checkpoint word
  };
  struct DepRef {
    size_t off;  // dependent * R_: its counter's offset from the rank's column
    int32_t stream;
    int32_t bytes_form;  // a collective dependent's bytes in the rank-step table (-1: none)
  };
  std::vector<HotTask> hot_;
  std::vector<double> bytes_const_;  // per collective task with const_bytes: its bytes
  // GroupLayout::GroupOf without its two divisions where stride and size are powers of two (every
  // layout of a power-of-two world): a rank's arrival is the hottest caller.
  struct GroupOfRank {
    GroupLayout l;
    int shift_block = -1, shift_stride = -1;  // log2(stride * size), log2(stride); -1: not a power of two
    int Of(int r) const {
      if (shift_block < 0) return l.GroupOf(r);
      return ((r >> shift_block) << shift_stride) + (r & ((1 << shift_stride) - 1));
    }
  };
  std::vector<GroupOfRank> group_of_;
  std::vector<DepRef> deps_;
  int64_t tasks_per_step_ = 0;                    // R_ * T_: a step's completions
  std::array<uint8_t*, 2> slot_base_{};           // where each slot starts
  std::array<const int*, kNumStreams> stream_list_{};  // per stream: its tasks (null when none)
  // Prefetches what a member's end of call i reads for rank r: its SmState (the call gives back its
  // share of the rank's compute), and what Complete(r, i, step) reads (its stream state, the counters
  // of the stream's next task and of i's first dependents). The members of a group are far apart in
  // memory and each would otherwise be a cache miss.
  void PrefetchCompletion(int r, int i, int step) {
    const HotTask& t = hot_[i];
    __builtin_prefetch(&rs_[r].st[t.stream]);
    __builtin_prefetch(&sm_[r]);
    __builtin_prefetch(&Pending(r, t.stream_next, step + t.wraps));
    if (t.dep_begin < t.dep_end) __builtin_prefetch(PendingColumn(r, step) + deps_[t.dep_begin].off);
  }
};

__attribute__((noinline)) void Engine::StartHead(int r, int stream, int i) {
  StreamState& ss = rs_[r].st[stream];
  const int step = ss.step;
  ss.busy = 1;
  Pending(r, i, step) = FullCount(i, step + kSlots);  // the slot's next use
  const HotTask& t = hot_[i];
  if (!t.collective) {
    StartCompute(r, i, step);
  } else if (t.period > 1 && (step + 1) % t.period != 0) {
    q_.Push(now_, EventType::kTaskEnd, r, i, UINT32_MAX);  // not this step: a no-op
  } else {
    Arrive(r, i, step);
  }
}

// Out of line: it runs once per rank-step, and inlined its loops weighed on the registers of every
// StartHead (the calls' saves and restores).
__attribute__((noinline)) void Engine::EnterComputeStep(int r, int step) {
  // The compute stream moves to `step` (in order): bank the finished step's work and bring this
  // step's inputs next to the rank's state, so each compute task reads them from one place.
  RankState& st = rs_[r];
  if (st.cur_step >= 0) out_.step_work_s[static_cast<size_t>(st.cur_step) * R_ + r] += st.cur_work;
  st.cur_step = static_cast<int16_t>(step);
  st.cur_work = 0;
  st.noise = in_.noise != nullptr ? (*in_.noise)[static_cast<size_t>(step) * R_ + r] : 1.0;
  std::copy_n(Stats(step, r), width_, cur_stats_.data() + static_cast<size_t>(r) * width_);
  {
    const absl::Span<const double> stats(cur_stats_.data() + static_cast<size_t>(r) * width_, width_);
    for (int f = 0; f < forms_; ++f) {
      if (form_flat_[f].end >= 0) {
        FormTime(r, f) = EvalFlat(form_flat_[f], stats.data());
      } else {  // a time with curve terms (a collective's bytes are always flat)
        const TaskTemplate& t = tpl_.tasks[form_task_[f]];
        FormTime(r, f) = EvalTime(t.time, t.curve_terms, stats);
      }
    }
  }
  if (in_.checkpointed != nullptr) {
    const size_t pieces = tpl_.pieces.size();
    const uint8_t* ck = in_.checkpointed->data() + (static_cast<size_t>(step) * R_ + r) * pieces;
    for (int w = 0; w < ckpt_words_; ++w) CkptWord(r, w) = 0;
    size_t p = 0;
#if defined(__SSE2__)
    // 16 flags (0 or 1 bytes) to 16 bits at a time; 16 divides 64, so a group never straddles words.
    const __m128i zero = _mm_setzero_si128();
    for (; p + 16 <= pieces; p += 16) {
      const __m128i flags = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ck + p));
      const uint64_t set = static_cast<uint16_t>(~_mm_movemask_epi8(_mm_cmpeq_epi8(flags, zero)));
      CkptWord(r, static_cast<int>(p / 64)) |= set << (p % 64);
    }
#endif
    for (; p < pieces; ++p) if (ck[p]) CkptWord(r, static_cast<int>(p / 64)) |= uint64_t{1} << (p % 64);
  }
}

void Engine::StartCompute(int r, int i, int step) {
  if (rs_[r].cur_step != step) EnterComputeStep(r, step);
  const absl::Span<const double> stats(cur_stats_.data() + static_cast<size_t>(r) * width_, width_);
  Running& x = rs_[r].run;
  x.task = i;
  x.step = step;
  x.start = now_;
  // The task's template (hundreds of bytes, often out of cache) only where the table has no value
  // or a region recomputes.
  const int form = form_of_[i];
  if (form >= 0) {
    x.main = FormTime(r, form);
  } else {
    const TaskTemplate& t = tpl_.tasks[i];
    x.main = EvalTime(t.time, t.curve_terms, stats);
  }
  x.rec = 0;
  if (hot_[i].recompute && in_.checkpointed != nullptr) {
    // The region's dropped pieces are rebuilt before its backward.
    const RegionTemplate& reg = tpl_.regions[tpl_.tasks[i].recompute_region];
    // The region's flags at once (a region has at most one piece per recompute class, far fewer
    // than 64): most regions drop none, and a dropped one is found without testing the others.
    const int first = reg.piece_begin, n = reg.piece_end - reg.piece_begin, off = first % 64;
    uint64_t dropped = CkptWord(r, first / 64) >> off;
    if (off + n > 64) dropped |= CkptWord(r, first / 64 + 1) << (64 - off);
    dropped &= (uint64_t{1} << n) - 1;
    for (; dropped != 0; dropped &= dropped - 1) {
      const int p = first + std::countr_zero(dropped);
      x.rec += piece_flat_[p].end >= 0 ? EvalFlat(piece_flat_[p], stats.data())
                                       : EvalTime(tpl_.pieces[p].fwd_time, tpl_.pieces[p].fwd_curve_terms, stats);
    }
  }
  x.base = (x.main + x.rec) * rs_[r].noise;
  x.work_left = x.base;
  x.last_t = now_;
  SmState& sm = sm_[r];
  sm.computing = 1;
  x.c = Contention(sm);
  rs_[r].contended = x.c > 1.0;
  ++sm.version;
  sm.end = now_ + x.work_left * x.c;
  sm.queued = sm.end;
  q_.Push(sm.end, EventType::kTaskEnd, r, i, sm.version, step);
  // Compute idle time ends here: charge it to the collective that unblocked it.
  if (rs_[r].idle_since >= 0) {
    const double idle = now_ - rs_[r].idle_since;
    if (Measured(step) && idle > 0) {
      double wait = 0;
      if (rs_[r].last_task >= 0) {
        const double lo = std::max(rs_[r].idle_since, rs_[r].last_arr), hi = std::min(now_, rs_[r].last_start);
        wait = std::max(0.0, hi - lo);
        out_.sites[rs_[r].last_task].exposed_s += idle - wait;
      }
      rs_[r].acc.wait_s += wait;
      rs_[r].acc.exposed_comm_s += idle - wait;
    }
    rs_[r].idle_since = -1;
  }
}

__attribute__((noinline)) void Engine::SetSmComputing(int r, int op, int delta) {
  SmState& sm = sm_[r];
  sm.Add(op, delta);
  const double c_new = Contention(sm);
  Running& x = rs_[r].run;
  if (c_new == x.c) return;  // x.c is the contention of the counts before (set with them)
  // Reschedule the running task's remaining work at the new rate.
  x.work_left -= (now_ - x.last_t) / x.c;
  if (x.work_left < 0) x.work_left = 0;
  x.last_t = now_;
  x.c = c_new;
  rs_[r].contended = rs_[r].contended || c_new > 1.0;
  sm.end = now_ + x.work_left * x.c;
  if (sm.end >= sm.queued) return;  // the queued event fires first and re-queues at sm.end
  ++sm.version;
  sm.queued = sm.end;
  q_.Push(sm.end, EventType::kTaskEnd, r, x.task, sm.version, x.step);
}

void Engine::Arrive(int r, int i, int step) {
  const HotTask& t = hot_[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  const int g = group_of_[t.layout].Of(r);
  const int64_t k = coll_off_[i] + g;
  rs_[r].st[t.stream].arrival = now_;
  // Bytes from the task's constant, or the rank-step's table (the compute stream's step, nearly
  // always), or else the statistics.
  double bytes;
  if (t.const_bytes) {
    bytes = bytes_const_[i];
  } else if (form_of_[i] >= 0 && rs_[r].cur_step == step) {
    bytes = FormTime(r, form_of_[i]);
  } else {
    const double* stats = rs_[r].cur_step == step ? cur_stats_.data() + static_cast<size_t>(r) * width_ : Stats(step, r);
    bytes = tpl_.tasks[i].bytes.Eval(absl::Span<const double>(stats, width_));
  }
  if (in_.a2av_per_rank && t.a2av) MemberSlot(a2av_bytes_, r, t.stream) = bytes;
  if (arrived_[k] == 0 || bytes > max_bytes_[k]) max_bytes_[k] = bytes;
  if (++arrived_[k] == l.size) {
    coll_step_[k] = static_cast<int16_t>(step);
    StartCollective(i, g, step);
  }
}

// Out of line: one arrival in a group's size starts the call, and its passes over the members would
// otherwise weigh on every start's registers (StartHead inlines the arrival).
__attribute__((noinline)) void Engine::StartCollective(int i, int g, int step) {
  const TaskTemplate& t = tpl_.tasks[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  const int64_t k = coll_off_[i] + g;
  arrived_[k] = 0;
  const double bytes = max_bytes_[k];
  CostMemo& memo = cost_memo_[i];
  if (memo.bytes != bytes) {  // most call sites move the same bytes every step (weights, fixed shapes)
    memo.bytes = bytes;
    memo.cost = in_.timing->Cost(t.layout, t.op, bytes, t.a2av);
  }
  const CollectiveCost& cost = memo.cost;
  double dur = cost.duration_s;
  double jitter = 1.0;
  if (in_.jitter_sigma > 0 && dur > 0) {
    const uint64_t stream = SplitMix64(SplitMix64(kPurposeJitter ^ static_cast<uint64_t>(i)) ^ static_cast<uint64_t>(g));
    const double z = StdNormal(in_.seed, stream, static_cast<uint64_t>(step));
    jitter = std::exp(in_.jitter_sigma * z - 0.5 * in_.jitter_sigma * in_.jitter_sigma);
    dur *= jitter;
  }
  coll_start_[k] = now_;
  coll_dur_[k] = dur;
  const bool holds_sms = HoldsSms(i) && dur > 0;
  if (t.a2av && in_.a2av_per_rank) {
    if (Measured(step)) {
      EngineOutput::CollSite& s = out_.sites[i];
      s.calls += 1;
      s.duration_s += dur;
      s.bytes += bytes;
      if (s.algo.empty()) s.algo = AlgoLabel(cost.algo, cost.proto);
    }
    StartPerRank(i, g, step, jitter, holds_sms);
    return;
  }
  if (holds_sms) {
    // A member's SmState and, when it computes, its running task are likely cache misses: load
    // them a few members ahead.
    constexpr int kAhead = 8;
    const int base = l.BaseOf(g);
    for (int p = 0; p < l.size; ++p) {
      if (p + kAhead < l.size) {
        const int ahead = base + (p + kAhead) * l.stride;
        __builtin_prefetch(&sm_[ahead]);
        __builtin_prefetch(&rs_[ahead].run);
      }
      SetSm(base + p * l.stride, static_cast<int>(t.op), +1);
    }
  }
  if (Measured(step)) {
    EngineOutput::CollSite& s = out_.sites[i];
    s.calls += 1;
    s.duration_s += dur;
    s.bytes += bytes;
    s.member_time_s += dur * l.size;
    if (s.algo.empty()) s.algo = AlgoLabel(cost.algo, cost.proto);
  }
  ++share_ver_[k];
  if (in_.ideal_network) {
    // No time on the dependency path; SM-based collectives still hold their SMs for `dur`.
    if (holds_sms) q_.Push(now_ + dur, EventType::kSmRelease, i, g);
    q_.Push(now_, EventType::kCollEnd, i, g, share_ver_[k]);
  } else if (in_.processor_sharing && dur > 0) {
    ShareStart(i, g, k, dur);
  } else {
    q_.Push(now_ + dur, EventType::kCollEnd, i, g, share_ver_[k]);
  }
}

// a2av_end per_rank: the members start together, but each leaves when its own send and
// receive totals are through, costed with its own bytes (the same per-call jitter for all).
void Engine::StartPerRank(int i, int g, int step, double jitter, bool holds_sms) {
  const TaskTemplate& t = tpl_.tasks[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  for (int p = 0; p < l.size; ++p) {
    const int r = l.Member(g, p);
    double& own = MemberSlot(a2av_dur_, r, t.stream);
    own = in_.timing->Cost(t.layout, t.op, MemberSlot(a2av_bytes_, r, t.stream), true).duration_s * jitter;
    if (Measured(step)) out_.sites[i].member_time_s += own;
    if (holds_sms) SetSm(r, static_cast<int>(t.op), +1);
    if (in_.ideal_network) {
      if (holds_sms) q_.Push(now_ + own, EventType::kMemberSmRelease, r, static_cast<int>(t.op));
      q_.Push(now_, EventType::kMemberEnd, i, r);
    } else {
      q_.Push(now_ + own, EventType::kMemberEnd, i, r);
    }
  }
}

// One member leaves collective task i: at the call's end for every member (OnCollEnd), or at its own
// end under a2av_end per_rank. It gives back its SMs, books its communication, traces, completes.
void Engine::MemberEnd(int i, int r, int step, double start, double dur, bool release_sms) {
  const TaskTemplate& t = tpl_.tasks[i];
  if (release_sms) SetSm(r, static_cast<int>(t.op), -1);
  const double arr = rs_[r].st[t.stream].arrival;
  rs_[r].last_arr = arr;
  rs_[r].last_start = start;
  rs_[r].last_task = i;
  if (Measured(step)) rs_[r].comm += in_.ideal_network ? 0.0 : dur;
  if (Traced(r, step)) {
    AddTrace(r, t.stream, t.name, "wait", arr, start - arr);
    AddTrace(r, t.stream, t.name, in_.copy_engine ? "copy" : "comm", start, now_ - start);
  }
  Complete(r, i, step);
}

// Processor sharing: collective k (task i, group g) joins its members' port lists. Every collective
// already on one of those ports gains a sharer there; those whose most-loaded member changed are
// rescheduled (RateChange), and k's own end is set at its shared rate.
void Engine::ShareStart(int i, int g, int64_t k, double dur) {
  const GroupLayout& l = tpl_.layouts[tpl_.tasks[i].layout];
  const int port = layout_port_[tpl_.tasks[i].layout];
  std::array<int32_t, kMaxShare + 1>& hist = share_hist_[k];
  hist.fill(0);
  ++share_stamp_;
  share_touched_.clear();
  const size_t first = PortIndex(l.BaseOf(g), port);
  for (int p = 0; p < l.size; ++p) {
    const size_t x = first + static_cast<size_t>(p) * l.stride;
    const int n = port_n_[x];
    if (n == 0) {
      port_first_[x] = static_cast<int32_t>(k);
    } else {
      ShareMove(port_first_[x], n, n + 1, share_touched_);
      PortState& ps = ports_[x];
      for (int j = 0; j + 1 < n; ++j) ShareMove(ps.coll[j], n, n + 1, share_touched_);
      ps.coll[n - 1] = static_cast<int32_t>(k);
    }
    port_n_[x] = static_cast<uint8_t>(n + 1);
    ++hist[n + 1];
  }
  int n = kMaxShare;
  while (n > 1 && hist[n] == 0) --n;
  share_n_[k] = n;
  share_left_[k] = dur;
  share_last_[k] = now_;
  q_.Push(now_ + dur * n, EventType::kCollEnd, i, g, share_ver_[k]);
  for (int64_t other : share_touched_) Reshare(other);
}

// Collective k leaves rank r's port list; the others there lose a sharer (in OnCollEnd's pass over
// the members, so that an end costs one pass).
void Engine::ShareLeave(int r, int port, int64_t k) {
  const size_t x = PortIndex(r, port);
  const int n = port_n_[x];
  port_n_[x] = static_cast<uint8_t>(n - 1);
  if (n == 1) return;  // it was alone there
  // Remove k from [first, coll[0], ..., coll[n - 2]], keeping start order (deterministic).
  PortState& ps = ports_[x];
  int j = 0;
  if (port_first_[x] == k) {
    port_first_[x] = ps.coll[0];
  } else {
    while (ps.coll[j] != k) ++j;
  }
  for (; j + 1 < n - 1; ++j) ps.coll[j] = ps.coll[j + 1];
  ShareMove(port_first_[x], n, n - 1, share_end_touched_);
  for (j = 0; j + 2 < n; ++j) ShareMove(ps.coll[j], n, n - 1, share_end_touched_);
}

// One member of collective `other` goes from `from` to `to` collectives on its port.
void Engine::ShareMove(int64_t other, int from, int to, std::vector<int64_t>& touched) {
  std::array<int32_t, kMaxShare + 1>& hist = share_hist_[other];
  --hist[from];
  ++hist[to];
  if (share_mark_[other] != share_stamp_) {
    share_mark_[other] = share_stamp_;
    touched.push_back(other);
  }
}

// RateChange: if k's most-loaded member changed, bank its work at the old rate and move its end.
void Engine::Reshare(int64_t k) {
  const std::array<int32_t, kMaxShare + 1>& hist = share_hist_[k];
  if (share_n_[k] == 0) return;  // ended (its members are leaving their ports)
  int n = kMaxShare;
  while (n > 1 && hist[n] == 0) --n;
  if (n == share_n_[k]) return;
  share_left_[k] = std::max(0.0, share_left_[k] - (now_ - share_last_[k]) / share_n_[k]);
  share_last_[k] = now_;
  share_n_[k] = n;
  ++share_ver_[k];
  const int i = inst_task_[k];
  q_.Push(now_ + share_left_[k] * n, EventType::kCollEnd, i, static_cast<int32_t>(k - coll_off_[i]), share_ver_[k]);
}

void Engine::OnCollEnd(int i, int g, uint32_t version) {
  const TaskTemplate& t = tpl_.tasks[i];
  const GroupLayout& l = tpl_.layouts[t.layout];
  const int64_t k = coll_off_[i] + g;
  if (version != share_ver_[k]) return;  // rescheduled by a rate change
  const int step = coll_step_[k];
  const bool shared = share_n_[k] > 0;
  const int port = layout_port_[t.layout];
  if (shared) {
    share_n_[k] = 0;
    ++share_stamp_;
    share_end_touched_.clear();
    // Booked at its lone duration when it started: add what sharing stretched it by.
    const double stretch = (now_ - coll_start_[k]) - coll_dur_[k];
    if (Measured(step) && stretch > 0) {
      out_.sites[i].duration_s += stretch;
      out_.sites[i].member_time_s += stretch * l.size;
    }
    coll_dur_[k] = now_ - coll_start_[k];
  }
  const double start = coll_start_[k], dur = coll_dur_[k];
  const bool release = HoldsSms(i) && dur > 0 && !in_.ideal_network;
  constexpr int kAhead = 8;  // members prefetched ahead (each completion is a few hundred ns)
  const int base = l.BaseOf(g);  // member p is base + p * stride
  for (int p = 0; p < std::min(kAhead, l.size); ++p) PrefetchCompletion(base + p * l.stride, i, step);
  for (int p = 0; p < l.size; ++p) {
    const int r = base + p * l.stride;
    if (p + kAhead < l.size) PrefetchCompletion(r + kAhead * l.stride, i, step);
    if (p + 1 < l.size) __builtin_prefetch(&rs_[r + l.stride].run);
    if (shared) ShareLeave(r, port, k);
    MemberEnd(i, r, step, start, dur, release);
  }
  if (shared) {
    for (int64_t other : share_end_touched_) Reshare(other);
  }
}

void Engine::OnComputeEnd(int r, int task, int step, uint32_t version) {
  SmState& sm = sm_[r];
  if (!sm.computing || version != sm.version) return;  // stale (rescheduled)
  if (now_ < sm.end) {  // slowed since this event was queued: end at the current rate
    sm.queued = sm.end;
    q_.Push(sm.end, EventType::kTaskEnd, r, task, version, step);
    return;
  }
  Running& x = rs_[r].run;
  const HotTask& t = hot_[x.task];
  // Uncontended, a task takes exactly its base time (not end - start, which rounds per rank).
  const bool contended = rs_[r].contended;
  const double actual = contended ? now_ - x.start : x.base;
  rs_[r].cur_work += actual;
  if (Measured(x.step)) {
    Accumulated& s = rs_[r].acc;
    // Uncontended, actual is base: the share is exactly 1 without the division.
    const double share = !contended ? 1.0 : x.base > 0 ? actual / x.base : 1.0;
    const double noise_share = (x.main + x.rec) > 0 ? x.base / (x.main + x.rec) : 1.0;
    s.work_s += actual;
    if (contended) s.contention_s += actual - x.base;
    if (t.nonlayer) {
      s.nonlayer_compute_s += actual;
    } else {
      s.compute_s += x.main * noise_share * share;
      s.recompute_s += x.rec * noise_share * share;
    }
  }
  if (Traced(r, x.step)) {
    const double split = x.base > 0 ? actual * (x.rec / (x.main + x.rec)) : 0.0;
    const std::string& name = tpl_.tasks[x.task].name;
    if (split > 0) AddTrace(r, kComputeStream, name, "recompute", x.start, split);
    AddTrace(r, kComputeStream, name, "compute", x.start + split, actual - split);
  }
  x.task = -1;
  sm.computing = 0;
  Complete(r, task, step);
}

// Inlined into its callers (a call end's member loop, a compute end): ~425 completions per
// rank-step, each paying a call's saves and restores when it was a function of its own.
inline __attribute__((always_inline)) void Engine::Complete(int r, int i, int step) {
  const HotTask& t = hot_[i];
  StreamState& ss = rs_[r].st[t.stream];
  ss.busy = 0;
  if (++ss.pos == t.stream_len) {
    ss.pos = 0;
    ++ss.step;
  }
  if (++done_count_[step] == tasks_per_step_) out_.step_end_s[step] = now_;
  TryStart(r, t.stream);
  uint8_t* const col = PendingColumn(r, step);
  for (int q = t.dep_begin; q < t.dep_end; ++q) {
    if (--col[deps_[q].off] == 0) TryStart(r, deps_[q].stream);
  }
  if (t.next_begin < t.next_end && step + 1 < steps_) {
    uint8_t* const next_col = PendingColumn(r, step + 1);
    for (int q = t.next_begin; q < t.next_end; ++q) {
      if (--next_col[deps_[q].off] == 0) TryStart(r, deps_[q].stream);
    }
  }
  if (t.stream == kComputeStream && !rs_[r].st[kComputeStream].busy && rs_[r].idle_since < 0) rs_[r].idle_since = now_;
}

absl::StatusOr<EngineOutput> Engine::Run() {
  if (in_.steps > 32000) return absl::InvalidArgumentError("batches: more than 32000 steps");
  rs_.assign(R_, RankState{});
  sm_.assign(R_, SmState{});
  cur_stats_.assign(static_cast<size_t>(R_) * width_, 0.0);
  {
    // Forms: compute tasks keyed by the bits of their time function (a constant-efficiency part and
    // curve terms), collectives of batch-dependent bytes by their bytes function.
    std::map<std::vector<uint64_t>, int32_t> seen;
    form_of_.assign(T_, -1);
    form_task_.clear();
    std::vector<uint64_t> key;
    const auto add = [&key](const StatAffine& a) {
      key.push_back(a.coef.size());
      for (double c : a.coef) key.push_back(std::bit_cast<uint64_t>(c));
    };
    for (int i = 0; i < T_; ++i) {
      const TaskTemplate& t = tpl_.tasks[i];
      key.clear();
      key.push_back(t.collective);
      if (t.collective) {
        if (ConstantBytes(t)) continue;
        add(t.bytes);
      } else {
        add(t.time);
        for (const CurveTerm& c : t.curve_terms) {
          add(c.flops);
          add(c.tokens);
          key.push_back(reinterpret_cast<uintptr_t>(c.curve));
          key.push_back(std::bit_cast<uint64_t>(c.rate));
        }
      }
      const auto found = seen.find(key);
      if (found != seen.end()) {
        form_of_[i] = found->second;
      } else if (static_cast<int>(form_task_.size()) < in_.time_table_functions) {
        form_of_[i] = static_cast<int32_t>(form_task_.size());
        seen.emplace(key, form_of_[i]);
        form_task_.push_back(i);
      }
    }
    forms_ = static_cast<int>(form_task_.size());
    flat_idx_.clear();
    flat_val_.clear();
    form_flat_.assign(forms_, FlatFn{});
    for (int f = 0; f < forms_; ++f) {
      const TaskTemplate& t = tpl_.tasks[form_task_[f]];
      if (t.collective) {
        form_flat_[f] = Flatten(t.bytes);
      } else if (t.curve_terms.empty()) {
        form_flat_[f] = Flatten(t.time);
      }
    }
    piece_flat_.assign(tpl_.pieces.size(), FlatFn{});
    for (size_t p = 0; p < tpl_.pieces.size(); ++p) {
      if (tpl_.pieces[p].fwd_curve_terms.empty()) piece_flat_[p] = Flatten(tpl_.pieces[p].fwd_time);
    }
    form_time_.assign(static_cast<size_t>(R_) * forms_, 0.0);
  }
  ckpt_words_ = static_cast<int>((tpl_.pieces.size() + 63) / 64) + 1;
  cur_ckpt_.assign(static_cast<size_t>(R_) * ckpt_words_, 0);
  for (int i = 0; i < T_; ++i) {
    if (tpl_.tasks[i].deps.size() + tpl_.tasks[i].prev_deps.size() > 255) {
      return absl::InvalidArgumentError(absl::StrCat("sim engine: task ", tpl_.tasks[i].name, " has more than 255 dependencies"));
    }
  }
  if (ckpt_words_ > INT16_MAX) {  // HotTask::ckpt_word
    return absl::InternalError(absl::StrCat("sim engine: ", tpl_.pieces.size(), " checkpoint pieces (at most ",
                                            64 * (INT16_MAX - 1), ")"));
  }
  for (const RegionTemplate& reg : tpl_.regions) {
    if (reg.piece_end - reg.piece_begin >= 64) {  // StartCompute reads a region's flags as one word
      return absl::InternalError(absl::StrCat("sim engine: region ", reg.name, " has ", reg.piece_end - reg.piece_begin,
                                              " checkpoint pieces (at most 63)"));
    }
  }
  tasks_per_step_ = static_cast<int64_t>(R_) * T_;
  const size_t slot_size = static_cast<size_t>(tasks_per_step_);
  pending_.resize(kSlots * slot_size);
  for (int k = 0; k < kSlots; ++k) slot_base_[k] = pending_.data() + k * slot_size;
  for (int s = 0; s < kNumStreams; ++s) {
    stream_list_[s] = s < static_cast<int>(tpl_.stream_tasks.size()) && !tpl_.stream_tasks[s].empty()
                          ? tpl_.stream_tasks[s].data()
                          : nullptr;
  }
  hot_.assign(T_, HotTask{});
  bytes_const_.assign(T_, 0.0);
  {
    // Eval of a constant is its constant term, whatever the row (the others add 0 * x = +0).
    std::vector<double> unit(static_cast<size_t>(width_), 0.0);
    unit[StatLayout::kOne] = 1.0;
    for (int i = 0; i < T_; ++i) {
      if (tpl_.tasks[i].collective && ConstantBytes(tpl_.tasks[i])) bytes_const_[i] = tpl_.tasks[i].bytes.Eval(unit);
    }
  }
  deps_.clear();
  for (int i = 0; i < T_; ++i) {
    const TaskTemplate& t = tpl_.tasks[i];
    HotTask& h = hot_[i];
    h.stream = t.stream;
    h.layout = t.layout;
    h.period = t.period;
    h.stream_len = static_cast<int32_t>(tpl_.stream_tasks[t.stream].size());
    h.collective = t.collective;
    h.a2av = t.a2av;
    h.nonlayer = t.nonlayer;
    h.recompute = t.recompute_region >= 0 ? 1 : 0;
    h.ckpt_word = static_cast<int16_t>(h.recompute ? tpl_.regions[t.recompute_region].piece_begin / 64 : 0);
    h.const_bytes = t.collective && ConstantBytes(t) ? 1 : 0;
    h.reads_stats = h.recompute || (!h.const_bytes && form_of_[i] < 0) ? 1 : 0;
    h.full_count = static_cast<uint8_t>(t.deps.size() + t.prev_deps.size());
    h.full_count_first = static_cast<uint8_t>(t.deps.size());
    h.dep_begin = static_cast<int32_t>(deps_.size());
    for (int d : tpl_.dependents[i]) {
      deps_.push_back(DepRef{static_cast<size_t>(d) * R_, tpl_.tasks[d].stream, tpl_.tasks[d].collective ? form_of_[d] : -1});
    }
    h.dep_end = h.next_begin = static_cast<int32_t>(deps_.size());
    for (int d : tpl_.next_step_dependents[i]) deps_.push_back(DepRef{static_cast<size_t>(d) * R_, tpl_.tasks[d].stream, -1});
    h.next_end = static_cast<int32_t>(deps_.size());
  }
  for (const std::vector<int>& list : tpl_.stream_tasks) {
    for (size_t p = 0; p < list.size(); ++p) {
      hot_[list[p]].stream_next = list[(p + 1) % list.size()];
      hot_[list[p]].wraps = p + 1 == list.size() ? 1 : 0;
    }
  }
  for (int k = 0; k < kSlots; ++k) {
    for (int i = 0; i < T_; ++i) std::fill_n(&Pending(0, i, k), R_, FullCount(i, k));
  }
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
  share_n_.assign(total, 0);
  share_left_.assign(total, 0.0);
  share_last_.assign(total, 0.0);
  share_ver_.assign(total, 0);
  share_mark_.assign(total, 0);
  inst_task_.assign(total, -1);
  cost_memo_.assign(T_, CostMemo{});
  if (in_.processor_sharing) {
    share_hist_.resize(total);
    ports_.assign(static_cast<size_t>(R_) * kPorts, PortState{});
    port_n_.assign(static_cast<size_t>(R_) * kPorts, 0);
    port_first_.assign(static_cast<size_t>(R_) * kPorts, -1);
  }
  for (int i = 0; i < T_; ++i) {
    if (coll_off_[i] < 0) continue;
    std::fill_n(inst_task_.begin() + coll_off_[i], tpl_.layouts[tpl_.tasks[i].layout].count, i);
  }
  group_of_.clear();
  for (const GroupLayout& l : tpl_.layouts) {
    GroupOfRank f{l};
    const int64_t block = static_cast<int64_t>(l.stride) * l.size;
    if (l.stride > 0 && std::has_single_bit(static_cast<uint64_t>(l.stride)) && std::has_single_bit(static_cast<uint64_t>(block))) {
      f.shift_block = std::countr_zero(static_cast<uint64_t>(block));
      f.shift_stride = std::countr_zero(static_cast<uint64_t>(l.stride));
    }
    group_of_.push_back(f);
  }
  layout_port_.assign(tpl_.layouts.size(), 0);
  for (size_t j = 0; j < tpl_.layouts.size(); ++j) {
    const GroupShape& shape = in_.timing->shape(static_cast<int>(j));
    layout_port_[j] = shape.hosts > 1 ? 1 : 0;
  }
  done_count_.assign(in_.steps, 0);
  if (in_.a2av_per_rank) {
    a2av_bytes_.assign(static_cast<size_t>(R_) * kNumStreams, 0.0);
    a2av_dur_.assign(static_cast<size_t>(R_) * kNumStreams, 0.0);
  }
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
    // The next event's state is a likely cache miss: start loading it now. For a compute end, its
    // SmState and the rank's state whether it completes or not (a stale or early end touches only
    // the SmState, but reading that here to decide would wait for the miss this is meant to hide).
    // (`top` lives in the queue: read before this event's pushes.)
    if (!q_.Empty()) {
      const Event& top = q_.Top();
      if (top.type == EventType::kTaskEnd) {
        const int next = top.a;
        __builtin_prefetch(&sm_[next]);
        const uint8_t* col = PendingColumn(next, top.step);
        for (int q = hot_[top.b].dep_begin; q < hot_[top.b].dep_end; ++q) {
          __builtin_prefetch(col + deps_[q].off);
          // A collective it readies arrives with bytes from the table.
          if (deps_[q].bytes_form >= 0) __builtin_prefetch(FormTimePtr(next, deps_[q].bytes_form));
        }
        __builtin_prefetch(&Pending(next, hot_[top.b].stream_next, top.step + hot_[top.b].wraps));
        // The whole rank state (a task end touches most of it); the table entry of the stream's next
        // task (its time, or a collective's bytes); the statistics row and checkpoint flags only
        // where that task reads them (a region's recompute, a function not in the table).
        const char* state = reinterpret_cast<const char*>(&rs_[next]);
        for (size_t off = 0; off < sizeof(RankState); off += 64) __builtin_prefetch(state + off);
        const int following = hot_[top.b].stream_next;
        if (form_of_[following] >= 0) __builtin_prefetch(FormTimePtr(next, form_of_[following]));
        if (hot_[following].reads_stats) {
          const double* stats_row = cur_stats_.data() + static_cast<size_t>(next) * width_;
          for (int off = 0; off < width_; off += 8) __builtin_prefetch(stats_row + off);
          __builtin_prefetch(&CkptWord(next, hot_[following].ckpt_word));
        }
      }
    }
    ++events;
    switch (e.type) {
      case EventType::kTaskEnd:
        if (e.version == UINT32_MAX) {
          Complete(e.a, e.b, rs_[e.a].st[hot_[e.b].stream].step);
        } else {
          OnComputeEnd(e.a, e.b, e.step, e.version);
        }
        break;
      case EventType::kCollEnd:
        OnCollEnd(e.a, e.b, e.version);
        break;
      case EventType::kMemberEnd: {
        const int64_t k = coll_off_[e.a] + tpl_.layouts[hot_[e.a].layout].GroupOf(e.b);
        MemberEnd(e.a, e.b, coll_step_[k], coll_start_[k], MemberSlot(a2av_dur_, e.b, tpl_.tasks[e.a].stream),
                  HoldsSms(e.a) && coll_dur_[k] > 0 && !in_.ideal_network);
        break;
      }
      case EventType::kMemberSmRelease:
        SetSm(e.a, e.b, -1);
        break;
      case EventType::kSmRelease: {
        const GroupLayout& l = tpl_.layouts[tpl_.tasks[e.a].layout];
        const int op = static_cast<int>(tpl_.tasks[e.a].op);
        for (int p = 0; p < l.size; ++p) SetSm(l.Member(e.b, p), op, -1);
        break;
      }
    }
  }
  out_.events = events;
  for (int r = 0; r < R_; ++r) {
    if (rs_[r].cur_step >= 0) out_.step_work_s[static_cast<size_t>(rs_[r].cur_step) * R_ + r] += rs_[r].cur_work;
    const Accumulated& a = rs_[r].acc;
    RankStats& o = out_.ranks[r];
    o.compute_s = a.compute_s;
    o.exposed_comm_s = a.exposed_comm_s;
    o.wait_s = a.wait_s;
    o.recompute_s = a.recompute_s;
    o.contention_s = a.contention_s;
    o.nonlayer_compute_s = a.nonlayer_compute_s;
    o.work_s = a.work_s;
    out_.comm_s[r] = rs_[r].comm;
  }
  for (int s = 0; s < in_.steps; ++s) {
    if (done_count_[s] != tasks_per_step_) {
      return absl::InternalError(absl::StrCat("sim engine: step ", s, " did not finish (", done_count_[s], " of ",
                                              tasks_per_step_, " tasks): the task graph deadlocks"));
    }
  }
  return std::move(out_);
}

}  // namespace

absl::StatusOr<EngineOutput> RunEngine(const EngineInput& in) {
  if (in.tpl == nullptr || in.timing == nullptr || in.stats == nullptr) {
    return absl::InvalidArgumentError("sim engine: missing template, timing or stats");
  }
  // On the heap: the event queue's per-bucket arrays are ~130 KiB, too much for a worker's stack.
  auto e = std::make_unique<Engine>(in);
  return e->Run();
}

}  // namespace gemtb::sim
