// Rank 0's side of the TCP store (tcp_store.h): one thread accepts, one thread per connection
// answers its rank's requests; a Get waits on the store's condition variable.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/launch/tcp_store.h"
#include "model/launch/tcp_store_wire.h"

namespace gemtb::launch {
namespace {

enum RankState { kNeverConnected = 0, kConnected = 1, kGoodbye = 2, kLost = 3 };
constexpr auto kReplySendLimit = std::chrono::seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(int port, int world_size) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("store port ", port, ": must be in [0, 65535]"));
  if (world_size < 1) return absl::InvalidArgumentError(absl::StrCat("store world size ", world_size, ": must be >= 1"));
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("store: socket: ", std::strerror(errno)));
  const int on = 1, off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));  // IPv4 clients too
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("store: cannot listen on port ", port, ": ", std::strerror(err)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(fd, ntohs(addr.sin6_port), world_size));
  server->rank_state_.assign(static_cast<size_t>(world_size), kNeverConnected);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  if (!shut_down_) (void)Shutdown(Millis(0));
}

void TcpStoreServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.load()) {
      ::close(fd);
      break;
    }
    open_fds_.push_back(fd);
    ++open_connections_;
    servers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void TcpStoreServer::FailJob(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
  changed_.notify_all();
}

std::string TcpStoreServer::NotConnected() const {
  std::string ranks;
  int count = 0;
  for (size_t r = 0; r < rank_state_.size(); ++r) {
    if (rank_state_[r] != kNeverConnected) continue;
    absl::StrAppend(&ranks, count++ ? ", " : "", r);
  }
  if (count == 0) return "every rank has connected";
  return absl::StrCat(count == 1 ? "rank " : "ranks ", ranks, count == 1 ? " has" : " have", " not connected");
}

void TcpStoreServer::Serve(int fd) {
  int rank = -1;
  for (;;) {
    auto request = wire::RecvRequest(fd);
    std::unique_lock<std::mutex> lock(mu_);
    if (!request.ok()) {
      if (rank >= 0 && rank_state_[rank] == kConnected) {
        rank_state_[rank] = kLost;
        FailJob(absl::UnavailableError(absl::StrCat("rank ", rank,
                                                    ": its connection to the store closed without a goodbye (the "
                                                    "process died or was killed)")));
      }
      break;
    }
    absl::Status status;
    std::string value;
    bool done = false;
    bool fail_job_after_reply = false;
    switch (request->op) {
      case wire::kHello: {
        int r = -1, w = -1;
        if (std::sscanf(request->value.c_str(), "%d %d", &r, &w) != 2) {
          status = absl::InvalidArgumentError(absl::StrCat("store: malformed hello \"", request->value, "\""));
        } else if (w != world_size_) {
          status = absl::FailedPreconditionError(absl::StrCat("world size: rank ", r, " runs with world size ", w,
                                                              ", rank 0 (the store) with ", world_size_));
        } else if (r < 0 || r >= world_size_) {
          status = absl::InvalidArgumentError(absl::StrCat("rank ", r, ": outside world size ", world_size_));
        } else if (rank_state_[r] != kNeverConnected) {
          status = absl::FailedPreconditionError(absl::StrCat("rank ", r, ": connected twice (two processes with the same rank)"));
        }
        if (status.ok()) {
          rank = r;
          rank_state_[r] = kConnected;
          changed_.notify_all();
        } else {
          // After the reply: the other ranks may stop the store as soon as they learn of the failure,
          // and this rank must learn why it was refused first.
          fail_job_after_reply = true;
        }
        break;
      }
      case wire::kSet:
        if (rank < 0) {
          status = absl::FailedPreconditionError("store: set before hello");
        } else if (!failure_.ok()) {
          status = failure_;
        } else {
          values_[request->key] = std::move(request->value);
          changed_.notify_all();
        }
        break;
      case wire::kGet: {
        if (rank < 0) {
          status = absl::FailedPreconditionError("store: get before hello");
          break;
        }
        const auto deadline = wire::Clock::now() + Millis(request->timeout_ms);
        auto ready = [&] { return !failure_.ok() || stopping_.load() || values_.count(request->key) > 0; };
        if (!changed_.wait_until(lock, deadline, ready)) {
          status = absl::DeadlineExceededError(absl::StrCat("rank ", rank, ": \"", request->key, "\" not set within ",
                                                            request->timeout_ms, " ms (", NotConnected(), ")"));
        } else if (auto it = values_.find(request->key); it != values_.end()) {
          value = it->second;  // a value already set is read even after a failure: the wait did not wait
        } else if (!failure_.ok()) {
          status = failure_;
        } else {
          status = absl::UnavailableError("store: shutting down");
        }
        break;
      }
      case wire::kErase:
        if (rank < 0) {
          status = absl::FailedPreconditionError("store: erase before hello");
        } else {
          values_.erase(request->key);
        }
        break;
      case wire::kCheck:  // the job's failure, or OK, without waiting
        if (rank < 0) {
          status = absl::FailedPreconditionError("store: check before hello");
        } else {
          status = failure_;
        }
        break;
      case wire::kFail:
        if (rank < 0) {
          status = absl::FailedPreconditionError("store: fail before hello");
          break;
        }
        FailJob(absl::AbortedError(absl::StrCat("rank ", rank, ": ", request->value)));
        break;
      case wire::kBye:
        if (rank >= 0) rank_state_[rank] = kGoodbye;
        changed_.notify_all();
        done = true;
        break;
      default:
        status = absl::InvalidArgumentError(absl::StrCat("store: unknown op ", int{request->op}));
    }
    lock.unlock();
    const std::string reply = wire::EncodeReply(status, value);
    const bool sent = wire::SendAll(fd, reply, wire::Clock::now() + kReplySendLimit).ok();
    if (fail_job_after_reply) {
      lock.lock();
      FailJob(status);
      lock.unlock();
    }
    if (!sent || done) {
      lock.lock();
      if (!done && rank >= 0 && rank_state_[rank] == kConnected) {
        rank_state_[rank] = kLost;
        FailJob(absl::UnavailableError(absl::StrCat("rank ", rank, ": its connection to the store broke")));
      }
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ::close(fd);
  std::erase(open_fds_, fd);
  --open_connections_;
  changed_.notify_all();
}

absl::Status TcpStoreServer::Shutdown(Millis timeout) {
  std::vector<std::thread> servers;
  absl::Status result;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto finished = [&] {
      bool all_left = true;
      for (int s : rank_state_) all_left = all_left && (s == kGoodbye || s == kLost);
      return (all_left && open_connections_ == 0) || (!failure_.ok() && open_connections_ == 0);
    };
    const bool ok = changed_.wait_for(lock, timeout, finished);
    stopping_.store(true);
    changed_.notify_all();
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    result = !failure_.ok() ? failure_
             : ok          ? absl::OkStatus()
                           : absl::DeadlineExceededError(absl::StrCat("store: not every rank said goodbye within ",
                                                                      timeout.count(), " ms (", NotConnected(), ")"));
  }
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    servers.swap(servers_);
  }
  for (std::thread& t : servers) t.join();
  ::close(listen_fd_);
  shut_down_ = true;
  return result;
}

}  // namespace gemtb::launch
