// gemtb ref compare: judges outputs that someone else's kernel produced for a case folder, with
// the GPU criteria: per tensor, the primary bound
//   max|test - ref| <= 2 * max|emu - ref| + 2 * ulp_dtype(max|ref|)
// (ref = fp64 oracle, emu = this oracle's emulate mode with the kernel's input dtype) and the
// secondary rel-L2 bound (5e-3 forward, 1e-2 gradients); LSE by max abs error with -inf in the same
// places.
#include <cmath>
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

// The element of largest |got - ref| (a NaN, or an infinity where the oracle has another value,
// counts as largest), as "[i, j, k]: got G, oracle R".
std::string WorstElement(const check::ReferenceTensor& t, const std::vector<double>& got) {
  size_t worst = 0;
  double worst_diff = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = got[i] == t.ref[i] ? 0 : std::isnan(got[i] - t.ref[i]) ? INFINITY : std::abs(got[i] - t.ref[i]);
    if (diff > worst_diff) {
      worst_diff = diff;
      worst = i;
    }
  }
  std::vector<int64_t> index(t.shape.size());
  size_t rest = worst;
  for (size_t d = t.shape.size(); d-- > 0;) {
    index[d] = static_cast<int64_t>(rest % static_cast<size_t>(t.shape[d]));
    rest /= static_cast<size_t>(t.shape[d]);
  }
  return absl::StrFormat("%s: got %.9g, oracle %.9g", io::ShapeString(index), got[worst], t.ref[worst]);
}

absl::Status Run(const std::vector<std::string>& args, bool* help, bool* all_pass) {
  std::string case_dir, test_dir;
  int64_t threads = 0;
  FlagSet flags("gemtb ref compare --case DIR --test DIR",
                "Checks attention outputs produced elsewhere against the oracle for the inputs and\n"
                "options of the case folder (case.json + .npy inputs). --test must hold every output the\n"
                "case produces: o.npy, lse.npy (softmax) and, when the case has 'do', dq.npy dk.npy dv.npy\n"
                "and ddense.npy drel.npy dts.npy for the biases it gives; a missing one fails. Prints the\n"
                "measured errors per tensor and, for a failing one, its worst element; exit 0 if all\n"
                "pass, 1 otherwise.");
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

  if (!std::filesystem::is_directory(test_dir)) {
    return absl::InvalidArgumentError(absl::StrCat("--test=", test_dir, ": not a folder"));
  }
  auto present = [&](const std::string& name) { return std::filesystem::exists(std::filesystem::path(test_dir) / name); };
  const bool want_backward = c->has_d_o;
  if (!want_backward) {
    for (const char* name : {"dq.npy", "dk.npy", "dv.npy", "ddense.npy", "drel.npy", "dts.npy"}) {
      if (present(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--case=", case_dir, ": --test holds ", name, " but case.json has no 'do' to make gradients"));
      }
    }
  }
  const ElementType dtype = c->inputs.input_type;
  std::optional<reference::TensorView<double>> d_o;
  if (want_backward) d_o = reference::TensorView<double>{c->d_o, c->d_o_shape};
  absl::StatusOr<std::vector<check::ReferenceTensor>> tensors =
      check::ReferenceOutputs(c->inputs, c->options, d_o, static_cast<int>(threads));
  if (!tensors.ok()) return tensors.status();

  // Every output the case produces must be there: a folder holding only some of them is not a pass.
  std::string missing;
  for (const check::ReferenceTensor& t : *tensors) {
    if (!t.shape.empty() && !present(t.file)) absl::StrAppend(&missing, missing.empty() ? "" : ", ", t.file);
  }
  if (!missing.empty()) {
    std::cout << "FAIL: --test=" << test_dir << " lacks " << missing << ", which this case produces\n";
    *all_pass = false;
    return absl::OkStatus();
  }
  int compared = 0;
  *all_pass = true;
  for (const check::ReferenceTensor& t : *tensors) {
    const std::string path = (std::filesystem::path(test_dir) / t.file).string();
    if (t.shape.empty()) {
      if (present(t.file)) return absl::InvalidArgumentError(absl::StrCat(path, ": this case produces no ", t.file));
      continue;
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
    bool pass = true;
    for (const check::Verdict& v : verdicts) {
      std::cout << v.message << "\n";
      pass = pass && v.pass;
    }
    if (!pass) std::cout << t.file.substr(0, t.file.size() - 4) << ": worst element " << WorstElement(t, *got) << "\n";
    *all_pass = *all_pass && pass;
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
