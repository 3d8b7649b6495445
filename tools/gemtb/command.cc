#include "tools/gemtb/command.h"

#include <filesystem>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace gemtb::cli {

int ReportError(const std::string& command, const absl::Status& status) {
  // One line, whatever the message holds.
  const std::string message = absl::StrReplaceAll(status.message(), {{"\n", " "}});
  std::cerr << "gemtb " << command << ": error: " << message << "\n";
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return kExitBadInput;
    default:
      return kExitCheckFailed;
  }
}

absl::Status WriteOutputs(const std::string& dir,
                          const std::vector<std::pair<std::string, io::NpyArray>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--out-dir=", dir, ": ", ec.message()));
  for (const auto& [name, array] : files) {
    if (absl::Status s = io::WriteNpy((std::filesystem::path(dir) / name).string(), array); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gemtb::cli
