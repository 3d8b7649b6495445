#include "gpu/attention/api.h"

#include <cmath>
#include <limits>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"
#include "gpu/attention/launch.h"
#include "gpu/attention/params.h"
#include "gpu/attention/tile_scheduler.h"
#include "gpu/common/device_buffer.h"
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

// A validated call: shapes, the resolved pairing and scales.
struct Problem {
  int64_t tq = 0, tk = 0, to = 0, heads = 0, kv_heads = 0, d = 0;
  Pairing pairing;
  float pre_scale = 1.f, post_scale = 1.f;
};

absl::StatusOr<Problem> Resolve(const AttentionArgs& a) {
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
  GEMTB_RETURN_IF_ERROR(CheckRank(a.q, "q", 3, "[TQ,H,Dqk]"));
  GEMTB_RETURN_IF_ERROR(CheckRank(a.k, "k", 3, "[TK,Hkv,Dqk]"));
  GEMTB_RETURN_IF_ERROR(CheckRank(a.v, "v", 3, "[TK,Hkv,Dv]"));
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

// The device copies every kernel of a call reads.
struct DeviceProblem {
  DeviceArray<uint16_t> q, k, v;
  DeviceArray<SeqInfo> seqs;

  absl::Status Upload(const AttentionArgs& a, const Problem& p) {
    GEMTB_RETURN_IF_ERROR(q.Upload(a.q.data, "q"));
    GEMTB_RETURN_IF_ERROR(k.Upload(a.k.data, "k"));
    GEMTB_RETURN_IF_ERROR(v.Upload(a.v.data, "v"));
    return seqs.Upload(p.pairing.seqs, "sequence table");
  }

  ProblemParams Params(const AttentionArgs& a, const Problem& p) const {
    ProblemParams pp;
    pp.q = q.get();
    pp.k = k.get();
    pp.v = v.get();
    pp.seqs = seqs.get();
    pp.heads = static_cast<int32_t>(p.heads);
    pp.kv_heads = static_cast<int32_t>(p.kv_heads);
    pp.out_rows = p.to;
    pp.pre_scale = p.pre_scale;
    pp.post_scale = p.post_scale;
    pp.options = a.options;
    return pp;
  }
};

absl::Status Finish() {
  GEMTB_RETURN_IF_ERROR(CudaOk(cudaGetLastError(), "attention kernels"));
  return CudaOk(cudaDeviceSynchronize(), "attention kernels");
}

}  // namespace

absl::Status CanRun(const AttentionArgs& args) { return Resolve(args).status(); }

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
  absl::StatusOr<Problem> resolved = Resolve(args);
  if (!resolved.ok()) return resolved.status();
  GEMTB_RETURN_IF_ERROR(DeviceAvailable());
  const Problem& p = *resolved;
  const bool softmax = args.options.act == Activation::kSoftmax;
  const std::vector<ForwardTile> tiles = BuildForwardTiles(p.pairing, args.options);

  DeviceProblem dev;
  GEMTB_RETURN_IF_ERROR(dev.Upload(args, p));
  DeviceArray<ForwardTile> d_tiles;
  DeviceArray<uint16_t> d_o;
  DeviceArray<float> d_lse;
  GEMTB_RETURN_IF_ERROR(d_tiles.Upload(tiles, "forward tiles"));
  GEMTB_RETURN_IF_ERROR(d_o.Allocate(static_cast<size_t>(p.to * p.heads * p.d), "o"));
  GEMTB_RETURN_IF_ERROR(d_o.Zero("o"));  // rows of skipped tiles
  if (softmax) {
    GEMTB_RETURN_IF_ERROR(d_lse.Allocate(static_cast<size_t>(p.heads * p.to), "lse"));
    GEMTB_RETURN_IF_ERROR(LaunchFill(d_lse.get(), p.heads * p.to, -std::numeric_limits<float>::infinity()));
  }
  ForwardParams fp;
  fp.problem = dev.Params(args, p);
  fp.tiles = d_tiles.get();
  fp.o = d_o.get();
  fp.lse = d_lse.get();
  const int64_t num_tiles = static_cast<int64_t>(tiles.size());
  GEMTB_RETURN_IF_ERROR(Dispatch(args.dtype, p.d, [&]<ElementType E, int D>() {
    return LaunchForward<E, D>(fp, num_tiles);
  }));
  GEMTB_RETURN_IF_ERROR(Finish());

  ForwardResult out;
  out.o_shape = {p.to, p.heads, p.d};
  GEMTB_RETURN_IF_ERROR(d_o.Download(out.o, "o"));
  if (softmax) {
    out.lse_shape = {p.heads, p.to};
    GEMTB_RETURN_IF_ERROR(d_lse.Download(out.lse, "lse"));
  }
  return out;
}

