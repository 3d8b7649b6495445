// gemtb.testing's attention half: the random cases and the judgement of `gemtb check attention`
// (tools/check/attention_check.h), so that a Python caller (gemtb.gpu's tests, a user's own kernel)
// draws the same cases from the same seeds and is held to the same criteria, computed by the same
// code, rather than to numbers re-derived in Python. Needs no GPU.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/src/arrays.h"
#include "reference/io/npy.h"
#include "tools/check/attention_cases.h"
#include "tools/check/attention_check.h"

namespace gemtb::python {
namespace {

check::Family FamilyOf(const std::string& name) {
  absl::StatusOr<std::vector<check::Family>> families = check::ParseFamilies(name);
  if (!families.ok() || families->size() != 1 || name == "all") {
    Raise(absl::InvalidArgumentError(absl::StrCat("family=", name, ": want one act/mask, e.g. silu/causal")));
  }
  return families->front();
}

void CheckMaxLength(int64_t max_length) {
  if (max_length < 1 || max_length > 8192) {
    Raise(absl::InvalidArgumentError(absl::StrCat("max_length=", max_length, ": want 1..8192")));
  }
}

io::NpyDType WireType(ElementType type) {
  return type == ElementType::kBFloat16 ? io::NpyDType::kBFloat16 : io::NpyDType::kFloat16;
}

// The case's cotangent, as `gemtb check attention` seeds it.
std::vector<double> CotangentOf(const check::AttentionCase& c, int64_t case_seed) {
  return check::RandomCotangent(c, static_cast<uint64_t>(case_seed) ^ 0x5DEECE66Dull);
}

nb::dict Case(const std::string& family_name, int64_t index, int64_t seed, int64_t max_length) {
  const check::Family family = FamilyOf(family_name);
  CheckMaxLength(max_length);
  if (index < 0) Raise(absl::InvalidArgumentError(absl::StrCat("index=", index, ": must be >= 0")));
  const int64_t case_seed = check::CaseSeed(seed, check::FamilyIndex(family), index);
  const check::AttentionCase c = check::DrawCase(case_seed, family, max_length);
  const io::NpyDType type = WireType(c.input_type);
  nb::dict arrays;
  arrays["q"] = FromNpy(io::EncodeFloat(c.q.data, c.q.shape, type));
  arrays["k"] = FromNpy(io::EncodeFloat(c.k.data, c.k.shape, type));
  arrays["v"] = FromNpy(io::EncodeFloat(c.v.data, c.v.shape, type));
  arrays["do"] = FromNpy(io::EncodeFloat(CotangentOf(c, case_seed), {check::OutputRows(c), c.heads(), c.dv()}, type));
  arrays["q_offsets"] = FromNpy(io::EncodeInt64(c.q_offsets.data, c.q_offsets.shape));
  arrays["kv_offsets"] = FromNpy(io::EncodeInt64(c.kv_offsets.data, c.kv_offsets.shape));
  if (c.kv_index.present()) arrays["kv_index"] = FromNpy(io::EncodeInt64(c.kv_index.data, c.kv_index.shape));
  const AttentionOptions& o = c.options;
  nb::dict options;
  options["act"] = std::string(ActivationName(o.act));
  options["mask"] = std::string(MaskKindName(o.mask));
  options["align"] = std::string(AlignmentName(o.align));
  options["pre_scale"] = o.pre_scale ? nb::cast(*o.pre_scale) : nb::none();
  options["post_scale"] = o.post_scale ? nb::cast(*o.post_scale) : nb::none();
  options["window"] = nb::make_tuple(o.window_left, o.window_right);
  options["block"] = o.block;
  options["max_lq"] = c.max_lq;
  options["max_lk"] = c.max_lk;
  options["broadcast_q"] = o.broadcast_q;
  nb::dict result;
  result["case_seed"] = case_seed;
  result["description"] = check::Describe(c);
  result["arrays"] = arrays;
  result["options"] = options;
  return result;
}

std::vector<double> Values(const WireMap& outputs, const char* key) {
  auto it = outputs.find(key);
  if (it == outputs.end()) return {};
  io::NpyArray array = Value(ToNpy(key, it->second));
  return Value(io::DecodeFloat(array, key));
}

nb::dict Judge(const std::string& family_name, int64_t case_seed, int64_t max_length, const WireMap& outputs,
               int threads) {
  const check::Family family = FamilyOf(family_name);
  CheckMaxLength(max_length);
  if (threads < 0 || threads > 4096) Raise(absl::InvalidArgumentError(absl::StrCat("threads=", threads, ": want 0..4096")));
  for (const auto& [key, wire] : outputs) {
    (void)wire;
    if (key != "o" && key != "lse" && key != "dq" && key != "dk" && key != "dv") {
      Raise(absl::InvalidArgumentError(absl::StrCat(key, ": not an output (o, lse, dq, dk, dv)")));
    }
  }
  for (const char* key : {"o", "dq", "dk", "dv"}) {
    if (!outputs.contains(key)) Raise(absl::InvalidArgumentError(absl::StrCat(key, ": missing")));
  }
  const check::AttentionCase c = check::DrawCase(case_seed, family, max_length);
  check::GpuOutputs got;
  got.o = Values(outputs, "o");
  got.lse = Values(outputs, "lse");
  got.dq = Values(outputs, "dq");
  got.dk = Values(outputs, "dk");
  got.dv = Values(outputs, "dv");
  check::CaseResult r;
  {
    nb::gil_scoped_release release;
    r = check::Judge(c, CotangentOf(c, case_seed), got, threads);
  }
  nb::dict result;
  result["passed"] = r.pass;
  result["excused"] = r.excused;
  result["relaxed"] = r.relaxed;
  result["failures"] = r.failures;
  result["description"] = r.description;
  return result;
}

}  // namespace

void BindTesting(nb::module_& m) {
  m.def("testing_attention_families", [] {
    std::vector<std::string> names;
    for (const check::Family& f : check::AllFamilies()) names.push_back(f.Name());
    return names;
  });
  m.def("testing_attention_case", &Case, nb::arg("family"), nb::arg("index"), nb::arg("seed"),
        nb::arg("max_length"));
  m.def("testing_attention_judge", &Judge, nb::arg("family"), nb::arg("case_seed"), nb::arg("max_length"),
        nb::arg("outputs"), nb::arg("threads"));
}

}  // namespace gemtb::python
