// `gemtb --version`: the version, the commit the binary was built from, the build options and the
// data folder it reads (model/description/data_dir.h).
#ifndef GEMTB_TOOLS_GEMTB_VERSION_H_
#define GEMTB_TOOLS_GEMTB_VERSION_H_

#include <string>

namespace gemtb::cli {

std::string VersionText();
// The commit this gemtb was built from ("unknown" where the build had no git history).
std::string BuildCommit();

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_VERSION_H_
