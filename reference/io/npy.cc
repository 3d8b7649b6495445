#include "reference/io/npy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/common/status_macros.h"
#include "model/json/user_file.h"
#include "model/numerics/float_formats.h"

namespace gemtb::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// A header longer than this is not one we wrote or would accept: it guards the parser against
// multi-gigabyte "headers" in hostile files.
constexpr uint64_t kMaxHeaderLen = 1 << 16;
// Magic, version and the 4-byte header length of a version 2.0/3.0 file.
constexpr uint64_t kMaxPrefixLen = kMagicLen + 2 + 4;

struct DTypeInfo {
  NpyDType dtype;
  const char* descr;
  const char* name;
  int size;
};
constexpr DTypeInfo kDTypes[] = {
    {NpyDType::kFloat64, "<f8", "float64", 8}, {NpyDType::kFloat32, "<f4", "float32", 4},
    {NpyDType::kFloat16, "<f2", "float16", 2}, {NpyDType::kBFloat16, "<u2", "bfloat16", 2},
    {NpyDType::kInt64, "<i8", "int64", 8},     {NpyDType::kInt32, "<i4", "int32", 4},
    {NpyDType::kUInt8, "|u1", "uint8", 1},
};

const DTypeInfo& Info(NpyDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

// A cursor over the header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  std::optional<std::string> String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return std::nullopt;
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return std::nullopt;
    std::string out(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  std::optional<bool> Bool() {
    SkipSpace();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return std::nullopt;
  }
  std::optional<int64_t> Int() {
    SkipSpace();
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) return std::nullopt;
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    // numpy may print "3L" in old files
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return value;
  }
  std::optional<std::vector<int64_t>> Tuple() {
    if (!Consume('(')) return std::nullopt;
    std::vector<int64_t> dims;
    while (!Consume(')')) {
      std::optional<int64_t> dim = Int();
      if (!dim) return std::nullopt;
      dims.push_back(*dim);
      if (!Consume(',') && !Peek(')')) return std::nullopt;
    }
    return dims;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

uint64_t ReadLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

template <typename T>
T LoadLe(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // x86-64 and aarch64 hosts are little-endian
  return value;
}

}  // namespace

absl::string_view NpyDescr(NpyDType dtype) { return Info(dtype).descr; }
int NpyItemSize(NpyDType dtype) { return Info(dtype).size; }
absl::string_view NpyDTypeName(NpyDType dtype) { return Info(dtype).name; }
std::optional<NpyDType> ParseNpyDTypeName(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return std::nullopt;
}
bool IsFloating(NpyDType dtype) {
  return dtype == NpyDType::kFloat64 || dtype == NpyDType::kFloat32 ||
         dtype == NpyDType::kFloat16 || dtype == NpyDType::kBFloat16;
}

int64_t NpyView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t NpyArray::NumElements() const { return View().NumElements(); }

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<NpyHeader> ParseNpyHeader(absl::Span<const uint8_t> head, uint64_t file_size,
                                         absl::string_view name) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a valid .npy file: ", what));
  };
  if (head.size() < kMagicLen + 2 || std::memcmp(head.data(), kMagic, kMagicLen) != 0) {
    return bad("missing the \\x93NUMPY magic string");
  }
  const int major = head[kMagicLen];
  const int minor = head[kMagicLen + 1];
  if (major < 1 || major > 3 || minor != 0) {
    return bad(absl::StrCat("unsupported format version ", major, ".", minor));
  }
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (head.size() < prefix) return bad("truncated before the header length");
  const uint64_t header_len = ReadLe(head.data() + kMagicLen + 2, len_bytes);
  if (header_len > kMaxHeaderLen) return bad(absl::StrCat("header length ", header_len, " too large"));
  if (head.size() < prefix + header_len) {
    return bad(absl::StrCat("truncated header: header length ", header_len, " but only ",
                            head.size() - prefix, " bytes follow"));
  }
  const absl::string_view header(reinterpret_cast<const char*>(head.data() + prefix), header_len);

  HeaderParser parser(header);
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  if (!parser.Consume('{')) return bad("header is not a dict");
  while (!parser.Consume('}')) {
    std::optional<std::string> key = parser.String();
    if (!key || !parser.Consume(':')) return bad("malformed header dict");
    if (*key == "descr") {
      descr = parser.String();
      if (!descr) return bad("header field 'descr' is not a string");
    } else if (*key == "fortran_order") {
      fortran = parser.Bool();
      if (!fortran) return bad("header field 'fortran_order' is not True/False");
    } else if (*key == "shape") {
      shape = parser.Tuple();
      if (!shape) return bad("header field 'shape' is not a tuple of non-negative integers");
    } else {
      return bad(absl::StrCat("unknown header field '", *key, "'"));
    }
    if (!parser.Consume(',') && !parser.Peek('}')) return bad("malformed header dict");
  }
  if (!descr || !fortran || !shape) return bad("header lacks 'descr', 'fortran_order' or 'shape'");
  if (*fortran) return bad("fortran_order=True is not supported; save C-ordered arrays");

  NpyHeader out;
  bool known = false;
  for (const DTypeInfo& info : kDTypes) {
    if (*descr == info.descr) {
      out.dtype = info.dtype;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": dtype '", *descr,
        "' is not supported (use <f8, <f4, <f2, <u2 for bfloat16 bits, <i8, <i4 or |u1)"));
  }
  // Element count with overflow checks: a hostile shape must not wrap around.
  uint64_t count = 1;
  const uint64_t limit = std::numeric_limits<int64_t>::max() / 8;
  for (int64_t d : *shape) {
    if (d != 0 && count > limit / static_cast<uint64_t>(d)) {
      return bad(absl::StrCat("shape ", ShapeString(*shape), " is too large"));
    }
    count *= static_cast<uint64_t>(d);
  }
  out.shape = *shape;
  const uint64_t data_bytes = count * static_cast<uint64_t>(NpyItemSize(out.dtype));
  const uint64_t available = file_size - prefix - header_len;
  if (available != data_bytes) {
    return bad(absl::StrCat(available < data_bytes ? "truncated data" : "trailing bytes",
                            ": shape ", ShapeString(*shape), " of ", *descr, " needs ", data_bytes,
                            " bytes, file has ", available));
  }
  out.data_offset = prefix + header_len;
  out.data_bytes = data_bytes;
  return out;
}

