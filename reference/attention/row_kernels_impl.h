// The body of the row kernels (row_kernels.h), included once per instruction-set level by
// row_kernels_baseline.cc, row_kernels_avx2.cc and row_kernels_avx512.cc, each inside its own
// namespace after defining `Vec`: kWidth doubles with Load, Store, Set1, Mul and Add. Every step is an
// explicit multiply then add on independent values (the eight lanes of a Dot, a block of keys, the
// elements of y), so the wider levels only do several of the scalar level's operations at once;
// Tree8 adds a Dot's eight lanes in Dot's fixed tree.
// It includes nothing: the file that includes it provides row_kernels.h, <cstdint> and Vec.

namespace {

constexpr int kW = Vec::kWidth;
constexpr int kMaxMulti = 4;  // vectors or outputs sharing each load in the Multi kernels
constexpr int64_t kKeyTile = 64;  // rows of a Multi kernel's matrix kept in cache for all groups
static_assert(8 % kW == 0, "a Dot's eight lanes must fill whole vectors");

// The schedule of the Multi kernels: keys in tiles of kKeyTile (a tile stays in cache while every
// group reads it), and within a tile the `count` vectors or outputs in groups of kMaxMulti, then one
// by one; group.template operator()<M>(r0, t0, t1) does members r0 .. r0+M-1 on keys t0 .. t1-1.
template <typename Group>
void ForKeyTilesAndGroups(int count, int64_t n, const Group& group) {
  for (int64_t t0 = 0; t0 < n; t0 += kKeyTile) {
    const int64_t t1 = n - t0 < kKeyTile ? n : t0 + kKeyTile;
    int r0 = 0;
    for (; r0 + kMaxMulti <= count; r0 += kMaxMulti) group.template operator()<kMaxMulti>(r0, t0, t1);
    for (; r0 < count; ++r0) group.template operator()<1>(r0, t0, t1);
  }
}

// Dot of kernel_utils.h: lane l sums d = l (mod 8) in increasing d, then a fixed tree.
inline double Finish(const Vec* lanes, const double* a, const double* r, int64_t full, int64_t dim) {
  if (full == dim) return Vec::Tree8(lanes);  // no tail: the tree in registers
  double acc[8];
  for (int v = 0; v < 8 / kW; ++v) Vec::Store(acc + v * kW, lanes[v]);
  for (int l = 0; full + l < dim; ++l) acc[l] += a[full + l] * r[full + l];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void DotRows(const double* a, const double* rows, int64_t stride, int64_t n, int64_t dim, double* out) {
  constexpr int kKeys = 4;  // rows sharing each load of `a`
  constexpr int kV = 8 / kW;
  const int64_t full = dim - dim % 8;
  int64_t t = 0;
  for (; t + kKeys <= n; t += kKeys) {
    Vec acc[kKeys][kV];
    for (int c = 0; c < kKeys; ++c) {
      for (int v = 0; v < kV; ++v) acc[c][v] = Vec::Set1(0.0);
    }
    const double* r[kKeys];
    for (int c = 0; c < kKeys; ++c) r[c] = rows + (t + c) * stride;
    for (int64_t d = 0; d < full; d += 8) {
      for (int v = 0; v < kV; ++v) {
        const Vec av = Vec::Load(a + d + v * kW);
        for (int c = 0; c < kKeys; ++c) acc[c][v] = Vec::Add(acc[c][v], Vec::Mul(av, Vec::Load(r[c] + d + v * kW)));
      }
    }
    for (int c = 0; c < kKeys; ++c) out[t + c] = Finish(acc[c], a, r[c], full, dim);
  }
  for (; t < n; ++t) {
    const double* r = rows + t * stride;
    Vec acc[kV];
    for (int v = 0; v < kV; ++v) acc[v] = Vec::Set1(0.0);
    for (int64_t d = 0; d < full; d += 8) {
      for (int v = 0; v < kV; ++v) acc[v] = Vec::Add(acc[v], Vec::Mul(Vec::Load(a + d + v * kW), Vec::Load(r + d + v * kW)));
    }
    out[t] = Finish(acc, a, r, full, dim);
  }
}

// y[d] += coef[t] * row_t[d] for t in increasing order; a block of y stays in registers over all t.
void AxpyRows(const double* coef, const double* rows, int64_t stride, int64_t n, int64_t dim, double* y) {
  constexpr int kV = 8;  // independent add chains
  constexpr int64_t kBlock = kV * kW;
  int64_t d0 = 0;
  for (; d0 + kBlock <= dim; d0 += kBlock) {
    Vec acc[kV];
    for (int v = 0; v < kV; ++v) acc[v] = Vec::Load(y + d0 + v * kW);
    for (int64_t t = 0; t < n; ++t) {
      const Vec c = Vec::Set1(coef[t]);
      const double* r = rows + t * stride + d0;
      for (int v = 0; v < kV; ++v) acc[v] = Vec::Add(acc[v], Vec::Mul(c, Vec::Load(r + v * kW)));
    }
    for (int v = 0; v < kV; ++v) Vec::Store(y + d0 + v * kW, acc[v]);
  }
  for (int64_t t = 0; t < n && d0 < dim; ++t) {
    const double c = coef[t];
    const double* r = rows + t * stride;
    for (int64_t d = d0; d < dim; ++d) y[d] += c * r[d];
  }
}

// out[p] = Vec::Tree8(lanes[p]) for eight Dots: Vec::Tree8x8 where the level has it (AVX-512: the
// eight trees at once, the lanes transposed as they are added), else one tree at a time.
template <typename V = Vec>
void Trees8(const V* const* lanes, double* out) {
  if constexpr (requires { V::Tree8x8(lanes, out); }) {
    V::Tree8x8(lanes, out);
  } else {
    for (int p = 0; p < 8; ++p) out[p] = V::Tree8(lanes[p]);
  }
}

// Dot products of M vectors a[r] with rows t0 .. t1-1 (out[r][t]), sharing each load of a row. M is
// a compile-time constant so that every accumulator stays in a register. With one Dot per register
// (AVX-512) four keys share each load of a vector (4M sums in flight, 32 registers hold them) and,
// with no tail, the trees of two vectors' four keys go together (Trees8).
template <int M>
void DotGroup(const double* const* a, const double* rows, int64_t stride, int64_t t0, int64_t t1, int64_t dim,
              double* const* out) {
  constexpr int kV = 8 / kW;
  constexpr int kKeys = kV == 1 ? 4 : 1;
  const int64_t full = dim - dim % 8;
  int64_t t = t0;
  for (; t + kKeys <= t1; t += kKeys) {
    Vec acc[kKeys][M][kV];
    for (int e = 0; e < kKeys; ++e) {
      for (int r = 0; r < M; ++r) {
        for (int v = 0; v < kV; ++v) acc[e][r][v] = Vec::Set1(0.0);
      }
    }
    for (int64_t d = 0; d < full; d += 8) {
      for (int v = 0; v < kV; ++v) {
        Vec x[kKeys];
        for (int e = 0; e < kKeys; ++e) x[e] = Vec::Load(rows + (t + e) * stride + d + v * kW);
        for (int r = 0; r < M; ++r) {
          const Vec av = Vec::Load(a[r] + d + v * kW);
          for (int e = 0; e < kKeys; ++e) acc[e][r][v] = Vec::Add(acc[e][r][v], Vec::Mul(av, x[e]));
        }
      }
    }
    if constexpr (kKeys == 4 && M % 2 == 0) {
      if (full == dim) {
        for (int r = 0; r < M; r += 2) {
          const Vec* const pairs[8] = {acc[0][r], acc[1][r], acc[2][r], acc[3][r],
                                       acc[0][r + 1], acc[1][r + 1], acc[2][r + 1], acc[3][r + 1]};
          double sums[8];
          Trees8(pairs, sums);
          for (int e = 0; e < 4; ++e) {
            out[r][t + e] = sums[e];
            out[r + 1][t + e] = sums[4 + e];
          }
        }
        continue;
      }
    }
    for (int e = 0; e < kKeys; ++e) {
      for (int r = 0; r < M; ++r) out[r][t + e] = Finish(acc[e][r], a[r], rows + (t + e) * stride, full, dim);
    }
  }
  for (; t < t1; ++t) {
    for (int r = 0; r < M; ++r) DotRows(a[r], rows + t * stride, stride, 1, dim, out[r] + t);
  }
}

// DotRows for `count` vectors a[r] at once (out[r][t]), keys in tiles that every group of rows
// reads from cache.
void DotRowsMulti(const double* const* a, int count, const double* rows, int64_t stride, int64_t n, int64_t dim,
                  double* const* out) {
  ForKeyTilesAndGroups(count, n, [&]<int M>(int r0, int64_t t0, int64_t t1) {
    DotGroup<M>(a + r0, rows, stride, t0, t1, dim, out + r0);
  });
}

// y[r] += coef[r][t] * row_t for t = t0 .. t1-1 in increasing order, for M outputs sharing each load of
// a row; a block of each y[r] stays in registers over the keys.
template <int M>
void AxpyGroup(const double* const* coef, const double* rows, int64_t stride, int64_t t0, int64_t t1, int64_t dim,
               double* const* y) {
  constexpr int kV = 2;
  constexpr int64_t kBlock = kV * kW;
  int64_t d0 = 0;
  for (; d0 + kBlock <= dim; d0 += kBlock) {
    Vec acc[M][kV];
    for (int r = 0; r < M; ++r) {
      for (int v = 0; v < kV; ++v) acc[r][v] = Vec::Load(y[r] + d0 + v * kW);
    }
    for (int64_t t = t0; t < t1; ++t) {
      const double* row = rows + t * stride + d0;
      Vec x[kV];
      for (int v = 0; v < kV; ++v) x[v] = Vec::Load(row + v * kW);
      for (int r = 0; r < M; ++r) {
        const Vec c = Vec::Set1(coef[r][t]);
        for (int v = 0; v < kV; ++v) acc[r][v] = Vec::Add(acc[r][v], Vec::Mul(c, x[v]));
      }
    }
    for (int r = 0; r < M; ++r) {
      for (int v = 0; v < kV; ++v) Vec::Store(y[r] + d0 + v * kW, acc[r][v]);
    }
  }
  for (int r = 0; r < M && d0 < dim; ++r) {
    for (int64_t t = t0; t < t1; ++t) {
      const double c = coef[r][t];
      const double* row = rows + t * stride;
      for (int64_t d = d0; d < dim; ++d) y[r][d] += c * row[d];
    }
  }
}

// AxpyRows for `count` outputs y[r] with their own coefficients coef[r][t]; each y[r] takes the keys
// in increasing order, tile by tile.
void AxpyRowsMulti(const double* const* coef, int count, const double* rows, int64_t stride, int64_t n, int64_t dim,
                   double* const* y) {
  ForKeyTilesAndGroups(count, n, [&]<int M>(int r0, int64_t t0, int64_t t1) {
    AxpyGroup<M>(coef + r0, rows, stride, t0, t1, dim, y + r0);
  });
}

// y += coef[r] * x[r] for r = 0, 1, ... in order, each element's sum kept in a register.
void AxpyMulti(const double* coef, const double* const* x, int count, double* y, int64_t dim) {
  int64_t d = 0;
  for (; d + kW <= dim; d += kW) {
    Vec acc = Vec::Load(y + d);
    for (int r = 0; r < count; ++r) acc = Vec::Add(acc, Vec::Mul(Vec::Set1(coef[r]), Vec::Load(x[r] + d)));
    Vec::Store(y + d, acc);
  }
  for (; d < dim; ++d) {
    for (int r = 0; r < count; ++r) y[d] += coef[r] * x[r][d];
  }
}

void Axpy(double alpha, const double* x, double* y, int64_t n) {
  const Vec c = Vec::Set1(alpha);
  int64_t d = 0;
  for (; d + kW <= n; d += kW) Vec::Store(y + d, Vec::Add(Vec::Load(y + d), Vec::Mul(c, Vec::Load(x + d))));
  for (; d < n; ++d) y[d] += alpha * x[d];
}

}  // namespace
