#include "tools/gemtb/attention_case_flags.h"

#include <filesystem>
#include <variant>

#include "absl/strings/str_cat.h"

namespace gemtb::cli {
namespace {

using Spec = io::AttentionCaseSpec;
using Member = std::variant<std::string Spec::*, std::optional<int64_t> Spec::*, std::optional<double> Spec::*,
                            int64_t Spec::*, bool Spec::*>;

// One flag of a case: its name (the case.json key too), the spec field it sets, whether it names a
// file, and its help line.
struct CaseFlag {
  const char* name;
  Member member;
  bool file;
  const char* help;
};

constexpr CaseFlag kCaseFlags[] = {
    {"q", &Spec::q, true, "queries [TQ,H,Dqk] (.npy: <f8, <f4, <f2, or bfloat16 bits as <u2)"},
    {"k", &Spec::k, true, "keys [TK,Hkv,Dqk], same dtype as q"},
    {"v", &Spec::v, true, "values [TK,Hkv,Dv], same dtype as q"},
    {"q-offsets", &Spec::q_offsets, true, "int64 [nq+1] sequence offsets into q"},
    {"kv-offsets", &Spec::kv_offsets, true, "int64 [nkv+1] sequence offsets into k and v"},
    {"max-lq", &Spec::max_lq, false, "declared max q length (default: the longest)"},
    {"max-lk", &Spec::max_lk, false, "declared max kv length (default: the longest)"},
    {"act", &Spec::act, false, "softmax|identity|gelu|gelu_tanh|silu|relu|relu_square|leaky_relu|hardswish"},
    {"pre-scale", &Spec::pre_scale, false, "scale before act (default 1/sqrt(Dqk) softmax, else 1)"},
    {"post-scale", &Spec::post_scale, false, "scale after act (default 1)"},
    {"mask", &Spec::mask, false, "none|causal|window|block"},
    {"window-left", &Spec::window_left, false, "window(l, r) left extent, -1 = unbounded"},
    {"window-right", &Spec::window_right, false, "window(l, r) right extent, -1 = unbounded"},
    {"block", &Spec::block, false, "block(n) size (default 64)"},
    {"align", &Spec::align, false, "bottom_right (default) | top_left"},
    {"bias-dense", &Spec::bias_dense, true, "dense bias [B,Hb,maxLq,maxLk] (fp32/fp64)"},
    {"bias-rel", &Spec::bias_rel, true, "relative-position bias table [Hr,2*maxL-1]"},
    {"ts", &Spec::ts, true, "int64 [TQ] per-token timestamps (time bias, self-attention)"},
    {"bias-ts", &Spec::bias_ts, true, "time-bucket bias table [Ht,129]"},
    {"rope-q", &Spec::rope_q, true, "RoPE table [TQ,Dqk]: sin in [0,D/2), cos in [D/2,D)"},
    {"rope-k", &Spec::rope_k, true, "RoPE table [TK,Dqk]"},
    {"rope-v", &Spec::rope_v, true, "RoPE table [TK,Dv] (optional)"},
    {"broadcast-q", &Spec::broadcast_q, false, "one q sequence read by every output sequence (PMA)"},
    {"kv-index", &Spec::kv_index, true, "int64 [B]: output b reads kv sequence kv_index[b]"},
    {"do", &Spec::d_o, true, "dO [TO,H,Dv] for the backward, same dtype as q"},
};

template <typename T>
std::string Text(const T& value) {
  return absl::StrCat(value);
}
template <typename T>
std::string Text(const std::optional<T>& value) {
  return value ? absl::StrCat(*value) : "(unset)";
}
std::string Text(bool value) { return value ? "true" : "false"; }

// Two names of one file: the flag's (relative to the working folder) and the case's (joined to the
// case folder) agree when they resolve to the same file.
bool SameFile(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec)) return true;
  return std::filesystem::absolute(a, ec).lexically_normal() == std::filesystem::absolute(b, ec).lexically_normal();
}

}  // namespace

void RegisterAttentionCaseFlags(FlagSet& f, Spec& s) {
  for (const CaseFlag& flag : kCaseFlags) {
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(s.*member)>;
          if constexpr (std::is_same_v<T, std::string>) f.String(flag.name, &(s.*member), flag.help);
          if constexpr (std::is_same_v<T, std::optional<int64_t>>) f.OptionalInt64(flag.name, &(s.*member), flag.help);
          if constexpr (std::is_same_v<T, std::optional<double>>) f.OptionalDouble(flag.name, &(s.*member), flag.help);
          if constexpr (std::is_same_v<T, int64_t>) f.Int64(flag.name, &(s.*member), flag.help);
          if constexpr (std::is_same_v<T, bool>) f.Bool(flag.name, &(s.*member), flag.help);
        },
        flag.member);
  }
}

absl::Status MergeCaseFlags(const FlagSet& flags, const Spec& from_flags, const std::string& case_dir,
                            Spec& from_case) {
  for (const CaseFlag& flag : kCaseFlags) {
    if (!flags.Seen(flag.name)) continue;
    absl::Status conflict;
    std::visit(
        [&](auto member) {
          const auto& given = from_flags.*member;
          auto& in_case = from_case.*member;
          if (!from_case.given.contains(flag.name)) {
            in_case = given;
            return;
          }
          bool same = given == in_case;
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(given)>, std::string>) {
            if (flag.file) same = SameFile(given, in_case);
          }
          if (!same) {
            conflict = absl::InvalidArgumentError(absl::StrCat(
                "--", flag.name, "=", Text(given), " conflicts with --case=", case_dir, ", whose case.json sets ",
                flag.name, " to ", Text(in_case), "; drop the flag or edit the case"));
          }
        },
        flag.member);
    if (!conflict.ok()) return conflict;
  }
  return absl::OkStatus();
}

}  // namespace gemtb::cli
