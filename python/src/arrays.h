// The module's array and error conventions. An array crosses as (dtype name, shape, bytes): the
// package (python/gemtb/_arrays.py) checks dtype and layout and views the data as bytes, this side
// turns it into the io::NpyArray the libraries take, and results go back the same way, zero copy.
// Every source of the module includes it, so all of them see the same type casters (nanobind/stl).
// Errors: a library's absl::Status becomes ValueError (bad input: invalid argument, out of range, not
// found, failed precondition) or RuntimeError, with its message.
#ifndef GEMTB_PYTHON_SRC_ARRAYS_H_
#define GEMTB_PYTHON_SRC_ARRAYS_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reference/io/npy.h"

namespace gemtb::python {

namespace nb = nanobind;

using Bytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// An array from Python: (dtype name as NumPy/ml_dtypes spell it, shape, its bytes in C order).
using Wire = std::tuple<std::string, std::vector<int64_t>, Bytes>;
using WireMap = std::map<std::string, Wire>;

// The array named `field`, its bytes copied; the error names the field.
absl::StatusOr<io::NpyArray> ToNpy(const std::string& field, const Wire& wire);
// The same without the copy: the view lends the wire's bytes, valid while the wire is.
absl::StatusOr<io::NpyView> ToNpyView(const std::string& field, const Wire& wire);
// (dtype name, shape, uint8 ndarray owning the bytes).
nb::tuple FromNpy(io::NpyArray array);

// A result computed in fp64, before it crosses: kept as it is when it is wanted in float64 (so the
// values cross without a copy), else encoded into the wanted dtype. Built without the GIL.
struct F64Result {
  std::vector<double> values;  // float64 results
  std::vector<int64_t> shape;
  io::NpyArray encoded;        // the others
  bool is_f64 = false;
};
F64Result EncodeResult(std::vector<double>&& values, std::vector<int64_t> shape, io::NpyDType dtype);
// FromNpy's tuple for it (the GIL held).
nb::tuple FromResult(F64Result result);

// Throws the Python exception for a failed status.
[[noreturn]] void Raise(const absl::Status& status);
inline void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}
template <typename T>
T Value(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return *std::move(value);
}

void BindAttention(nb::module_& m);
void BindQuantize(nb::module_& m);
void BindEmbed(nb::module_& m);
void BindSimModelData(nb::module_& m);
void BindTesting(nb::module_& m);
void BindGpuAttention(nb::module_& m);  // built with CUDA only (gpu_attention.cc)

}  // namespace gemtb::python

#endif  // GEMTB_PYTHON_SRC_ARRAYS_H_
