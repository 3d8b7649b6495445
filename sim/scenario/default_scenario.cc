// Where gem-default lives: sim/scenarios/ of the data folder (model/description/data_dir.h).
#include "model/description/data_dir.h"
#include "sim/scenario/scenario_json.h"

namespace gemtb::sim {

std::string DefaultScenarioPath() { return model::DataDir() + "/sim/scenarios/gem-default.json"; }

}  // namespace gemtb::sim