absl::StatusOr<NpyArray> ParseNpy(absl::Span<const uint8_t> bytes, absl::string_view name) {
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(bytes, bytes.size(), name);
  if (!header.ok()) return header.status();
  NpyArray array;
  array.dtype = header->dtype;
  array.shape = std::move(header->shape);
  array.data.assign(bytes.begin() + static_cast<ptrdiff_t>(header->data_offset), bytes.end());
  return array;
}

absl::StatusOr<NpyFile> NpyFile::Open(const std::string& path) {
  absl::StatusOr<UserFile> file = UserFile::Open(path, PhysicalMemoryBytes());
  if (!file.ok()) return file.status();
  // Header first: the shape and dtype are checked against the file size before the data is read.
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(file->size(), kMaxPrefixLen + kMaxHeaderLen)));
  GEMTB_RETURN_IF_ERROR(file->ReadAt(0, absl::MakeSpan(head)));
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(head, file->size(), path);
  if (!header.ok()) return header.status();
  return NpyFile(*std::move(file), *std::move(header));
}

absl::Status NpyFile::ReadData(absl::Span<uint8_t> out) const {
  if (out.size() != header_.data_bytes) {
    return absl::InternalError(absl::StrCat(file_.path(), ": data of ", header_.data_bytes,
                                            " bytes read into a buffer of ", out.size()));
  }
  return file_.ReadAt(header_.data_offset, out);
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  absl::StatusOr<NpyFile> file = NpyFile::Open(path);
  if (!file.ok()) return file.status();
  NpyArray array;
  array.dtype = file->header().dtype;
  array.shape = file->header().shape;
  array.data.resize(static_cast<size_t>(file->header().data_bytes));
  GEMTB_RETURN_IF_ERROR(file->ReadData(absl::MakeSpan(array.data)));
  return array;
}

absl::StatusOr<std::vector<double>> NpyFile::ReadFloat(absl::string_view name) const {
  if (header_.dtype == NpyDType::kFloat64) {
    std::vector<double> values(static_cast<size_t>(header_.data_bytes / sizeof(double)));
    GEMTB_RETURN_IF_ERROR(
        ReadData(absl::MakeSpan(reinterpret_cast<uint8_t*>(values.data()), values.size() * sizeof(double))));
    return values;
  }
  NpyArray array;
  array.dtype = header_.dtype;
  array.shape = header_.shape;
  array.data.resize(static_cast<size_t>(header_.data_bytes));
  GEMTB_RETURN_IF_ERROR(ReadData(absl::MakeSpan(array.data)));
  return DecodeFloat(array, name);
}

