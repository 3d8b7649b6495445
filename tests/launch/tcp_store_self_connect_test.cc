// A rank that starts before rank 0's store listens, on a port inside the local ephemeral port range,
// still reaches the store. Its connect attempts can pick the store's port as their own source port
// and connect to themselves (TCP simultaneous open); such a connection must count as refused.
//
// To make that certain rather than rare, a child process runs in its own user and network
// namespaces whose ephemeral range is the two ports {P, P + 1}: the kernel tries the port of the
// range's low parity first, so every attempt to reach P before the store listens connects to itself.
// Where namespaces are not allowed (some containers), the test is skipped.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "model/launch/tcp_store.h"

namespace gemtb::launch {
namespace {

constexpr int kStorePort = 40002;  // even: the low parity of the range {40002, 40003}
constexpr int kSkipped = 77;

bool WriteFile(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// In a fresh user and network namespace: loopback up, ephemeral range {kStorePort, kStorePort + 1}.
bool EnterNamespaceWithTwoEphemeralPorts() {
  const uid_t uid = ::getuid();
  const gid_t gid = ::getgid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return false;
  if (!WriteFile("/proc/self/setgroups", "deny") || !WriteFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1")) ||
      !WriteFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1")))
    return false;
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq lo{};
  std::snprintf(lo.ifr_name, sizeof(lo.ifr_name), "lo");
  bool up = ::ioctl(s, SIOCGIFFLAGS, &lo) == 0;
  lo.ifr_flags = static_cast<short>(lo.ifr_flags | IFF_UP);
  up = up && ::ioctl(s, SIOCSIFFLAGS, &lo) == 0;
  ::close(s);
  return up && WriteFile("/proc/sys/net/ipv4/ip_local_port_range", absl::StrCat(kStorePort, " ", kStorePort + 1));
}

int Failed(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

// The child's body: a rank connects first, the store listens 300 ms later, and a value passes
// through it. (A world of one rank: the range has room for one client's source port only.)
// Returns the exit code: 0 when the rank reached the store, kSkipped without namespaces.
int RankBeforeTheStore() {
  if (!EnterNamespaceWithTwoEphemeralPorts()) return kSkipped;
  auto rank = std::async(std::launch::async, [] {
    return TcpStoreClient::Connect({"127.0.0.1", kStorePort}, 0, 1, Millis(10000));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A connection to itself holds the port for the microseconds before it is reset: retry then.
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = absl::UnavailableError("not started");
  for (int attempt = 0; attempt < 100 && !server.ok(); ++attempt) {
    server = TcpStoreServer::Start(kStorePort, 1);
    if (!server.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server.ok()) return Failed("the store", server.status());
  auto client = rank.get();
  if (!client.ok()) return Failed("the rank", client.status());
  if (absl::Status s = (*client)->Set("k", "v"); !s.ok()) return Failed("set", s);
  auto got = (*client)->Get("k");
  if (!got.ok()) return Failed("get", got.status());
  if (*got != "v") return Failed("get", absl::DataLossError(*got));
  if (absl::Status s = (*client)->Close(); !s.ok()) return Failed("close", s);
  if (absl::Status s = (*server)->Shutdown(Millis(10000)); !s.ok()) return Failed("the store's shutdown", s);
  return 0;
}

TEST(TcpStoreSelfConnect, ARankStartedBeforeTheStoreOnAnEphemeralPortReachesIt) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(RankBeforeTheStore());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == kSkipped) GTEST_SKIP() << "no user and network namespaces here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

}  // namespace
}  // namespace gemtb::launch
