// gemtb.ref.quantize: the bit-exact codecs on an in-memory tensor, as `gemtb ref quantize` runs them
// (the same options, names and output encodings).

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "python/src/arrays.h"
#include "reference/quantize/quantize.h"

namespace gemtb::python {
namespace {

absl::Status Bad(const std::string& m) { return absl::InvalidArgumentError(m); }

// The library's messages name the flags of `gemtb ref quantize`; the binding's name its arguments.
absl::Status NamingArguments(const absl::Status& status) {
  if (status.ok()) return status;
  const std::string message = absl::StrReplaceAll(
      status.message(), {{"--in:", "x:"}, {"--block", "block"}, {"--axis", "axis"}, {"--rht", "rht"}, {"--format", "format"}});
  return absl::Status(status.code(), message);
}

nb::dict Quantize(const Wire& x, const std::string& format, const std::string& block, int64_t axis,
                  const std::string& scale_mode, const std::string& rounding, int64_t seed, int64_t stream,
                  int64_t rht) {
  reference::QuantizeOptions o;
  if (std::optional<reference::QuantFormat> f = ParseIn(reference::kQuantFormatNames, format)) {
    o.format = *f;
  } else {
    Raise(Bad(absl::StrCat("format=", format, ": want ", reference::kQuantFormatChoices)));
  }
  if (block.empty()) o.block = reference::QuantBlock::kNone;
  else if (block == "32") o.block = reference::QuantBlock::kAxis32;
  else if (block == "32x32") o.block = reference::QuantBlock::kSquare32;
  else Raise(Bad(absl::StrCat("block=", block, ": want 32 or 32x32")));
  if (scale_mode == "rceil") o.scale_rule = numerics::MxScaleRule::kRceil;
  else if (scale_mode == "floor") o.scale_rule = numerics::MxScaleRule::kFloor;
  else Raise(Bad(absl::StrCat("scale_mode=", scale_mode, ": want rceil|floor")));
  if (rounding == "rne") o.stochastic = false;
  else if (rounding == "stochastic") o.stochastic = true;
  else Raise(Bad(absl::StrCat("rounding=", rounding, ": want rne|stochastic")));
  if (seed < 0) Raise(Bad(absl::StrCat("seed=", seed, ": must be >= 0")));
  if (stream < 0) Raise(Bad(absl::StrCat("stream=", stream, ": must be >= 0")));
  if (axis < -64 || axis > 64) Raise(Bad(absl::StrCat("axis=", axis, ": out of range")));
  if (rht < 0 || rht > 128) Raise(Bad(absl::StrCat("rht=", rht, ": want 32, 64 or 128")));
  o.axis = static_cast<int>(axis);
  o.seed = static_cast<uint64_t>(seed);
  o.stream = static_cast<uint64_t>(stream);
  o.rht = static_cast<int>(rht);

  io::NpyArray array = Value(ToNpy("x", x));
  std::vector<io::NpyArray> outputs;
  absl::Status status = [&]() -> absl::Status {
    nb::gil_scoped_release release;
    absl::StatusOr<std::vector<double>> values = io::DecodeFloat(array, "x");
    if (!values.ok()) return values.status();
    absl::StatusOr<reference::QuantizeResult> r = reference::Quantize(*values, array.shape, o);
    if (!r.ok()) return r.status();
    if (r->code_bits == 8) {
      outputs.push_back(io::EncodeUInt8(std::vector<uint8_t>(r->codes.begin(), r->codes.end()), array.shape));
    } else {
      outputs.push_back(io::EncodeUInt16(r->codes, array.shape));
    }
    outputs.push_back(io::EncodeFloat(r->values, array.shape, io::NpyDType::kFloat64));
    if (!r->scales_shape.empty()) outputs.push_back(io::EncodeUInt8(r->scales, r->scales_shape));
    return absl::OkStatus();
  }();
  Check(NamingArguments(status));
  nb::dict result;
  result["codes"] = FromNpy(std::move(outputs[0]));
  result["values"] = FromNpy(std::move(outputs[1]));
  if (outputs.size() > 2) result["scales"] = FromNpy(std::move(outputs[2]));
  return result;
}

}  // namespace

void BindQuantize(nb::module_& m) {
  m.def("quantize", &Quantize, nb::arg("x"), nb::arg("format"), nb::arg("block"), nb::arg("axis"),
        nb::arg("scale_mode"), nb::arg("rounding"), nb::arg("seed"), nb::arg("stream"), nb::arg("rht"));
}

}  // namespace gemtb::python
