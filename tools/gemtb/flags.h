// A small command-line flag parser for the gemtb subcommands: `--name value` and `--switch`,
// typed destinations, `--help` text generated from the registrations. Errors are absl::Status
// values naming the flag, so every command reports bad input the same way (exit code 2).
#ifndef GEMTB_TOOLS_GEMTB_FLAGS_H_
#define GEMTB_TOOLS_GEMTB_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace gemtb::cli {

class FlagSet {
 public:
  FlagSet(std::string usage, std::string summary);

  void String(const std::string& name, std::string* dst, const std::string& help);
  void Int64(const std::string& name, int64_t* dst, const std::string& help);
  void OptionalInt64(const std::string& name, std::optional<int64_t>* dst, const std::string& help);
  void OptionalDouble(const std::string& name, std::optional<double>* dst, const std::string& help);
  void Bool(const std::string& name, bool* dst, const std::string& help);
  // Repeatable: each `--name V` appends V, and a comma-separated V appends each of its parts
  // (`--in a.json --in b.json` = `--in a.json,b.json`); an empty part is an error naming the flag.
  void StringList(const std::string& name, std::vector<std::string>* dst, const std::string& help);

  // Parses args (without the command words). `--help` sets help_requested() and returns OK.
  absl::Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_; }
  // Whether `name` appeared on the command line.
  bool Seen(const std::string& name) const;
  std::string Help() const;

 private:
  enum class Kind { kString, kInt64, kOptInt64, kOptDouble, kBool, kStringList };
  struct Flag {
    std::string name;
    Kind kind;
    void* dst;
    std::string help;
    bool seen = false;
  };
  absl::Status Assign(Flag& flag, const std::string& value);

  std::string usage_;
  std::string summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

// Strict number parsing: the whole string must be a number; names the flag on error.
absl::Status ParseInt64(const std::string& flag, const std::string& text, int64_t* out);
absl::Status ParseDouble(const std::string& flag, const std::string& text, double* out);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_FLAGS_H_
