// The gemtb subcommands and what they share: one-line errors and exit codes.
//
// Exit codes: 0 success; 1 a check failed (e.g. `ref compare` found a mismatch) or an internal
// error; 2 bad input (unknown flag, malformed file, invalid option): nothing was written.
#ifndef GEMTB_TOOLS_GEMTB_COMMAND_H_
#define GEMTB_TOOLS_GEMTB_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json_fwd.hpp"
#include "reference/io/npy.h"

namespace gemtb::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitBadInput = 2;

// `message` with its line breaks made spaces: every error is one line on stderr.
std::string OneLine(absl::string_view message);

// Prints "gemtb <command>: error: <message>" on one line to stderr; returns the exit code.
int ReportError(const std::string& command, const absl::Status& status);

// Writes `text` to `path` atomically (temp file, fsync, rename).
absl::Status WriteTextAtomically(const std::string& path, const std::string& text);

// A check command's `--json=path` report: `report` indented by 2, newline-terminated. An unwritable
// path is PermissionDenied naming the flag.
absl::Status WriteJsonReport(const std::string& path, const nlohmann::json& report);

// The exit code of a check command: ReportError's for an error, else kExitOk when every check
// passed and kExitCheckFailed when one failed.
int CheckCommandExit(const std::string& command, const absl::Status& status, bool all_pass);

int RunRefAttention(const std::vector<std::string>& args);
int RunRefQuantize(const std::vector<std::string>& args);
int RunRefCompare(const std::vector<std::string>& args);
int RunRefEmbed(const std::vector<std::string>& args);
int RunDemo(const std::vector<std::string>& args);
int RunGpuAttention(const std::vector<std::string>& args);
int RunCheckAttention(const std::vector<std::string>& args);
int RunModel(const std::vector<std::string>& args);             // model_cmd.cc
int RunDataGenerate(const std::vector<std::string>& args);      // data_cmd.cc
int RunRefTrain(const std::vector<std::string>& args);          // ref_train.cc
int RunGoldenVerify(const std::vector<std::string>& args);      // golden_cmd.cc
int RunGoldenRegen(const std::vector<std::string>& args);       // golden_cmd.cc
int RunWhatif(const std::vector<std::string>& args);            // whatif.cc
int RunWhatifCollective(const std::vector<std::string>& args);  // whatif_collective.cc
int RunWhatifCalibrate(const std::vector<std::string>& args);   // whatif_collective.cc
int RunBenchComm(const std::vector<std::string>& args);         // bench_comm.cc
int RunBenchAttention(const std::vector<std::string>& args);    // bench_attention.cc
int RunGpuEmbed(const std::vector<std::string>& args);          // gpu_embed.cc
int RunCheckEmbed(const std::vector<std::string>& args);        // check_embed.cc
int RunCheckTrain(const std::vector<std::string>& args);        // check_train.cc
int RunGpuTrain(const std::vector<std::string>& args);          // gpu_train.cc
int RunBenchEmbed(const std::vector<std::string>& args);        // bench_embed.cc
int RunBenchLayers(const std::vector<std::string>& args);       // bench_layers.cc

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_COMMAND_H_
