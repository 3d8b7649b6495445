// Where gemtb's data files live: the model configs (model/configs), the scenarios, cluster and
// calibration files (sim/scenarios, sim/network, sim/calibration) and the golden vectors (golden/),
// in the source tree's layout.
//
// In order: the folder the caller names (a location only: the files decide the results, as with any
// input path); <prefix>/share/gemtb for a program installed as <prefix>/bin/...; the source tree for
// a program run from the build tree it was built in. A program elsewhere without a named folder gets
// <its folder>/../share/gemtb, so errors name that path.
#ifndef GEMTB_MODEL_DESCRIPTION_DATA_DIR_H_
#define GEMTB_MODEL_DESCRIPTION_DATA_DIR_H_

#include <filesystem>
#include <optional>
#include <string>

namespace gemtb::model {

enum class DataDirOrigin { kNamed, kInstalled, kSourceTree };

struct DataDirLocation {
  std::string path;  // the folder
  DataDirOrigin origin;
};

// `named`: a folder the caller chose (the gemtb command line takes it from GEMTB_DATA_DIR); an empty
// path counts as none.
DataDirLocation FindDataDir(const std::optional<std::filesystem::path>& named);

// Names the folder for DataDirInUse() (FindDataDir(named)). A program calls it at most once, before
// anything reads data; without the call the process uses FindDataDir(std::nullopt).
void NameDataDir(std::optional<std::filesystem::path> named);

// The data folder of this process, looked up once.
const DataDirLocation& DataDirInUse();
const std::string& DataDir();  // DataDirInUse().path

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_DATA_DIR_H_
