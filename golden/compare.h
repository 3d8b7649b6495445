// Bit-exact comparison of a stored golden file with a recomputed one, and a message a person can act
// on: for .npy files the first differing element (flat index, multi-index, both values and their bits);
// for text the first differing line.
#ifndef GEMTB_GOLDEN_COMPARE_H_
#define GEMTB_GOLDEN_COMPARE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gemtb::golden {

// nullopt when the bytes are equal; otherwise what differs (without the file name).
std::optional<std::string> DescribeNpyDifference(const std::vector<uint8_t>& stored, const std::vector<uint8_t>& recomputed);
std::optional<std::string> DescribeTextDifference(const std::vector<uint8_t>& stored, const std::vector<uint8_t>& recomputed);

}  // namespace gemtb::golden

#endif  // GEMTB_GOLDEN_COMPARE_H_
