#include "gpu/attention/api.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gpu/attention/backward_fused_dq_plan.h"
#include "gpu/attention/backward_stored_ds_plan.h"
#include "gpu/attention/device_call.h"
#include "gpu/attention/forward_variant.h"
#include "gpu/attention/launch.h"
#include "gpu/attention/params.h"
#include "gpu/attention/tile_scheduler.h"
#include "gpu/common/device_buffer.h"
#include "gpu/common/sm_count.h"
#include "model/attention/jagged_checks.h"
#include "model/common/status_macros.h"

namespace gemtb::gpu {
namespace {

// Local lengths, offsets and the tile indices are int32 in the kernels (spec §1 allows a checked
// conversion), and the head index is blockIdx.y.
constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxHeads = 65535;

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

absl::string_view DTypeName(ElementType t) {
  switch (t) {
    case ElementType::kFloat64: return "float64";
    case ElementType::kFloat32: return "float32";
    case ElementType::kFloat16: return "float16";
    case ElementType::kBFloat16: return "bfloat16";
  }
  return "?";
}

using checks::CheckOffsets;
using checks::CheckRank;
using checks::ShapeString;

// A tensor's shape with a stand-in for its values, so that CheckRank validates the shape alone (the
// device path's values live on the device). Its count is the shape's product where that is valid
// and 0 where not (CheckRank then reports the shape itself).
struct ShapeOnly {
  struct Count {
    size_t n;
    size_t size() const { return n; }
  } data;
  std::vector<int64_t> shape;
};

template <typename T>
absl::Status CheckTensor(const HostTensor<T>& t, bool values, absl::string_view field, size_t rank,
                         absl::string_view layout) {
  if (values) return CheckRank(t, field, rank, layout);
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0 || (d != 0 && n > std::numeric_limits<int64_t>::max() / d)) {
      n = 0;
      break;
    }
    n *= d;
  }
  return CheckRank(ShapeOnly{{static_cast<size_t>(n)}, t.shape}, field, rank, layout);
}

// A validated call: shapes, the resolved pairing and scales.
struct Problem {
  int64_t tq = 0, tk = 0, to = 0, heads = 0, kv_heads = 0, d = 0;
  Pairing pairing;
  float pre_scale = 1.f, post_scale = 1.f;
};

