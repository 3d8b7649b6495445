#include "reference/quantize/quantize.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/hadamard.h"
#include "model/numerics/philox.h"
#include "model/numerics/stochastic_rounding.h"

namespace gemtb::reference {
namespace {

using numerics::MxElement;

// The one-byte formats, which are also the MX element formats.
bool IsByteFormat(QuantFormat f) { return f != QuantFormat::kBf16 && f != QuantFormat::kFp16; }
MxElement ToMxElement(QuantFormat f) {
  switch (f) {
    case QuantFormat::kE5M2: return MxElement::kE5M2;
    case QuantFormat::kE2M3: return MxElement::kE2M3;
    case QuantFormat::kE3M2: return MxElement::kE3M2;
    case QuantFormat::kE2M1: return MxElement::kE2M1;
    default: return MxElement::kE4M3;
  }
}

uint16_t EncodeRne(double x, QuantFormat f) {
  switch (f) {
    case QuantFormat::kBf16: return numerics::DoubleToBf16BitsRne(x);
    case QuantFormat::kFp16: return numerics::DoubleToFp16BitsRne(x);
    default: return numerics::DoubleToMxElementRne(x, ToMxElement(f));
  }
}

uint16_t EncodeSr(float x, QuantFormat f, uint16_t r) {
  switch (f) {
    case QuantFormat::kBf16: return numerics::FloatToBf16BitsSr(x, r);
    case QuantFormat::kFp16: return numerics::FloatToFp16BitsSr(x, r);
    default: return numerics::FloatToMxElementSr(x, ToMxElement(f), r);
  }
}

double Decode(uint16_t code, QuantFormat f) {
  switch (f) {
    case QuantFormat::kBf16: return numerics::Bf16BitsToFloat(code);
    case QuantFormat::kFp16: return numerics::Fp16BitsToFloat(code);
    default: return numerics::MxElementToFloat(static_cast<uint8_t>(code), ToMxElement(f));
  }
}

// Splits the shape around `axis` into (outer, n, inner).
struct Fibers {
  int64_t outer = 1, n = 1, inner = 1;
};
Fibers SplitAt(const std::vector<int64_t>& shape, int axis) {
  Fibers f;
  for (int d = 0; d < axis; ++d) f.outer *= shape[d];
  f.n = shape[axis];
  for (size_t d = axis + 1; d < shape.size(); ++d) f.inner *= shape[d];
  return f;
}

}  // namespace

absl::StatusOr<QuantizeResult> Quantize(absl::Span<const double> x, const std::vector<int64_t>& shape,
                                        const QuantizeOptions& o) {
  const int rank = static_cast<int>(shape.size());
  const bool mx = o.block != QuantBlock::kNone;
  if (mx && !IsByteFormat(o.format)) {
    return absl::InvalidArgumentError("--block: MX blocks need --format e4m3, e5m2, e2m3, e3m2 or e2m1");
  }
  if (o.block == QuantBlock::kSquare32 && rank < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--block=32x32: needs at least 2 dimensions, input has ", rank));
  }
  if (rank == 0 && (mx || o.rht)) return absl::InvalidArgumentError("--in: a scalar has no axis to block");
  const int axis = o.block == QuantBlock::kSquare32 ? rank - 1 : (o.axis < 0 ? o.axis + rank : o.axis);
  if ((mx || o.rht) && (axis < 0 || axis >= rank)) {
    return absl::InvalidArgumentError(absl::StrCat("--axis=", o.axis, ": out of range for rank ", rank));
  }
  if (o.rht != 0 && !numerics::RhtIsValidSize(o.rht)) {
    return absl::InvalidArgumentError(absl::StrCat("--rht=", o.rht, ": want 32, 64 or 128"));
  }
  if (o.rht != 0 && shape[axis] % o.rht != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--rht=", o.rht, ": axis ", axis, " has length ", shape[axis],
                                                   ", not a multiple"));
  }
  // fp32 working copy for the paths a kernel runs in fp32.
  std::vector<float> xf;
  const bool fp32_path = o.stochastic || mx || o.rht != 0;
  if (fp32_path) {
    xf.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xf[i] = static_cast<float>(x[i]);
      if (!std::isnan(x[i]) && static_cast<double>(xf[i]) != x[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--in: element ", i, " = ", x[i], " is not exactly representable in fp32, which stochastic "
            "rounding, MX and RHT work on; convert the input to float32 first"));
      }
    }
  }
  if (o.rht != 0) {
    const Fibers f = SplitAt(shape, axis);
    std::vector<float> block(static_cast<size_t>(o.rht));
    for (int64_t a = 0; a < f.outer; ++a) {
      for (int64_t c = 0; c < f.inner; ++c) {
        for (int64_t start = 0; start < f.n; start += o.rht) {
          for (int t = 0; t < o.rht; ++t) block[t] = xf[(a * f.n + start + t) * f.inner + c];
          numerics::RandomizedHadamardTransform(block.data(), o.rht, o.seed, o.stream);
          for (int t = 0; t < o.rht; ++t) xf[(a * f.n + start + t) * f.inner + c] = block[t];
        }
      }
    }
  }

  QuantizeResult r;
  r.code_bits = IsByteFormat(o.format) ? 8 : 16;
  r.codes.resize(x.size());
  r.values.resize(x.size());
  auto sr_bits = [&](int64_t element) { return numerics::PhiloxSrBits(o.seed, o.stream, static_cast<uint64_t>(element)); };

  if (!mx) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (o.stochastic) {
        r.codes[i] = EncodeSr(xf[i], o.format, sr_bits(static_cast<int64_t>(i)));
      } else {
        r.codes[i] = EncodeRne(fp32_path ? static_cast<double>(xf[i]) : x[i], o.format);
      }
      r.values[i] = Decode(r.codes[i], o.format);
    }
    return r;
  }

  // MX: gather each block (32 along the axis, or a 32x32 tile of the last two axes) into a buffer,
  // quantise it as one block, scatter codes back. Elements keep their flat index for SR bits.
  const MxElement element = ToMxElement(o.format);
  std::vector<float> buf;
  std::vector<int64_t> index;
  std::vector<uint16_t> bits;
  std::vector<uint8_t> codes;
  auto quantize_gathered = [&]() -> uint8_t {
    const int n = static_cast<int>(buf.size());
    codes.resize(buf.size());
    bits.resize(buf.size());
    for (int t = 0; t < n; ++t) bits[t] = sr_bits(index[t]);
    // A block here may be a 32x32 tile (up to 1024 elements); the block math is size-agnostic.
    const uint8_t scale = numerics::MxQuantizeBlockStrided(buf.data(), n, 1, element, o.scale_rule, codes.data(), 1,
                                                           o.stochastic ? bits.data() : nullptr);
    for (int t = 0; t < n; ++t) {
      r.codes[index[t]] = codes[t];
      r.values[index[t]] = numerics::MxDecodeElement(codes[t], scale, element);
    }
    return scale;
  };
  if (o.block == QuantBlock::kAxis32) {
    const Fibers f = SplitAt(shape, axis);
    const int64_t nb = (f.n + numerics::kMxBlockSize - 1) / numerics::kMxBlockSize;
    r.scales_shape = shape;
    r.scales_shape[axis] = nb;
    r.scales.resize(static_cast<size_t>(f.outer * nb * f.inner));
    for (int64_t a = 0; a < f.outer; ++a) {
      for (int64_t bi = 0; bi < nb; ++bi) {
        for (int64_t c = 0; c < f.inner; ++c) {
          buf.clear();
          index.clear();
          for (int64_t t = bi * 32; t < std::min(f.n, bi * 32 + 32); ++t) {
            const int64_t e = (a * f.n + t) * f.inner + c;
            buf.push_back(xf[e]);
            index.push_back(e);
          }
          r.scales[(a * nb + bi) * f.inner + c] = quantize_gathered();
        }
      }
    }
  } else {
    const int64_t rows = shape[rank - 2], cols = shape[rank - 1];
    int64_t batch = 1;
    for (int d = 0; d < rank - 2; ++d) batch *= shape[d];
    const int64_t nbr = (rows + 31) / 32, nbc = (cols + 31) / 32;
    r.scales_shape.assign(shape.begin(), shape.end() - 2);
    r.scales_shape.push_back(nbr);
    r.scales_shape.push_back(nbc);
    r.scales.resize(static_cast<size_t>(batch * nbr * nbc));
    for (int64_t m = 0; m < batch; ++m) {
      for (int64_t bi = 0; bi < nbr; ++bi) {
        for (int64_t bj = 0; bj < nbc; ++bj) {
          buf.clear();
          index.clear();
          for (int64_t i = bi * 32; i < std::min(rows, bi * 32 + 32); ++i) {
            for (int64_t j = bj * 32; j < std::min(cols, bj * 32 + 32); ++j) {
              const int64_t e = (m * rows + i) * cols + j;
              buf.push_back(xf[e]);
              index.push_back(e);
            }
          }
          r.scales[(m * nbr + bi) * nbc + bj] = quantize_gathered();
        }
      }
    }
  }
  return r;
}

}  // namespace gemtb::reference
