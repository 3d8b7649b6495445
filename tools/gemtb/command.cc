#include "tools/gemtb/command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace gemtb::cli {

std::string OneLine(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"\n", " "}, {"\r", " "}});
}

int ReportError(const std::string& command, const absl::Status& status) {
  std::cerr << "gemtb " << command << ": error: " << OneLine(status.message()) << "\n";
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

absl::Status WriteTextAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::DataLossError(absl::StrCat(path, ": write failed"));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": could not be written"));
  }
  return absl::OkStatus();
}

absl::Status WriteJsonReport(const std::string& path, const nlohmann::json& report) {
  std::ofstream out(path);
  out << report.dump(2) << "\n";
  if (!out) return absl::PermissionDeniedError(absl::StrCat("--json=", path, ": cannot write"));
  return absl::OkStatus();
}

int CheckCommandExit(const std::string& command, const absl::Status& status, bool all_pass) {
  if (!status.ok()) return ReportError(command, status);
  return all_pass ? kExitOk : kExitCheckFailed;
}

}  // namespace gemtb::cli
