// A command's output folder, written as a set: every file goes into a temporary folder beside the
// target, and only when all are complete is that folder renamed into place. A reader of the target
// sees the previous set or the new one, never a part of one or a mix of two; a failed write (a full
// disk) leaves the previous set as it was.
//
// A target that already holds files is refused unless `force`; with it, the old folder is replaced
// as a whole (an atomic exchange), and only a folder of plain files is ever replaced, so a mistyped
// --out-dir cannot take a tree of folders with it.
#ifndef GEMTB_TOOLS_GEMTB_OUTPUT_SET_H_
#define GEMTB_TOOLS_GEMTB_OUTPUT_SET_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "reference/io/npy.h"

namespace gemtb::cli {

struct OutputSetOptions {
  bool force = false;  // replace a target folder that already holds files
  // For tests: the write of file number `fail_write_at` (0-based, in the order added) stops after
  // half its bytes with ENOSPC, as a full disk would.
  std::optional<size_t> fail_write_at;
};

class OutputSet {
 public:
  // Checks, before any work is done, that `dir` can receive a new set: its parent folder exists and
  // is writable, and `dir` is absent, an empty folder, or (with force) a folder of plain files.
  // `flag` names the option in errors ("--out-dir").
  static absl::StatusOr<OutputSet> Prepare(std::string flag, std::string dir, OutputSetOptions options = {});

  // Keeps the array's data as it is (moved in when given an rvalue); its file is written as the
  // header and the data in one gathered write.
  void AddNpy(std::string name, io::NpyArray array);
  void AddText(std::string name, const std::string& text);
  // Writes every file into a temporary folder, fsyncs it, and puts it in place of `dir`.
  absl::Status Commit();

  const std::string& dir() const { return dir_; }

 private:
  OutputSet(std::string flag, std::string dir, OutputSetOptions options)
      : flag_(std::move(flag)), dir_(std::move(dir)), options_(options) {}

  std::string flag_;
  std::string dir_;
  OutputSetOptions options_;
  struct File {
    std::string name;
    std::vector<uint8_t> head, body;  // the file is head then body
  };
  std::vector<File> files_;
};

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_OUTPUT_SET_H_
