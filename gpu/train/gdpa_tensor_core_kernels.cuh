// The tensor-core GDPA kernels of gdpa_tensor_core.h and what they share: device code only, built by
// nvcc for the GPU (gdpa_tensor_core.cu launches them) and by a host compiler for the CPU emulation
// (tests/gpu/emulation, through its cuda_shim.h), so that their logic is checked where no GPU is.
#ifndef GEMTB_GPU_TRAIN_GDPA_TENSOR_CORE_KERNELS_CUH_
#define GEMTB_GPU_TRAIN_GDPA_TENSOR_CORE_KERNELS_CUH_

#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "gpu/common/dependent_launch.cuh"
#include "gpu/common/mma.cuh"
#include "gpu/train/gdpa_rows.cuh"
#include "gpu/train/head_rms_norm_kernels.cuh"
#include "gpu/train/row_divisor.cuh"
#include "model/common/element_type.h"

namespace gemtb::gpu::train::tc {

using gdpa::LoadSample;
using gdpa::Mask;
using gdpa::Sample;

using bf16 = uint16_t;  // staged tiles, and bf16 tensors in global memory, hold bf16 bit patterns

// Two fp32 values rounded (RNE) to bf16 and packed, lo in the low half: one cvt.rn.bf16x2 on the GPU.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
#ifdef __CUDACC__
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
#else
  return PackRounded<ElementType::kBFloat16>(lo, hi);
#endif
}

// x rounded (RNE) to bf16 and back to fp32.
__device__ __forceinline__ float RoundToBf16(float x) {
  return Storage<ElementType::kBFloat16>::ToFloat(Storage<ElementType::kBFloat16>::FromFloat(x));
}

// The low and high bf16 of a packed pair (PackBf16x2's layout), as fp32.
__device__ __forceinline__ float Bf16Lo(uint32_t pair) {
  return Storage<ElementType::kBFloat16>::ToFloat(static_cast<bf16>(pair & 0xffffu));
}
__device__ __forceinline__ float Bf16Hi(uint32_t pair) {
  return Storage<ElementType::kBFloat16>::ToFloat(static_cast<bf16>(pair >> 16));
}

// A CTA takes one (sample, head, tile of kTile rows of its own side: queries for o and dq, keys for
// dk and dv) and walks the other side's kept rows in steps of kTile rows staged in shared memory as
// bf16. Its 16-row strips and each step's 16-row chunks cut the step's scores into 16x16 regions. A
// region stays in registers (mma.sync m16n8k16, gpu/common/mma.cuh): its two fp32 C tiles get the mask
// and the pointwise function lane by lane and, rounded to bf16, are the A fragment of the products
// that add the region's terms to the warp's strip of the output. The strip's own rows are loaded as A
// fragments once; the chunk's rows come from shared memory by ldmatrix.
//
// Warp roles: with n real rows in the own tile, `strips` = 1, 2 or 4 warps (n <= 16, <= 32, else) take
// one strip each, and the kWarps / strips groups of them split every step's chunks (group g takes
// chunks g, g + groups, ...), so that a tile of a few rows (PMA's 4 queries, cross-attention's 4 keys)
// still keeps every warp busy. Each warp sums its chunks in increasing order; the groups' partial
// strips are added in increasing group order at the end: no atomics, a fixed order of every sum.
constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTile = 64;
constexpr int kFrag = 16;                    // a region's rows and columns: mma.sync's m and k
constexpr int kChunks = kTile / kFrag;       // 16-row strips (chunks) of a tile
constexpr int kLdS = kTile + 4;              // fp32 row stride of the output tile (float4 rows)

static_assert(kChunks == kWarps, "the warp roles assume one strip per warp in a full tile");

// Split walks. A short own side (PMA's 4 queries for o and dq, cross-attention's 4 keys for dk and dv)
// over a long other side gives few CTAs, each walking up to ~33 steps in series. Where the host bounds
// (GdpaBatch's max_q, max_k, window, block) allow a walk longer than kSplitSteps steps and the own side
// fits one tile, the grid's z index folds (tile, split): split s walks steps [s * kSplitSteps,
// (s + 1) * kSplitSteps) of its tile's walk, in increasing order, and writes its fp32 partial rows to a
// workspace; SumSplitsKernel adds a row's partials in increasing split order into the output. Split s > 0
// of a walk of at most s * kSplitSteps steps writes nothing and is not read (split 0 always writes, zeros
// for an empty walk). A re-association of the unsplit kernel's fp32 sums of the same chunk terms, in a
// fixed order: no atomics, the same bytes on every run.
constexpr int kSplitSteps = 4;
constexpr int kSplitRows = kSplitSteps * kTile;  // rows of the other side per split
// The largest workspace (bytes, dk and dv together) a split launch allocates; beyond it the walks stay whole.
constexpr double kMaxWorkspaceBytes = 512.0 * 1024 * 1024;

// The CTAs an SM must be able to hold at once (__launch_bounds__' second argument) for the dK/dV kernel
// at bf16 and head dims up to 32: a CTA's walk is a few short steps, each waiting on its loads, and left
// to itself ptxas gives it 148 registers a thread (three CTAs an SM); capped at 128 it fits four, for a
// few bytes of spills. The dQ kernel and the forward, capped alike (five and six CTAs), spill more and
// lose, so they keep the compiler's choice, as do fp32 tensors and larger head dims
// (tools/bench/NOTES.md has the timings).
template <int kDh, typename T>
constexpr int MinCtas(int at_dh32) {
  return kDh <= 32 && sizeof(T) == 2 ? at_dh32 : 1;
}

// The shared memory of a kernel: `own` staged tiles of kTile rows of bf16 (the own side's operands),
// then the walked side's two operands twice (step s's pair in buffer s % 2, so that a step's rows are
// stored while the warps compute on the step before, one barrier a step). Once the walk is over the
// fp32 output tile (the warps' partial output strips, kDh <= kLdS columns, added there in a fixed
// order) takes the walked buffers' place.
template <int kDh>
struct Layout {
  // bf16 row stride: rows 16 bytes apart modulo 128, so that ldmatrix's 8-row loads hit distinct banks.
  static constexpr int kLd = kDh + 8;
  static constexpr size_t kOperandElems = static_cast<size_t>(kTile) * kLd;
  static constexpr size_t kWalkBytes = sizeof(bf16) * kOperandElems * 4;
  static constexpr size_t kOutputBytes = sizeof(float) * kTile * kLdS;
  static constexpr size_t Bytes(int own) {
    return sizeof(bf16) * kOperandElems * own + (kWalkBytes > kOutputBytes ? kWalkBytes : kOutputBytes);
  }
  // Operand `which` (0 or 1) of buffer `buf` of the walked side, which starts at `walk`.
  static __device__ bf16* Walked(bf16* walk, int buf, int which) { return walk + (2 * buf + which) * kOperandElems; }
  static_assert(kDh % kFrag == 0 && kDh <= kLdS, "dh: a multiple of 16 that fits the output tile's rows");
  static_assert(sizeof(bf16) * kOperandElems % 128 == 0, "every staged tile 128-byte aligned");
};

// A side given as a head RMS norm's output, rows = x * inv per row and head (x: rows ld apart, bf16;
// inv: [rows, heads] fp32), or none (x null). Where given, that side's gradient is written as dL/dx
// (NormBackward) with row stride ld.
struct NormSide {
  const bf16* x = nullptr;
  const float* inv = nullptr;
  int ld = 0;
  // Where not null: the side is RoPE_t of the norm's output (qk_norm_rope.h's table [positions, dh], t
  // the row's position in its sample), and its gradient goes through RoPE's transpose before the norm's
  // backward.
  const float* rope = nullptr;
};

