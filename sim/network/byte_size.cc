#include "sim/network/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

absl::StatusOr<std::vector<int64_t>> ParseByteSweep(std::string_view flag, std::string_view text) {
  const std::string f(flag);
  const std::vector<std::string> parts = absl::StrSplit(absl::string_view(text.data(), text.size()), ':');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(f, ": \"", std::string(text),
                                                   "\" is not MIN:MAX:FACTOR (e.g. 1K:1G:2, as nccl-tests -b/-e/-f)"));
  }
  absl::StatusOr<int64_t> lo = ParseByteSize(f + " MIN", parts[0]);
  if (!lo.ok()) return lo.status();
  absl::StatusOr<int64_t> hi = ParseByteSize(f + " MAX", parts[1]);
  if (!hi.ok()) return hi.status();
  int64_t factor = 0;
  if (!absl::SimpleAtoi(parts[2], &factor) || factor < 2) {
    return absl::InvalidArgumentError(absl::StrCat(f, " FACTOR: \"", parts[2], "\" must be an integer >= 2"));
  }
  if (*lo < 1) return absl::InvalidArgumentError(absl::StrCat(f, " MIN: ", *lo, " must be >= 1"));
  if (*lo > *hi) return absl::InvalidArgumentError(absl::StrCat(f, ": MIN ", *lo, " is above MAX ", *hi));
  constexpr size_t kMaxSizes = 4096;
  std::vector<int64_t> sizes;
  for (int64_t s = *lo; s <= *hi; s *= factor) {
    sizes.push_back(s);
    if (sizes.size() > kMaxSizes) {
      return absl::InvalidArgumentError(absl::StrCat(f, ": more than ", kMaxSizes, " sizes"));
    }
    if (s > *hi / factor) break;  // the next step would pass MAX (or overflow)
  }
  return sizes;
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
