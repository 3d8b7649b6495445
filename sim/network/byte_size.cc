#include "sim/network/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gemtb::sim {

absl::StatusOr<int64_t> ParseByteSize(std::string_view flag, std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(absl::string_view(flag.data(), flag.size()), ": \"",
                                                   absl::string_view(text.data(), text.size()),
                                                   "\" is not a byte size (e.g. 1024, 1K, 64M, 1G)"));
  };
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr == text.data() || value < 0) return bad();
  std::string suffix;
  for (const char* c = ptr; c != end; ++c) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    shift = 40;
  } else {
    return bad();
  }
  if (value > (INT64_MAX >> shift)) return bad();
  return value << shift;
}

std::string FormatByteSize(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && std::fmod(bytes, 1024) == 0) {
    bytes /= 1024;
    ++u;
  }
  return absl::StrCat(bytes, " ", units[u]);
}

}  // namespace gemtb::sim
