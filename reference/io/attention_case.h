// An attention call described by files: the .npy inputs and the options, given as command-line flags
// (tools/gemtb/attention_case_flags.h) or as a case folder (case.json with the same keys as the
// flags, paths relative to the folder). `gemtb ref attention`, `gemtb ref compare` and
// `gemtb gpu attention` load cases here, so a case means the same thing to every command.
#ifndef GEMTB_REFERENCE_IO_ATTENTION_CASE_H_
#define GEMTB_REFERENCE_IO_ATTENTION_CASE_H_

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "reference/attention/attention.h"
#include "reference/io/npy.h"

namespace gemtb::io {

// The flag (or case.json) values that define a case, before any file is read. Names stay text
// here; LoadAttentionCase parses them with model/'s parse functions.
struct AttentionCaseSpec {
  std::string q, k, v, q_offsets, kv_offsets, kv_index;
  std::string bias_dense, bias_rel, ts, bias_ts, rope_q, rope_k, rope_v, d_o;
  std::optional<int64_t> max_lq, max_lk;
  std::string act = "softmax";
  std::optional<double> pre_scale, post_scale;
  std::string mask = "none";
  int64_t window_left = -1, window_right = -1, block = 64;
  std::string align = "bottom_right";
  bool broadcast_q = false;
  // The keys a case.json set (flag names without the dashes); empty for a spec from flags.
  std::set<std::string> given;
};

// Reads DIR/case.json into a spec (keys are flag names without the dashes), strictly: unknown keys
// and values of the wrong type or name fail with "<file>.<key>: <value> <rule>".
absl::StatusOr<AttentionCaseSpec> ReadCaseFolder(const std::string& dir);
// The same from the text of DIR/case.json (ReadCaseFolder reads the file and calls this).
absl::StatusOr<AttentionCaseSpec> ParseCaseFolderJson(const std::string& json_text, const std::string& dir);

// The loaded case: owns the decoded values that `inputs` views, except fp64 Q, K and V lent by an
// ArraySource, which `inputs` views where they are (q, k, v then stay empty).
struct AttentionCase {
  AttentionOptions options;
  reference::AttentionInputs inputs;
  NpyDType input_dtype = NpyDType::kFloat64;
  std::vector<double> q, k, v, bias_dense, bias_rel, bias_ts, rope_q, rope_k, rope_v, d_o;
  std::vector<int64_t> q_offsets, kv_offsets, kv_index, ts;
  std::vector<int64_t> d_o_shape;
  bool has_d_o = false;
};

// The options of `spec` (act, mask and align parsed by name; scales, window, block and broadcast_q
// as given); an unknown name fails as "<flag_prefix><key>=<value>: ...". LoadAttentionCase calls it
// with "--"; the Python GPU binding, whose keywords have no dashes, with "".
absl::StatusOr<AttentionOptions> AttentionOptionsOf(const AttentionCaseSpec& spec, absl::string_view flag_prefix);

// Reads every file of `spec`, checks dtypes agree and builds the inputs; then validates the whole
// call with the oracle's own checks, so an error names the field before anything is computed.
absl::StatusOr<AttentionCase> LoadAttentionCase(const AttentionCaseSpec& spec);
// The same with the arrays taken from `read`, called with each non-empty file field of `spec` (the
// Python bindings name arrays there instead of files, and lend their bytes, which must stay valid
// while the loaded case is used); an empty `read` reads the files.
using ArraySource = std::function<absl::StatusOr<NpyView>(const std::string& name)>;
absl::StatusOr<AttentionCase> LoadAttentionCase(const AttentionCaseSpec& spec, const ArraySource& read);

ElementType ToElementType(NpyDType dtype);

}  // namespace gemtb::io

#endif  // GEMTB_REFERENCE_IO_ATTENTION_CASE_H_
