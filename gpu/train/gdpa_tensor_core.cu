#include "gpu/train/gdpa_tensor_core.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/train/gdpa_tensor_core_kernels.cuh"
#include "gpu/train/kernel_utils.cuh"

namespace gemtb::gpu::train {
namespace {

using tc::BackwardDkDvKernel;
using tc::BackwardDqKernel;
using tc::ForwardKernel;
using tc::kMaxWorkspaceBytes;
using tc::kSplitRows;
using tc::kThreads;
using tc::kTile;
using tc::Layout;
using tc::Mask;
using tc::Params;
using tc::Split;
using tc::SumSplitsKernel;

static_assert(tc::kTileInts == kGdpaTileInts, "the tile list's entry");

// The tiles of `rows` rows.
int32_t TilesOf(int64_t rows) { return static_cast<int32_t>((rows + kTile - 1) / kTile); }

// The row stride of v and dv (GdpaBatch::v_ld, 0: dense).
int VRowStride(const GdpaBatch& b) { return static_cast<int>(b.v_ld > 0 ? b.v_ld : int64_t{b.heads} * b.dh); }

// vec: every tensor 16-byte aligned and v's row stride a multiple of 16 bytes; then, head widths being
// multiples of 16 values, every row of every head starts on 16 bytes (a float4, or eight bf16).
template <typename T>
Params MakeParams(const GdpaBatch& b, bool aligned) {
  const int ld_v = VRowStride(b);
  const bool vec = aligned && (static_cast<int64_t>(ld_v) * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  return Params{b.q_offsets, b.k_offsets, b.heads,           Mask{b.window, b.block}, b.post_scale, vec, ld_v,
                b.q_tiles.entries, b.k_tiles.entries, TilesOf(b.max_q), TilesOf(b.max_k), tc::NormSide{},
                tc::NormSide{}};
}

// (tile of the own side (keys where own_keys): its list's entries, or every sample's tiles; head; split).
dim3 Grid(const GdpaBatch& b, bool own_keys, int splits) {
  const GdpaTiles& list = own_keys ? b.k_tiles : b.q_tiles;
  const int64_t tiles = list.entries != nullptr ? list.count : b.batch * TilesOf(own_keys ? b.max_k : b.max_q);
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(b.heads), static_cast<unsigned>(splits));
}

// Whether a launch over the own side (keys where own_keys) has a CTA: a tile list may be empty.
bool AnyTile(const GdpaBatch& b, bool own_keys) { return Grid(b, own_keys, 1).x > 0; }

// The splits of the walks of a launch whose own side has at most max_own rows per sample, the other
// side at most max_other, with `outputs` output tensors: 1 (whole walks: the unsplit path) unless the
// own side fits one tile (a longer one has tiles enough for the GPU) and the host bounds let a tile's
// walk pass kSplitSteps steps, and the workspace stays within kMaxWorkspaceBytes. A tile of n <= kTile
// rows keeps at most n + 2 * window (window mask) or n + 2 * block - 2 (block mask) rows of the other
// side, and at most max_other.
int SplitsFor(const GdpaBatch& b, int32_t max_own, int32_t max_other, int outputs) {
  if (max_own > kTile) return 1;
  int64_t walk = max_other;
  if (b.block > 0) {
    walk = std::min<int64_t>(walk, kTile + 2 * static_cast<int64_t>(b.block));
  } else if (b.window >= 0) {
    walk = std::min<int64_t>(walk, kTile + 2 * static_cast<int64_t>(b.window));
  }
  const int64_t splits = (walk + kSplitRows - 1) / kSplitRows;  // <= 2^20 / kSplitRows: z fits
  if (splits <= 1) return 1;
  const double bytes = static_cast<double>(outputs) * static_cast<double>(splits) * static_cast<double>(b.batch) *
                       max_own * b.heads * b.dh * sizeof(float);
  return bytes <= kMaxWorkspaceBytes ? static_cast<int>(splits) : 1;
}

// A split launch: the workspace (`outputs` = 1 or 2 sets of partial rows, stream-ordered), launch(sp)
// (the kernel writing it), SumSplitsKernel into out0 (and out1), the workspace freed.
template <typename T, typename Launch>
absl::Status SplitLaunch(const GdpaBatch& b, const Params& p, int splits, int32_t max_own, bool own_keys, T* out0,
                         T* out1, const char* what, cudaStream_t stream, Launch launch) {
  Split sp;
  sp.splits = splits;
  sp.max_own = max_own;
  sp.split_stride = b.batch * max_own * b.heads * b.dh;
  const int64_t per_output = splits * sp.split_stride;
  const int64_t floats = (out1 != nullptr ? 2 : 1) * per_output;
  float* part = nullptr;
  if (absl::Status a = CudaOk(cudaMallocAsync(reinterpret_cast<void**>(&part), floats * sizeof(float), stream), what);
      !a.ok()) {
    return a;
  }
  sp.part0 = part;
  sp.part1 = out1 != nullptr ? part + per_output : nullptr;
  launch(sp);
  const absl::Status partials = Launched(what);
  if (partials.ok()) {
    const int64_t units = static_cast<int64_t>(max_own) * (p.vec ? b.heads * b.dh / 4 : b.heads * b.dh);
    const int64_t blocks = std::min<int64_t>(65535, (units + kThreads - 1) / kThreads);
    LaunchDependent(SumSplitsKernel<T>, dim3(static_cast<unsigned>(b.batch), static_cast<unsigned>(blocks)), kThreads,
                    0, stream, p, sp, b.dh, own_keys, out0, out1);
  }
  const absl::Status summed = partials.ok() ? Launched(what) : partials;
  const absl::Status freed = CudaOk(cudaFreeAsync(part, stream), what);
  return summed.ok() ? freed : summed;
}

template <int kDh, typename T>
absl::Status LaunchForward(const GdpaBatch& b, const T* q, const T* k, const T* v, T* o,
                           const GdpaQueryNorm* query_norm, cudaStream_t stream) {
  constexpr size_t kBytes = Layout<kDh>::Bytes(1);  // q, then k and v twice
  const auto kernel = query_norm != nullptr ? ForwardKernel<kDh, T, true> : ForwardKernel<kDh, T, false>;
  if (absl::Status s = AllowSharedMemory(kernel, kBytes, "GdpaForwardTensorCore"); !s.ok()) return s;
  Params p = MakeParams<T>(b, Aligned16({q, k, v, o}));
  tc::NormForward qn;
  if (query_norm != nullptr) {
    qn = tc::NormForward{static_cast<int>(query_norm->ld), query_norm->rope, Bf16Bits(query_norm->y), query_norm->inv};
    p.vec = p.vec && query_norm->ld % 8 == 0;  // q's rows, now ld apart, 16-byte aligned too
  }
  if (!AnyTile(b, /*own_keys=*/false)) return absl::OkStatus();
  const int splits = SplitsFor(b, b.max_q, b.max_k, 1);
  const auto launch = [&](const Split& sp) {
    LaunchDependent(kernel, Grid(b, /*own_keys=*/false, sp.splits), kThreads, kBytes, stream, p, sp, q, k, v, o, qn);
  };
  if (splits == 1) {
    launch(Split{});
    return Launched("GdpaForwardTensorCore");
  }
  T* const no_second = nullptr;  // one output
  return SplitLaunch(b, p, splits, b.max_q, /*own_keys=*/false, o, no_second, "GdpaForwardTensorCore (split)", stream,
                     launch);
}

template <int kDh, typename T>
absl::Status LaunchBackward(const GdpaBatch& b, const T* q, const T* k, const T* v, const T* d_o, T* dq, T* dk, T* dv,
                            const GdpaHeadNorm* key_norm, const GdpaHeadNorm* query_norm, cudaStream_t stream) {
  constexpr size_t kBytes = Layout<kDh>::Bytes(2);  // the own pair, then the walked pair twice
  Params p = MakeParams<T>(b, Aligned16({q, k, v, d_o, dq, dk, dv}));
  for (const auto& [norm, side] : {std::pair{key_norm, &p.key_norm}, std::pair{query_norm, &p.query_norm}}) {
    if (norm == nullptr) continue;
    *side = tc::NormSide{Bf16Bits(norm->x), norm->inv, static_cast<int>(norm->ld), norm->rope};
    p.vec = p.vec && norm->ld % 8 == 0;  // the gradient's rows, now ld apart, 16-byte aligned too
  }
  T* const no_second = nullptr;  // dq's split launch has one output
  if (b.max_q > 0 && AnyTile(b, /*own_keys=*/false)) {
    const auto kernel = query_norm != nullptr ? BackwardDqKernel<kDh, T, true> : BackwardDqKernel<kDh, T, false>;
    if (absl::Status s = AllowSharedMemory(kernel, kBytes, "GdpaBackwardTensorCore dq"); !s.ok()) return s;
    // The query norm's backward needs a tile's whole sums: its walks stay whole.
    const int splits = query_norm != nullptr ? 1 : SplitsFor(b, b.max_q, b.max_k, 1);
    const auto launch = [&](const Split& sp) {
      LaunchDependent(kernel, Grid(b, /*own_keys=*/false, sp.splits), kThreads, kBytes, stream, p, sp, q, k, v, d_o,
                      dq);
    };
    if (splits == 1) {
      launch(Split{});
      if (absl::Status s = Launched("GdpaBackwardTensorCore dq"); !s.ok()) return s;
    } else if (absl::Status s = SplitLaunch(b, p, splits, b.max_q, /*own_keys=*/false, dq, no_second,
                                            "GdpaBackwardTensorCore dq (split)", stream, launch);
               !s.ok()) {
      return s;
    }
  }
  if (b.max_k > 0 && AnyTile(b, /*own_keys=*/true)) {
    const auto kernel = key_norm != nullptr ? BackwardDkDvKernel<kDh, T, true> : BackwardDkDvKernel<kDh, T, false>;
    if (absl::Status s = AllowSharedMemory(kernel, kBytes, "GdpaBackwardTensorCore dk dv"); !s.ok()) return s;
    // The key norm's backward needs a tile's whole sums: its walks stay whole.
    const int splits = key_norm != nullptr ? 1 : SplitsFor(b, b.max_k, b.max_q, 2);
    const auto launch = [&](const Split& sp) {
      LaunchDependent(kernel, Grid(b, /*own_keys=*/true, sp.splits), kThreads, kBytes, stream, p, sp, q, k, v, d_o,
                      dk, dv);
    };
    if (splits == 1) {
      launch(Split{});
      if (absl::Status s = Launched("GdpaBackwardTensorCore dk dv"); !s.ok()) return s;
    } else if (absl::Status s = SplitLaunch(b, p, splits, b.max_k, /*own_keys=*/true, dk, dv,
                                            "GdpaBackwardTensorCore dk dv (split)", stream, launch);
               !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Forward(const GdpaBatch& b, const T* q, const T* k, const T* v, T* o, const GdpaQueryNorm* query_norm,
                     cudaStream_t stream) {
  if (absl::Status s = ValidateGdpaBatch(b); !s.ok()) return s;
  if (query_norm != nullptr) {
    const int64_t width = int64_t{b.heads} * b.dh;
    if (query_norm->ld < width || query_norm->ld % 2 != 0 || query_norm->ld >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat("GdpaForwardTensorCore: query_norm.ld=", query_norm->ld,
                                                     ": want an even stride >= heads * dh = ", width));
    }
  }
  if (b.batch == 0 || b.max_q == 0) return absl::OkStatus();
  // Keys are read only where some sample has one.
  if (absl::Status s = NotNull({{q, "q"}, {o, "o"}}); !s.ok()) return s;
  if (b.max_k > 0) {
    if (absl::Status s = NotNull({{k, "k"}, {v, "v"}}); !s.ok()) return s;
  }
  if (query_norm != nullptr) {
    if (absl::Status s = NotNull({{query_norm->y, "query_norm.y"}, {query_norm->inv, "query_norm.inv"}}); !s.ok()) {
      return s;
    }
    if (reinterpret_cast<uintptr_t>(q) % 4 != 0 || reinterpret_cast<uintptr_t>(query_norm->y) % 4 != 0) {
      return absl::InvalidArgumentError("GdpaForwardTensorCore: q (x) and query_norm.y: want 4-byte aligned pointers");
    }
  }
  switch (b.dh) {
    case 16: return LaunchForward<16>(b, q, k, v, o, query_norm, stream);
    case 32: return LaunchForward<32>(b, q, k, v, o, query_norm, stream);
    default: return LaunchForward<64>(b, q, k, v, o, query_norm, stream);
  }
}

template <typename T>
absl::Status Backward(const GdpaBatch& b, const T* q, const T* k, const T* v, const T* d_o, T* dq, T* dk, T* dv,
                      const GdpaHeadNorm* key_norm, const GdpaHeadNorm* query_norm, cudaStream_t stream) {
  if (absl::Status s = ValidateGdpaBatch(b); !s.ok()) return s;
  if (b.batch == 0 || (b.max_q == 0 && b.max_k == 0)) return absl::OkStatus();
  // q, d_o, dq are used only where some sample has queries; k, v, dk, dv only where some has keys.
  if (b.max_q > 0) {
    if (absl::Status s = NotNull({{q, "q"}, {d_o, "d_o"}, {dq, "dq"}}); !s.ok()) return s;
  }
  if (b.max_k > 0) {
    if (absl::Status s = NotNull({{k, "k"}, {v, "v"}, {dk, "dk"}, {dv, "dv"}}); !s.ok()) return s;
  }
  for (const auto& [norm, name, rows] :
       {std::tuple{query_norm, "query_norm", b.max_q}, std::tuple{key_norm, "key_norm", b.max_k}}) {
    if (norm == nullptr) continue;
    const int64_t width = int64_t{b.heads} * b.dh;
    if (norm->ld < width || norm->ld % 2 != 0 || norm->ld >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat("GdpaBackwardTensorCore: ", name, ".ld=", norm->ld,
                                                     ": want an even stride >= heads * dh = ", width));
    }
    if (rows > 0) {
      if (norm->x == nullptr || norm->inv == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("GdpaBackwardTensorCore: ", name, ".x and ", name,
                                                       ".inv: want device pointers, got null"));
      }
      if (reinterpret_cast<uintptr_t>(norm->x) % 4 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("GdpaBackwardTensorCore: ", name, ".x: want a 4-byte aligned pointer"));
      }
    }
  }
  switch (b.dh) {
    case 16: return LaunchBackward<16>(b, q, k, v, d_o, dq, dk, dv, key_norm, query_norm, stream);
    case 32: return LaunchBackward<32>(b, q, k, v, d_o, dq, dk, dv, key_norm, query_norm, stream);
    default: return LaunchBackward<64>(b, q, k, v, d_o, dq, dk, dv, key_norm, query_norm, stream);
  }
}

}  // namespace

