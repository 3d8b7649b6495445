// The TCP store's framing (tcp_store.h has the format): whole-buffer sends and receives that give
// up at a deadline, and the request and reply records.
#ifndef GEMTB_MODEL_LAUNCH_TCP_STORE_WIRE_H_
#define GEMTB_MODEL_LAUNCH_TCP_STORE_WIRE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gemtb::launch::wire {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kFail = 4, kBye = 5, kErase = 6, kCheck = 7 };

// Keys and values larger than this are refused (they would be a bug, not a payload).
constexpr uint64_t kMaxValueBytes = uint64_t{1} << 30;
constexpr uint32_t kMaxKeyBytes = 4096;

struct Request {
  uint8_t op = 0;
  std::string key;
  std::string value;
  int64_t timeout_ms = 0;
};

// Sends all of `bytes` by `deadline`. Unavailable when the peer closed, DeadlineExceeded at the deadline.
absl::Status SendAll(int fd, std::string_view bytes, Clock::time_point deadline);
// Receives exactly n bytes by `deadline` (Clock::time_point::max(): no deadline). Unavailable
// ("closed") at end of stream.
absl::StatusOr<std::string> RecvExact(int fd, uint64_t n, Clock::time_point deadline);

std::string EncodeRequest(const Request& r);
absl::StatusOr<Request> RecvRequest(int fd);  // blocks until a request or the end of the stream
std::string EncodeReply(const absl::Status& status, std::string_view value);
// The reply's value, or its error with the message the store sent.
absl::StatusOr<std::string> RecvReply(int fd, Clock::time_point deadline);

}  // namespace gemtb::launch::wire

#endif  // GEMTB_MODEL_LAUNCH_TCP_STORE_WIRE_H_
