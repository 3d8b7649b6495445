// NumPy .npy files (format versions 1.0, 2.0, 3.0), the tensor interface of every gemtb command.
//
// Only what gemtb exchanges is accepted: little-endian float64, float32, float16, uint16 (bfloat16
// stored as raw bits), int64, int32 and uint8, C order. Anything else is rejected with a message that names
// the file and the offending header field.
#ifndef GEMTB_REFERENCE_IO_NPY_H_
#define GEMTB_REFERENCE_IO_NPY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/json/user_file.h"

namespace gemtb::io {

// kBFloat16 is "<u2" on disk: bfloat16 values travel as raw bits, and so do other 16-bit codes
// (fp16 codes from `ref quantize`). kUInt8 ("|u1") carries fp8 and E8M0 codes.
enum class NpyDType { kFloat64, kFloat32, kFloat16, kBFloat16, kInt64, kInt32, kUInt8 };

// The NumPy descr string ("<f8", ...; bfloat16 is "<u2") and the element size in bytes.
absl::string_view NpyDescr(NpyDType dtype);
int NpyItemSize(NpyDType dtype);
absl::string_view NpyDTypeName(NpyDType dtype);  // "float64", ..., "bfloat16"
// The dtype NpyDTypeName gives `name`, or nullopt.
std::optional<NpyDType> ParseNpyDTypeName(absl::string_view name);
bool IsFloating(NpyDType dtype);

// An array whose bytes live elsewhere (a caller's buffer, or an NpyArray), for reading without a copy.
struct NpyView {
  NpyDType dtype = NpyDType::kFloat64;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> data;  // little-endian elements, C order

  int64_t NumElements() const;
};

struct NpyArray {
  NpyDType dtype = NpyDType::kFloat64;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // little-endian elements, C order

  int64_t NumElements() const;
  NpyView View() const { return {dtype, shape, data}; }
};

// What the header of a .npy file declares, checked against the file's size.
struct NpyHeader {
  NpyDType dtype = NpyDType::kFloat64;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // bytes before the data
  uint64_t data_bytes = 0;   // shape * item size, equal to the bytes after the header
};

// Parses the header from the first bytes of a file of `file_size` bytes (`head` holds at least the
// header, or the whole file if shorter) and checks that the data the shape needs is exactly what
// the file holds, so nothing is allocated for a shape the file cannot back.
absl::StatusOr<NpyHeader> ParseNpyHeader(absl::Span<const uint8_t> head, uint64_t file_size,
                                         absl::string_view name);
// Parses the bytes of a .npy file; `name` (a path or field name) prefixes every error message.
absl::StatusOr<NpyArray> ParseNpy(absl::Span<const uint8_t> bytes, absl::string_view name);
// A user's .npy file, open, with its header read and checked against the file's size; the data is
// read by the caller straight into its destination (one read, no per-element work).
class NpyFile {
 public:
  // A regular file no larger than the machine's memory (it is held in memory whole), header first.
  static absl::StatusOr<NpyFile> Open(const std::string& path);

  const NpyHeader& header() const { return header_; }
  // Reads the data (exactly header().data_bytes bytes) into `out`.
  absl::Status ReadData(absl::Span<uint8_t> out) const;
  // The data decoded into fp64, as DecodeFloat gives it (a dtype that is not floating gives its
  // error, named `name`); float64 data is read straight into the result.
  absl::StatusOr<std::vector<double>> ReadFloat(absl::string_view name) const;

 private:
  NpyFile(UserFile file, NpyHeader header) : file_(std::move(file)), header_(std::move(header)) {}

  UserFile file_;
  NpyHeader header_;
};

// Reads a user's .npy file (NpyFile::Open, then its data).
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

// The header bytes of a .npy file (version 1.0) holding `array`, padded so the data starts on a
// 64-byte boundary: the file is these bytes, then array.data.
std::vector<uint8_t> NpyHeaderBytes(const NpyArray& array);
// The bytes of a .npy file: NpyHeaderBytes, then the data.
std::vector<uint8_t> SerializeNpy(const NpyArray& array);

// Decodes a floating array exactly into fp64 (every supported float format is a subset of fp64).
absl::StatusOr<std::vector<double>> DecodeFloat(const NpyView& array, absl::string_view name);
inline absl::StatusOr<std::vector<double>> DecodeFloat(const NpyArray& array, absl::string_view name) {
  return DecodeFloat(array.View(), name);
}
// Decodes an integer array (int64 or int32) into int64.
absl::StatusOr<std::vector<int64_t>> DecodeInt(const NpyView& array, absl::string_view name);
inline absl::StatusOr<std::vector<int64_t>> DecodeInt(const NpyArray& array, absl::string_view name) {
  return DecodeInt(array.View(), name);
}

// Encodes fp64 values into `dtype`, rounding each value once (round-to-nearest-even).
NpyArray EncodeFloat(absl::Span<const double> values, std::vector<int64_t> shape, NpyDType dtype);
// fp32 values as they are.
NpyArray EncodeFloat32(absl::Span<const float> values, std::vector<int64_t> shape);
NpyArray EncodeInt64(absl::Span<const int64_t> values, std::vector<int64_t> shape);
NpyArray EncodeInt32(absl::Span<const int32_t> values, std::vector<int64_t> shape);
NpyArray EncodeUInt16(absl::Span<const uint16_t> values, std::vector<int64_t> shape);  // "<u2"
NpyArray EncodeUInt8(absl::Span<const uint8_t> values, std::vector<int64_t> shape);    // "|u1"

// "[2, 3, 4]" for messages.
std::string ShapeString(absl::Span<const int64_t> shape);

}  // namespace gemtb::io

#endif  // GEMTB_REFERENCE_IO_NPY_H_
