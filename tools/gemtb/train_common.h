// What `gemtb ref train` (the CPU oracle's trainer) and `gemtb train` (the GPU trainer) share: the
// identity a checkpoint folder must match to be resumed, the check of a learning-rate flag and the
// number formats of their progress lines.
#ifndef GEMTB_TOOLS_GEMTB_TRAIN_COMMON_H_
#define GEMTB_TOOLS_GEMTB_TRAIN_COMMON_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "reference/dist/sharded_checkpoint.h"

namespace gemtb::cli {

// What a checkpoint folder of a job must match: the world size, the config file's bytes (`config`
// names a built-in config or a JSON path) and the plan (its JSON, or "" for data parallel with the
// tables replicated). An unreadable config file is the reader's error naming it.
absl::StatusOr<reference::dist::CheckpointIdentity> TrainCheckpointIdentity(const std::string& config, int world_size,
                                                                            const std::string& plan);

// A learning-rate-like flag --`flag`: finite, >= 0 and representable in fp32 (the trainers'
// precision). The error line naming the flag and value, or nullopt when it is fine or absent.
std::optional<std::string> CheckRate(const char* flag, const std::optional<double>& v);

// After stop signal `signal` at step `step`: with a checkpoint folder, `save` it and say where to
// resume (`resume_flags` + the folder), else say nothing was saved; on stderr, named by `command`.
// The exit code: 128 + signal, or the save's error's.
int StopAfterSignal(const char* command, int signal, int64_t step, const std::string& checkpoint,
                    const std::string& resume_flags, const std::function<absl::Status()>& save);

// `v` rounded for display to `digits` significant digits ("nan" for NaN).
std::string Num(double v, int digits = 5);
// The shortest text that reads back to `v` (a flag's value as given).
std::string Exact(double v);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_TRAIN_COMMON_H_