// `values`: whether q, k and v carry their values (the host API) or only their shapes (DeviceCall).
absl::StatusOr<Problem> Resolve(const AttentionArgs& a, bool values) {
  const AttentionOptions& o = a.options;
  if (a.dtype != ElementType::kBFloat16 && a.dtype != ElementType::kFloat16) {
    return Bad(absl::StrCat("dtype: ", DTypeName(a.dtype),
                            " inputs are not supported by the GPU kernels (bfloat16, float16)"));
  }
  const struct {
    const char* name;
    bool present;
  } unsupported[] = {{"bias_dense", a.bias_dense.present()}, {"bias_rel", a.bias_rel.present()},
                     {"ts", a.ts.present()},                 {"bias_ts", a.bias_ts.present()},
                     {"rope_q", a.rope_q.present()},         {"rope_k", a.rope_k.present()},
                     {"rope_v", a.rope_v.present()}};
  for (const auto& u : unsupported) {
    if (u.present) {
      return Bad(absl::StrCat(u.name, ": not supported by the GPU attention kernels yet (bias and "
                                      "RoPE run in the oracle only)"));
    }
  }
  GEMTB_RETURN_IF_ERROR(CheckTensor(a.q, values, "q", 3, "[TQ,H,Dqk]"));
  GEMTB_RETURN_IF_ERROR(CheckTensor(a.k, values, "k", 3, "[TK,Hkv,Dqk]"));
  GEMTB_RETURN_IF_ERROR(CheckTensor(a.v, values, "v", 3, "[TK,Hkv,Dv]"));
  Problem p;
  p.tq = a.q.shape[0];
  p.heads = a.q.shape[1];
  p.d = a.q.shape[2];
  p.tk = a.k.shape[0];
  p.kv_heads = a.k.shape[1];
  if (p.heads < 1) return Bad(absl::StrCat("q: H=", p.heads, " must be >= 1"));
  if (p.heads > kMaxHeads) return Bad(absl::StrCat("q: H=", p.heads, " exceeds ", kMaxHeads));
  if (p.kv_heads < 1) return Bad(absl::StrCat("k: Hkv=", p.kv_heads, " must be >= 1"));
  if (p.d != 64 && p.d != 128) {
    return Bad(absl::StrCat("q: Dqk=", p.d, " is not supported by the GPU kernels (64 or 128)"));
  }
  if (a.k.shape[2] != p.d) return Bad(absl::StrCat("k: Dqk=", a.k.shape[2], " differs from q's Dqk=", p.d));
  if (a.v.shape[0] != p.tk || a.v.shape[1] != p.kv_heads) {
    return Bad(absl::StrCat("v: shape ", ShapeString(a.v.shape), " disagrees with k's [TK,Hkv]=[",
                            p.tk, ",", p.kv_heads, "]"));
  }
  if (a.v.shape[2] != p.d) {
    return Bad(absl::StrCat("v: Dv=", a.v.shape[2], " differs from Dqk=", p.d,
                            ": the GPU kernels need Dv = Dqk"));
  }
  if (p.heads % p.kv_heads != 0) {
    return Bad(absl::StrCat("k: H=", p.heads, " is not divisible by Hkv=", p.kv_heads));
  }
  for (const auto& [name, scale] : {std::pair{"pre_scale", o.pre_scale}, {"post_scale", o.post_scale}}) {
    if (scale && !std::isfinite(*scale)) return Bad(absl::StrCat(name, "=", *scale, ": must be finite"));
  }
  if (o.window_left < -1) return Bad(absl::StrCat("window_left=", o.window_left, ": must be >= -1"));
  if (o.window_right < -1) return Bad(absl::StrCat("window_right=", o.window_right, ": must be >= -1"));
  if (o.mask == MaskKind::kBlock && o.block < 1) return Bad(absl::StrCat("block=", o.block, ": must be >= 1"));
  if (static_cast<int>(o.act) < 0 || static_cast<int>(o.act) >= kNumActivations) {
    return Bad(absl::StrCat("act=", static_cast<int>(o.act), ": unknown activation code"));
  }
  if (a.max_lq < 0 || a.max_lq > kMaxRows) return Bad(absl::StrCat("max_lq=", a.max_lq, ": must be in [0, 2^31)"));
  if (a.max_lk < 0 || a.max_lk > kMaxRows) return Bad(absl::StrCat("max_lk=", a.max_lk, ": must be in [0, 2^31)"));
  if (p.tq > kMaxRows) return Bad(absl::StrCat("q: TQ=", p.tq, " exceeds 2^31-1 rows"));
  if (p.tk > kMaxRows) return Bad(absl::StrCat("k: TK=", p.tk, " exceeds 2^31-1 rows"));

  absl::StatusOr<std::vector<int64_t>> lq = CheckOffsets(a.q_offsets, "q_offsets", p.tq, "TQ");
  if (!lq.ok()) return lq.status();
  absl::StatusOr<std::vector<int64_t>> lk = CheckOffsets(a.kv_offsets, "kv_offsets", p.tk, "TK");
  if (!lk.ok()) return lk.status();
  for (size_t b = 0; b < lq->size(); ++b) {
    if ((*lq)[b] > a.max_lq) return Bad(absl::StrCat("max_lq=", a.max_lq, " < length ", (*lq)[b], " of q sequence ", b));
  }
  for (size_t b = 0; b < lk->size(); ++b) {
    if ((*lk)[b] > a.max_lk) return Bad(absl::StrCat("max_lk=", a.max_lk, " < length ", (*lk)[b], " of kv sequence ", b));
  }
  const int64_t nq = static_cast<int64_t>(lq->size());
  const int64_t nkv = static_cast<int64_t>(lk->size());
  if (o.broadcast_q && nq != 1) {
    return Bad(absl::StrCat("q_offsets: broadcast_q needs exactly one q sequence, got ", nq));
  }
  std::vector<int64_t>& ks = p.pairing.kv_seq;
  if (a.kv_index.present()) {
    GEMTB_RETURN_IF_ERROR(CheckRank(a.kv_index, "kv_index", 1, "[B]"));
    for (size_t b = 0; b < a.kv_index.data.size(); ++b) {
      const int64_t kb = a.kv_index.data[b];
      if (kb < 0 || kb >= nkv) return Bad(absl::StrCat("kv_index[", b, "]=", kb, ": out of range [0, ", nkv, ")"));
      ks.push_back(kb);
    }
  } else {
    for (int64_t b = 0; b < nkv; ++b) ks.push_back(b);
  }
  const int64_t num_out = static_cast<int64_t>(ks.size());
  if (!o.broadcast_q && nq != num_out) {
    return Bad(absl::StrCat("q_offsets: ", nq, " q sequences but ", num_out,
                            a.kv_index.present() ? " entries in kv_index" : " kv sequences"));
  }
  int64_t out_row = 0;
  for (int64_t b = 0; b < num_out; ++b) {
    const int64_t qb = o.broadcast_q ? 0 : b;
    SeqInfo s;
    s.q_begin = a.q_offsets.data[qb];
    s.lq = static_cast<int32_t>((*lq)[qb]);
    s.kv_begin = a.kv_offsets.data[ks[b]];
    s.lk = static_cast<int32_t>((*lk)[ks[b]]);
    s.out_begin = out_row;
    out_row += s.lq;
    p.pairing.seqs.push_back(s);
  }
  if (out_row > kMaxRows) return Bad(absl::StrCat("output rows TO=", out_row, " exceed 2^31-1"));
  p.to = out_row;
  p.pairing.kv_offsets.assign(a.kv_offsets.data.begin(), a.kv_offsets.data.end());
  p.pairing.broadcast_q = o.broadcast_q;
  const bool softmax = o.act == Activation::kSoftmax;
  // Rounded once to fp32, as emulate mode rounds them (spec §7).
  p.pre_scale = static_cast<float>(o.pre_scale.value_or(softmax ? 1.0 / std::sqrt(static_cast<double>(p.d)) : 1.0));
  p.post_scale = static_cast<float>(o.post_scale.value_or(1.0));
  return p;
}

