#include "python/src/arrays.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemtb::python {

absl::StatusOr<io::NpyView> ToNpyView(const std::string& field, const Wire& wire) {
  const auto& [dtype_name, shape, bytes] = wire;
  const std::optional<io::NpyDType> dtype = io::ParseNpyDTypeName(dtype_name);
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat(field, ": dtype ", dtype_name, " is not supported"));
  io::NpyView a;
  a.dtype = *dtype;
  a.shape = shape;
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && elements > UINT64_MAX / 16 / static_cast<uint64_t>(d))) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": shape ", io::ShapeString(shape), " is not a tensor's"));
    }
    elements *= static_cast<uint64_t>(d);
  }
  if (elements * static_cast<uint64_t>(io::NpyItemSize(a.dtype)) != bytes.shape(0)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", bytes.shape(0), " bytes do not hold shape ",
                                                   io::ShapeString(shape), " of ", dtype_name));
  }
  a.data = absl::MakeConstSpan(bytes.data(), bytes.shape(0));
  return a;
}

absl::StatusOr<io::NpyArray> ToNpy(const std::string& field, const Wire& wire) {
  absl::StatusOr<io::NpyView> view = ToNpyView(field, wire);
  if (!view.ok()) return view.status();
  io::NpyArray a;
  a.dtype = view->dtype;
  a.shape = std::move(view->shape);
  a.data.assign(view->data.begin(), view->data.end());
  return a;
}

nb::tuple FromNpy(io::NpyArray array) {
  auto* data = new std::vector<uint8_t>(std::move(array.data));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> bytes(data->data(), {data->size()}, owner);
  return nb::make_tuple(std::string(io::NpyDTypeName(array.dtype)), array.shape, bytes);
}

F64Result EncodeResult(std::vector<double>&& values, std::vector<int64_t> shape, io::NpyDType dtype) {
  F64Result r;
  if (dtype == io::NpyDType::kFloat64) {
    r.values = std::move(values);
    r.shape = std::move(shape);
    r.is_f64 = true;
  } else {
    r.encoded = io::EncodeFloat(values, std::move(shape), dtype);
  }
  return r;
}

nb::tuple FromResult(F64Result result) {
  if (!result.is_f64) return FromNpy(std::move(result.encoded));
  auto* data = new std::vector<double>(std::move(result.values));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> bytes(reinterpret_cast<uint8_t*>(data->data()),
                                                     {data->size() * sizeof(double)}, owner);
  return nb::make_tuple(std::string(io::NpyDTypeName(io::NpyDType::kFloat64)), result.shape, bytes);
}

void Raise(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      throw nb::value_error(message.c_str());
    default:
      throw std::runtime_error(message);
  }
}

}  // namespace gemtb::python
