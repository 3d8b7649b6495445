// The warp collectives of gpu/common/mma.cuh for host compilations of the kernels: mma.sync
// m16n8k16 and ldmatrix x4, from the PTX ISA's fragment layouts and independent of the kernels,
// over the fibers of fiber_block.h.
#include "tests/gpu/emulation/cuda_shim.h"
// The shim must come first.
#include <cstdint>

#include "gpu/common/mma.cuh"
#include "tests/gpu/emulation/fiber_block.h"

namespace gemtb::gpu {

template <ElementType E>
void HostMma16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  struct Fragments {
    uint32_t a[4], b[2];
  };
  const Fragments mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  Fragments all[32];
  emu::WarpExchange(&mine, sizeof(mine), all);
  auto lo = [](uint32_t w) { return Storage<E>::ToFloat(static_cast<uint16_t>(w & 0xFFFFu)); };
  auto hi = [](uint32_t w) { return Storage<E>::ToFloat(static_cast<uint16_t>(w >> 16)); };
  float am[16][16], bm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const Fragments& f = all[lane];
    am[g][2 * t] = lo(f.a[0]);
    am[g][2 * t + 1] = hi(f.a[0]);
    am[g + 8][2 * t] = lo(f.a[1]);
    am[g + 8][2 * t + 1] = hi(f.a[1]);
    am[g][2 * t + 8] = lo(f.a[2]);
    am[g][2 * t + 9] = hi(f.a[2]);
    am[g + 8][2 * t + 8] = lo(f.a[3]);
    am[g + 8][2 * t + 9] = hi(f.a[3]);
    bm[2 * t][g] = lo(f.b[0]);
    bm[2 * t + 1][g] = hi(f.b[0]);
    bm[2 * t + 8][g] = lo(f.b[1]);
    bm[2 * t + 9][g] = hi(f.b[1]);
  }
  const int lane = static_cast<int>(emu::ThreadIdx().x & 31u);
  const int g = lane >> 2, t = lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8};
  const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int e = 0; e < 4; ++e) {
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += am[rows[e]][k] * bm[k][cols[e]];  // products exact in fp32
    c[e] = acc;
  }
}

template void HostMma16816<ElementType::kBFloat16>(float (&)[4], const uint32_t (&)[4], const uint32_t (&)[2]);
template void HostMma16816<ElementType::kFloat16>(float (&)[4], const uint32_t (&)[4], const uint32_t (&)[2]);

// Lane 8m + i gives the address of row i of matrix m; lane 4g + t gets, of each matrix, the 16-bit
// elements (g, 2t) and (g, 2t + 1), or with trans (2t, g) and (2t + 1, g), the first in the low half.
void HostLdMatrixX4(const uint16_t* row, bool trans, uint32_t (&r)[4]) {
  const uint16_t* rows[32];
  emu::WarpExchange(&row, sizeof(row), rows);
  const int lane = static_cast<int>(emu::ThreadIdx().x & 31u);
  const int g = lane >> 2, t = lane & 3;
  for (int m = 0; m < 4; ++m) {
    const uint16_t* const* mat = rows + 8 * m;
    const uint16_t lo = trans ? mat[2 * t][g] : mat[g][2 * t];
    const uint16_t hi = trans ? mat[2 * t + 1][g] : mat[g][2 * t + 1];
    r[m] = PackHalves(lo, hi);
  }
}

}  // namespace gemtb::gpu
