// Where gemtb's data files live: the model configs (model/configs), the scenarios, cluster and
// calibration files (sim/scenarios, sim/network, sim/calibration) and the golden vectors (golden/),
// in the source tree's layout.
//
// In order: the folder the GEMTB_DATA_DIR environment variable names (a location only: the files
// decide the results, as with any input path); <prefix>/share/gemtb for a program installed as
// <prefix>/bin/...; the source tree for a program run from the build tree it was built in. A program
// elsewhere without GEMTB_DATA_DIR gets <its folder>/../share/gemtb, so errors name that path.
#ifndef GEMTB_MODEL_DESCRIPTION_DATA_DIR_H_
#define GEMTB_MODEL_DESCRIPTION_DATA_DIR_H_

#include <string>

namespace gemtb::model {

struct DataDirLocation {
  std::string path;    // the folder
  std::string origin;  // "GEMTB_DATA_DIR", "installed" or "source tree"
};

DataDirLocation FindDataDir();

// FindDataDir().path, looked up once per process, unless UseDataDir named the folder first.
const std::string& DataDir();

// A program that embeds the libraries (the Python module, whose package ships the data files) names
// the folder itself; call it before anything reads DataDir().
void UseDataDir(const std::string& path);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_DATA_DIR_H_
