// One rank's side of the TCP store (tcp_store.h).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/launch/tcp_store.h"
#include "model/launch/tcp_store_wire.h"

namespace gemtb::launch {
namespace {

using wire::Clock;

// How long a reply may take beyond the request's own timeout (the store waits that long itself).
constexpr auto kReplyGrace = std::chrono::seconds(5);
constexpr auto kRetryPause = std::chrono::milliseconds(50);

// Whether `fd` is connected to itself. While no one listens on a port of the local ephemeral range,
// a connect to it can pick that very port as its source and connect to itself (TCP simultaneous
// open): the rank would read its own request as the store's reply.
bool ConnectedToItself(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof(self), peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 || self.ss_family != peer.ss_family)
    return false;
  if (self.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(self);
    const auto& b = reinterpret_cast<const sockaddr_in&>(peer);
    return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
  }
  if (self.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(self);
    const auto& b = reinterpret_cast<const sockaddr_in6&>(peer);
    return a.sin6_port == b.sin6_port && std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof(a.sin6_addr)) == 0;
  }
  return false;
}

// One non-blocking connect attempt, finished by `deadline`; the connected fd or -1 with errno set.
// A connection to itself counts as refused; it is closed with a reset, so that no TIME_WAIT keeps
// the port rank 0 is about to listen on.
int TryConnect(const addrinfo* a, Clock::time_point deadline) {
  const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) return -1;
  if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) {
      err = ETIMEDOUT;
    } else {
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      ::close(fd);
      errno = err;
      return -1;
    }
  }
  if (ConnectedToItself(fd)) {
    const linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(fd);
    errno = ECONNREFUSED;
    return -1;
  }
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const Rendezvous& where, int rank,
                                                                        int world_size, Millis timeout) {
  if (timeout.count() <= 0) return absl::InvalidArgumentError(absl::StrCat("store timeout ", timeout.count(), " ms: must be > 0"));
  const std::string name = absl::StrCat(where.host, ":", where.port);
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(where.host.c_str(), std::to_string(where.port).c_str(), &hints, &found);
  if (rc != 0)
    return absl::InvalidArgumentError(absl::StrCat("MASTER_ADDR=", where.host, ": cannot resolve (", ::gai_strerror(rc), ")"));
  int fd = -1;
  int last_error = 0;
  // Rank 0 may not listen yet: retry refused connections (and connections to itself) until the deadline.
  while (fd < 0 && Clock::now() < deadline) {
    for (const addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = TryConnect(a, deadline);
      if (fd < 0) last_error = errno;
    }
    if (fd < 0) std::this_thread::sleep_for(kRetryPause);
  }
  ::freeaddrinfo(found);
  if (fd < 0)
    return absl::DeadlineExceededError(absl::StrCat("rank ", rank, ": cannot reach the store of rank 0 at ", name,
                                                    " within ", timeout.count(), " ms (", std::strerror(last_error),
                                                    ")"));
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(fd, name, rank, world_size, timeout));
  auto hello = client->Call(wire::kHello, "", absl::StrCat(rank, " ", world_size));
  if (!hello.ok()) return hello.status();
  return client;
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::string> TcpStoreClient::Call(uint8_t op, std::string_view key, std::string_view value) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, ": store connection already closed"));
  wire::Request request{op, std::string(key), std::string(value), timeout_.count()};
  const auto deadline = Clock::now() + timeout_ + kReplyGrace;
  const absl::Status sent = wire::SendAll(fd_, wire::EncodeRequest(request), deadline);
  absl::StatusOr<std::string> reply = sent.ok() ? wire::RecvReply(fd_, deadline) : absl::StatusOr<std::string>(sent);
  if (reply.ok()) return reply;
  // Errors the store sent pass as they are; transport errors say what broke.
  if (absl::IsUnavailable(reply.status()) && absl::StartsWith(reply.status().message(), "connection closed"))
    return absl::UnavailableError(absl::StrCat("rank ", rank_, ": lost the store at ", where_,
                                               " (rank 0, which holds it, exited or was killed)"));
  if (absl::IsDeadlineExceeded(reply.status()) && reply.status().message() == "timed out")
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", rank_, ": the store at ", where_, " did not answer within ",
                     std::chrono::duration_cast<std::chrono::milliseconds>(timeout_ + kReplyGrace).count(), " ms"));
  return reply.status();
}

absl::Status TcpStoreClient::Set(std::string_view key, std::string_view value) {
  return Call(wire::kSet, key, value).status();
}

absl::StatusOr<std::string> TcpStoreClient::Get(std::string_view key) { return Call(wire::kGet, key, ""); }

absl::Status TcpStoreClient::Erase(std::string_view key) { return Call(wire::kErase, key, "").status(); }

absl::Status TcpStoreClient::Fail(std::string_view message) { return Call(wire::kFail, "", message).status(); }

absl::Status TcpStoreClient::JobStatus() { return Call(wire::kCheck, "", "").status(); }

absl::Status TcpStoreClient::Close() {
  absl::Status s = Call(wire::kBye, "", "").status();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return s;
}

absl::StatusOr<std::vector<std::string>> StoreAllGather(TcpStoreClient& store, std::string_view name,
                                                        std::string_view value) {
  if (absl::Status s = store.Set(absl::StrCat(std::string(name), "/", store.rank()), value); !s.ok()) return s;
  std::vector<std::string> all;
  all.reserve(static_cast<size_t>(store.world_size()));
  for (int r = 0; r < store.world_size(); ++r) {
    auto v = store.Get(absl::StrCat(std::string(name), "/", r));
    if (!v.ok()) return v.status();
    all.push_back(*std::move(v));
  }
  return all;
}

}  // namespace gemtb::launch
