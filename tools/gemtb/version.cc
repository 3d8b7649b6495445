#include "tools/gemtb/version.h"

#include "absl/strings/str_cat.h"
#include "model/description/data_dir.h"
#include "tools/gemtb/version_info.h"  // generated: GEMTB_VERSION, GEMTB_COMMIT, GEMTB_BUILD_TYPE, GEMTB_CUDA

namespace gemtb::cli {

namespace {

// How the data folder was chosen, in the words of README.md.
const char* OriginText(model::DataDirOrigin origin) {
  switch (origin) {
    case model::DataDirOrigin::kNamed:
      return "GEMTB_DATA_DIR";
    case model::DataDirOrigin::kInstalled:
      return "installed";
    case model::DataDirOrigin::kSourceTree:
      return "source tree";
  }
  return "unknown";
}

}  // namespace

std::string VersionText() {
  const model::DataDirLocation& data = model::DataDirInUse();
  const std::string cuda = std::string(GEMTB_CUDA) == "ON" ? "on" : "off";
  return absl::StrCat("gemtb ", GEMTB_VERSION, "\ncommit ", GEMTB_COMMIT, "\nbuild ", GEMTB_BUILD_TYPE, ", CUDA ", cuda,
                      "\ndata ", data.path, " (", OriginText(data.origin), ")\n");
}

std::string BuildCommit() { return GEMTB_COMMIT; }

}  // namespace gemtb::cli
