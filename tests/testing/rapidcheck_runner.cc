#include "tests/testing/rapidcheck_runner.h"

#include <cstdlib>
#include <string_view>

namespace gemtb::testing {

rc::detail::TestParams PropertyParams(int cases) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  const char* env = std::getenv("RC_PARAMS");
  if (env == nullptr || std::string_view(env).find("max_success") == std::string_view::npos) {
    params.maxSuccess = cases;
  }
  return params;
}

}  // namespace gemtb::testing