// Calls f.template operator()<E, D>() for the kernels' (storage type, head dim).
template <typename F>
absl::Status Dispatch(ElementType dtype, int64_t d, F&& f) {
  if (dtype == ElementType::kBFloat16) {
    return d == 64 ? f.template operator()<ElementType::kBFloat16, 64>()
                   : f.template operator()<ElementType::kBFloat16, 128>();
  }
  return d == 64 ? f.template operator()<ElementType::kFloat16, 64>()
                 : f.template operator()<ElementType::kFloat16, 128>();
}

absl::Status Finish() {
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "attention kernels"));
  return CudaOk(cudaDeviceSynchronize(), "attention kernels");
}

// Rows covered by a tile list: every kernel writes every row of each of its tiles, so when the
// tiles cover all rows the output needs no prefill.
int64_t ForwardRows(const std::vector<ForwardTile>& tiles, const Pairing& pairing, int block_m) {
  int64_t rows = 0;
  for (const ForwardTile& t : tiles) rows += std::min(block_m, pairing.seqs[t.b].lq - t.i0);
  return rows;
}

}  // namespace

struct DeviceCall::State {
  Problem problem;
  AttentionOptions options;
  ElementType dtype = ElementType::kBFloat16;
  bool softmax = false;
  bool hopper_forward = false;
  bool hopper_ws = false;  // the warp-specialised Hopper forward (forward_hopper_ws_kernel.cuh)
  int hopper_block_n = kHopperDefaultBlockN;
  DeviceArray<SeqInfo> seqs;
  DeviceArray<ForwardTile> forward_tiles;
  int64_t num_forward = 0;
  int32_t forward_max_rows = 0;  // ForwardParams::max_tile_rows
  bool forward_covers_all = false;
  bool with_backward = false;
  DeviceArray<DqTile> dq_tiles;
  DeviceArray<DqReader> dq_readers;
  DeviceArray<DkvTile> dkv_tiles;
  DeviceArray<DkvSegment> dkv_segments;
  DeviceArray<DqReduce> dq_reduce;
  DeviceArray<float> dq_partial;  // the split dQ tiles' fp32 parts
  DeviceArray<int64_t> ds_block_base;  // backward v5's stored dS (backward_stored_ds_plan.h), if used
  DeviceArray<uint16_t> ds;
  bool hopper_backward = false;
  int fused_dq_chain = 0;  // backward v6 (backward_fused_dq_plan.h): K/V tiles per chain; 0: not used
  int64_t num_dq = 0, num_dkv = 0, num_dq_reduce = 0;
  int32_t dq_max_key_steps = 0;  // BackwardParams::dq_max_key_steps
  bool dq_covers_all = false, dkv_covers_all = false;

