// Checkpoints: named arrays in one file, written atomically (temp file in the same directory, write,
// fsync, rename over the old file, fsync the directory), so a crash at any point leaves either the
// previous checkpoint or the new one, never a torn file. The temp file "<path>.tmp.<pid>" of a
// write killed midway stays behind until the next successful write of the same path removes it
// (only when process <pid> is gone: a live writer's temp file is never touched).
//
// Format (little-endian):
//   "GEMTBCKP"  u32 version (1)  u32 count
//   per array: u32 name length, name bytes, u64 npy length, the array as a complete .npy file
//   u64 FNV-1a-64 of every byte before it
// A reader rejects a wrong magic, version, a truncated file or a checksum mismatch (DataLoss).
#ifndef GEMTB_REFERENCE_MODEL_CHECKPOINT_H_
#define GEMTB_REFERENCE_MODEL_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "reference/io/npy.h"

namespace gemtb::reference::model {

using NamedArrays = std::vector<std::pair<std::string, io::NpyArray>>;

std::vector<uint8_t> SerializeCheckpoint(const NamedArrays& arrays);
absl::StatusOr<NamedArrays> ParseCheckpoint(const std::vector<uint8_t>& bytes, const std::string& name);

struct CheckpointWriteOptions {
  // Failure injection for tests: stop after this many bytes of the temp file, as a crash would
  // (the temp file stays behind, the target is untouched) and return an error. -1 = off.
  int64_t fail_after_bytes = -1;
  // With fail_after_bytes: kill the process with SIGKILL at that point instead of returning (a real
  // crash mid-write, for end-to-end tests of `gemtb ref train --crash-checkpoint-after-bytes`).
  bool kill_at_failure = false;
};

// Whether `path` can be written before any work starts: its folder exists and is writable, and
// `path` is not a folder. FailedPrecondition naming the path and the reason otherwise.
absl::Status CheckCheckpointPath(const std::string& path);

// Writes `bytes` to `path` by the atomic procedure above (temp file, fsync, rename, fsync the folder).
absl::Status WriteFileAtomically(const std::string& path, absl::Span<const uint8_t> bytes,
                                 const CheckpointWriteOptions& options = {});
// WriteFileAtomically of SerializeCheckpoint(arrays).
absl::Status WriteCheckpoint(const std::string& path, const NamedArrays& arrays, const CheckpointWriteOptions& options = {});
absl::StatusOr<NamedArrays> ReadCheckpoint(const std::string& path);

}  // namespace gemtb::reference::model

#endif  // GEMTB_REFERENCE_MODEL_CHECKPOINT_H_