// The forward's queries given as a head RMS norm's input (ForwardKernel's kQueryNorm instance): the
// kernel's q argument is x (rows ld apart), and the kernel norms its tile's rows itself (then RoPE_t
// where rope is given, t the row's position in its sample), as HeadRmsNormForward and
// QkNormRopeForward do, attends with them, and writes them (y, rows heads * dh apart, bf16) and their
// inverse RMS (inv, [rows, heads]) for the backward, which takes them as its NormSide.
struct NormForward {
  int ld = 0;
  const float* rope = nullptr;
  bf16* y = nullptr;
  float* inv = nullptr;
};

struct Params {
  const int32_t* q_offsets;
  const int32_t* k_offsets;
  int heads;
  Mask mask;
  float post_scale;
  bool vec;  // every tensor and row 16-byte aligned: rows move as quads (float4, or four bf16)
  int ld_v;  // the row stride of v and dv (elements); q, k, d_o, o, dq and dk rows are heads * dh apart
  // The CTAs' tiles of the own side, queries (o, dq) or keys (dk, dv): a list of kTileInts int32 an
  // entry (CtaPlace reads them), or null: every sample's max_*_tiles tiles, blockIdx.x = sample * max +
  // tile.
  const int32_t* q_tiles;
  const int32_t* k_tiles;
  int max_q_tiles, max_k_tiles;
  // The keys' norm, read by BackwardDkDvKernel's kKeyNorm instance, and the queries', by
  // BackwardDqKernel's kQueryNorm instance; only unsplit launches take them.
  NormSide key_norm, query_norm;
};

// A tile list's entry, 32 bytes (two 16-byte loads): its sample's first query row, query count, first
// key row and key count, then the tile's index within the sample's own side, the sample, and two zeros.
constexpr int kTileInts = 8;

// The tile list (host code) of the own side (keys where own_keys) of samples with host offsets
// q_offsets and k_offsets: every kTile-row tile that holds rows, sample by sample. WriteTilesKernel
// writes the same entries on the device.
inline std::vector<int32_t> TileList(const std::vector<int32_t>& q_offsets, const std::vector<int32_t>& k_offsets,
                                     bool own_keys) {
  std::vector<int32_t> entries;
  const size_t samples = q_offsets.size() < k_offsets.size() ? q_offsets.size() : k_offsets.size();
  for (size_t b = 0; b + 1 < samples; ++b) {
    const int32_t lq = q_offsets[b + 1] - q_offsets[b], lk = k_offsets[b + 1] - k_offsets[b];
    const int32_t own = own_keys ? lk : lq;
    for (int32_t t = 0; t * kTile < own; ++t) {
      entries.insert(entries.end(), {q_offsets[b], lq, k_offsets[b], lk, t, static_cast<int32_t>(b), 0, 0});
    }
  }
  return entries;
}

// The tile list's entries of sample blockIdx.x, [tile_offsets[b], tile_offsets[b + 1]) (the prefix sums
// of the samples' own-side tiles), from the device offsets: TileList's entries.
__global__ void __launch_bounds__(kThreads)
    WriteTilesKernel(const int32_t* q_offsets, const int32_t* k_offsets, const int32_t* tile_offsets,
                     int32_t* entries) {
  AwaitPriorGrids();
  const int b = static_cast<int>(blockIdx.x);
  const int32_t q_row = q_offsets[b], lq = q_offsets[b + 1] - q_row, k_row = k_offsets[b],
                lk = k_offsets[b + 1] - k_row, first = tile_offsets[b], tiles = tile_offsets[b + 1] - first;
  for (int t = static_cast<int>(threadIdx.x); t < tiles; t += kThreads) {
    uint4* entry = reinterpret_cast<uint4*>(entries + static_cast<int64_t>(first + t) * kTileInts);
    entry[0] = make_uint4(static_cast<uint32_t>(q_row), static_cast<uint32_t>(lq), static_cast<uint32_t>(k_row),
                          static_cast<uint32_t>(lk));
    entry[1] = make_uint4(static_cast<uint32_t>(t), static_cast<uint32_t>(b), 0u, 0u);
  }
}

// How a launch splits its walks. splits == 1: the CTA walks every step and writes the output rows.
// splits > 1 (the own side then fits one tile, max_own <= kTile): blockIdx.z is the split, and split s
// writes its partial rows of sample b, head h to
// part[s * split_stride + (b * max_own + r) * heads * dh + h * dh + c] (r the own row within the sample,
// part0 for o, dq or dk, part1 for dv); own rows beyond max_own (a broken max_q / max_k) are not computed.
struct Split {
  int splits = 1;
  int max_own = 0;
  int64_t split_stride = 0;  // batch * max_own * heads * dh
  float* part0 = nullptr;
  float* part1 = nullptr;
};


// The CTA's part of a launch split as `sp` says: its sample (the rows of both sides), its own tile (rows
// [tile * kTile, ...) of the own side, which has `own` rows in the sample) and its split. Grid: x the
// tile (Params' tile list entry, or sample * max tiles + tile), y the head, z the split.
struct Place {
  Sample s;
  int64_t sample;
  int tile, split, own;
};

__device__ inline Place CtaPlace(const Params& p, const Split& sp, bool own_keys) {
  Place c;
  const int32_t* list = own_keys ? p.k_tiles : p.q_tiles;
  if (list != nullptr) {
    const uint4* entry = reinterpret_cast<const uint4*>(list + static_cast<int64_t>(blockIdx.x) * kTileInts);
    const uint4 rows = entry[0], at = entry[1];
    c.s.q_row = static_cast<int32_t>(rows.x), c.s.lq = static_cast<int32_t>(rows.y);
    c.s.k_row = static_cast<int32_t>(rows.z), c.s.lk = static_cast<int32_t>(rows.w);
    c.tile = static_cast<int32_t>(at.x), c.sample = static_cast<int32_t>(at.y);
  } else {
    const int tiles = own_keys ? p.max_k_tiles : p.max_q_tiles;
    c.sample = blockIdx.x / tiles, c.tile = static_cast<int>(blockIdx.x % tiles);
    c.s = LoadSample(p, c.sample);
  }
  c.split = static_cast<int>(blockIdx.z);
  const int own = own_keys ? c.s.lk : c.s.lq;
  c.own = sp.splits > 1 ? min(own, sp.max_own) : own;
  return c;
}

// Rows [*begin, *end) of the tile's walk [lo, hi) that split `split` takes: all of it unsplit, else
// steps [split * kSplitSteps, (split + 1) * kSplitSteps) of kTile rows from lo. False where a split
// past the first takes none: it writes nothing (SumSplitsKernel does not read it).
__device__ inline bool SplitWalk(const Split& sp, int split, int lo, int hi, int* begin, int* end) {
  *begin = lo;
  *end = hi;
  if (sp.splits == 1) return true;
  const int64_t first = lo + static_cast<int64_t>(split) * kSplitRows;
  if (split > 0 && first >= hi) return false;
  const int64_t last = first + kSplitRows;
  *begin = static_cast<int>(first);  // split 0: lo
  *end = static_cast<int>(last < hi ? last : hi);
  return true;
}

// sigmoid(x) from one exp and one fast division, without a branch: below x = -88 exp(-x) is inf and
// the quotient 0, the limit. The few ulp these intrinsics lose vanish in the bf16 rounding of the
// products the result enters. On the GPU the SFU's exp2 and reciprocal run with denormals flushed
// (.ftz): __expf's exp2 without it spends a compare and two multiplies a value scaling inputs below
// -126, which only arise for x > 87.3, where exp(-x) is below 2^-126 and 1 + exp(-x) is 1 either way;
// the divisor is at least 1, so the reciprocal meets no denormal. The same bits as __fdividef(1, 1 +
// __expf(-x)), in fewer instructions (this runs once per score in each GDPA kernel).
__device__ __forceinline__ float Sigmoid(float x) {
#ifdef __CUDA_ARCH__
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.44269504088896341f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
#else
  return __fdividef(1.0f, 1.0f + __expf(-x));
#endif
}

