// Byte sizes as nccl-tests writes them: "1024", "1K", "64M", "1G" (powers of two; B optional, case
// insensitive: "64MiB", "64mb" read the same). For `gemtb whatif collective --size` and
// `gemtb bench comm --min-bytes/--max-bytes`.
#ifndef GEMTB_SIM_NETWORK_BYTE_SIZE_H_
#define GEMTB_SIM_NETWORK_BYTE_SIZE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gemtb::sim {

// Errors name `flag`: "--size: \"12Q\" is not a byte size (e.g. 1024, 1K, 64M, 1G)".
absl::StatusOr<int64_t> ParseByteSize(std::string_view flag, std::string_view text);

// A size sweep as nccl-tests' -b/-e/-f: "MIN:MAX:FACTOR" ("1K:1G:2") -> MIN, MIN·F, ... up to MAX
// (MAX included when the steps reach it). Errors name `flag` and the bad part: three fields, sizes
// >= 1, MIN <= MAX, FACTOR an integer >= 2, at most 4,096 sizes.
absl::StatusOr<std::vector<int64_t>> ParseByteSweep(std::string_view flag, std::string_view text);

// 1024 -> "1 KiB", 3 << 20 -> "3 MiB", 1000 -> "1000 B" (exact multiples only).
std::string FormatByteSize(double bytes);

}  // namespace gemtb::sim

#endif  // GEMTB_SIM_NETWORK_BYTE_SIZE_H_
