// The .npy reader on arbitrary bytes (reference/io/npy.h), in memory and from a file.
//
// Promise: any bytes give a Status, never a crash, and the reader never allocates more than the
// file holds. The file reader (header first, from the first bytes, checked against the file size,
// then the data) judges every file exactly as the in-memory parser judges its bytes. What it accepts must be self-consistent: the element count times the item size is
// the data size, decoding succeeds for its dtype class, serializing and parsing again gives the
// same array, and every non-NaN float survives decode-to-fp64 and encode-back bit for bit (every
// supported float format is a subset of fp64).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "fuzz/byte_reader.h"
#include "reference/io/npy.h"

namespace {

using gemtb::fuzz::Check;
using gemtb::fuzz::Fail;
using gemtb::io::NpyArray;
using gemtb::io::NpyDType;

void CheckFloatRoundTrip(const NpyArray& array) {
  absl::StatusOr<std::vector<double>> values = gemtb::io::DecodeFloat(array, "fuzz");
  Check(values.ok(), absl::StrCat("DecodeFloat failed on an accepted float array: ",
                                  values.status().ToString()));
  Check(static_cast<int64_t>(values->size()) == array.NumElements(), "DecodeFloat: wrong count");
  absl::StatusOr<std::vector<int64_t>> ints = gemtb::io::DecodeInt(array, "fuzz");
  Check(!ints.ok(), "DecodeInt accepted a float array");
  const NpyArray back = gemtb::io::EncodeFloat(*values, array.shape, array.dtype);
  Check(back.data.size() == array.data.size(), "EncodeFloat: wrong byte count");
  const size_t item = static_cast<size_t>(gemtb::io::NpyItemSize(array.dtype));
  for (size_t i = 0; i < values->size(); ++i) {
    if (std::isnan((*values)[i])) continue;  // NaN payloads need not survive
    if (std::memcmp(&back.data[i * item], &array.data[i * item], item) != 0) {
      Fail(absl::StrCat("element ", i, " of ", gemtb::io::NpyDTypeName(array.dtype),
                        " changed in decode/encode: ", (*values)[i]));
    }
  }
}

// The file each input is written to for ReadNpy, removed when the fuzzer exits.
struct ScratchFile {
  std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("gemtb-npy-fuzz-", ::getpid(), ".npy")).string();
  ~ScratchFile() { std::remove(path.c_str()); }
};

// ReadNpy on a file holding `bytes` must agree with ParseNpy on the bytes: the same array, or an
// InvalidArgument error with the same message (the path is the name both use).
void CheckFileReaderAgrees(absl::Span<const uint8_t> bytes, const absl::StatusOr<NpyArray>& parsed,
                           const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  Check(f != nullptr, "cannot create the scratch file");
  Check(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fclose(f) == 0,
        "cannot write the scratch file");
  absl::StatusOr<NpyArray> read = gemtb::io::ReadNpy(path);
  if (!parsed.ok()) {
    Check(!read.ok(), "ReadNpy accepted a file that ParseNpy rejects");
    Check(absl::IsInvalidArgument(read.status()), "ReadNpy: error is not InvalidArgument");
    Check(read.status().message() == parsed.status().message(),
          absl::StrCat("ReadNpy and ParseNpy differ: '", read.status().message(), "' vs '",
                       parsed.status().message(), "'"));
    return;
  }
  Check(read.ok(), absl::StrCat("ReadNpy rejected what ParseNpy accepts: ", read.ok() ? "" : read.status().ToString()));
  Check(read->dtype == parsed->dtype && read->shape == parsed->shape && read->data == parsed->data,
        "ReadNpy and ParseNpy give different arrays");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile scratch;
  const std::string& path = scratch.path;
  absl::StatusOr<NpyArray> array = gemtb::io::ParseNpy(absl::MakeConstSpan(data, size), path);
  CheckFileReaderAgrees(absl::MakeConstSpan(data, size), array, path);
  if (!array.ok()) {
    Check(absl::IsInvalidArgument(array.status()), "ParseNpy: error is not InvalidArgument");
    return 0;
  }
  Check(array->data.size() <= size, "ParseNpy: more data than the file holds");
  const int64_t count = array->NumElements();
  Check(count >= 0 && static_cast<uint64_t>(count) * gemtb::io::NpyItemSize(array->dtype) ==
                          array->data.size(),
        "ParseNpy: element count disagrees with the data size");

  if (gemtb::io::IsFloating(array->dtype)) {
    CheckFloatRoundTrip(*array);
  } else if (array->dtype == NpyDType::kUInt8) {
    Check(!gemtb::io::DecodeFloat(*array, "fuzz").ok(), "DecodeFloat accepted |u1");
    Check(!gemtb::io::DecodeInt(*array, "fuzz").ok(), "DecodeInt accepted |u1");
  } else {
    absl::StatusOr<std::vector<int64_t>> ints = gemtb::io::DecodeInt(*array, "fuzz");
    Check(ints.ok() && static_cast<int64_t>(ints->size()) == count, "DecodeInt failed on an int array");
    Check(!gemtb::io::DecodeFloat(*array, "fuzz").ok(), "DecodeFloat accepted an int array");
  }

  // What the CLI writes back must read back as the same array.
  const std::vector<uint8_t> bytes = gemtb::io::SerializeNpy(*array);
  absl::StatusOr<NpyArray> again = gemtb::io::ParseNpy(bytes, "fuzz.npy (serialized)");
  Check(again.ok(), absl::StrCat("serialized array does not parse: ",
                                 again.ok() ? "" : again.status().ToString()));
  Check(again->dtype == array->dtype && again->shape == array->shape && again->data == array->data,
        "serialize/parse round trip changed the array");
  return 0;
}
