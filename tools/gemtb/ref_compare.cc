// gemtb ref compare: judges outputs that someone else's kernel produced for a case folder, with
// spec/attention.md §9's GPU criteria: per tensor, the primary bound
//   max|test - ref| <= 2 * max|emu - ref| + 2 * ulp_dtype(max|ref|)
// (ref = fp64 oracle, emu = this oracle's emulate mode with the kernel's input dtype) and the
// secondary rel-L2 bound (5e-3 forward, 1e-2 gradients); LSE by max abs error with -inf in the same
// places.
#include <filesystem>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/common/status_macros.h"
#include "reference/attention/attention.h"
#include "reference/io/attention_case.h"
#include "tools/check/attention_compare.h"
#include "tools/check/criteria.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {
namespace {

constexpr char kCommand[] = "ref compare";

absl::Status Run(const std::vector<std::string>& args, bool* help, bool* all_pass) {
  std::string case_dir, test_dir;
  int64_t threads = 0;
  FlagSet flags("gemtb ref compare --case DIR --test DIR",
                "Checks attention outputs produced elsewhere (o.npy, lse.npy, dq.npy, dk.npy, dv.npy,\n"
                "ddense.npy, drel.npy, dts.npy: whichever are in --test) against the oracle for the\n"
                "inputs and options of the case folder (case.json + .npy inputs, and do.npy for\n"
                "gradients). Prints the measured errors per tensor; exit 0 if all pass, 1 otherwise.");
  flags.String("case", &case_dir, "case folder: case.json (keys = `ref attention` flag names) + inputs");
  flags.String("test", &test_dir, "folder with the outputs to judge");
  flags.Int64("threads", &threads, "oneTBB threads for the oracle, 0 = all");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  if (case_dir.empty()) return absl::InvalidArgumentError("--case: required");
  if (test_dir.empty()) return absl::InvalidArgumentError("--test: required");
  if (threads < 0 || threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", threads, ": want 0..4096"));
  }
  absl::StatusOr<io::AttentionCaseSpec> spec = io::ReadCaseFolder(case_dir);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<io::AttentionCase> c = io::LoadAttentionCase(*spec);
  if (!c.ok()) return c.status();

  auto present = [&](const char* name) { return std::filesystem::exists(std::filesystem::path(test_dir) / name); };
  const bool want_backward = present("dq.npy") || present("dk.npy") || present("dv.npy") ||
                             present("ddense.npy") || present("drel.npy") || present("dts.npy");
  if (want_backward && !c->has_d_o) {
    return absl::InvalidArgumentError(absl::StrCat("--case=", case_dir, ": gradients to compare but case.json has no 'do'"));
  }
  const ElementType dtype = c->inputs.input_type;
  std::optional<reference::TensorView<double>> d_o;
  if (want_backward) d_o = reference::TensorView<double>{c->d_o, c->d_o_shape};
  absl::StatusOr<std::vector<check::ReferenceTensor>> tensors =
      check::ReferenceOutputs(c->inputs, c->options, d_o, static_cast<int>(threads));
  if (!tensors.ok()) return tensors.status();

  int compared = 0;
  *all_pass = true;
  for (const check::ReferenceTensor& t : *tensors) {
    if (!present(t.file.c_str())) continue;
    const std::string path = (std::filesystem::path(test_dir) / t.file).string();
    if (t.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": this case produces no ", t.file));
    }
    absl::StatusOr<io::NpyArray> array = io::ReadNpy(path);
    if (!array.ok()) return array.status();
    if (array->shape != t.shape) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": shape ", io::ShapeString(array->shape),
                                                     ", expected ", io::ShapeString(t.shape)));
    }
    absl::StatusOr<std::vector<double>> got = io::DecodeFloat(*array, path);
    if (!got.ok()) return got.status();
    ++compared;
    const std::vector<check::Verdict> verdicts = check::JudgeTensor(t, *got);
    for (const check::Verdict& v : verdicts) {
      std::cout << v.message << "\n";
      *all_pass = *all_pass && v.pass;
    }
  }
  if (compared == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--test=", test_dir, ": holds none of o.npy lse.npy dq.npy dk.npy dv.npy ddense.npy drel.npy dts.npy"));
  }
  std::cout << (*all_pass ? "PASS" : "FAIL") << ": " << compared << " tensors compared against the oracle (input dtype "
            << check::ElementTypeName(dtype) << ")\n";
  return absl::OkStatus();
}

}  // namespace

int RunRefCompare(const std::vector<std::string>& args) {
  bool help = false;
  bool all_pass = false;
  if (absl::Status s = Run(args, &help, &all_pass); !s.ok()) return ReportError(kCommand, s);
  if (help) return kExitOk;
  return all_pass ? kExitOk : kExitCheckFailed;
}

}  // namespace gemtb::cli
