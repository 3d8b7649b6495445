// The body of the row kernels (row_kernels.h), included once per instruction-set level by
// row_kernels_baseline.cc, row_kernels_avx2.cc and row_kernels_avx512.cc, each inside its own
// namespace after defining `Vec`: kWidth doubles with Load, Store, Set1, Mul and Add. Every step is an
// explicit multiply then add on independent values (the eight lanes of a Dot, a block of keys, the
// elements of y), so the wider levels only do several of the scalar level's operations at once.
// It includes nothing: the file that includes it provides row_kernels.h, <cstdint> and Vec.

namespace {

constexpr int kW = Vec::kWidth;
static_assert(8 % kW == 0, "a Dot's eight lanes must fill whole vectors");

// Dot of kernel_utils.h: lane l sums d = l (mod 8) in increasing d, then a fixed tree.
inline double Finish(const Vec* lanes, const double* a, const double* r, int64_t full, int64_t dim) {
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

void Axpy(double alpha, const double* x, double* y, int64_t n) {
  const Vec c = Vec::Set1(alpha);
  int64_t d = 0;
  for (; d + kW <= n; d += kW) Vec::Store(y + d, Vec::Add(Vec::Load(y + d), Vec::Mul(c, Vec::Load(x + d))));
  for (; d < n; ++d) y[d] += alpha * x[d];
}

}  // namespace
