// Placeholder until its area lands; replaced by the owning area.
#include "absl/status/status.h"
#include "tools/gemtb/command.h"

namespace gemtb::cli {

int RunRefTrain(const std::vector<std::string>&) {
  return ReportError("RunRefTrain", absl::UnimplementedError("not built yet"));
}

}  // namespace gemtb::cli