// post * silu(z), given sg = sigmoid(z).
__device__ __forceinline__ float Weight(float z, float sg, float post) { return post * z * sg; }
// dL/dz = post * silu'(z) * dp, silu'(z) = sg (1 + z (1 - sg)).
__device__ __forceinline__ float ScoreGrad(float z, float sg, float dp, float post) {
  return post * sg * (1.0f + z * (1.0f - sg)) * dp;
}

// The warp's part of a CTA whose own tile has n (1 .. kTile) real rows: own rows [row0, row0 + 16)
// (strip `strip`), chunks group, group + groups, ... of every step; inactive when the strip holds
// no real row (n = 33 .. 48 leaves the fourth strip empty).
struct Role {
  int strips, groups, strip, group, row0;
  bool active;
};

__device__ inline Role WarpRole(int n) {
  Role r;
  r.strips = n <= kFrag ? 1 : n <= 2 * kFrag ? 2 : kWarps;
  r.groups = kWarps / r.strips;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  r.strip = warp % r.strips;
  r.group = warp / r.strips;
  r.row0 = r.strip * kFrag;
  r.active = r.row0 < n;
  return r;
}

// The kernels read q, k, v, d_o and write o, dq, dk, dv as T: fp32 (rounded to bf16 as they are
// staged) or bf16 (staged as they are). Both stage the same bf16 tiles from the same values, so the
// bf16 tensors' results are the fp32 tensors' results rounded to bf16, bit for bit.
template <typename T>
inline constexpr bool kIoType = std::is_same_v<T, float> || std::is_same_v<T, bf16>;

__device__ __forceinline__ void StoreQuad(float* at, const float4& v) { *reinterpret_cast<float4*>(at) = v; }
__device__ __forceinline__ void StoreQuad(bf16* at, const float4& v) {
  *reinterpret_cast<uint2*>(at) = make_uint2(PackBf16x2(v.x, v.y), PackBf16x2(v.z, v.w));
}
__device__ __forceinline__ void StoreOne(float* at, float v) { *at = v; }
__device__ __forceinline__ void StoreOne(bf16* at, float v) { *at = Storage<ElementType::kBFloat16>::FromFloat(v); }

// 16 consecutive bytes of a row, the unit a thread stages: four fp32 (a float4) or eight bf16 (a uint4).
template <typename T>
using Unit = std::conditional_t<std::is_same_v<T, float>, float4, uint4>;

// One thread's share of a tile being staged: rows [row0, row0 + n) of head h of x (rows of `width`
// values) held in registers between Fetch and Put, so that the next step's global loads are in
// flight while the warps compute on the current one. Thread `tid` holds unit (tid + i * kThreads) %
// kUnitsPerRow of row Row(tid + i * kThreads) for every i: consecutive threads take a row's
// consecutive 16-byte units (whole 32-byte sectors from global memory), and where a row is four units
// (bf16 at dh 32) the rows of each group of eight are taken in the order 0, 4, 1, 5, 2, 6, 3, 7, so
// that the eight 16-byte stores of a shared-memory phase (two rows, four apart, kLd = 40 values:
// 16-byte offsets 5r + c modulo 8) fall on distinct banks, where rows 0 and 1 would share one.
template <int kDh, typename T>
struct StagedRows {
  static_assert(kIoType<T>, "fp32 or bf16 rows");
  static constexpr int kPerUnit = 16 / static_cast<int>(sizeof(T));
  static constexpr int kUnitsPerRow = kDh / kPerUnit;
  static constexpr int kUnits = kTile * kUnitsPerRow / kThreads;
  static_assert(kDh % kPerUnit == 0 && kTile * kUnitsPerRow % kThreads == 0, "a tile's units split evenly");
  Unit<T> x[kUnits];

  // The tile row of unit index e (see above).
  static __device__ int Row(int e) {
    const int r = e / kUnitsPerRow;
    if constexpr (kUnitsPerRow == 4 && sizeof(T) == 2) {
      return (r & ~7) | ((r & 1) << 2) | ((r >> 1) & 3);
    } else {
      return r;
    }
  }

  // Rows past n read as zero: a partial tile's padding adds nothing and is never NaN. vec: one 16-byte
  // load per unit; else one scalar load per value.
  __device__ void Fetch(const T* src, int64_t row0, int n, int width, int h, bool vec) {
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = Row(e), c = e % kUnitsPerRow * kPerUnit;
      x[i] = Unit<T>{};
      if (r >= n) continue;
      const T* at = src + (row0 + r) * width + h * kDh + c;
      if (vec) {
        x[i] = __ldg(reinterpret_cast<const Unit<T>*>(at));
      } else if constexpr (std::is_same_v<T, float>) {
        x[i] = make_float4(__ldg(at), __ldg(at + 1), __ldg(at + 2), __ldg(at + 3));
      } else {
        x[i] = make_uint4(PackHalves(__ldg(at), __ldg(at + 1)), PackHalves(__ldg(at + 2), __ldg(at + 3)),
                          PackHalves(__ldg(at + 4), __ldg(at + 5)), PackHalves(__ldg(at + 6), __ldg(at + 7)));
      }
    }
  }
  // The held rows (rounded to bf16 where fp32) into rows 0 .. kTile-1 of the staged tile s.
  __device__ void Put(bf16* s) const {
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads, r = Row(e), c = e % kUnitsPerRow * kPerUnit;
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<uint2*>(s + r * Layout<kDh>::kLd + c) =
            make_uint2(PackBf16x2(x[i].x, x[i].y), PackBf16x2(x[i].z, x[i].w));
      } else {
        *reinterpret_cast<uint4*>(s + r * Layout<kDh>::kLd + c) = x[i];
      }
    }
  }
};

// The CTA's own rows [row0, row0 + n) of head h of a (and of b, where kTwo; rows ld_a and ld_b
// apart) into the staged tiles sa (and sb), their loads issued together with the first step's
// (first_step(), which fetches into the caller's StagedRows): the CTA waits one round trip before its
// first step, not two.
template <int kDh, bool kTwo, typename T, typename FirstStep>
__device__ void StageOwnRows(const T* a, const T* b, int64_t row0, int n, int ld_a, int ld_b, int h, bool vec,
                             bf16* sa, bf16* sb, FirstStep first_step) {
  StagedRows<kDh, T> own_a, own_b;
  own_a.Fetch(a, row0, n, ld_a, h, vec);
  if constexpr (kTwo) own_b.Fetch(b, row0, n, ld_b, h, vec);
  first_step();
  own_a.Put(sa);
  if constexpr (kTwo) own_b.Put(sb);
}

// The walked side of a CTA's walk: its two operands (k and v, or q and do; rows of head h, ld_a and
// ld_b apart, the sample's first at row0, the walk's kept rows ending at hi) staged step by step in
// two buffers at `tiles` (Layout::Walked): step s's pair in buffer s % 2. A step's rows are loaded into
// registers while the step before it is computed, and stored after that step's compute into the buffer
// no warp reads any more, so one barrier a step suffices.
template <int kDh, typename T>
class WalkedTiles {
 public:
  __device__ WalkedTiles(const T* a, const T* b, int64_t row0, int ld_a, int ld_b, int hi, int h, bool vec,
                         bf16* tiles)
      : a_(a), b_(b), row0_(row0), ld_a_(ld_a), ld_b_(ld_b), hi_(hi), h_(h), vec_(vec), tiles_(tiles) {}

