// gemtb ref quantize: the bit-exact codecs of model/numerics on a user's .npy tensor.
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "reference/io/npy.h"
#include "reference/quantize/quantize.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"
#include "tools/gemtb/output_set.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "ref quantize";

absl::Status Run(const std::vector<std::string>& args, bool* help) {
  std::string in_path, format, block, scale_mode = "rceil", rounding = "rne", out_dir;
  int64_t axis = -1, seed = 0, stream = 0, rht = 0;
  bool force = false;
  FlagSet flags(
      "gemtb ref quantize --in FILE --format bf16|fp16|e4m3|e5m2|e2m3|e3m2|e2m1 [--block 32|32x32 --axis N "
      "--scale-mode rceil|floor] [--rounding rne|stochastic --seed S --stream T] [--rht 32|64|128] --out-dir DIR",
      "Quantises a .npy tensor with the bit-exact codecs (docs/quantize.md) and writes codes.npy\n"
      "(<u2 for bf16/fp16, |u1 for fp8, fp6 and fp4: one code per byte, in its low bits), scales.npy\n"
      "(E8M0 codes, MX only) and values.npy (the decoded values, float64; after the RHT when --rht is\n"
      "given). e4m3/e5m2 are FP8, e2m3/e3m2 FP6 and e2m1 FP4 (OCP MX v1.0; ml_dtypes' float8_e4m3fn,\n"
      "float8_e5m2, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn); they saturate at their largest value,\n"
      "and NaN gives FP8's NaN code, or +max in FP6/FP4, which have no NaN. --block 32 forms MX blocks\n"
      "(MXFP8, MXFP6, MXFP4) of 32 along --axis; --block 32x32 tiles the last two axes. Stochastic\n"
      "rounding takes the low 16 bits of Philox4x32-10 word (seed, stream, flat element index); the\n"
      "RHT's signs come from (seed, stream).");
  flags.String("in", &in_path, "input .npy (<f8, <f4, <f2 or bfloat16 bits <u2)");
  flags.String("format", &format, reference::kQuantFormatChoices);
  flags.String("block", &block, "MX blocks: 32 (along --axis) or 32x32 (last two axes); fp8, fp6, fp4 only");
  flags.Int64("axis", &axis, "block / RHT axis, negative from the end (default -1)");
  flags.String("scale-mode", &scale_mode, "E8M0 scale rule: rceil (default) | floor");
  flags.String("rounding", &rounding, "rne (default) | stochastic");
  flags.Int64("seed", &seed, "Philox seed for stochastic rounding and RHT signs (default 0)");
  flags.Int64("stream", &stream, "Philox stream (default 0)");
  flags.Int64("rht", &rht, "randomized Hadamard transform block size 32|64|128 before quantising");
  flags.String("out-dir", &out_dir, "output folder (created; its parent must exist)");
  flags.Bool("force", &force, "replace an --out-dir that already holds files, as a whole");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  if (in_path.empty()) return absl::InvalidArgumentError("--in: required");
  absl::StatusOr<OutputSet> output = OutputSet::Prepare("--out-dir", out_dir, {.force = force, .fail_write_at = {}});
  if (!output.ok()) return output.status();
  reference::QuantizeOptions o;
  if (std::optional<reference::QuantFormat> f = ParseIn(reference::kQuantFormatNames, format)) {
    o.format = *f;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--format=", format, ": want ", reference::kQuantFormatChoices));
  }
  if (block.empty()) o.block = reference::QuantBlock::kNone;
  else if (block == "32") o.block = reference::QuantBlock::kAxis32;
  else if (block == "32x32") o.block = reference::QuantBlock::kSquare32;
  else return absl::InvalidArgumentError(absl::StrCat("--block=", block, ": want 32 or 32x32"));
  if (scale_mode == "rceil") o.scale_rule = numerics::MxScaleRule::kRceil;
  else if (scale_mode == "floor") o.scale_rule = numerics::MxScaleRule::kFloor;
  else return absl::InvalidArgumentError(absl::StrCat("--scale-mode=", scale_mode, ": want rceil|floor"));
  if (rounding == "rne") o.stochastic = false;
  else if (rounding == "stochastic") o.stochastic = true;
  else return absl::InvalidArgumentError(absl::StrCat("--rounding=", rounding, ": want rne|stochastic"));
  if (seed < 0) return absl::InvalidArgumentError(absl::StrCat("--seed=", seed, ": must be >= 0"));
  if (stream < 0) return absl::InvalidArgumentError(absl::StrCat("--stream=", stream, ": must be >= 0"));
  if (axis < -64 || axis > 64) return absl::InvalidArgumentError(absl::StrCat("--axis=", axis, ": out of range"));
  if (rht < 0 || rht > 128) return absl::InvalidArgumentError(absl::StrCat("--rht=", rht, ": want 32, 64 or 128"));
  o.axis = static_cast<int>(axis);
  o.seed = static_cast<uint64_t>(seed);
  o.stream = static_cast<uint64_t>(stream);
  o.rht = static_cast<int>(rht);

  absl::StatusOr<io::NpyArray> array = io::ReadNpy(in_path);
  if (!array.ok()) return array.status();
  absl::StatusOr<std::vector<double>> x = io::DecodeFloat(*array, absl::StrCat("--in=", in_path));
  if (!x.ok()) return x.status();
  absl::StatusOr<reference::QuantizeResult> r = reference::Quantize(*x, array->shape, o);
  if (!r.ok()) return r.status();

  if (r->code_bits == 8) {
    std::vector<uint8_t> codes(r->codes.begin(), r->codes.end());
    output->AddNpy("codes.npy", io::EncodeUInt8(codes, array->shape));
  } else {
    output->AddNpy("codes.npy", io::EncodeUInt16(r->codes, array->shape));
  }
  if (!r->scales_shape.empty()) output->AddNpy("scales.npy", io::EncodeUInt8(r->scales, r->scales_shape));
  output->AddNpy("values.npy", io::EncodeFloat(r->values, array->shape, io::NpyDType::kFloat64));
  return output->Commit();
}

}  // namespace

int RunRefQuantize(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Run(args, &help); !s.ok()) return ReportError(kCommand, s);
  return kExitOk;
}

}  // namespace gemtb::cli
