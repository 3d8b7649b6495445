// Golden vectors of the quantisers (reference/quantize): bf16 / fp16 / E4M3 /
// E5M2 / E2M3 / E3M2 / E2M1 by round-to-nearest-even and stochastic rounding, MX blocks of 32 along an
// axis and 32x32 tiles with both E8M0 scale rules, and the randomized Hadamard transform. Two shared inputs live in
// quantize/inputs/: x.npy (float32 [32, 64], rows spanning 2^-16 .. 2^15 with outliers) and
// special.npy (float64 [64]: zeros, infinities, NaN, overflow and subnormal edges, exact ties).
// Each case folder holds what `gemtb ref quantize --in ../inputs/<input>.npy ...` writes: codes.npy,
// scales.npy (MX) and values.npy.
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "reference/quantize/quantize.h"
#include "golden/inputs.h"
#include "golden/params.h"
#include "golden/registry.h"

namespace gemtb::golden {
namespace {

using nlohmann::json;

constexpr int64_t kRows = 32, kCols = 64;
constexpr uint64_t kInputSeed = 2026, kInputStream = 1, kOutlierStream = 2;

// x [32, 64]: row r has magnitude ~2^(r-16); every 13th element is a 2^6 outlier (which MX scales
// must absorb); one exact zero and one negative zero per row. All values are fp32.
std::vector<double> MakeX() {
  std::vector<double> x(static_cast<size_t>(kRows * kCols));
  for (int64_t r = 0; r < kRows; ++r) {
    const double scale = std::ldexp(1.0, static_cast<int>(r) - 16);  // exact power of two
    for (int64_t c = 0; c < kCols; ++c) {
      const uint64_t i = static_cast<uint64_t>(r * kCols + c);
      double v = golden::Bell(kInputSeed, kInputStream, i) * scale;
      if ((r * kCols + c) % 13 == 5) v *= 64.0 + golden::Uniform(kInputSeed, kOutlierStream, i);
      if (c == 7) v = 0.0;
      if (c == 11) v = -0.0;
      x[i] = golden::RoundTo(v, ElementType::kFloat32);
    }
  }
  return x;
}

// special [64]: values at the edges of every format, then bell values over a wide range.
std::vector<double> MakeSpecial() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> s = {
      0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(),
      65504.0, 65519.0, 65520.0, -65520.0,               // fp16 max, below/at the overflow tie
      448.0, 464.0, 480.0, -500.0,                       // E4M3 max and past it
      57344.0, 61440.0, 65536.0,                         // E5M2 max, its tie, past it
      3.3895313892515355e38, 3.402823466385289e38,       // bf16 max, fp32 max
      std::ldexp(1.0, -24), std::ldexp(1.0, -25), std::ldexp(3.0, -26),    // fp16 subnormal edges
      std::ldexp(1.0, -133), std::ldexp(1.0, -134), std::ldexp(1.0, -149),  // bf16 subnormals / ties
      std::ldexp(1.0, -9), std::ldexp(1.0, -10), std::ldexp(1.0, -17), std::ldexp(1.0, -18),  // fp8 subnormals
      1.0 + std::ldexp(1.0, -8), 1.0 + std::ldexp(3.0, -8),              // bf16 ties to even
      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),                  // just above a bf16 tie
      1.0 + std::ldexp(1.0, -11), 1.0 + std::ldexp(1.0, -4), 1.0 + std::ldexp(1.0, -3),  // fp16/e4m3/e5m2 ties
      -1.0 - std::ldexp(1.0, -4),
      1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -52),  // double rounding through fp32 would fail
  };
  for (size_t i = s.size(); i < 64; ++i) {
    s.push_back(golden::Bell(kInputSeed, 3, i) * std::ldexp(1.0, static_cast<int>(i % 40) - 20));
  }
  return s;
}