std::vector<uint8_t> NpyHeaderBytes(const NpyArray& array) {
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    absl::StrAppend(&shape, array.shape[i], array.shape.size() == 1 ? "," : "",
                    i + 1 < array.shape.size() ? ", " : "");
  }
  shape += ")";
  std::string header = absl::StrCat("{'descr': '", NpyDescr(array.dtype),
                                    "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces so that the data starts on a 64-byte boundary, ending with '\n'.
  const size_t unpadded = kMagicLen + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> out(kMagic, kMagic + kMagicLen);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<uint8_t>(header.size() & 0xFF));
  out.push_back(static_cast<uint8_t>(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  return out;
}

std::vector<uint8_t> SerializeNpy(const NpyArray& array) {
  std::vector<uint8_t> out = NpyHeaderBytes(array);
  out.insert(out.end(), array.data.begin(), array.data.end());
  return out;
}

absl::StatusOr<std::vector<double>> DecodeFloat(const NpyView& array, absl::string_view name) {
  if (!IsFloating(array.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": dtype ", NpyDTypeName(array.dtype),
                                                   " is not floating (want <f8, <f4, <f2 or <u2)"));
  }
  const int64_t n = array.NumElements();
  std::vector<double> out(static_cast<size_t>(n));
  const uint8_t* p = array.data.data();
  if (array.dtype == NpyDType::kFloat64) {  // the file's bytes are the values (little-endian host)
    if (n > 0) std::memcpy(out.data(), p, static_cast<size_t>(n) * sizeof(double));
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (array.dtype) {
      case NpyDType::kFloat32: out[i] = LoadLe<float>(p + 4 * i); break;
      case NpyDType::kFloat16: out[i] = numerics::Fp16BitsToFloat(LoadLe<uint16_t>(p + 2 * i)); break;
      case NpyDType::kBFloat16: out[i] = numerics::Bf16BitsToFloat(LoadLe<uint16_t>(p + 2 * i)); break;
      default: break;
    }
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> DecodeInt(const NpyView& array, absl::string_view name) {
  if (array.dtype != NpyDType::kInt64 && array.dtype != NpyDType::kInt32) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": dtype ", NpyDTypeName(array.dtype),
                                                   " is not an integer type (want <i8)"));
  }
  const int64_t n = array.NumElements();
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (array.dtype == NpyDType::kInt64) {
    if (n > 0) std::memcpy(out.data(), array.data.data(), static_cast<size_t>(n) * sizeof(int64_t));
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i] = LoadLe<int32_t>(array.data.data() + 4 * i);
  }
  return out;
}

NpyArray EncodeFloat(absl::Span<const double> values, std::vector<int64_t> shape, NpyDType dtype) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  const int size = NpyItemSize(dtype);
  array.data.resize(values.size() * size);
  uint8_t* p = array.data.data();
  if (dtype == NpyDType::kFloat64) {
    if (!values.empty()) std::memcpy(p, values.data(), values.size() * sizeof(double));
    return array;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case NpyDType::kFloat32: {
        const float f = static_cast<float>(values[i]);  // one IEEE RNE rounding
        std::memcpy(p + 4 * i, &f, 4);
        break;
      }
      case NpyDType::kFloat16: {
        const uint16_t h = numerics::DoubleToFp16BitsRne(values[i]);
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      case NpyDType::kBFloat16: {
        const uint16_t h = numerics::DoubleToBf16BitsRne(values[i]);
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      default: break;
    }
  }
  return array;
}

NpyArray EncodeFloat32(absl::Span<const float> values, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = NpyDType::kFloat32;
  array.shape = std::move(shape);
  array.data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), values.size() * 4);
  return array;
}

NpyArray EncodeInt64(absl::Span<const int64_t> values, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = NpyDType::kInt64;
  array.shape = std::move(shape);
  array.data.resize(values.size() * 8);
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), values.size() * 8);
  return array;
}

NpyArray EncodeInt32(absl::Span<const int32_t> values, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = NpyDType::kInt32;
  array.shape = std::move(shape);
  array.data.resize(values.size() * 4);
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), values.size() * 4);
  return array;
}

NpyArray EncodeUInt16(absl::Span<const uint16_t> values, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = NpyDType::kBFloat16;  // "<u2"
  array.shape = std::move(shape);
  array.data.resize(values.size() * 2);
  if (!values.empty()) std::memcpy(array.data.data(), values.data(), values.size() * 2);
  return array;
}

NpyArray EncodeUInt8(absl::Span<const uint8_t> values, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = NpyDType::kUInt8;
  array.shape = std::move(shape);
  array.data.assign(values.begin(), values.end());
  return array;
}

}  // namespace gemtb::io
