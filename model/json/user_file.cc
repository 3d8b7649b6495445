#include "model/json/user_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gemtb {
namespace {

absl::Status Bad(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

// What a non-regular file is, for the message.
const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a fifo (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return uint64_t{1} << 34;  // unknown: assume 16 GiB
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

absl::StatusOr<UserFile> UserFile::Open(const std::string& path, uint64_t max_bytes) {
  if (path.empty()) return absl::InvalidArgumentError("an empty file name");
  // O_NONBLOCK: opening a fifo for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Bad(path, absl::StrCat("cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Bad(path, absl::StrCat("cannot stat: ", why));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Bad(path, absl::StrCat("is ", KindOf(st.st_mode), ", expected a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    return Bad(path, absl::StrCat("size ", size, " bytes exceeds the limit of ", max_bytes, " bytes"));
  }
  return UserFile(path, fd, size);
}

UserFile::UserFile(UserFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

UserFile& UserFile::operator=(UserFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

UserFile::~UserFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status UserFile::ReadAt(uint64_t offset, absl::Span<uint8_t> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Bad(path_, absl::StrCat("read failed: ", std::strerror(errno)));
    if (n == 0) {
      return Bad(path_, absl::StrCat("file shrank while reading: ", offset + done, " of ", offset + out.size(),
                                     " bytes present"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadUserFile(const std::string& path, uint64_t max_bytes) {
  absl::StatusOr<UserFile> file = UserFile::Open(path, max_bytes);
  if (!file.ok()) return file.status();
  std::string text(static_cast<size_t>(file->size()), '\0');
  absl::Status read = file->ReadAt(0, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(text.data()), text.size()));
  if (!read.ok()) return read;
  return text;
}

}  // namespace gemtb