  // Step j0's rows into registers (rows past the walk's end read as zero).
  __device__ void Fetch(int j0) {
    next_a_.Fetch(a_, row0_ + j0, min(kTile, hi_ - j0), ld_a_, h_, vec_);
    next_b_.Fetch(b_, row0_ + j0, min(kTile, hi_ - j0), ld_b_, h_, vec_);
  }
  __device__ const bf16* A(int buf) const { return Layout<kDh>::Walked(tiles_, buf, 0); }
  __device__ const bf16* B(int buf) const { return Layout<kDh>::Walked(tiles_, buf, 1); }
  // The walk [begin, end)'s first step, fetched with the own rows (StageOwnRows), into buffer 0 and
  // the second step's loads issued; the caller's barrier follows.
  __device__ void Start(int begin, int end) {
    if (begin >= end) return;
    Put(0);
    if (begin + kTile < end) Fetch(begin + kTile);
  }
  // After step j0's compute from buffer buf: the next step into the other buffer (every warp finished
  // reading it before the barrier that ended the step before this one), the step after it loading
  // meanwhile, then the step's one barrier.
  __device__ void Advance(int j0, int end, int buf) {
    if (j0 + kTile >= end) return;  // the last step: CTA-uniform, no barrier needed
    Put(buf ^ 1);
    if (j0 + 2 * kTile < end) Fetch(j0 + 2 * kTile);
    __syncthreads();
  }

 private:
  __device__ void Put(int buf) {
    next_a_.Put(Layout<kDh>::Walked(tiles_, buf, 0));
    next_b_.Put(Layout<kDh>::Walked(tiles_, buf, 1));
  }

  const T* a_;
  const T* b_;
  int64_t row0_;
  int ld_a_, ld_b_, hi_, h_;
  bool vec_;
  bf16* tiles_;
  StagedRows<kDh, T> next_a_, next_b_;  // the next step's rows, between their loads and their stores
};

// Where a lane's score-side values sit (gpu/common/mma.cuh's fragment layouts): lane 4g + t holds
// rows g and g + 8 of the strip, columns 2t, 2t + 1 of each 8-column tile. The mask range of each of
// its two rows, [lo, hi) of the other side (empty for a row past the tile's n real rows).
struct LaneRows {
  int lo[2], hi[2];
  __device__ bool Keep(int half, int j) const { return j >= lo[half] && j < hi[half]; }
};

// The lane's rows of the strip whose first row is own row `first` (sample-local), `left` real rows
// from it, over an other side of `other` rows.
__device__ inline LaneRows StripRows(const Mask& mask, int first, int left, int other) {
  const int g = Lane().g;
  LaneRows r;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    r.lo[half] = r.hi[half] = 0;
    if (g + 8 * half < left) mask.Range(first + g + 8 * half, other, &r.lo[half], &r.hi[half]);
  }
  return r;
}

// The other side's rows the warp's strip reaches: [any_lo, any_hi) those some real row of the strip
// keeps, [all_lo, all_hi) those every real row keeps. Every Mask's bounds grow with the own row, so
// these are the strip's first and last real rows' bounds.
struct StripSpan {
  int any_lo, any_hi, all_lo, all_hi;
  // No row of the strip keeps a column of the chunk [c, c + 16): the chunk is skipped.
  __device__ bool Misses(int c) const { return c >= any_hi || c + kFrag <= any_lo; }
  // Every real row keeps every column of the chunk: its values need no mask (the strip's padding rows,
  // past n, get values too, but their output rows are never written).
  __device__ bool Inside(int c) const { return c >= all_lo && c + kFrag <= all_hi; }
};

// The span of the strip of own rows [first, last] (sample-local) over an other side of `other` rows.
__device__ inline StripSpan SpanOf(const Mask& mask, int first, int last, int other) {
  StripSpan s;
  mask.Range(first, other, &s.any_lo, &s.all_hi);
  mask.Range(last, other, &s.all_lo, &s.any_hi);
  return s;
}

// The A fragments of strip rows [row0, row0 + 16) of the staged tile s, one per 16 columns: loaded
// once per CTA and kept in registers for the whole walk.
template <int kDh>
__device__ void LoadStrip(const bf16* s, int row0, uint32_t (&a)[kDh / kFrag][4]) {
#pragma unroll
  for (int kk = 0; kk < kDh / kFrag; ++kk) {
    LoadA(s, Layout<kDh>::kLd, row0, kk * kFrag, a[kk]);
  }
}

// The strip's 16 x 16 products a X^T with the chunk's rows [r0, r0 + 16) of the staged tile X, as two
// 8-column C tiles (columns 0-7 in lo, 8-15 in hi), summed in fp32 over the head's dh columns.
template <int kDh>
__device__ void TimesRowsT(const uint32_t (&a)[kDh / kFrag][4], const bf16* x, int r0, float (&lo)[4],
                           float (&hi)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) lo[e] = hi[e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < kDh / kFrag; ++kk) {
    uint32_t b_lo[2], b_hi[2];
    LoadBPairFromRows(x, Layout<kDh>::kLd, r0, kk * kFrag, b_lo, b_hi);
    Mma16816<ElementType::kBFloat16>(lo, a[kk], b_lo);
    Mma16816<ElementType::kBFloat16>(hi, a[kk], b_hi);
  }
}

// acc += W X: W the 16 x 16 bf16 A fragment of a region (the chunk's 16 rows of the other side as its
// columns), X the chunk's rows [r0, r0 + 16) of the staged tile.
template <int kDh>
__device__ void AddTimesRows(const uint32_t (&w)[4], const bf16* x, int r0, float (&acc)[kDh / 8][4]) {
#pragma unroll
  for (int n = 0; n < kDh / 8; n += 2) {
    uint32_t b_lo[2], b_hi[2];
    LoadBPairFromCols(x, Layout<kDh>::kLd, r0, n * 8, b_lo, b_hi);
    Mma16816<ElementType::kBFloat16>(acc[n], w, b_lo);
    Mma16816<ElementType::kBFloat16>(acc[n + 1], w, b_hi);
  }
}

// A region's values (two C tiles: columns 0-7 in lo, 8-15 in hi) where the lane's row keeps
// other-side row jc + column, else 0, rounded to bf16 as an A fragment.
__device__ __forceinline__ void RegionOperand(const LaneRows& rows, int jc, const float (&lo)[4], const float (&hi)[4],
                                              uint32_t (&w)[4]) {
  const int t = Lane().t;
  float klo[4], khi[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int j = jc + 2 * t + e % 2;
    klo[e] = rows.Keep(e / 2, j) ? lo[e] : 0.0f;
    khi[e] = rows.Keep(e / 2, j + 8) ? hi[e] : 0.0f;
  }
  CToA<ElementType::kBFloat16>(klo, khi, w);
}

// A region's values as an A fragment: as they are where the chunk lies inside the strip's span, else
// masked (RegionOperand). The branch is the warp's: the span is.
__device__ __forceinline__ void ChunkOperand(const StripSpan& span, const LaneRows& rows, int jc, const float (&lo)[4],
                                             const float (&hi)[4], uint32_t (&w)[4]) {
  if (span.Inside(jc)) {
    CToA<ElementType::kBFloat16>(lo, hi, w);
  } else {
    RegionOperand(rows, jc, lo, hi, w);
  }
}