  ProblemParams Params(const DeviceInputs& in) const {
    ProblemParams pp;
    pp.q = in.q;
    pp.k = in.k;
    pp.v = in.v;
    pp.seqs = seqs.get();
    pp.heads = static_cast<int32_t>(problem.heads);
    pp.kv_heads = static_cast<int32_t>(problem.kv_heads);
    pp.out_rows = problem.to;
    pp.pre_scale = problem.pre_scale;
    pp.post_scale = problem.post_scale;
    pp.options = options;
    return pp;
  }
};

DeviceCall::DeviceCall(std::unique_ptr<State> state) : state_(std::move(state)) {}
DeviceCall::~DeviceCall() = default;

absl::StatusOr<std::unique_ptr<DeviceCall>> DeviceCall::Create(const AttentionArgs& args,
                                                               bool with_backward,
                                                               ForwardKernelChoice forward_kernel) {
  absl::StatusOr<Problem> resolved = Resolve(args, /*values=*/false);
  if (!resolved.ok()) return resolved.status();
  GEMTB_RETURN_IF_ERROR(DeviceAvailable());
  auto s = std::make_unique<State>();
  s->problem = *std::move(resolved);
  s->options = args.options;
  s->dtype = args.dtype;
  s->softmax = args.options.act == Activation::kSoftmax;
  const bool hopper_applies = s->problem.d == kHopperHeadDim && HopperKernelsAvailable();
  if (forward_kernel == ForwardKernelChoice::kAuto) {
    // GEMTB_FORWARD_KERNEL=hopper_ws: the warp-specialised forward for every act and tile list
    // (device_call.h; how the check covers it beyond kAuto's own choice below).
    const char* env = std::getenv("GEMTB_FORWARD_KERNEL");
    if (env != nullptr && absl::string_view(env) == "hopper_ws" && hopper_applies) {
      forward_kernel = ForwardKernelChoice::kHopperWs;
    }
  }
  switch (forward_kernel) {
    case ForwardKernelChoice::kHopperWs:
      if (!hopper_applies) {
        return Bad(absl::StrCat("forward kernel: the Hopper kernel needs head dim ", kHopperHeadDim,
                                " and an sm_90a build; this call has Dqk=", s->problem.d));
      }
      s->hopper_forward = true;
      s->hopper_ws = true;
      s->hopper_block_n = kHopperWsBlockN;
      break;
    case ForwardKernelChoice::kAuto:
      // Also for PMA's 32-row query sequences: since the per-activation kernels (v3) the Hopper
      // kernel is faster there despite its 128-row tiles (0.66 ms against the mma.sync kernel's
      // 1.85 ms on the H200; it was 3.55 ms with v2).
      s->hopper_forward = hopper_applies;
      s->hopper_block_n = kHopperDefaultBlockN;
      break;
    case ForwardKernelChoice::kMmaSync: s->hopper_forward = false; break;
    case ForwardKernelChoice::kHopper64:
    case ForwardKernelChoice::kHopper128:
      s->hopper_block_n = forward_kernel == ForwardKernelChoice::kHopper64 ? 64 : 128;
      if (!hopper_applies) {
        return Bad(absl::StrCat("forward kernel: the Hopper kernel needs head dim ", kHopperHeadDim,
                                " and an sm_90a build; this call has Dqk=", s->problem.d));
      }
      s->hopper_forward = true;
      break;
  }
  const int block_m = s->hopper_forward ? kHopperBlockM : kBlockM;
  std::vector<ForwardTile> tiles = BuildForwardTiles(s->problem.pairing, args.options, block_m);
  s->num_forward = static_cast<int64_t>(tiles.size());
  for (const ForwardTile& t : tiles) {
    s->forward_max_rows = std::max(s->forward_max_rows, std::min(block_m, s->problem.pairing.seqs[t.b].lq - t.i0));
  }
  if (forward_kernel == ForwardKernelChoice::kAuto && s->hopper_forward && !tiles.empty()) {
    // kAuto: the warp-specialised forward for every act and tile list since its v5 (persistent
    // CTAs, TMA loads; forward_hopper_tma_kernel.cuh), which was faster than v3 on all eight bench
    // cases on the H200, one-step tiles and pointwise acts included (tools/bench/NOTES.md, "Forward
    // v5"); v4's rule (softmax averaging >= 2 steps of 128 keys) no longer applies.
    s->hopper_ws = true;
    s->hopper_block_n = kHopperWsBlockN;
  }
  const bool short_tile_forward = s->hopper_ws && ForwardSplitApplies(s->forward_max_rows, s->softmax);
  if (s->hopper_ws && !short_tile_forward && ForwardStepOrder()) OrderByStepsThenSequence(tiles, kHopperWsBlockN);
  if (short_tile_forward) {
    // The persistent short-tile forwards take every grid-th item (tile x head): a snake over the
    // heavy-first list evens their sums (tile_scheduler.h). The split kernel's grid is the SM count,
    // v10's the CTAs that fit at once (forward_variant.h); v9 has one CTA per item and no snake.
    const int64_t items = s->num_forward * s->problem.heads;
    int64_t grid = 0;
    if (!ForwardSmallApplies(s->forward_max_rows, s->softmax)) {
      if (ForwardSplitSnake()) grid = HopperSmCount();
    } else if (ForwardSmallPersistent()) {
      grid = ForwardSmallGrid(items, HopperSmCount(), s->problem.heads);
    }
    if (grid > 0 && grid % s->problem.heads == 0 && items > grid) DealInSnakeBands(tiles, grid / s->problem.heads);
  }
  s->forward_covers_all = ForwardRows(tiles, s->problem.pairing, block_m) == s->problem.to;
  GEMTB_RETURN_IF_ERROR(s->seqs.Upload(s->problem.pairing.seqs, "sequence table"));
  GEMTB_RETURN_IF_ERROR(s->forward_tiles.Upload(tiles, "forward tiles"));
  s->with_backward = with_backward;
  if (with_backward) {
    // The Hopper backward wherever it applies, unless the mma.sync kernels are asked for.
    s->hopper_backward = hopper_applies && forward_kernel != ForwardKernelChoice::kMmaSync;
    const TileLists lists = BuildBackwardTiles(s->problem.pairing, args.options);
    s->num_dq = static_cast<int64_t>(lists.dq.size());
    s->num_dq_reduce = static_cast<int64_t>(lists.dq_reduce.size());
    s->num_dkv = static_cast<int64_t>(lists.dkv.size());
    int64_t dq_rows = 0, dkv_rows = 0;
    const int32_t lq0 = s->problem.pairing.seqs.empty() ? 0 : s->problem.pairing.seqs[0].lq;
    for (const DqReduce& r : lists.dq_reduce) dq_rows += r.rows;
    for (const DqTile& t : lists.dq) {
      if (t.partial >= 0) continue;  // counted by its DqReduce
      // A dQ tile's rows belong to its first reader's query sequence.
      const int32_t lq = s->problem.pairing.broadcast_q ? lq0 : s->problem.pairing.seqs[lists.dq_readers[t.reader_begin].b].lq;
      dq_rows += std::min(kBlockM, lq - t.i0);
    }
    for (const DkvTile& t : lists.dkv) dkv_rows += std::min(kBlockN, t.lk - t.j0);
    for (const DqTile& t : lists.dq) {
      int32_t steps = 0;
      for (int32_t r = 0; r < t.reader_count; ++r) {
        const DqReader& rd = lists.dq_readers[t.reader_begin + r];
        steps += (rd.k_hi - rd.k_lo + kBlockN - 1) / kBlockN;
      }
      s->dq_max_key_steps = std::max(s->dq_max_key_steps, steps);
    }
    s->dq_covers_all = dq_rows == s->problem.tq;
    s->dkv_covers_all = dkv_rows == s->problem.tk;
    GEMTB_RETURN_IF_ERROR(s->dq_tiles.Upload(lists.dq, "dQ tiles"));
    GEMTB_RETURN_IF_ERROR(s->dq_readers.Upload(lists.dq_readers, "dQ readers"));
    GEMTB_RETURN_IF_ERROR(s->dkv_tiles.Upload(lists.dkv, "dK/dV tiles"));
    // Backward v5: dQ from the dS the dK/dV kernel stores, where it applies (its dK/dV segments).
    const BwdDqMode dq_mode = s->hopper_backward ? BwdDqModeFromEnv() : BwdDqMode::kRecompute;
    const StoredDsPlan ds_plan =
        PlanStoredDs(s->problem.pairing.seqs, lists, s->problem.pairing.broadcast_q, s->problem.heads, dq_mode);
    bool stored_ds = ds_plan.use;
    if (stored_ds) {
      if (absl::Status a = s->ds.Allocate(static_cast<size_t>(ds_plan.elements), "stored dS"); !a.ok()) {
        if (dq_mode == BwdDqMode::kStored) return a;
        (void)cudaGetLastError();  // the default falls back to the recompute when the memory is not there
        stored_ds = false;
      } else {
        GEMTB_RETURN_IF_ERROR(s->ds_block_base.Upload(ds_plan.block_base, "dS block offsets"));
      }
    }
    GEMTB_RETURN_IF_ERROR(
        s->dkv_segments.Upload(stored_ds ? ds_plan.segments : lists.dkv_segments, "dK/dV segments"));
    GEMTB_RETURN_IF_ERROR(s->dq_reduce.Upload(lists.dq_reduce, "dQ reduce list"));
    size_t partial_floats =
        static_cast<size_t>(lists.dq_partial_slots) * static_cast<size_t>(s->problem.heads) * kBlockM *
        static_cast<size_t>(s->problem.d);
    // Backward v6 under broadcast_q: its chains' dQ parts use the same workspace (the split dQ
    // tiles it replaces do not run).
    if (!stored_ds && s->num_dkv > 0 &&
        FusedDqApplies(s->hopper_backward, s->problem.pairing.broadcast_q, s->problem.heads, s->problem.kv_heads,
                       s->problem.d, lq0)) {
      s->fused_dq_chain = FusedDqChainTiles(s->num_dkv, s->problem.kv_heads, HopperSmCount());
      const size_t fused_floats = static_cast<size_t>(FusedDqChains(s->num_dkv, s->fused_dq_chain)) *
                                  static_cast<size_t>(s->problem.heads) * static_cast<size_t>(kFusedDqSlotFloats);
      partial_floats = std::max(partial_floats, fused_floats);
    }
    GEMTB_RETURN_IF_ERROR(s->dq_partial.Allocate(partial_floats, "dQ partial sums"));
  }
  return std::unique_ptr<DeviceCall>(new DeviceCall(std::move(s)));
}

