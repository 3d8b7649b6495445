// A small key-value store over TCP, held by rank 0, for what the ranks of a job must agree on or
// hand each other before they can talk by faster means: NCCL's unique id, the start-up agreement
// on config, plan and checkpoint, checkpoint commits, and (for the CPU oracle across processes)
// the collectives' payloads.
//
// Every blocking call ends within its timeout. The store ends every rank's waits (and refuses every
// later Set; a Get of a value already set still reads it) with one named error as soon as the job
// cannot go on: a rank whose connection closes without saying goodbye
// (the process died or was killed), a rank registering a different world size or a rank number
// outside it or twice, or a rank reporting its own error (Fail). A rank that never connects shows up as
// a DeadlineExceeded naming the ranks not connected. If rank 0 dies, the other ranks see the
// connection drop (Unavailable).
//
// Wire format (little-endian), one request and one reply at a time per connection:
//   request  u8 op, u32 key length, key, u64 value length, value, i64 timeout in ms
//   reply    u8 absl status code (0 = OK), u64 length, the value (Get) or the error message
#ifndef GEMTB_MODEL_LAUNCH_TCP_STORE_H_
#define GEMTB_MODEL_LAUNCH_TCP_STORE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/launch/launch_env.h"

namespace gemtb::launch {

using Millis = std::chrono::milliseconds;

// Rank 0's side: accepts the world's connections and answers them until every rank has said goodbye.
class TcpStoreServer {
 public:
  // Listens on `port` of every interface (0: a free port, see port()).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(int port, int world_size);
  ~TcpStoreServer();  // Shutdown(Millis(0)) when not called before

  int port() const { return port_; }
  // Waits up to `timeout` for every connected rank to close, then stops; the job's failure if it
  // failed, DeadlineExceeded if not every rank said goodbye.
  absl::Status Shutdown(Millis timeout);

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  TcpStoreServer(int listen_fd, int port, int world_size) : listen_fd_(listen_fd), port_(port), world_size_(world_size) {}
  void AcceptLoop();
  void Serve(int fd);
  void FailJob(absl::Status status);  // the first failure wins; wakes every waiter
  std::string NotConnected() const;   // "ranks 2, 3 have not connected"

  const int listen_fd_;
  const int port_;
  const int world_size_;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  std::vector<int> rank_state_;  // per rank: 0 never connected, 1 connected, 2 said goodbye, 3 lost
  absl::Status failure_;
  std::vector<int> open_fds_;
  std::vector<std::thread> servers_;
  int open_connections_ = 0;
  bool shut_down_ = false;
};

// One rank's connection.
class TcpStoreClient {
 public:
  // Connects to the store (retrying while rank 0 starts) and registers; every later call waits at
  // most `timeout`.
  static absl::StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const Rendezvous& where, int rank, int world_size,
                                                                 Millis timeout);
  // Closes without goodbye unless Close() was called: the store fails the job as if this rank had
  // died. A rank that stops on an error of its own calls Fail, then Close.
  ~TcpStoreClient();

  absl::Status Set(std::string_view key, std::string_view value);
  // Waits for `key` to be set, up to the timeout.
  absl::StatusOr<std::string> Get(std::string_view key);
  // Removes `key` (no error when absent): a value no rank will read again frees the store's memory.
  absl::Status Erase(std::string_view key);
  // Reports this rank's error: every rank's waits end with it (as Aborted naming this rank).
  absl::Status Fail(std::string_view message);
  // The job's failure as the store knows it (a rank gone, a rank's reported error), or OK; answers at
  // once. A rank waiting on something other than the store (a GPU collective) polls it, so that it
  // learns of a dead rank without waiting for its own timeout.
  absl::Status JobStatus();
  // Says goodbye and closes.
  absl::Status Close();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  Millis timeout() const { return timeout_; }

  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

 private:
  TcpStoreClient(int fd, std::string where, int rank, int world_size, Millis timeout)
      : fd_(fd), where_(std::move(where)), rank_(rank), world_size_(world_size), timeout_(timeout) {}
  absl::StatusOr<std::string> Call(uint8_t op, std::string_view key, std::string_view value);

  int fd_;
  std::string where_;  // host:port, for messages
  int rank_;
  int world_size_;
  Millis timeout_;
};

// Every rank sets "<name>/<rank>" and reads all the others' in rank order: an all-gather of small
// values through the store.
absl::StatusOr<std::vector<std::string>> StoreAllGather(TcpStoreClient& store, std::string_view name,
                                                        std::string_view value);

}  // namespace gemtb::launch

#endif  // GEMTB_MODEL_LAUNCH_TCP_STORE_H_