// The CTA's output rows [first, first + n) of head h: own row r is the sum of the groups' partial
// rows g * strips * 16 + r of `part` (warp g * strips + s wrote its strip s at rows 16 * warp), in
// increasing g, written as Out (fp32, or rounded to bf16).
template <int kDh, typename Out>
__device__ void StoreOutput(const float* part, int strips, int64_t first, int n, int width, int h, bool vec,
                            Out* out) {
  const int groups = kWarps / strips, group_rows = strips * kFrag;
  if (vec) {
    constexpr int kQuads = kDh / 4;
    for (int e = threadIdx.x; e < n * kQuads; e += kThreads) {
      const int r = e / kQuads, c = e % kQuads * 4;
      float4 sum = *reinterpret_cast<const float4*>(part + r * kLdS + c);
      for (int g = 1; g < groups; ++g) {
        const float4 x = *reinterpret_cast<const float4*>(part + (g * group_rows + r) * kLdS + c);
        sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
      }
      StoreQuad(out + (first + r) * width + h * kDh + c, sum);
    }
  } else {
    for (int e = threadIdx.x; e < n * kDh; e += kThreads) {
      const int r = e / kDh, c = e % kDh;
      float sum = part[r * kLdS + c];
      for (int g = 1; g < groups; ++g) sum += part[(g * group_rows + r) * kLdS + c];
      StoreOne(out + (first + r) * width + h * kDh + c, sum);
    }
  }
}

// The warp's accumulators as its partial strip: rows 16 * warp of the fp32 output tile ss.
template <int kDh>
__device__ void StorePartialStrip(const float (&acc)[kDh / 8][4], float* ss) {
  const LaneCoords l = Lane();
  float* part = ss + static_cast<int>(threadIdx.x) / kWarp * kFrag * kLdS;
#pragma unroll
  for (int c = 0; c < kDh / 8; ++c) {
    *reinterpret_cast<float2*>(part + l.g * kLdS + c * 8 + 2 * l.t) = make_float2(acc[c][0], acc[c][1]);
    *reinterpret_cast<float2*>(part + (l.g + 8) * kLdS + c * 8 + 2 * l.t) = make_float2(acc[c][2], acc[c][3]);
  }
}

// The warp's accumulators as its partial strip, then the CTA's rows [first, first + n) of out. Starts
// and ends with a barrier: the output tile is free on return.
template <int kDh, typename Out>
__device__ void FinishOutput(const float (&acc)[kDh / 8][4], float* ss, const Role& role, int64_t first, int n,
                             int width, int h, bool vec, Out* out) {
  __syncthreads();
  StorePartialStrip<kDh>(acc, ss);
  __syncthreads();
  StoreOutput<kDh>(ss, role.strips, first, n, width, h, vec, out);
  __syncthreads();
}

__device__ __forceinline__ void StorePair(float* at, float lo, float hi) {
  *reinterpret_cast<float2*>(at) = make_float2(lo, hi);
}
__device__ __forceinline__ void StorePair(bf16* at, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(at) = PackBf16x2(lo, hi);
}

// The warp's accumulators straight from registers to own rows [first + row0, ...) of head h, rows past
// n not written: where the warp's strip is the only one for its rows (no group's partial strip to add),
// the value FinishOutput would store, without its shared-memory round trip and barriers. Only where
// the caller's `vec` holds: its stores of value pairs need 4- (bf16) or 8-byte (fp32) alignment.
template <int kDh, typename Out>
__device__ void StoreStrip(const float (&acc)[kDh / 8][4], const Role& role, int64_t first, int n, int width, int h,
                           Out* out) {
  const LaneCoords l = Lane();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = role.row0 + l.g + 8 * half;
    if (r >= n) continue;
    Out* row = out + (first + r) * width + h * kDh + 2 * l.t;
#pragma unroll
    for (int c = 0; c < kDh / 8; ++c) StorePair(row + c * 8, acc[c][2 * half], acc[c][2 * half + 1]);
  }
}

// The CTA's own rows [i0, i0 + n) of sample row `first` on: unsplit, rows first + i0 of `out` (rows
// ld_out apart; from registers where each warp holds a strip of its own and the rows are aligned);
// split, rows sample * max_own + i0 of its split's fp32 partial rows in `part` (`width` apart,
// 16-byte aligned: float4 stores). The same branch for the whole CTA (FinishOutput's barriers).
template <int kDh, typename T>
__device__ void WriteOwnRows(const float (&acc)[kDh / 8][4], float* ss, const Role& role, const Split& sp,
                             const Place& place, int64_t first, int i0, int n, int ld_out, int width, int h, bool vec,
                             T* out, float* part) {
  const int split = place.split;
  if (sp.splits == 1 && role.groups == 1 && vec) {
    StoreStrip<kDh>(acc, role, first + i0, n, ld_out, h, out);
  } else if (sp.splits == 1) {
    FinishOutput<kDh>(acc, ss, role, first + i0, n, ld_out, h, vec, out);
  } else {
    FinishOutput<kDh>(acc, ss, role, place.sample * sp.max_own + i0, n, width, h, true,
                      part + split * sp.split_stride);
  }
}

// Where a tile's strips are split among groups of warps (role.groups > 1): the warps of group 0 end
// with their strip's sum over the groups (added in increasing group order, as StoreOutput adds them),
// the others with zeros, so that the output path's own group sum gives that sum. Starts and ends with a
// barrier (ss, the walked buffers, is free after the walk).
template <int kDh>
__device__ void GatherGroups(float (&acc)[kDh / 8][4], float* ss, const Role& role) {
  const LaneCoords l = Lane();
  __syncthreads();
  StorePartialStrip<kDh>(acc, ss);
  __syncthreads();
  const int group_rows = role.strips * kFrag;
#pragma unroll
  for (int c = 0; c < kDh / 8; ++c) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = role.row0 + l.g + 8 * (e / 2), col = c * 8 + 2 * l.t + e % 2;
      float sum = ss[row * kLdS + col];
      for (int g = 1; g < role.groups; ++g) sum += ss[(g * group_rows + row) * kLdS + col];
      acc[c][e] = role.group == 0 ? sum : 0.0f;
    }
  }
  __syncthreads();
}

// The lane's share of a strip's rows x of a head RMS norm's input and their inverse RMS (rows g and
// g + 8 of the strip, columns 8c + 2t and 8c + 2t + 1), for NormBackward: loaded before the walk, so
// that their latency hides behind it rather than trailing it. Rows past n read the tile's first row.
template <int kDh>
struct NormRows {
  uint32_t x[2][kDh / 8];  // columns 8c + 2t, 8c + 2t + 1 of rows g (half 0) and g + 8 (half 1), bf16 pairs
  float inv[2];

  __device__ void Load(const NormSide& side, int heads, const Role& role, int64_t first, int n, int h) {
    const LaneCoords l = Lane();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = role.row0 + l.g + 8 * half;
      const int64_t row = first + (r < n ? r : 0);
      inv[half] = side.inv[row * heads + h];
      const bf16* at = side.x + row * side.ld + h * kDh + 2 * l.t;
#pragma unroll
      for (int c = 0; c < kDh / 8; ++c) x[half][c] = *reinterpret_cast<const uint32_t*>(at + c * 8);
    }
  }
};

// The RoPE table's row (rope: [positions, kDh], null: no RoPE) of strip row r of a tile whose first
// row sits at position pos0 in its sample; rows past the tile's n real rows read pos0's (their values
// are never stored, and pos0 + r may lie past the table's end). Null where rope is.
template <int kDh>
__device__ __forceinline__ const float* RopeRow(const float* rope, int pos0, int n, int r) {
  return rope != nullptr ? rope + static_cast<int64_t>(pos0 + (r < n ? r : 0)) * kDh : nullptr;
}

