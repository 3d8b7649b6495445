#include "tools/gemtb/flags.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gemtb::cli {

FlagSet::FlagSet(std::string usage, std::string summary)
    : usage_(std::move(usage)), summary_(std::move(summary)) {}

void FlagSet::String(const std::string& name, std::string* dst, const std::string& help) {
  flags_.push_back({name, Kind::kString, dst, help});
}
void FlagSet::Int64(const std::string& name, int64_t* dst, const std::string& help) {
  flags_.push_back({name, Kind::kInt64, dst, help});
}
void FlagSet::OptionalInt64(const std::string& name, std::optional<int64_t>* dst,
                            const std::string& help) {
  flags_.push_back({name, Kind::kOptInt64, dst, help});
}
void FlagSet::OptionalDouble(const std::string& name, std::optional<double>* dst,
                             const std::string& help) {
  flags_.push_back({name, Kind::kOptDouble, dst, help});
}
void FlagSet::Bool(const std::string& name, bool* dst, const std::string& help) {
  flags_.push_back({name, Kind::kBool, dst, help});
}
void FlagSet::StringList(const std::string& name, std::vector<std::string>* dst, const std::string& help) {
  flags_.push_back({name, Kind::kStringList, dst, help});
}

absl::Status ParseInt64(const std::string& flag, const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": not an integer"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ParseDouble(const std::string& flag, const std::string& text, double* out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": not a number"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status FlagSet::Assign(Flag& flag, const std::string& value) {
  switch (flag.kind) {
    case Kind::kString: *static_cast<std::string*>(flag.dst) = value; return absl::OkStatus();
    case Kind::kInt64: return ParseInt64(flag.name, value, static_cast<int64_t*>(flag.dst));
    case Kind::kOptInt64: {
      int64_t v = 0;
      if (absl::Status s = ParseInt64(flag.name, value, &v); !s.ok()) return s;
      *static_cast<std::optional<int64_t>*>(flag.dst) = v;
      return absl::OkStatus();
    }
    case Kind::kOptDouble: {
      double v = 0;
      if (absl::Status s = ParseDouble(flag.name, value, &v); !s.ok()) return s;
      *static_cast<std::optional<double>*>(flag.dst) = v;
      return absl::OkStatus();
    }
    case Kind::kBool: *static_cast<bool*>(flag.dst) = true; return absl::OkStatus();
    case Kind::kStringList: {
      auto* list = static_cast<std::vector<std::string>*>(flag.dst);
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        if (part.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("--", flag.name, "=", value, ": an empty entry"));
        }
        list->emplace_back(part);
      }
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown flag kind");
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t a = 0; a < args.size(); ++a) {
    const std::string& arg = args[a];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return absl::OkStatus();
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "' (see --help)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Flag* flag = nullptr;
    for (Flag& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (flag->seen && flag->kind != Kind::kStringList) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " given twice"));
    }
    flag->seen = true;
    if (flag->kind == Kind::kBool) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      *static_cast<bool*>(flag->dst) = true;
      continue;
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else {
      if (a + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      value = args[++a];
    }
    if (absl::Status s = Assign(*flag, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool FlagSet::Seen(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

std::string FlagSet::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("  --", f.name);
    if (f.kind == Kind::kStringList) absl::StrAppend(&left, " V[,V...]");
    else if (f.kind != Kind::kBool) absl::StrAppend(&left, " VALUE");
    if (left.size() < 26) left.append(26 - left.size(), ' ');
    absl::StrAppend(&out, left, " ", f.help, "\n");
  }
  absl::StrAppend(&out, "  --help                   this text\n");
  return out;
}

}  // namespace gemtb::cli
