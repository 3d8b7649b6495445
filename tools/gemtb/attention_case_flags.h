// The command-line flags that describe an attention case (reference/io/attention_case.h), shared by
// `gemtb ref attention`, `gemtb ref compare` and `gemtb gpu attention`.
#ifndef GEMTB_TOOLS_GEMTB_ATTENTION_CASE_FLAGS_H_
#define GEMTB_TOOLS_GEMTB_ATTENTION_CASE_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "reference/io/attention_case.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {

// Registers --q --k ... --broadcast-q on `flags`.
void RegisterAttentionCaseFlags(FlagSet& flags, io::AttentionCaseSpec& spec);

// With --case: every case flag given on the command line joins `from_case`. One the case.json sets
// too must agree with it (files: the same file), else the error names both values; one the case
// leaves out sets it.
absl::Status MergeCaseFlags(const FlagSet& flags, const io::AttentionCaseSpec& from_flags,
                            const std::string& case_dir, io::AttentionCaseSpec& from_case);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_ATTENTION_CASE_FLAGS_H_
