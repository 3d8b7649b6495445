// Placeholder until its area lands; replaced by the owning area.
#include "absl/status/status.h"
#include "tools/gemtb/command.h"

namespace gemtb::cli {

int RunGoldenVerify(const std::vector<std::string>&) {
  return ReportError("RunGoldenVerify", absl::UnimplementedError("not built yet"));
}

int RunGoldenRegen(const std::vector<std::string>&) {
  return ReportError("RunGoldenRegen", absl::UnimplementedError("not built yet"));
}

}  // namespace gemtb::cli
