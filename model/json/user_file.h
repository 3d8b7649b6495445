// The one way gemtb opens a file a user named: every reader (.npy tensors, JSON specs and configs,
// checkpoints, manifests) goes through here, so every one refuses the same things with the same words.
//
// The file is checked before a byte is read: it must exist, be a regular file (a directory, a fifo,
// a device such as /dev/zero or a socket is refused by name) and be no larger than the reader's cap.
// Opening never blocks (a fifo is refused, not waited on), and a read never allocates more than the
// size the file had when it was checked.
#ifndef GEMTB_MODEL_JSON_USER_FILE_H_
#define GEMTB_MODEL_JSON_USER_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gemtb {

// Text inputs (JSON specs, configs, manifests) are small; a larger one is a wrong path, not a spec.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{64} << 20;

// The machine's physical memory in bytes: the cap for binary inputs that are held in memory whole.
uint64_t PhysicalMemoryBytes();

// An open regular file. Errors are InvalidArgument (bad input, exit 2) and start with the path.
class UserFile {
 public:
  // Opens `path` read-only after the checks above; `max_bytes` is the largest size accepted.
  static absl::StatusOr<UserFile> Open(const std::string& path, uint64_t max_bytes);

  UserFile(UserFile&& other) noexcept;
  UserFile& operator=(UserFile&& other) noexcept;
  UserFile(const UserFile&) = delete;
  UserFile& operator=(const UserFile&) = delete;
  ~UserFile();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly out.size() bytes at `offset`; a file that shrank since Open is an error.
  absl::Status ReadAt(uint64_t offset, absl::Span<uint8_t> out) const;

 private:
  UserFile(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {}

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as text (JSON and manifests), at most `max_bytes`.
absl::StatusOr<std::string> ReadUserFile(const std::string& path, uint64_t max_bytes = kMaxTextFileBytes);

}  // namespace gemtb

#endif  // GEMTB_MODEL_JSON_USER_FILE_H_
