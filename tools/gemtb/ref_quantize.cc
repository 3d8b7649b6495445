#include "tools/gemtb/command.h"
namespace gemtb::cli {
int RunRefQuantize(const std::vector<std::string>&) { return ReportError("ref quantize", absl::UnimplementedError("todo")); }
}