int64_t DeviceCall::q_elements() const { return state_->problem.tq * state_->problem.heads * state_->problem.d; }
int64_t DeviceCall::kv_elements() const {
  return state_->problem.tk * state_->problem.kv_heads * state_->problem.d;
}
int64_t DeviceCall::o_elements() const { return state_->problem.to * state_->problem.heads * state_->problem.d; }
int64_t DeviceCall::out_rows() const { return state_->problem.to; }
int64_t DeviceCall::heads() const { return state_->problem.heads; }
bool DeviceCall::softmax() const { return state_->softmax; }
const char* DeviceCall::forward_kernel_name() const {
  if (!state_->hopper_forward) return "mma_sync";
  if (state_->hopper_ws) {
    // The kernel LaunchForwardHopperWs picks for TMA-suited tensors (16-byte aligned; v4 otherwise).
    if (ForwardSmallApplies(state_->forward_max_rows, state_->softmax)) return "hopper_small";
    if (ForwardSplitApplies(state_->forward_max_rows, state_->softmax)) {
      switch (ForwardSplitMode()) {
        case 1: return "hopper_split_steps";
        default: return ForwardSplitRing() ? "hopper_split_keys_ring" : "hopper_split_keys";
      }
    }
    switch (ForwardWsVersion()) {
      case 4: return "hopper_ws_v4";
      case 5: return "hopper_tma_v5";
      case 6: return "hopper_tma_v6";
      default: return "hopper_tma_v7";
    }
  }
  return state_->hopper_block_n == 128 ? "hopper_wgmma_n128" : "hopper_wgmma_n64";
}