// The head RMS norm's backward on the warp's strip of the own side's gradient g (dL/dk in the dK/dV
// kernel, dL/dq in the dQ kernel; acc: the walk's fp32 sums of the strip, whole: GatherGroups' where
// groups share it, zeros in the others): per row and head dx = inv (g - y mean(g y)), y = x * inv, on
// g rounded to bf16 as GDPA's output would hold it, so the values are HeadRmsNormBackward's on that
// output (up to the order of the row's fp32 dot product). A lane holds columns 2t, 2t + 1 of each
// 8-column tile of rows g and g + 8; a row's dot product is its quad's (lanes 4g .. 4g + 3).
// rope, where not null: the side is RoPE of the norm's output, and g first goes through RoPE's
// transpose (qk_norm_rope_kernels.cuh's operations: a pair (a, b) at table row p, the strip row's
// position `pos0` + its row in the strip, becomes (a cs + b sn, b cs - a sn)); rows past n read the
// strip's first position.
template <int kDh>
__device__ void NormBackward(const NormRows<kDh>& rows, const float* rope, int pos0, int n, int row0,
                             float (&acc)[kDh / 8][4]) {
  const LaneCoords l = Lane();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float inv = rows.inv[half];
    float y[kDh / 8][2];
    float dot = 0.0f;
    const float* trow = RopeRow<kDh>(rope, pos0, n, row0 + l.g + 8 * half);
#pragma unroll
    for (int c = 0; c < kDh / 8; ++c) {
      acc[c][2 * half] = RoundToBf16(acc[c][2 * half]);
      acc[c][2 * half + 1] = RoundToBf16(acc[c][2 * half + 1]);
      if (trow != nullptr) {
        const int m = 4 * c + l.t;
        const float sn = trow[m], cs = trow[kDh / 2 + m], a = acc[c][2 * half], b = acc[c][2 * half + 1];
        acc[c][2 * half] = __fadd_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
        acc[c][2 * half + 1] = __fsub_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
      }
      const uint32_t pair = rows.x[half][c];
      y[c][0] = __fmul_rn(Bf16Lo(pair), inv);
      y[c][1] = __fmul_rn(Bf16Hi(pair), inv);
      dot = __fadd_rn(dot, __fmul_rn(acc[c][2 * half], y[c][0]));
      dot = __fadd_rn(dot, __fmul_rn(acc[c][2 * half + 1], y[c][1]));
    }
    dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, 1));
    dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, 2));
    const float mean = __fdiv_rn(dot, static_cast<float>(kDh));
#pragma unroll
    for (int c = 0; c < kDh / 8; ++c) {
      acc[c][2 * half] = __fmul_rn(inv, __fsub_rn(acc[c][2 * half], __fmul_rn(y[c][0], mean)));
      acc[c][2 * half + 1] = __fmul_rn(inv, __fsub_rn(acc[c][2 * half + 1], __fmul_rn(y[c][1], mean)));
    }
  }
}

// The strip's A fragments a (the head's x values, LoadStrip's layout: rows g and g + 8 in halves 0 and 1,
// columns 16kk + 2t, 16kk + 2t + 1 and 8 columns on) replaced by the head RMS norm of their rows, then
// RoPE at the rows' positions where rope is given (pos0 + the row in the tile, strip rows row0 + g and
// row0 + g + 8; rows past n read pos0's, as NormBackward's), each value rounded to bf16 once: the
// bytes of HeadRmsNormForward / QkNormRopeForward. Their 8-lane sums kept: norm lane g' holds columns
// g', g' + 8, ..., so the lane holding columns 2t, 2t + 1 keeps lanes 2t (e) and 2t + 1 (o) in column
// order, and the butterfly's offsets 4, 2 and 1 are the shuffles over t ^ 2, t ^ 1 and e + o. inv:
// each half's inverse RMS.
template <int kDh>
__device__ void NormStrip(uint32_t (&a)[kDh / kFrag][4], const float* rope, int pos0, int n, int row0,
                          float (&inv)[2]) {
  const LaneCoords l = Lane();
  const RowDivisor per_value(kDh);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float e = 0.0f, o = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDh / kFrag; ++kk) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {  // columns 16kk + 8hi + 2t, + 1: increasing column order
        const uint32_t pair = a[kk][half + 2 * hi];
        const float x0 = Bf16Lo(pair), x1 = Bf16Hi(pair);
        e = __fadd_rn(e, __fmul_rn(x0, x0));
        o = __fadd_rn(o, __fmul_rn(x1, x1));
      }
    }
    e = __fadd_rn(e, __shfl_xor_sync(0xffffffffu, e, 2));
    o = __fadd_rn(o, __shfl_xor_sync(0xffffffffu, o, 2));
    e = __fadd_rn(e, __shfl_xor_sync(0xffffffffu, e, 1));
    o = __fadd_rn(o, __shfl_xor_sync(0xffffffffu, o, 1));
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(per_value.Of(__fadd_rn(e, o)), hrn::kEps)));
    inv[half] = r;
    const float* trow = RopeRow<kDh>(rope, pos0, n, row0 + l.g + 8 * half);
#pragma unroll
    for (int kk = 0; kk < kDh / kFrag; ++kk) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const uint32_t pair = a[kk][half + 2 * hi];
        float y0 = __fmul_rn(Bf16Lo(pair), r);
        float y1 = __fmul_rn(Bf16Hi(pair), r);
        if (trow != nullptr) {  // the pair (y0, y1) at m = column / 2: (y0 cs - y1 sn, y1 cs + y0 sn)
          const int m = kk * 8 + 4 * hi + l.t;
          const float sn = trow[m], cs = trow[kDh / 2 + m];
          const float r0 = __fsub_rn(__fmul_rn(y0, cs), __fmul_rn(y1, sn));
          const float r1 = __fadd_rn(__fmul_rn(y1, cs), __fmul_rn(y0, sn));
          y0 = r0, y1 = r1;
        }
        a[kk][half + 2 * hi] = PackBf16x2(y0, y1);
      }
    }
  }
}

// The normed strip (NormStrip's fragments and inverse RMS) to own rows [first + row0, ...) of head h of
// qn.y and qn.inv, rows past n not written.
template <int kDh>
__device__ void StoreNormedStrip(const uint32_t (&a)[kDh / kFrag][4], const float (&inv)[2], const Role& role,
                                 int64_t first, int n, int heads, int h, const NormForward& qn) {
  const LaneCoords l = Lane();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = role.row0 + l.g + 8 * half;
    if (r >= n) continue;
    const int64_t row = first + r;
    bf16* y = qn.y + row * heads * kDh + h * kDh + 2 * l.t;
#pragma unroll
    for (int kk = 0; kk < kDh / kFrag; ++kk) {
      *reinterpret_cast<uint32_t*>(y + kk * kFrag) = a[kk][half];
      *reinterpret_cast<uint32_t*>(y + kk * kFrag + 8) = a[kk][half + 2];
    }
    if (l.t == 0) qn.inv[row * heads + h] = inv[half];
  }
}

