#include "reference/model/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "model/json/user_file.h"

namespace gemtb::reference::model {
namespace {

constexpr char kMagic[8] = {'G', 'E', 'M', 'T', 'B', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;

uint64_t Fnv1a64(const uint8_t* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

class Reader {
 public:
  Reader(const std::vector<uint8_t>& b, size_t end) : b_(b), end_(end) {}
  bool Get(void* dst, size_t n) {
    if (end_ - at_ < n) return false;
    std::memcpy(dst, b_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool U32(uint32_t* v) {
    uint8_t x[4];
    if (!Get(x, 4)) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(x[i]) << (8 * i);
    return true;
  }
  bool U64(uint64_t* v) {
    uint8_t x[8];
    if (!Get(x, 8)) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= static_cast<uint64_t>(x[i]) << (8 * i);
    return true;
  }
  size_t at() const { return at_; }
  size_t left() const { return end_ - at_; }

 private:
  const std::vector<uint8_t>& b_;
  size_t end_;
  size_t at_ = 0;
};

absl::Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return absl::DataLossError(absl::StrCat(dir, ": cannot open directory to fsync: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::DataLossError(absl::StrCat(dir, ": directory fsync failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

// Removes the temp files that earlier writes of the checkpoint `target` left behind when their
// process died mid-write (kill -9): "<name>.tmp.<pid>" whose process <pid> is gone. A temp file of a
// running process is kept (it may be a write under way), and so is every other file. Best effort:
// a failure here never fails the write that has already succeeded.
void RemoveStaleTemps(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::vector<fs::path> stale;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno == EPERM) continue;  // alive (EPERM: someone else's process)
    stale.push_back(it->path());
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
}

}  // namespace

std::vector<uint8_t> SerializeCheckpoint(const NamedArrays& arrays) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  PutU32(out, kVersion);
  PutU32(out, static_cast<uint32_t>(arrays.size()));
  for (const auto& [name, array] : arrays) {
    PutU32(out, static_cast<uint32_t>(name.size()));
    out.insert(out.end(), name.begin(), name.end());
    const std::vector<uint8_t> npy = io::SerializeNpy(array);
    PutU64(out, npy.size());
    out.insert(out.end(), npy.begin(), npy.end());
  }
  PutU64(out, Fnv1a64(out.data(), out.size()));
  return out;
}

absl::StatusOr<NamedArrays> ParseCheckpoint(const std::vector<uint8_t>& bytes, const std::string& name) {
  auto lost = [&](const std::string& what) { return absl::DataLossError(absl::StrCat(name, ": ", what)); };
  if (bytes.size() < 8 + 4 + 4 + 8) return lost(absl::StrCat("truncated (", bytes.size(), " bytes)"));
  if (std::memcmp(bytes.data(), kMagic, 8) != 0) return lost("not a gemtb checkpoint (bad magic)");
  const size_t body = bytes.size() - 8;
  std::vector<uint8_t> sum_bytes(bytes.end() - 8, bytes.end());
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i) stored |= static_cast<uint64_t>(sum_bytes[i]) << (8 * i);
  if (stored != Fnv1a64(bytes.data(), body)) return lost("checksum mismatch (truncated or corrupted)");
  Reader r(bytes, body);
  uint8_t magic[8];
  uint32_t version = 0, count = 0;
  r.Get(magic, 8);
  if (!r.U32(&version) || version != kVersion) return lost(absl::StrCat("version ", version, ", expected ", kVersion));
  if (!r.U32(&count)) return lost("truncated header");
  NamedArrays out;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!r.U32(&len) || r.left() < len) return lost(absl::StrCat("array ", i, ": truncated name"));
    std::string key(len, '\0');
    r.Get(key.data(), len);
    uint64_t npy_len = 0;
    if (!r.U64(&npy_len) || r.left() < npy_len) return lost(absl::StrCat("array '", key, "': truncated"));
    absl::StatusOr<io::NpyArray> a =
        io::ParseNpy(absl::Span<const uint8_t>(bytes.data() + r.at(), static_cast<size_t>(npy_len)), key);
    if (!a.ok()) return lost(absl::StrCat("array '", key, "': ", a.status().message()));
    std::vector<uint8_t> skip(static_cast<size_t>(npy_len));
    r.Get(skip.data(), skip.size());
    out.emplace_back(std::move(key), *std::move(a));
  }
  if (r.left() != 0) return lost(absl::StrCat(r.left(), " trailing bytes"));
  return out;
}

absl::Status CheckCheckpointPath(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return absl::InvalidArgumentError("checkpoint: the path is empty");
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::FailedPreconditionError(absl::StrCat(path, ": folder ", dir.string(), " does not exist"));
  if (fs::is_directory(target, ec)) return absl::FailedPreconditionError(absl::StrCat(path, ": is a folder"));
  // The temp file is created beside the target, so the folder itself must take new files.
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": folder ", dir.string(), " is not writable: ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status WriteCheckpoint(const std::string& path, const NamedArrays& arrays, const CheckpointWriteOptions& options) {
  return WriteFileAtomically(path, SerializeCheckpoint(arrays), options);
}

absl::Status WriteFileAtomically(const std::string& path, absl::Span<const uint8_t> bytes,
                                 const CheckpointWriteOptions& options) {
  const int64_t fail_after = options.fail_after_bytes;
  const bool kill_on_fail = options.kill_at_failure;
  const std::filesystem::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 20);
    if (fail_after >= 0 && done + chunk > static_cast<size_t>(fail_after)) chunk = static_cast<size_t>(fail_after) - done;
    const ssize_t n = chunk ? ::write(fd, bytes.data() + done, chunk) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::DataLossError(absl::StrCat(tmp, ": write failed: ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
    if (fail_after >= 0 && done >= static_cast<size_t>(fail_after)) {
      ::fsync(fd);
      if (kill_on_fail) std::raise(SIGKILL);  // a crash mid-write, as kill -9 would make it
      ::close(fd);
      return absl::AbortedError(absl::StrCat(path, ": injected failure after ", done, " of ", bytes.size(), " bytes"));
    }
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(tmp, ": fsync failed: ", std::strerror(errno)));
  }
  if (::close(fd) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
  }
  RemoveStaleTemps(target);
  return FsyncDir(dir);
}

absl::StatusOr<NamedArrays> ReadCheckpoint(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUserFile(path, PhysicalMemoryBytes());
  if (!text.ok()) return text.status();
  return ParseCheckpoint(std::vector<uint8_t>(text->begin(), text->end()), path);
}

}  // namespace gemtb::reference::model