absl::StatusOr<std::vector<GoldenFile>> RunInputs(const json&) {
  std::vector<GoldenFile> files;
  files.push_back(InputFile("x.npy", io::EncodeFloat(MakeX(), {kRows, kCols}, io::NpyDType::kFloat32)));
  const std::vector<double> special = MakeSpecial();
  files.push_back(InputFile("special.npy", io::EncodeFloat(special, {static_cast<int64_t>(special.size())}, io::NpyDType::kFloat64)));
  return files;
}

absl::StatusOr<std::vector<GoldenFile>> Run(const json& j) {
  const golden::Params p(j);
  std::string input = "x", format, block = "none", scale_mode = "rceil", rounding = "rne";
  int64_t axis = -1, seed = 0, stream = 0, rht = 0;
  GEMTB_RETURN_IF_ERROR(p.String("input", &input));
  GEMTB_RETURN_IF_ERROR(p.String("format", &format));
  GEMTB_RETURN_IF_ERROR(p.String("block", &block));
  GEMTB_RETURN_IF_ERROR(p.String("scale_mode", &scale_mode));
  GEMTB_RETURN_IF_ERROR(p.String("rounding", &rounding));
  GEMTB_RETURN_IF_ERROR(p.Int("axis", &axis));
  GEMTB_RETURN_IF_ERROR(p.Int("seed", &seed));
  GEMTB_RETURN_IF_ERROR(p.Int("stream", &stream));
  GEMTB_RETURN_IF_ERROR(p.Int("rht", &rht));
  reference::QuantizeOptions o;
  if (std::optional<reference::QuantFormat> f = ParseIn(reference::kQuantFormatNames, format)) {
    o.format = *f;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("params.format=", format));
  }
  if (block == "none") o.block = reference::QuantBlock::kNone;
  else if (block == "32") o.block = reference::QuantBlock::kAxis32;
  else if (block == "32x32") o.block = reference::QuantBlock::kSquare32;
  else return absl::InvalidArgumentError(absl::StrCat("params.block=", block));
  o.scale_rule = scale_mode == "floor" ? numerics::MxScaleRule::kFloor : numerics::MxScaleRule::kRceil;
  o.stochastic = rounding == "stochastic";
  o.axis = static_cast<int>(axis);
  o.seed = static_cast<uint64_t>(seed);
  o.stream = static_cast<uint64_t>(stream);
  o.rht = static_cast<int>(rht);
  std::vector<double> x;
  std::vector<int64_t> shape;
  if (input == "x") {
    x = MakeX();
    shape = {kRows, kCols};
  } else if (input == "special") {
    x = MakeSpecial();
    shape = {static_cast<int64_t>(x.size())};
  } else {
    return absl::InvalidArgumentError(absl::StrCat("params.input=", input));
  }
  absl::StatusOr<reference::QuantizeResult> r = reference::Quantize(x, shape, o);
  if (!r.ok()) return r.status();
  std::vector<GoldenFile> files;
  if (r->code_bits == 8) {
    files.push_back(OutputFile("codes.npy", io::EncodeUInt8(std::vector<uint8_t>(r->codes.begin(), r->codes.end()), shape)));
  } else {
    files.push_back(OutputFile("codes.npy", io::EncodeUInt16(r->codes, shape)));
  }
  if (!r->scales_shape.empty()) files.push_back(OutputFile("scales.npy", io::EncodeUInt8(r->scales, r->scales_shape)));
  files.push_back(OutputFile("values.npy", io::EncodeFloat(r->values, shape, io::NpyDType::kFloat64)));
  return files;
}

}  // namespace

absl::StatusOr<std::vector<GoldenFile>> RunQuantizeInputProducer(const json& params) { return RunInputs(params); }
absl::StatusOr<std::vector<GoldenFile>> RunQuantizeProducer(const json& params) { return Run(params); }

