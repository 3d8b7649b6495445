#include "tools/gemtb/train_common.h"

#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "model/common/sha256.h"
#include "model/description/model_config.h"
#include "model/json/user_file.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/stop_signals.h"

namespace gemtb::cli {

absl::StatusOr<reference::dist::CheckpointIdentity> TrainCheckpointIdentity(const std::string& config, int world_size,
                                                                            const std::string& plan) {
  std::error_code ec;
  const std::string path = std::filesystem::is_regular_file(config, ec) ? config : gemtb::model::BuiltinConfigPath(config);
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (!text.ok()) return text.status();
  return reference::dist::CheckpointIdentity{world_size, Sha256Hex(*text),
                                             Sha256Hex(plan.empty() ? "data parallel, tables replicated" : plan)};
}

std::optional<std::string> CheckRate(const char* flag, const std::optional<double>& v) {
  if (!v) return std::nullopt;
  if (!std::isfinite(*v) || *v < 0 || *v > FLT_MAX)
    return absl::StrCat("--", flag, ": ", Exact(*v), " must be finite, >= 0 and within the fp32 range");
  return std::nullopt;
}

std::string Num(double v, int digits) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string Exact(double v) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

int StopAfterSignal(const char* command, int signal, int64_t step, const std::string& checkpoint,
                    const std::string& resume_flags, const std::function<absl::Status()>& save) {
  if (checkpoint.empty()) {
    std::cerr << "gemtb " << command << ": stopped by " << SignalName(signal) << " after step " << step
              << "; nothing saved (no --checkpoint)\n";
  } else {
    if (absl::Status s = save(); !s.ok()) return ReportError(command, s);
    std::cerr << "gemtb " << command << ": stopped by " << SignalName(signal) << " after step " << step
              << "; checkpoint written to " << checkpoint << " (continue with " << resume_flags << " " << checkpoint
              << ")\n";
  }
  return 128 + signal;
}

}  // namespace gemtb::cli
