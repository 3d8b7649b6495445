// StatusIs(code, message_matcher): a GoogleMock matcher for absl::Status and absl::StatusOr<T>.
//
// The 2022 Abseil LTS we build against has no status matchers; this is the small one STYLE.md asks
// for. There is deliberately no "IsError()" matcher: a test names the code and the message it
// expects, e.g.
//   EXPECT_THAT(ValidateAttention(in, options),
//               StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv_index")));
#ifndef GEMTB_TESTS_TESTING_STATUS_MATCHERS_H_
#define GEMTB_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace gemtb::testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename StatusLike>
  bool MatchAndExplain(const StatusLike& value, ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    if (status.code() != code_) {
      *listener << "whose code is " << absl::StatusCodeToString(status.code()) << " (message: \""
                << status.message() << "\")";
      return false;
    }
    const std::string message(status.message());
    ::testing::StringMatchResultListener inner;
    if (!message_.MatchAndExplain(message, &inner)) {
      *listener << "whose message \"" << message << "\" does not match";
      if (!inner.str().empty()) *listener << ", " << inner.str();
      return false;
    }
    return true;
  }

  void DescribeTo(std::ostream* os) const {
    *os << "has code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }

  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have code " << absl::StatusCodeToString(code_) << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace internal

inline ::testing::PolymorphicMatcher<internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code, ::testing::Matcher<const std::string&> message = ::testing::_) {
  return ::testing::MakePolymorphicMatcher(internal::StatusIsMatcher(code, std::move(message)));
}

// Shorthand for StatusIs(absl::StatusCode::kOk).
inline ::testing::PolymorphicMatcher<internal::StatusIsMatcher> IsOk() {
  return StatusIs(absl::StatusCode::kOk);
}

}  // namespace gemtb::testing

#endif  // GEMTB_TESTS_TESTING_STATUS_MATCHERS_H_