std::vector<int32_t> GdpaTilesOf(const std::vector<int32_t>& q_offsets, const std::vector<int32_t>& k_offsets,
                                 bool own_keys) {
  return tc::TileList(q_offsets, k_offsets, own_keys);
}

std::vector<int32_t> GdpaTileOffsets(const std::vector<int32_t>& own_offsets) {
  std::vector<int32_t> tiles(own_offsets.empty() ? 1 : own_offsets.size(), 0);
  for (size_t b = 0; b + 1 < own_offsets.size(); ++b) {
    tiles[b + 1] = tiles[b] + TilesOf(own_offsets[b + 1] - own_offsets[b]);
  }
  return tiles;
}

absl::Status GdpaWriteTiles(int64_t batch, const int32_t* q_offsets, const int32_t* k_offsets,
                            const int32_t* tile_offsets, int32_t* entries, cudaStream_t stream) {
  if (batch < 0 || batch >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("GdpaWriteTiles: batch=", batch, ": want 0 .. 2^31-1"));
  }
  if (batch == 0) return absl::OkStatus();
  if (absl::Status s = NotNull({{q_offsets, "q_offsets"}, {k_offsets, "k_offsets"}, {tile_offsets, "tile_offsets"},
                                {entries, "entries"}});
      !s.ok()) {
    return s;
  }
  if (reinterpret_cast<uintptr_t>(entries) % 16 != 0) {
    return absl::InvalidArgumentError("GdpaWriteTiles: entries: want 16-byte aligned");
  }
  LaunchDependent(tc::WriteTilesKernel, static_cast<unsigned>(batch), kThreads, 0, stream, q_offsets, k_offsets,
                  tile_offsets, entries);
  return Launched("GdpaWriteTiles");
}