// o for the queries of a tile (CtaPlace), head blockIdx.y: the steps walk the
// tile's kept keys (or the split's part of them); a region's result is post * silu(q . k) where kept
// (else 0), times the chunk's v.
template <int kDh, typename T, bool kQueryNorm = false>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(Params p, Split sp, const T* q, const T* k, const T* v, T* o, NormForward qn = NormForward{}) {
  AwaitPriorGrids();
  using L = Layout<kDh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* walk = qs + L::kOperandElems;  // k and v of each step, two buffers
  float* ss = reinterpret_cast<float*>(walk);
  const Place place = CtaPlace(p, sp, /*own_keys=*/false);
  const Sample& s = place.s;
  const int h = blockIdx.y, width = p.heads * kDh;
  const int i0 = place.tile * kTile;
  if (i0 >= place.own) return;
  const int nq = min(kTile, place.own - i0);
  // The tile's kept keys (the split's steps of them), and the warp's strip's: the ranges' bounds grow with i.
  int klo = 0, khi = 0, jb = 0, je = 0, unused = 0;
  p.mask.Range(i0, s.lk, &klo, &unused);
  p.mask.Range(i0 + nq - 1, s.lk, &unused, &khi);
  if (!SplitWalk(sp, place.split, klo, khi, &jb, &je)) return;
  // The keys and values of each step; the first step's fetched with the own queries.
  WalkedTiles<kDh, T> kv(k, v, s.k_row, width, p.ld_v, khi, h, p.vec, walk);
  const int ld_q = kQueryNorm ? qn.ld : width;
  StageOwnRows<kDh, false>(q, q, s.q_row + i0, nq, ld_q, ld_q, h, p.vec, qs, qs, [&] {
    if (jb < je) kv.Fetch(jb);
  });
  const Role role = WarpRole(nq);
  const StripSpan span = SpanOf(p.mask, i0 + role.row0, i0 + min(role.row0 + kFrag, nq) - 1, s.lk);
  const LaneRows rows = StripRows(p.mask, i0 + role.row0, nq - role.row0, s.lk);
  kv.Start(jb, je);
  __syncthreads();
  uint32_t qa[kDh / kFrag][4];
  LoadStrip<kDh>(qs, role.row0, qa);
  if constexpr (kQueryNorm) {
    float inv[2];
    NormStrip<kDh>(qa, qn.rope, i0, nq, role.row0, inv);
    // Every group of a strip holds its rows' normed values; the first (of split 0) writes them.
    if (role.active && role.group == 0 && place.split == 0) {
      StoreNormedStrip<kDh>(qa, inv, role, s.q_row + i0, nq, p.heads, h, qn);
    }
  }
  float acc[kDh / 8][4] = {};
  for (int j0 = jb, buf = 0; j0 < je; j0 += kTile, buf ^= 1) {
    const bf16* ks = kv.A(buf);
    const bf16* vs = kv.B(buf);
    if (role.active) {
      for (int c = role.group; c < kChunks; c += role.groups) {
        const int jc = j0 + c * kFrag;
        if (span.Misses(jc)) continue;
        float z_lo[4], z_hi[4];
        TimesRowsT<kDh>(qa, ks, c * kFrag, z_lo, z_hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          z_lo[e] = Weight(z_lo[e], Sigmoid(z_lo[e]), p.post_scale);
          z_hi[e] = Weight(z_hi[e], Sigmoid(z_hi[e]), p.post_scale);
        }
        uint32_t w[4];
        ChunkOperand(span, rows, jc, z_lo, z_hi, w);
        AddTimesRows<kDh>(w, vs, c * kFrag, acc);
      }
    }
    kv.Advance(j0, je, buf);
  }
  WriteOwnRows<kDh>(acc, ss, role, sp, place, s.q_row, i0, nq, width, width, h, p.vec, o, sp.part0);
}

// dq for the queries of a tile (CtaPlace): the forward's walk with dz = post silu'(q . k) (do . v) where
// kept (else 0) as a region's result, times the chunk's k. kQueryNorm: the queries are a head RMS norm's
// output (Params::query_norm) and dq is written through its backward (NormBackward), rows its ld apart.
template <int kDh, typename T, bool kQueryNorm = false>
__global__ void __launch_bounds__(kThreads)
    BackwardDqKernel(Params p, Split sp, const T* q, const T* k, const T* v, const T* d_o, T* dq) {
  AwaitPriorGrids();
  using L = Layout<kDh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + L::kOperandElems;
  bf16* walk = dos + L::kOperandElems;  // k and v of each step, two buffers
  float* ss = reinterpret_cast<float*>(walk);
  const Place place = CtaPlace(p, sp, /*own_keys=*/false);
  const Sample& s = place.s;
  const int h = blockIdx.y, width = p.heads * kDh;
  const int i0 = place.tile * kTile;
  if (i0 >= place.own) return;
  const int nq = min(kTile, place.own - i0);
  int klo = 0, khi = 0, jb = 0, je = 0, unused = 0;
  p.mask.Range(i0, s.lk, &klo, &unused);
  p.mask.Range(i0 + nq - 1, s.lk, &unused, &khi);
  if (!SplitWalk(sp, place.split, klo, khi, &jb, &je)) return;
  // The keys and values of each step; the first step's fetched with the own queries and output
  // gradients.
  WalkedTiles<kDh, T> kv(k, v, s.k_row, width, p.ld_v, khi, h, p.vec, walk);
  StageOwnRows<kDh, true>(q, d_o, s.q_row + i0, nq, width, width, h, p.vec, qs, dos, [&] {
    if (jb < je) kv.Fetch(jb);
  });
  const Role role = WarpRole(nq);
  const StripSpan span = SpanOf(p.mask, i0 + role.row0, i0 + min(role.row0 + kFrag, nq) - 1, s.lk);
  const LaneRows rows = StripRows(p.mask, i0 + role.row0, nq - role.row0, s.lk);
  NormRows<kDh> query_rows;
  if constexpr (kQueryNorm) {
    query_rows.Load(p.query_norm, p.heads, role, s.q_row + i0, nq, h);
  }
  kv.Start(jb, je);
  __syncthreads();
  uint32_t qa[kDh / kFrag][4], doa[kDh / kFrag][4];
  LoadStrip<kDh>(qs, role.row0, qa);
  LoadStrip<kDh>(dos, role.row0, doa);
  float acc[kDh / 8][4] = {};
  for (int j0 = jb, buf = 0; j0 < je; j0 += kTile, buf ^= 1) {
    const bf16* ks = kv.A(buf);
    const bf16* vs = kv.B(buf);
    if (role.active) {
      for (int c = role.group; c < kChunks; c += role.groups) {
        const int jc = j0 + c * kFrag;
        if (span.Misses(jc)) continue;
        float z_lo[4], z_hi[4], dp_lo[4], dp_hi[4];
        TimesRowsT<kDh>(qa, ks, c * kFrag, z_lo, z_hi);
        TimesRowsT<kDh>(doa, vs, c * kFrag, dp_lo, dp_hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          dp_lo[e] = ScoreGrad(z_lo[e], Sigmoid(z_lo[e]), dp_lo[e], p.post_scale);
          dp_hi[e] = ScoreGrad(z_hi[e], Sigmoid(z_hi[e]), dp_hi[e], p.post_scale);
        }
        uint32_t w[4];
        ChunkOperand(span, rows, jc, dp_lo, dp_hi, w);
        AddTimesRows<kDh>(w, ks, c * kFrag, acc);
      }
    }
    kv.Advance(j0, je, buf);
  }
  if constexpr (kQueryNorm) {
    if (role.groups > 1) GatherGroups<kDh>(acc, ss, role);
    NormBackward<kDh>(query_rows, p.query_norm.rope, i0, nq, role.row0, acc);
  }
  WriteOwnRows<kDh>(acc, ss, role, sp, place, s.q_row, i0, nq, kQueryNorm ? p.query_norm.ld : width, width, h,
                    p.vec, dq, sp.part0);
}

