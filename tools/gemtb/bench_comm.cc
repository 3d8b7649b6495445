// Placeholder until its area lands; replaced by the owning area.
#include "absl/status/status.h"
#include "tools/gemtb/command.h"

namespace gemtb::cli {

int RunBenchComm(const std::vector<std::string>&) {
  return ReportError("RunBenchComm", absl::UnimplementedError("not built yet"));
}

}  // namespace gemtb::cli