absl::Status GdpaForwardTensorCore(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o,
                                   cudaStream_t stream) {
  const GdpaQueryNorm* const none = nullptr;
  return Forward(b, q, k, v, o, none, stream);
}

absl::Status GdpaForwardTensorCore(const GdpaBatch& b, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                   const __nv_bfloat16* v, __nv_bfloat16* o, cudaStream_t stream,
                                   const GdpaQueryNorm* query_norm) {
  return Forward(b, Bf16Bits(q), Bf16Bits(k), Bf16Bits(v), Bf16Bits(o), query_norm, stream);
}

absl::Status GdpaBackwardTensorCore(const GdpaBatch& b, const float* q, const float* k, const float* v,
                                    const float* d_o, float* dq, float* dk, float* dv, cudaStream_t stream) {
  const GdpaHeadNorm* const none = nullptr;
  return Backward(b, q, k, v, d_o, dq, dk, dv, none, none, stream);
}

absl::Status GdpaBackwardTensorCore(const GdpaBatch& b, const __nv_bfloat16* q, const __nv_bfloat16* k,
                                    const __nv_bfloat16* v, const __nv_bfloat16* d_o, __nv_bfloat16* dq,
                                    __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t stream,
                                    const GdpaHeadNorm* key_norm, const GdpaHeadNorm* query_norm) {
  return Backward(b, Bf16Bits(q), Bf16Bits(k), Bf16Bits(v), Bf16Bits(d_o), Bf16Bits(dq), Bf16Bits(dk), Bf16Bits(dv),
                  key_norm, query_norm, stream);
}

}  // namespace gemtb::gpu::train
