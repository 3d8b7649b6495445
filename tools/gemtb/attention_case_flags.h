// The command-line flags that describe an attention case (reference/io/attention_case.h), shared by
// `gemtb ref attention`, `gemtb ref compare` and `gemtb gpu attention`.
#ifndef GEMTB_TOOLS_GEMTB_ATTENTION_CASE_FLAGS_H_
#define GEMTB_TOOLS_GEMTB_ATTENTION_CASE_FLAGS_H_

#include "reference/io/attention_case.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {

// Registers --q --k ... --broadcast-q on `flags`.
void RegisterAttentionCaseFlags(FlagSet& flags, io::AttentionCaseSpec& spec);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_ATTENTION_CASE_FLAGS_H_