const char* DeviceCall::backward_kernel_name() const {
  if (!state_->with_backward) return "none";
  return state_->hopper_backward ? "hopper_wgmma" : "mma_sync";
}

absl::Status DeviceCall::Forward(const DeviceInputs& in, uint16_t* o, float* lse) const {
  const State& s = *state_;
  const Problem& p = s.problem;
  if (!s.forward_covers_all) {
    GEMTB_RETURN_IF_ERROR(
        CudaOk(cudaMemset(o, 0, static_cast<size_t>(o_elements()) * sizeof(uint16_t)), "zero o"));
    if (s.softmax) GEMTB_RETURN_IF_ERROR(LaunchFill(lse, p.heads * p.to, -std::numeric_limits<float>::infinity()));
  }
  ForwardParams fp;
  fp.problem = s.Params(in);
  fp.tiles = s.forward_tiles.get();
  fp.o = o;
  fp.lse = lse;
  fp.max_tile_rows = s.forward_max_rows;
  fp.wide_o_stores = ForwardWideStores() && reinterpret_cast<uintptr_t>(o) % 16 == 0 ? 1 : 0;
  return Dispatch(s.dtype, p.d, [&]<ElementType E, int D>() -> absl::Status {
    if constexpr (D == kHopperHeadDim) {
      if (s.hopper_ws) return LaunchForwardHopperWs<E>(fp, s.num_forward);
      if (s.hopper_forward) return LaunchForwardHopper<E>(fp, s.num_forward, s.hopper_block_n);
    }
    return LaunchForward<E, D>(fp, s.num_forward);
  });
}

