#include "golden/compare.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/numerics/float_formats.h"
#include "reference/io/npy.h"

namespace gemtb::golden {
namespace {

std::string Shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Element `i` of an array as text: its value (floats in shortest round-trip form) and raw bits.
std::string Element(const io::NpyArray& a, int64_t i) {
  const int size = io::NpyItemSize(a.dtype);
  uint64_t bits = 0;
  for (int b = 0; b < size; ++b) bits |= uint64_t{a.data[i * size + b]} << (8 * b);
  const std::string hex = absl::StrFormat("0x%0*x", 2 * size, bits);
  switch (a.dtype) {
    case io::NpyDType::kFloat64: {
      double v;
      std::memcpy(&v, &bits, 8);
      return absl::StrCat(Shortest(v), " (", hex, ")");
    }
    case io::NpyDType::kFloat32: {
      const uint32_t b32 = static_cast<uint32_t>(bits);
      float v;
      std::memcpy(&v, &b32, 4);
      return absl::StrCat(Shortest(v), " (", hex, ")");
    }
    case io::NpyDType::kFloat16:
      return absl::StrCat(Shortest(numerics::Fp16BitsToFloat(static_cast<uint16_t>(bits))), " (", hex, ")");
    case io::NpyDType::kBFloat16:  // "<u2": bfloat16 bits, or fp16/other 16-bit codes
      return absl::StrCat(hex, " (as bfloat16: ", Shortest(numerics::Bf16BitsToFloat(static_cast<uint16_t>(bits))), ")");
    case io::NpyDType::kInt64: return absl::StrCat(static_cast<int64_t>(bits), " (", hex, ")");
    case io::NpyDType::kInt32: return absl::StrCat(static_cast<int32_t>(static_cast<uint32_t>(bits)), " (", hex, ")");
    case io::NpyDType::kUInt8: return hex;
  }
  return hex;
}

std::string MultiIndex(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return io::ShapeString(idx);
}

}  // namespace

std::optional<std::string> DescribeNpyDifference(const std::vector<uint8_t>& stored, const std::vector<uint8_t>& recomputed) {
  if (stored == recomputed) return std::nullopt;
  absl::StatusOr<io::NpyArray> s = io::ParseNpy(stored, "stored");
  absl::StatusOr<io::NpyArray> r = io::ParseNpy(recomputed, "recomputed");
  if (!s.ok()) return absl::StrCat("the stored file is not a valid .npy: ", s.status().message());
  if (!r.ok()) return absl::StrCat("the recomputed array does not serialise: ", r.status().message());
  if (s->dtype != r->dtype) {
    return absl::StrCat("dtype ", io::NpyDescr(s->dtype), " stored, ", io::NpyDescr(r->dtype), " recomputed");
  }
  if (s->shape != r->shape) {
    return absl::StrCat("shape ", io::ShapeString(s->shape), " stored, ", io::ShapeString(r->shape), " recomputed");
  }
  const int size = io::NpyItemSize(s->dtype);
  const int64_t n = s->NumElements();
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(s->data.data() + i * size, r->data.data() + i * size, size) != 0) {
      int64_t count = 0;
      for (int64_t k = i; k < n; ++k) count += std::memcmp(s->data.data() + k * size, r->data.data() + k * size, size) != 0;
      return absl::StrCat("first differing element ", i, " at ", MultiIndex(s->shape, i), ": stored ", Element(*s, i),
                          ", recomputed ", Element(*r, i), " (", count, " of ", n, " elements differ)");
    }
  }
  return std::string("same elements, different header bytes");
}

std::optional<std::string> DescribeTextDifference(const std::vector<uint8_t>& stored, const std::vector<uint8_t>& recomputed) {
  if (stored == recomputed) return std::nullopt;
  int64_t line = 1;
  size_t i = 0;
  while (i < stored.size() && i < recomputed.size() && stored[i] == recomputed[i]) {
    if (stored[i] == '\n') ++line;
    ++i;
  }
  auto line_at = [&](const std::vector<uint8_t>& t) {
    size_t b = std::min(i, t.size());
    while (b > 0 && t[b - 1] != '\n') --b;
    size_t e = b;
    while (e < t.size() && t[e] != '\n') ++e;
    return std::string(t.begin() + static_cast<int64_t>(b), t.begin() + static_cast<int64_t>(e));
  };
  return absl::StrCat("first difference on line ", line, ": stored '", line_at(stored), "', recomputed '",
                      line_at(recomputed), "'");
}

}  // namespace gemtb::golden
