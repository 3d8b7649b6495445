// Placeholder until its area lands; replaced by the owning area.
#include "absl/status/status.h"
#include "tools/gemtb/command.h"

namespace gemtb::cli {

int RunWhatifCollective(const std::vector<std::string>&) {
  return ReportError("RunWhatifCollective", absl::UnimplementedError("not built yet"));
}

int RunWhatifCalibrate(const std::vector<std::string>&) {
  return ReportError("RunWhatifCalibrate", absl::UnimplementedError("not built yet"));
}

}  // namespace gemtb::cli
