#include "model/launch/tcp_store_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemtb::launch::wire {
namespace {

// Milliseconds left until `deadline` for poll(), -1 for none.
int PollMillis(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits until fd is ready for `events`; DeadlineExceeded past the deadline.
absl::Status WaitReady(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, PollMillis(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError("timed out");
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
  }
}

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return v;
}

}  // namespace

absl::Status SendAll(int fd, std::string_view bytes, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    if (absl::Status s = WaitReady(fd, POLLOUT, deadline); !s.ok()) return s;
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("connection closed (", std::strerror(errno), ")"));
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RecvExact(int fd, uint64_t n, Clock::time_point deadline) {
  std::string out(n, '\0');
  uint64_t got = 0;
  while (got < n) {
    if (absl::Status s = WaitReady(fd, POLLIN, deadline); !s.ok()) return s;
    const ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r == 0) return absl::UnavailableError("connection closed");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("connection closed (", std::strerror(errno), ")"));
    }
    got += static_cast<uint64_t>(r);
  }
  return out;
}

std::string EncodeRequest(const Request& r) {
  std::string out;
  out.push_back(static_cast<char>(r.op));
  PutLe(out, r.key.size(), 4);
  out += r.key;
  PutLe(out, r.value.size(), 8);
  out += r.value;
  PutLe(out, static_cast<uint64_t>(r.timeout_ms), 8);
  return out;
}

absl::StatusOr<Request> RecvRequest(int fd) {
  constexpr auto kNever = Clock::time_point::max();
  Request r;
  auto head = RecvExact(fd, 5, kNever);
  if (!head.ok()) return head.status();
  r.op = static_cast<uint8_t>((*head)[0]);
  const uint64_t key_len = GetLe(std::string_view(*head).substr(1), 4);
  if (key_len > kMaxKeyBytes) return absl::InvalidArgumentError(absl::StrCat("key length ", key_len, " > ", kMaxKeyBytes));
  auto key = RecvExact(fd, key_len, kNever);
  if (!key.ok()) return key.status();
  r.key = *std::move(key);
  auto vlen = RecvExact(fd, 8, kNever);
  if (!vlen.ok()) return vlen.status();
  const uint64_t value_len = GetLe(*vlen, 8);
  if (value_len > kMaxValueBytes)
    return absl::InvalidArgumentError(absl::StrCat("value length ", value_len, " > ", kMaxValueBytes));
  auto value = RecvExact(fd, value_len, kNever);
  if (!value.ok()) return value.status();
  r.value = *std::move(value);
  auto timeout = RecvExact(fd, 8, kNever);
  if (!timeout.ok()) return timeout.status();
  r.timeout_ms = static_cast<int64_t>(GetLe(*timeout, 8));
  return r;
}

std::string EncodeReply(const absl::Status& status, std::string_view value) {
  std::string out;
  out.push_back(static_cast<char>(status.code()));
  const std::string_view payload =
      status.ok() ? value : std::string_view(status.message().data(), status.message().size());
  PutLe(out, payload.size(), 8);
  out += payload;
  return out;
}

absl::StatusOr<std::string> RecvReply(int fd, Clock::time_point deadline) {
  auto head = RecvExact(fd, 9, deadline);
  if (!head.ok()) return head.status();
  const auto code = static_cast<absl::StatusCode>(static_cast<uint8_t>((*head)[0]));
  const uint64_t len = GetLe(std::string_view(*head).substr(1), 8);
  if (len > kMaxValueBytes) return absl::DataLossError(absl::StrCat("reply length ", len, " > ", kMaxValueBytes));
  auto payload = RecvExact(fd, len, deadline);
  if (!payload.ok()) return payload.status();
  if (code != absl::StatusCode::kOk) return absl::Status(code, *payload);
  return payload;
}

}  // namespace gemtb::launch::wire
