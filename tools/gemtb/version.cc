#include "tools/gemtb/version.h"

#include "absl/strings/str_cat.h"
#include "model/description/data_dir.h"
#include "tools/gemtb/version_info.h"  // generated: GEMTB_VERSION, GEMTB_COMMIT, GEMTB_BUILD_TYPE, GEMTB_CUDA

namespace gemtb::cli {

std::string VersionText() {
  const model::DataDirLocation data = model::FindDataDir();
  const std::string cuda = std::string(GEMTB_CUDA) == "ON" ? "on" : "off";
  return absl::StrCat("gemtb ", GEMTB_VERSION, "\ncommit ", GEMTB_COMMIT, "\nbuild ", GEMTB_BUILD_TYPE, ", CUDA ", cuda,
                      "\ndata ", data.path, " (", data.origin, ")\n");
}

}  // namespace gemtb::cli
