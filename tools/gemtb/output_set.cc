#include "tools/gemtb/output_set.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;

enum class Target { kAbsent, kEmpty, kHoldsFiles };

// What is at `dir` now. A file where the folder should be, or (when it would be replaced) a folder
// holding anything but plain files, is an error.
absl::StatusOr<Target> Inspect(const std::string& flag, const fs::path& dir, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (!fs::exists(st)) return Target::kAbsent;
  const std::string name = absl::StrCat(flag, "=", dir.string());
  if (!fs::is_directory(st)) return absl::InvalidArgumentError(absl::StrCat(name, ": exists and is not a folder"));
  std::vector<std::string> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (force && !it->is_regular_file(ec)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": holds '", it->path().filename().string(),
                                                     "', which is not a plain file; --force replaces only a "
                                                     "folder of files"));
    }
    entries.push_back(it->path().filename().string());
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot list: ", ec.message()));
  if (entries.empty()) return Target::kEmpty;
  if (!force) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": already holds outputs ('", entries.front(), "'",
                                                   entries.size() > 1 ? absl::StrCat(" and ", entries.size() - 1, " more") : "",
                                                   "); pass --force to replace the folder as a whole"));
  }
  return Target::kHoldsFiles;
}

// Writes `head` then `body` with gathered writes (one call unless the kernel writes less).
absl::Status WriteFile(const fs::path& path, const std::vector<uint8_t>& head, const std::vector<uint8_t>& body,
                       bool fail_half_way) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return absl::DataLossError(absl::StrCat(path.string(), ": cannot create: ", std::strerror(errno)));
  const size_t total = head.size() + body.size();
  const size_t limit = fail_half_way ? total / 2 : total;
  size_t done = 0;
  int error = 0;
  while (done < limit) {
    iovec parts[2];
    int count = 0;
    if (done < head.size()) {
      const size_t n = std::min(head.size() - done, limit - done);
      parts[count++] = {const_cast<uint8_t*>(head.data()) + done, n};
    }
    const size_t body_done = done > head.size() ? done - head.size() : 0;
    const size_t body_limit = limit - std::min(limit, head.size());
    if (body_done < body_limit) {
      parts[count++] = {const_cast<uint8_t*>(body.data()) + body_done, body_limit - body_done};
    }
    const ssize_t n = ::writev(fd, parts, count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == 0 && fail_half_way) error = ENOSPC;
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) return absl::DataLossError(absl::StrCat(path.string(), ": write failed: ", std::strerror(error)));
  return absl::OkStatus();
}

absl::Status FsyncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::DataLossError(absl::StrCat(dir.string(), ": cannot open: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) return absl::DataLossError(absl::StrCat(dir.string(), ": fsync failed: ", std::strerror(error)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OutputSet> OutputSet::Prepare(std::string flag, std::string dir, OutputSetOptions options) {
  if (dir.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": required"));
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path clean = target.has_filename() ? target : target.parent_path();
  const fs::path parent = clean.parent_path();
  const std::string name = absl::StrCat(flag, "=", dir);
  if (clean == parent) return absl::InvalidArgumentError(absl::StrCat(name, ": not a folder that can be replaced"));
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the parent folder ", parent.string(), " does not exist"));
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the parent folder ", parent.string(),
                                                   " is not writable: ", std::strerror(errno)));
  }
  absl::StatusOr<Target> state = Inspect(flag, clean, options.force);
  if (!state.ok()) return state.status();
  return OutputSet(std::move(flag), clean.string(), options);
}

void OutputSet::AddNpy(std::string name, io::NpyArray array) {
  std::vector<uint8_t> head = io::NpyHeaderBytes(array);
  files_.push_back({std::move(name), std::move(head), std::move(array.data)});
}

void OutputSet::AddText(std::string name, const std::string& text) {
  files_.push_back({std::move(name), {}, std::vector<uint8_t>(text.begin(), text.end())});
}

absl::Status OutputSet::Commit() {
  const fs::path target(dir_);
  const fs::path parent = target.parent_path();
  std::string pattern = (parent / absl::StrCat(".", target.filename().string(), ".tmp.XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::DataLossError(absl::StrCat(flag_, "=", dir_, ": cannot create a folder beside it: ", std::strerror(errno)));
  }
  const fs::path staging(pattern);
  auto discard = [&](absl::Status status) {
    std::error_code ec;
    fs::remove_all(staging, ec);
    return status;
  };
  // mkdtemp makes the folder private (0700); the outputs get the mode a plain mkdir would give.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::chmod(staging.c_str(), 0777 & ~mask) != 0) {
    return discard(absl::DataLossError(absl::StrCat(staging.string(), ": chmod failed: ", std::strerror(errno))));
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    absl::Status written = WriteFile(staging / files_[i].name, files_[i].head, files_[i].body, options_.fail_write_at == i);
    if (!written.ok()) {
      return discard(absl::DataLossError(absl::StrCat(flag_, "=", dir_, ": nothing written, the previous contents are "
                                                      "unchanged: ", written.message())));
    }
  }
  if (absl::Status synced = FsyncDir(staging); !synced.ok()) return discard(synced);

  // The state may have changed since Prepare (another run writing the same folder): check again.
  absl::StatusOr<Target> state = Inspect(flag_, target, options_.force);
  if (!state.ok()) return discard(state.status());
  if (*state != Target::kHoldsFiles) {
    if (std::rename(staging.c_str(), target.c_str()) == 0) return FsyncDir(parent);
    // Only a folder filled since the check above makes the rename fail with these.
    if (errno != ENOTEMPTY && errno != EEXIST) {
      return discard(absl::DataLossError(
          absl::StrCat(flag_, "=", dir_, ": cannot put the folder in place: ", std::strerror(errno))));
    }
  }
  if (!options_.force) {
    return discard(absl::FailedPreconditionError(
        absl::StrCat(flag_, "=", dir_, ": another run wrote outputs there meanwhile; they are kept")));
  }
  // Swap the old and new folders in one step, then remove the old one (now at the staging name).
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    return discard(absl::DataLossError(
        absl::StrCat(flag_, "=", dir_, ": cannot replace the folder: ", std::strerror(errno))));
  }
  std::error_code ec;
  fs::remove_all(staging, ec);
  return FsyncDir(parent);
}

}  // namespace gemtb::cli