absl::StatusOr<BackwardResult> Backward(const AttentionArgs& args, const HostTensor<uint16_t>& d_o,
                                        const ForwardResult& forward) {
  absl::StatusOr<Problem> resolved = Resolve(args);
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
  GEMTB_RETURN_IF_ERROR(DeviceAvailable());
  const TileLists tiles = BuildBackwardTiles(p.pairing, args.options);

  DeviceProblem dev;
  GEMTB_RETURN_IF_ERROR(dev.Upload(args, p));
  DeviceArray<uint16_t> d_do, d_o_fwd, d_dq, d_dk, d_dv;
  DeviceArray<float> d_lse, d_rows;
  DeviceArray<DqTile> d_dq_tiles;
  DeviceArray<DqReader> d_dq_readers;
  DeviceArray<DkvTile> d_dkv_tiles;
  DeviceArray<DkvSegment> d_dkv_segments;
  GEMTB_RETURN_IF_ERROR(d_do.Upload(d_o.data, "d_o"));
  if (softmax) {
    GEMTB_RETURN_IF_ERROR(d_o_fwd.Upload(forward.o, "forward o"));
    GEMTB_RETURN_IF_ERROR(d_lse.Upload(forward.lse, "forward lse"));
    GEMTB_RETURN_IF_ERROR(d_rows.Allocate(static_cast<size_t>(p.heads * p.to), "rowsum(dO*O)"));
  }
  GEMTB_RETURN_IF_ERROR(d_dq_tiles.Upload(tiles.dq, "dQ tiles"));
  GEMTB_RETURN_IF_ERROR(d_dq_readers.Upload(tiles.dq_readers, "dQ readers"));
  GEMTB_RETURN_IF_ERROR(d_dkv_tiles.Upload(tiles.dkv, "dK/dV tiles"));
  GEMTB_RETURN_IF_ERROR(d_dkv_segments.Upload(tiles.dkv_segments, "dK/dV segments"));
  // Rows no tile writes (never read, or masked everywhere) have zero gradients.
  GEMTB_RETURN_IF_ERROR(d_dq.Allocate(args.q.data.size(), "dq"));
  GEMTB_RETURN_IF_ERROR(d_dq.Zero("dq"));
  GEMTB_RETURN_IF_ERROR(d_dk.Allocate(args.k.data.size(), "dk"));
  GEMTB_RETURN_IF_ERROR(d_dk.Zero("dk"));
  GEMTB_RETURN_IF_ERROR(d_dv.Allocate(args.v.data.size(), "dv"));
  GEMTB_RETURN_IF_ERROR(d_dv.Zero("dv"));

  BackwardParams bp;
  bp.problem = dev.Params(args, p);
  bp.o = d_o_fwd.get();
  bp.d_o = d_do.get();
  bp.lse = d_lse.get();
  bp.d_rows = d_rows.get();
  bp.dq_tiles = d_dq_tiles.get();
  bp.dq_readers = d_dq_readers.get();
  bp.dkv_tiles = d_dkv_tiles.get();
  bp.dkv_segments = d_dkv_segments.get();
  bp.dq = d_dq.get();
  bp.dk = d_dk.get();
  bp.dv = d_dv.get();
  const int64_t num_dq = static_cast<int64_t>(tiles.dq.size());
  const int64_t num_dkv = static_cast<int64_t>(tiles.dkv.size());
  const absl::Status launched = Dispatch(args.dtype, p.d, [&]<ElementType E, int D>() -> absl::Status {
    if (softmax) GEMTB_RETURN_IF_ERROR((LaunchRowDot<E, D>(bp)));
    GEMTB_RETURN_IF_ERROR((LaunchDkDv<E, D>(bp, num_dkv)));
    return LaunchDq<E, D>(bp, num_dq);
  });
  GEMTB_RETURN_IF_ERROR(launched);
  GEMTB_RETURN_IF_ERROR(Finish());

  BackwardResult out;
  out.dq_shape = args.q.shape;
  out.dk_shape = args.k.shape;
  out.dv_shape = args.v.shape;
  GEMTB_RETURN_IF_ERROR(d_dq.Download(out.dq, "dq"));
  GEMTB_RETURN_IF_ERROR(d_dk.Download(out.dk, "dk"));
  GEMTB_RETURN_IF_ERROR(d_dv.Download(out.dv, "dv"));
  return out;
}

}  // namespace gemtb::gpu