void AddQuantizeProducers(std::vector<GoldenProducer>& out) {
  out.push_back({"quantize/inputs", "quantize_input", json::object()});
  auto add = [&](const std::string& name, json params) {
    out.push_back({absl::StrCat("quantize/", name), "quantize", std::move(params)});
  };
  const json sr = {{"rounding", "stochastic"}, {"seed", 7}, {"stream", 1}};
  for (const char* format : {"bf16", "fp16", "e4m3", "e5m2"}) {
    add(absl::StrCat(format, "_rne"), {{"input", "x"}, {"format", format}});
    add(absl::StrCat(format, "_rne_special"), {{"input", "special"}, {"format", format}});
    json c = sr;
    c["input"] = "x";
    c["format"] = format;
    add(absl::StrCat(format, "_sr"), c);
  }
  // MX: E8M0 scale per block, both scale rules, along either axis or in 32x32 tiles.
  for (const char* format : {"e4m3", "e5m2"}) {
    for (const char* rule : {"rceil", "floor"}) {
      add(absl::StrCat(format, "_mx32_", rule), {{"format", format}, {"block", "32"}, {"axis", -1}, {"scale_mode", rule}});
      add(absl::StrCat(format, "_mx32x32_", rule), {{"format", format}, {"block", "32x32"}, {"scale_mode", rule}});
    }
  }
  add("e4m3_mx32_axis0_rceil", {{"format", "e4m3"}, {"block", "32"}, {"axis", 0}, {"scale_mode", "rceil"}});
  add("e4m3_mx32_sr", {{"format", "e4m3"}, {"block", "32"}, {"axis", -1}, {"rounding", "stochastic"}, {"seed", 7}, {"stream", 2}});
  add("e5m2_mx32x32_floor_sr", {{"format", "e5m2"}, {"block", "32x32"}, {"scale_mode", "floor"}, {"rounding", "stochastic"},
                                {"seed", 9}, {"stream", 0}});
  // Randomized Hadamard transform before quantising.
  add("e4m3_mx32_rht32", {{"format", "e4m3"}, {"block", "32"}, {"axis", -1}, {"rht", 32}, {"seed", 3}, {"stream", 4}});
  add("e4m3_mx32x32_rht64", {{"format", "e4m3"}, {"block", "32x32"}, {"rht", 64}, {"seed", 3}, {"stream", 5}});
  add("e5m2_mx32_axis0_rht32_sr", {{"format", "e5m2"}, {"block", "32"}, {"axis", 0}, {"rht", 32}, {"rounding", "stochastic"},
                                   {"seed", 3}, {"stream", 6}});
  add("bf16_rht64", {{"format", "bf16"}, {"axis", -1}, {"rht", 64}, {"seed", 3}, {"stream", 7}});
  // OCP MX fp6 / fp4 elements: RNE on both inputs (saturation, NaN to +max), SR, MXFP6 / MXFP4 blocks
  // with FLOOR along an axis and RCEIL in tiles, and MXFP4 with RHT and SR (a training recipe).
  for (const char* format : {"e2m3", "e3m2", "e2m1"}) {
    add(absl::StrCat(format, "_rne"), {{"input", "x"}, {"format", format}});
    add(absl::StrCat(format, "_rne_special"), {{"input", "special"}, {"format", format}});
    json c = sr;
    c["input"] = "x";
    c["format"] = format;
    add(absl::StrCat(format, "_sr"), c);
    add(absl::StrCat(format, "_mx32_floor"), {{"format", format}, {"block", "32"}, {"axis", -1}, {"scale_mode", "floor"}});
    add(absl::StrCat(format, "_mx32x32_rceil"), {{"format", format}, {"block", "32x32"}, {"scale_mode", "rceil"}});
  }
  add("e2m1_mx32_rht32_sr", {{"format", "e2m1"}, {"block", "32"}, {"axis", -1}, {"rht", 32}, {"rounding", "stochastic"},
                             {"seed", 3}, {"stream", 8}});
}

}  // namespace gemtb::golden