// dk, dv for the keys of a tile (CtaPlace): a walk over the queries that keep them (or the split's part
// of them), in increasing order.
// A region is transposed (keys as rows): s^T = k q^T and dp^T = v do^T give p^T = post silu(s^T) (times
// the chunk's do into dv) and dz^T (times the chunk's q into dk). kKeyNorm: the keys are a head RMS
// norm's output (Params::key_norm) and dk is written through its backward (NormBackward), rows its ld
// apart; an instance of its own, so that the plain kernel's registers stay as they are.
template <int kDh, typename T, bool kKeyNorm = false>
__global__ void __launch_bounds__(kThreads, MinCtas<kDh, T>(4))
    BackwardDkDvKernel(Params p, Split sp, const T* q, const T* k, const T* v, const T* d_o, T* dk, T* dv) {
  AwaitPriorGrids();
  using L = Layout<kDh>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + L::kOperandElems;
  bf16* walk = vs + L::kOperandElems;  // q and do of each step, two buffers
  float* ss = reinterpret_cast<float*>(walk);
  const Place place = CtaPlace(p, sp, /*own_keys=*/true);
  const Sample& s = place.s;
  const int h = blockIdx.y, width = p.heads * kDh;
  const int j0 = place.tile * kTile;
  if (j0 >= place.own) return;
  const int nk = min(kTile, place.own - j0);
  int qlo = 0, qhi = 0, ib = 0, ie = 0, unused = 0;
  p.mask.Range(j0, s.lq, &qlo, &unused);
  p.mask.Range(j0 + nk - 1, s.lq, &unused, &qhi);
  if (!SplitWalk(sp, place.split, qlo, qhi, &ib, &ie)) return;
  // The queries and output gradients of each step; the first step's fetched with the own keys and
  // values.
  WalkedTiles<kDh, T> qdo(q, d_o, s.q_row, width, width, qhi, h, p.vec, walk);
  StageOwnRows<kDh, true>(k, v, s.k_row + j0, nk, width, p.ld_v, h, p.vec, ks, vs, [&] {
    if (ib < ie) qdo.Fetch(ib);
  });
  const Role role = WarpRole(nk);
  const StripSpan span = SpanOf(p.mask, j0 + role.row0, j0 + min(role.row0 + kFrag, nk) - 1, s.lq);
  const LaneRows rows = StripRows(p.mask, j0 + role.row0, nk - role.row0, s.lq);
  NormRows<kDh> key_rows;
  if constexpr (kKeyNorm) key_rows.Load(p.key_norm, p.heads, role, s.k_row + j0, nk, h);
  qdo.Start(ib, ie);
  __syncthreads();
  uint32_t ka[kDh / kFrag][4], va[kDh / kFrag][4];
  LoadStrip<kDh>(ks, role.row0, ka);
  LoadStrip<kDh>(vs, role.row0, va);
  float acc_k[kDh / 8][4] = {}, acc_v[kDh / 8][4] = {};
  for (int i0 = ib, buf = 0; i0 < ie; i0 += kTile, buf ^= 1) {
    const bf16* qs = qdo.A(buf);
    const bf16* dos = qdo.B(buf);
    if (role.active) {
      for (int c = role.group; c < kChunks; c += role.groups) {
        const int ic = i0 + c * kFrag;
        if (span.Misses(ic)) continue;
        float z_lo[4], z_hi[4], dp_lo[4], dp_hi[4];
        TimesRowsT<kDh>(ka, qs, c * kFrag, z_lo, z_hi);
        TimesRowsT<kDh>(va, dos, c * kFrag, dp_lo, dp_hi);
        float w_lo[4], w_hi[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sg_lo = Sigmoid(z_lo[e]), sg_hi = Sigmoid(z_hi[e]);
          w_lo[e] = Weight(z_lo[e], sg_lo, p.post_scale);
          w_hi[e] = Weight(z_hi[e], sg_hi, p.post_scale);
          dp_lo[e] = ScoreGrad(z_lo[e], sg_lo, dp_lo[e], p.post_scale);
          dp_hi[e] = ScoreGrad(z_hi[e], sg_hi, dp_hi[e], p.post_scale);
        }
        uint32_t pt[4], dzt[4];
        ChunkOperand(span, rows, ic, w_lo, w_hi, pt);
        ChunkOperand(span, rows, ic, dp_lo, dp_hi, dzt);
        AddTimesRows<kDh>(pt, dos, c * kFrag, acc_v);
        AddTimesRows<kDh>(dzt, qs, c * kFrag, acc_k);
      }
    }
    qdo.Advance(i0, ie, buf);
  }
  if constexpr (kKeyNorm) {
    if (role.groups > 1) GatherGroups<kDh>(acc_k, ss, role);
    NormBackward<kDh>(key_rows, p.key_norm.rope, j0, nk, role.row0, acc_k);
  }
  WriteOwnRows<kDh>(acc_k, ss, role, sp, place, s.k_row, j0, nk, kKeyNorm ? p.key_norm.ld : width, width, h,
                    p.vec, dk, sp.part0);
  WriteOwnRows<kDh>(acc_v, ss, role, sp, place, s.k_row, j0, nk, p.ld_v, width, h, p.vec, dv, sp.part1);
}
// The output rows of a split launch (SplitWalk): own row r of sample blockIdx.x (queries, or keys where
// own_keys), every head, is the sum of the partial rows of the splits that wrote them, in increasing
// split order; part1 / out1 (dv, rows p.ld_v apart) too where out1 is not null; written as T. Grid
// (batch, any y): the y blocks stride over the sample's elements.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SumSplitsKernel(Params p, Split sp, int dh, bool own_keys, T* out0, T* out1) {
  AwaitPriorGrids();
  const Sample s = LoadSample(p, blockIdx.x);
  const int own = min(own_keys ? s.lk : s.lq, sp.max_own), other = own_keys ? s.lq : s.lk;
  const int64_t first = own_keys ? s.k_row : s.q_row;
  const int64_t part_row0 = static_cast<int64_t>(blockIdx.x) * sp.max_own;
  const int width = p.heads * dh, per_row = p.vec ? width / 4 : width;  // float4s or floats
  const int64_t units = static_cast<int64_t>(own) * per_row;
  for (int64_t e = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x; e < units;
       e += static_cast<int64_t>(gridDim.y) * kThreads) {
    const int r = static_cast<int>(e / per_row), c = static_cast<int>(e % per_row) * (p.vec ? 4 : 1);
    // The splits of r's tile's walk that wrote partial rows: as SplitWalk decides them.
    const int i0 = r / kTile * kTile, n = min(kTile, own - i0);
    int lo = 0, hi = 0, unused = 0;
    p.mask.Range(i0, other, &lo, &unused);
    p.mask.Range(i0 + n - 1, other, &unused, &hi);
    const int64_t walked = (static_cast<int64_t>(hi) - lo + kSplitRows - 1) / kSplitRows;
    const int used = static_cast<int>(walked < 1 ? 1 : walked < sp.splits ? walked : sp.splits);
    const int64_t at = (part_row0 + r) * width + c;
    for (int t = 0; t < 2; ++t) {
      const float* part = t == 0 ? sp.part0 : sp.part1;
      T* out = t == 0 ? out0 : out1;
      if (out == nullptr) continue;
      const int64_t to = (first + r) * (t == 0 ? width : p.ld_v) + c;  // out1 is dv
      if (p.vec) {
        float4 sum = *reinterpret_cast<const float4*>(part + at);
        for (int split = 1; split < used; ++split) {
          const float4 x = *reinterpret_cast<const float4*>(part + split * sp.split_stride + at);
          sum.x += x.x, sum.y += x.y, sum.z += x.z, sum.w += x.w;
        }
        StoreQuad(out + to, sum);
      } else {
        float sum = part[at];
        for (int split = 1; split < used; ++split) sum += part[split * sp.split_stride + at];
        StoreOne(out + to, sum);
      }
    }
  }
}

}  // namespace gemtb::gpu::train::tc

#endif  // GEMTB_GPU_TRAIN_GDPA_TENSOR_CORE_KERNELS_CUH_
