// Warp-level tensor-core tiles for sm_80+ `mma.sync.m16n8k16` (bf16/fp16 operands, fp32 accumulators),
// and the fragment loads from row-major shared-memory tiles that the attention kernels use.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4*g + t:
//   A (16x16, row-major)  reg0 = A[g][2t..2t+1]   reg1 = A[g+8][2t..2t+1]
//                         reg2 = A[g][2t+8..+9]   reg3 = A[g+8][2t+8..+9]
//   B (16x8, k x n)       reg0 = B[2t..2t+1][g]   reg1 = B[2t+8..2t+9][g]
//   C (16x8, fp32)        c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]
// Two adjacent C tiles (columns 0-7 and 8-15) therefore hold exactly an A fragment of their 16x16
// block, which is how P and dS go from one matmul to the next without shared memory (FA2).
// Within a 32-bit register the element of the lower index sits in the low half.
#ifndef GEMTB_GPU_COMMON_MMA_CUH_
#define GEMTB_GPU_COMMON_MMA_CUH_

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cstdint>

#include "model/common/element_type.h"
#include "model/numerics/float_formats.h"

namespace gemtb::gpu {

#ifndef __CUDACC__
// Host compilations of the kernels (the CPU emulation in tests/gpu/emulation) define the warp's
// collective m16n8k16 with the fragment layouts described above, and ldmatrix's x4 loads.
template <ElementType E>
void HostMma16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
void HostLdMatrixX4(const uint16_t* row, bool trans, uint32_t (&r)[4]);
#endif

// The device type of a 16-bit storage format, and its conversions.
template <ElementType E>
struct Storage;

template <>
struct Storage<ElementType::kBFloat16> {
  static __device__ __forceinline__ float ToFloat(uint16_t bits) {
#ifdef __CUDACC__
    return __bfloat162float(__ushort_as_bfloat16(bits));
#else
    return numerics::Bf16BitsToFloat(bits);
#endif
  }
  static __device__ __forceinline__ uint16_t FromFloat(float x) {
#ifdef __CUDACC__
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
    return numerics::FloatToBf16BitsRne(x);
#endif
  }
};

template <>
struct Storage<ElementType::kFloat16> {
  static __device__ __forceinline__ float ToFloat(uint16_t bits) {
#ifdef __CUDACC__
    return __half2float(__ushort_as_half(bits));
#else
    return numerics::Fp16BitsToFloat(bits);
#endif
  }
  static __device__ __forceinline__ uint16_t FromFloat(float x) {
#ifdef __CUDACC__
    return __half_as_ushort(__float2half_rn(x));
#else
    return numerics::FloatToFp16BitsRne(x);
#endif
  }
};

__device__ __forceinline__ uint32_t PackHalves(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// Two fp32 values rounded (RNE) to the storage type and packed, `lo` in the low half.
template <ElementType E>
__device__ __forceinline__ uint32_t PackRounded(float lo, float hi) {
  return PackHalves(Storage<E>::FromFloat(lo), Storage<E>::FromFloat(hi));
}

// c += a * b on one 16x8x16 tile.
template <ElementType E>
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(E == ElementType::kBFloat16 || E == ElementType::kFloat16,
                "mma.sync m16n8k16 takes bf16 or fp16 operands");
#ifndef __CUDACC__
  HostMma16816<E>(c, a, b);
#else
  if constexpr (E == ElementType::kBFloat16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

struct LaneCoords {
  int g;  // lane / 4: the row (A, C) or column (B) group
  int t;  // lane % 4
};

__device__ __forceinline__ LaneCoords Lane() {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  return {lane >> 2, lane & 3};
}

__device__ __forceinline__ uint32_t Load32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// A fragment of rows [row0, row0+16) and columns [col0, col0+16) of a row-major tile `s` whose
// rows are `ld` elements apart (ld and col0 even, so every load is an aligned 32-bit word).
__device__ __forceinline__ void LoadA(const uint16_t* s, int ld, int row0, int col0, uint32_t (&a)[4]) {
  const LaneCoords l = Lane();
  const uint16_t* p = s + (row0 + l.g) * ld + col0 + 2 * l.t;
  a[0] = Load32(p);
  a[1] = Load32(p + 8 * ld);
  a[2] = Load32(p + 8);
  a[3] = Load32(p + 8 * ld + 8);
}

// B fragment with B[k][n] = M[n0+n][k0+k]: M's rows are B's columns (K in Q·Kᵀ, V in dO·Vᵀ).
__device__ __forceinline__ void LoadBFromRows(const uint16_t* s, int ld, int n0, int k0, uint32_t (&b)[2]) {
  const LaneCoords l = Lane();
  const uint16_t* p = s + (n0 + l.g) * ld + k0 + 2 * l.t;
  b[0] = Load32(p);
  b[1] = Load32(p + 8);
}

// B fragment with B[k][n] = M[k0+k][n0+n]: M's rows are B's rows (V in P·V, K in dS·K).
__device__ __forceinline__ void LoadBFromCols(const uint16_t* s, int ld, int k0, int n0, uint32_t (&b)[2]) {
  const LaneCoords l = Lane();
  const uint16_t* p = s + (k0 + 2 * l.t) * ld + n0 + l.g;
  b[0] = PackHalves(p[0], p[ld]);
  b[1] = PackHalves(p[8 * ld], p[9 * ld]);
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8m .. 8m+7 give the addresses of the rows
// of 8x8 matrix m (16 bytes each, in shared memory), and r[m] gets that matrix's fragment: without
// .trans (kTrans false) the lane's elements (g, 2t), (g, 2t+1), with it (2t, g), (2t+1, g).
template <bool kTrans>
__device__ __forceinline__ void LdMatrixX4(const uint16_t* row, uint32_t (&r)[4]) {
#ifdef __CUDACC__
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  }
#else
  HostLdMatrixX4(row, kTrans, r);
#endif
}

// The B fragments of two 8-column tiles (n0 and n0 + 8) over the k-slice [k0, k0 + 16), where
// B[k][n] = X[n][k] is read from rows of a shared-memory tile X whose rows are `ld` elements apart
// (X's rows are B's columns: K in Q·Kᵀ, a weight [out][in] times its input): one ldmatrix.x4,
// matrix m covering B's columns (m / 2) * 8 and k (m % 2) * 8 of the 16 x 16 block.
__device__ __forceinline__ void LoadBPairFromRows(const uint16_t* x, int ld, int n0, int k0, uint32_t (&lo)[2],
                                                  uint32_t (&hi)[2]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, m = lane / 8, r = lane % 8;
  uint32_t f[4];
  LdMatrixX4<false>(x + (n0 + (m / 2) * 8 + r) * ld + k0 + (m % 2) * 8, f);
  lo[0] = f[0], lo[1] = f[1], hi[0] = f[2], hi[1] = f[3];
}

// The same for B[k][n] = X[k][n], X's rows being B's rows (V in P·V, a weight [in][out]):
// ldmatrix.x4.trans.
__device__ __forceinline__ void LoadBPairFromCols(const uint16_t* x, int ld, int k0, int n0, uint32_t (&lo)[2],
                                                  uint32_t (&hi)[2]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, m = lane / 8, r = lane % 8;
  uint32_t f[4];
  LdMatrixX4<true>(x + (k0 + (m % 2) * 8 + r) * ld + n0 + (m / 2) * 8, f);
  lo[0] = f[0], lo[1] = f[1], hi[0] = f[2], hi[1] = f[3];
}

// The A fragment of a 16x16 block held as two C tiles (columns 0-7 in `lo`, 8-15 in `hi`), rounded
// to the storage type.
template <ElementType E>
__device__ __forceinline__ void CToA(const float (&lo)[4], const float (&hi)[4], uint32_t (&a)[4]) {
  a[0] = PackRounded<E>(lo[0], lo[1]);
  a[1] = PackRounded<E>(lo[2], lo[3]);
  a[2] = PackRounded<E>(hi[0], hi[1]);
  a[3] = PackRounded<E>(hi[2], hi[3]);
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_MMA_CUH_