absl::Status DeviceCall::Backward(const DeviceInputs& in, const uint16_t* o, const float* lse,
                                  const uint16_t* d_o, const DeviceGradients& grads) const {
  const State& s = *state_;
  const Problem& p = s.problem;
  if (!s.with_backward) return absl::FailedPreconditionError("DeviceCall: created without the backward tile lists");
  // Rows no tile writes (never read, or masked everywhere) have zero gradients.
  if (!s.dq_covers_all) {
    GEMTB_RETURN_IF_ERROR(CudaOk(cudaMemset(grads.dq, 0, static_cast<size_t>(q_elements()) * sizeof(uint16_t)), "zero dq"));
  }
  if (!s.dkv_covers_all) {
    const size_t bytes = static_cast<size_t>(kv_elements()) * sizeof(uint16_t);
    GEMTB_RETURN_IF_ERROR(CudaOk(cudaMemset(grads.dk, 0, bytes), "zero dk"));
    GEMTB_RETURN_IF_ERROR(CudaOk(cudaMemset(grads.dv, 0, bytes), "zero dv"));
  }
  BackwardParams bp;
  bp.problem = s.Params(in);
  bp.o = o;
  bp.d_o = d_o;
  bp.lse = lse;
  bp.d_rows = grads.d_rows;
  bp.dq_tiles = s.dq_tiles.get();
  bp.dq_readers = s.dq_readers.get();
  bp.dkv_tiles = s.dkv_tiles.get();
  bp.dkv_segments = s.dkv_segments.get();
  bp.dq_reduce = s.dq_reduce.get();
  bp.dq_partial = s.dq_partial.get();
  bp.dq = grads.dq;
  bp.dk = grads.dk;
  bp.dv = grads.dv;
  bp.dq_max_key_steps = s.dq_max_key_steps;
  bp.ds = s.ds.get();
  bp.ds_block_base = s.ds_block_base.get();
  return Dispatch(s.dtype, p.d, [&]<ElementType E, int D>() -> absl::Status {
    bool done = false;
    if constexpr (D == kHopperHeadDim) {
      if (s.hopper_backward) {
        if (s.softmax) GEMTB_RETURN_IF_ERROR(LaunchRowDotHopper<E>(bp));
        if (s.fused_dq_chain > 0) return LaunchDkDvDqFusedHopper<E>(bp, s.num_dkv, s.fused_dq_chain);
        GEMTB_RETURN_IF_ERROR(LaunchDkDvHopper<E>(bp, s.num_dkv));
        GEMTB_RETURN_IF_ERROR(LaunchDqHopper<E>(bp, s.num_dq));
        done = true;
      }
    }
    if (!done) {
      if (s.softmax) GEMTB_RETURN_IF_ERROR((LaunchRowDot<E, D>(bp)));
      GEMTB_RETURN_IF_ERROR((LaunchDkDv<E, D>(bp, s.num_dkv)));
      GEMTB_RETURN_IF_ERROR((LaunchDq<E, D>(bp, s.num_dq)));
    }
    return LaunchDqReduce<E, D>(bp, s.num_dq_reduce);
  });
}

absl::Status CanRun(const AttentionArgs& args) { return Resolve(args, /*values=*/true).status(); }

