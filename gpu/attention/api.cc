#include "gpu/attention/api.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gpu/attention/backward_fused_dq_plan.h"
#include "gpu/attention/backward_stored_ds_plan.h"
#include "gpu/attention/device_call.h"
#include "gpu/attention/kernel_policy.h"
#include "gpu/attention/launch.h"
#include "gpu/attention/params.h"
#include "gpu/attention/tile_scheduler.h"
#include "gpu/common/device_buffer.h"
#include "gpu/common/sm_count.h"
#include "model/attention/jagged_checks.h"
#include "model/common/status_macros.h"

namespace gemtb::gpu {
namespace {

// Local lengths, offsets and the tile indices are int32 in the kernels (the API allows a checked
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
  if (!IsKernelHeadDim(p.d)) {
    return Bad(absl::StrCat("q: Dqk=", p.d, " is not supported by the GPU kernels (16, 32, 64 or 128)"));
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
  // Rounded once to fp32, as emulate mode rounds them.
  p.pre_scale = static_cast<float>(o.pre_scale.value_or(softmax ? 1.0 / std::sqrt(static_cast<double>(p.d)) : 1.0));
  p.post_scale = static_cast<float>(o.post_scale.value_or(1.0));
  return p;
}

// Calls f.template operator()<E, D>() for the kernels' (storage type, head dim): one of
// kKernelHeadDims, as Resolve has checked.
template <int D, typename F>
absl::Status DispatchType(ElementType dtype, F& f) {
  return dtype == ElementType::kBFloat16 ? f.template operator()<ElementType::kBFloat16, D>()
                                         : f.template operator()<ElementType::kFloat16, D>();
}

template <typename F>
absl::Status Dispatch(ElementType dtype, int64_t d, F&& f) {
  switch (d) {
    case 16: return DispatchType<16>(dtype, f);
    case 32: return DispatchType<32>(dtype, f);
    case 64: return DispatchType<64>(dtype, f);
    case 128: return DispatchType<128>(dtype, f);
  }
  return absl::InternalError(absl::StrCat("attention: head dim ", d, " reached the kernel dispatch unchecked"));
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
  KernelPlan plan;
  DeviceArray<SeqInfo> seqs;
  DeviceArray<ForwardTile> forward_tiles;
  int64_t num_forward = 0;
  bool forward_covers_all = false;
  bool with_backward = false;
  DeviceArray<DqTile> dq_tiles;
  DeviceArray<DqReader> dq_readers;
  DeviceArray<DkvTile> dkv_tiles;
  DeviceArray<DkvSegment> dkv_segments;
  DeviceArray<DqReduce> dq_reduce;
  DeviceArray<float> dq_partial;  // the split dQ tiles' fp32 parts, or the fused dQ's chain parts
  DeviceArray<int64_t> ds_block_base;  // the stored-dS backward's block table (backward_stored_ds_plan.h)
  DeviceArray<uint16_t> ds;
  int fused_dq_chain = 0;  // the fused-dQ backward's K/V tiles per chain (backward_fused_dq_plan.h)
  int64_t num_dq = 0, num_dkv = 0, num_dq_reduce = 0;
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
                                                               bool with_backward) {
  absl::StatusOr<Problem> resolved = Resolve(args, /*values=*/false);
  if (!resolved.ok()) return resolved.status();
  GEMTB_RETURN_IF_ERROR(DeviceAvailable());
  auto s = std::make_unique<State>();
  s->problem = *std::move(resolved);
  s->options = args.options;
  s->dtype = args.dtype;
  s->softmax = args.options.act == Activation::kSoftmax;
  s->with_backward = with_backward;
  const Pairing& pairing = s->problem.pairing;

  // What the policy looks at: the Hopper forward's tiles (kHopperBlockM rows) and, with the
  // backward, its tile lists and the stored-dS workspace that the call would take.
  KernelShape shape;
  shape.head_dim = s->problem.d;
  shape.hopper_built = HopperKernelsAvailable();
  shape.softmax = s->softmax;
  std::vector<ForwardTile> tiles = BuildForwardTiles(pairing, args.options, kHopperBlockM);
  for (const ForwardTile& t : tiles) {
    shape.max_tile_rows = std::max(shape.max_tile_rows, std::min(kHopperBlockM, pairing.seqs[t.b].lq - t.i0));
  }
  shape.with_backward = with_backward;
  shape.broadcast_q = pairing.broadcast_q;
  shape.heads = s->problem.heads;
  shape.kv_heads = s->problem.kv_heads;
  const int32_t lq0 = pairing.seqs.empty() ? 0 : pairing.seqs[0].lq;
  shape.seeds = lq0;
  TileLists lists;
  StoredDsPlan ds_plan;
  if (with_backward) {
    lists = BuildBackwardTiles(pairing, args.options);
    shape.dkv_tiles = static_cast<int64_t>(lists.dkv.size());
    ds_plan = PlanStoredDs(pairing.seqs, lists, pairing.broadcast_q, s->problem.heads);
    shape.stored_ds_bytes = ds_plan.elements > 0 ? ds_plan.elements * 2 : -1;
  }
  absl::StatusOr<KernelPlan> plan = ChooseKernels(shape, args.kernels);
  if (!plan.ok()) return plan.status();
  s->plan = *plan;

  // Forward tiles of the chosen kernel's rows; the persistent Hopper forwards take them in their
  // own order (tile_scheduler.h).
  const bool hopper_forward = s->plan.forward != ForwardKernelKind::kMmaSync;
  const int block_m = hopper_forward ? kHopperBlockM : kBlockM;
  if (!hopper_forward) tiles = BuildForwardTiles(pairing, args.options, block_m);
  s->num_forward = static_cast<int64_t>(tiles.size());
  if (s->plan.forward == ForwardKernelKind::kHopperTma || s->plan.forward == ForwardKernelKind::kHopperWs) {
    // Tiles of fewer K/V steps later, so that a persistent CTA's items come in even steps.
    OrderByStepsThenSequence(tiles, kHopperWsBlockN);
  } else if (s->plan.forward == ForwardKernelKind::kHopperSplit) {
    // The split kernel's CTA c takes every grid-th item (grid = the SM count); a snake over the
    // heavy-first list evens their sums when the head count divides the SM count.
    const int64_t items = s->num_forward * s->problem.heads;
    const int64_t grid = HopperSmCount();
    if (grid % s->problem.heads == 0 && items > grid) DealInSnakeBands(tiles, grid / s->problem.heads);
  }
  s->forward_covers_all = ForwardRows(tiles, pairing, block_m) == s->problem.to;
  GEMTB_RETURN_IF_ERROR(s->seqs.Upload(pairing.seqs, "sequence table"));
  GEMTB_RETURN_IF_ERROR(s->forward_tiles.Upload(tiles, "forward tiles"));
  if (!with_backward) return std::unique_ptr<DeviceCall>(new DeviceCall(std::move(s)));

  s->num_dq = static_cast<int64_t>(lists.dq.size());
  s->num_dq_reduce = static_cast<int64_t>(lists.dq_reduce.size());
  s->num_dkv = static_cast<int64_t>(lists.dkv.size());
  int64_t dq_rows = 0, dkv_rows = 0;
  for (const DqReduce& r : lists.dq_reduce) dq_rows += r.rows;
  for (const DqTile& t : lists.dq) {
    if (t.partial >= 0) continue;  // counted by its DqReduce
    // A dQ tile's rows belong to its first reader's query sequence.
    const int32_t lq = pairing.broadcast_q ? lq0 : pairing.seqs[lists.dq_readers[t.reader_begin].b].lq;
    dq_rows += std::min(kBlockM, lq - t.i0);
  }
  for (const DkvTile& t : lists.dkv) dkv_rows += std::min(kBlockN, t.lk - t.j0);
  s->dq_covers_all = dq_rows == s->problem.tq;
  s->dkv_covers_all = dkv_rows == s->problem.tk;
  GEMTB_RETURN_IF_ERROR(s->dq_tiles.Upload(lists.dq, "dQ tiles"));
  GEMTB_RETURN_IF_ERROR(s->dq_readers.Upload(lists.dq_readers, "dQ readers"));
  GEMTB_RETURN_IF_ERROR(s->dkv_tiles.Upload(lists.dkv, "dK/dV tiles"));
  if (s->plan.backward == BackwardKernelKind::kHopperStoredDs) {
    if (absl::Status a = s->ds.Allocate(static_cast<size_t>(ds_plan.elements), "stored dS"); !a.ok()) {
      if (args.kernels.backward == BackwardKernelKind::kHopperStoredDs) return a;
      // Chosen by the policy: without the memory, the dQ pass recomputes dS instead.
      (void)cudaGetLastError();
      s->plan.backward = BackwardKernelKind::kHopperRecompute;
    } else {
      GEMTB_RETURN_IF_ERROR(s->ds_block_base.Upload(ds_plan.block_base, "dS block offsets"));
    }
  }
  const bool stored_ds = s->plan.backward == BackwardKernelKind::kHopperStoredDs;
  GEMTB_RETURN_IF_ERROR(s->dkv_segments.Upload(stored_ds ? ds_plan.segments : lists.dkv_segments, "dK/dV segments"));
  GEMTB_RETURN_IF_ERROR(s->dq_reduce.Upload(lists.dq_reduce, "dQ reduce list"));
  size_t partial_floats = static_cast<size_t>(lists.dq_partial_slots) * static_cast<size_t>(s->problem.heads) *
                          kBlockM * static_cast<size_t>(s->problem.d);
  if (s->plan.backward == BackwardKernelKind::kHopperFusedDq) {
    // Its chains' dQ parts use the same workspace (the split dQ tiles it replaces do not run).
    s->fused_dq_chain = FusedDqChainTiles(s->num_dkv, s->problem.kv_heads, HopperSmCount());
    const size_t fused_floats = static_cast<size_t>(FusedDqChains(s->num_dkv, s->fused_dq_chain)) *
                                static_cast<size_t>(s->problem.heads) * static_cast<size_t>(kFusedDqSlotFloats);
    partial_floats = std::max(partial_floats, fused_floats);
  }
  GEMTB_RETURN_IF_ERROR(s->dq_partial.Allocate(partial_floats, "dQ partial sums"));
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
const KernelPlan& DeviceCall::plan() const { return state_->plan; }
std::string DeviceCall::forward_kernel_name() const { return std::string(ForwardKernelName(state_->plan.forward)); }
std::string DeviceCall::backward_kernel_name() const {
  if (!state_->with_backward) return "none";
  return std::string(BackwardKernelName(state_->plan.backward));
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
  fp.wide_o_stores = reinterpret_cast<uintptr_t>(o) % 16 == 0 ? 1 : 0;
  return Dispatch(s.dtype, p.d, [&]<ElementType E, int D>() -> absl::Status {
    if constexpr (D == kHopperHeadDim) {
      if (s.plan.forward != ForwardKernelKind::kMmaSync) return LaunchForwardHopper<E>(fp, s.num_forward, s.plan.forward);
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
  bp.ds = s.ds.get();
  bp.ds_block_base = s.ds_block_base.get();
  return Dispatch(s.dtype, p.d, [&]<ElementType E, int D>() -> absl::Status {
    bool done = false;
    if constexpr (D == kHopperHeadDim) {
      if (s.plan.backward != BackwardKernelKind::kMmaSync) {
        if (s.softmax) GEMTB_RETURN_IF_ERROR(LaunchRowDotHopper<E>(bp));
        if (s.plan.backward == BackwardKernelKind::kHopperFusedDq) {
          return LaunchDkDvDqFusedHopper<E>(bp, s.num_dkv, s.fused_dq_chain);
        }
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
