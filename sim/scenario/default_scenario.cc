// Where gem-default lives: the source tree this binary was built from (GEMTB_SOURCE_DIR, set by
// sim/scenario/CMakeLists.txt), or the working directory for a moved binary.
#include <filesystem>

#include "sim/scenario/scenario_json.h"

#ifndef GEMTB_SOURCE_DIR
#error "GEMTB_SOURCE_DIR must name the source tree (set by sim/scenario/CMakeLists.txt)"
#endif

namespace gemtb::sim {

std::string DefaultScenarioPath() {
  const std::string in_tree = std::string(GEMTB_SOURCE_DIR) + "/sim/scenarios/gem-default.json";
  std::error_code ec;
  if (std::filesystem::exists(in_tree, ec)) return in_tree;
  return "sim/scenarios/gem-default.json";
}

}  // namespace gemtb::sim