absl::Status DeviceAvailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device on this machine");
  cudaDeviceProp prop{};
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  if (prop.major != 9 || prop.minor != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device 0 (", prop.name, ") has compute capability ", prop.major, ".", prop.minor,
        "; the attention kernels are built for sm_90a (H100/H200)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Forward(const AttentionArgs& args) {
  GEMTB_RETURN_IF_ERROR(CanRun(args));
  absl::StatusOr<std::unique_ptr<DeviceCall>> call = DeviceCall::Create(args, /*with_backward=*/false);
  if (!call.ok()) return call.status();
  const DeviceCall& c = **call;
  DeviceArray<uint16_t> q, k, v, o;
  DeviceArray<float> lse;
  GEMTB_RETURN_IF_ERROR(q.Upload(args.q.data, "q"));
  GEMTB_RETURN_IF_ERROR(k.Upload(args.k.data, "k"));
  GEMTB_RETURN_IF_ERROR(v.Upload(args.v.data, "v"));
  GEMTB_RETURN_IF_ERROR(o.Allocate(static_cast<size_t>(c.o_elements()), "o"));
  if (c.softmax()) GEMTB_RETURN_IF_ERROR(lse.Allocate(static_cast<size_t>(c.heads() * c.out_rows()), "lse"));
  GEMTB_RETURN_IF_ERROR(c.Forward({q.get(), k.get(), v.get()}, o.get(), lse.get()));
  GEMTB_RETURN_IF_ERROR(Finish());

  ForwardResult out;
  out.o_shape = {c.out_rows(), c.heads(), args.q.shape[2]};
  GEMTB_RETURN_IF_ERROR(o.Download(out.o, "o"));
  if (c.softmax()) {
    out.lse_shape = {c.heads(), c.out_rows()};
    GEMTB_RETURN_IF_ERROR(lse.Download(out.lse, "lse"));
  }
  return out;
}

absl::StatusOr<BackwardResult> Backward(const AttentionArgs& args, const HostTensor<uint16_t>& d_o,
                                        const ForwardResult& forward) {
  absl::StatusOr<Problem> resolved = Resolve(args, /*values=*/true);
  if (!resolved.ok()) return resolved.status();
  const Problem& p = *resolved;
  const bool softmax = args.options.act == Activation::kSoftmax;
  const std::vector<int64_t> o_shape = {p.to, p.heads, p.d};
  GEMTB_RETURN_IF_ERROR(CheckRank(d_o, "d_o", 3, "[TO,H,Dv]"));
  if (d_o.shape != o_shape) {
    return Bad(absl::StrCat("d_o: shape ", ShapeString(d_o.shape), ", expected O's shape ", ShapeString(o_shape)));
  }
  if (forward.o.size() != d_o.data.size()) {
    return Bad("forward: O does not match this call; run Forward on the same arguments first");
  }
  if (softmax && forward.lse.size() != static_cast<size_t>(p.heads * p.to)) {
    return Bad("forward: the softmax backward needs the forward's LSE [H,TO]");
  }
  absl::StatusOr<std::unique_ptr<DeviceCall>> call = DeviceCall::Create(args, /*with_backward=*/true);
  if (!call.ok()) return call.status();
  const DeviceCall& c = **call;
  DeviceArray<uint16_t> q, k, v, d_do, o_fwd, dq, dk, dv;
  DeviceArray<float> lse, rows;
  GEMTB_RETURN_IF_ERROR(q.Upload(args.q.data, "q"));
  GEMTB_RETURN_IF_ERROR(k.Upload(args.k.data, "k"));
  GEMTB_RETURN_IF_ERROR(v.Upload(args.v.data, "v"));
  GEMTB_RETURN_IF_ERROR(d_do.Upload(d_o.data, "d_o"));
  if (softmax) {
    GEMTB_RETURN_IF_ERROR(o_fwd.Upload(forward.o, "forward o"));
    GEMTB_RETURN_IF_ERROR(lse.Upload(forward.lse, "forward lse"));
    GEMTB_RETURN_IF_ERROR(rows.Allocate(static_cast<size_t>(p.heads * p.to), "rowsum(dO*O)"));
  }
  GEMTB_RETURN_IF_ERROR(dq.Allocate(args.q.data.size(), "dq"));
  GEMTB_RETURN_IF_ERROR(dk.Allocate(args.k.data.size(), "dk"));
  GEMTB_RETURN_IF_ERROR(dv.Allocate(args.v.data.size(), "dv"));
  GEMTB_RETURN_IF_ERROR(c.Backward({q.get(), k.get(), v.get()}, o_fwd.get(), lse.get(), d_do.get(),
                                   {dq.get(), dk.get(), dv.get(), rows.get()}));
  GEMTB_RETURN_IF_ERROR(Finish());

  BackwardResult out;
  out.dq_shape = args.q.shape;
  out.dk_shape = args.k.shape;
  out.dv_shape = args.v.shape;
  GEMTB_RETURN_IF_ERROR(dq.Download(out.dq, "dq"));
  GEMTB_RETURN_IF_ERROR(dk.Download(out.dk, "dk"));
  GEMTB_RETURN_IF_ERROR(dv.Download(out.dv, "dv"));
  return out;
}

}  // namespace gemtb::gpu
