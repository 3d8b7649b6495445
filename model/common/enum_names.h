// Names of enum values as data: each vocabulary enum of model/ has one table of {value, name} rows,
// and every printer and parser of that enum reads the table (JSON files, CLI flags, messages).
#ifndef GEMTB_MODEL_COMMON_ENUM_NAMES_H_
#define GEMTB_MODEL_COMMON_ENUM_NAMES_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gemtb {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `value` in `table`, or "?" for a value the table lacks.
template <typename E, size_t N>
constexpr std::string_view NameIn(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return "?";
}

template <typename E, size_t N>
constexpr std::optional<E> ParseIn(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& row : table) {
    if (row.name == name) return row.value;
  }
  return std::nullopt;
}

// "a, b, c": the names of `table`, for messages.
template <typename E, size_t N>
std::string NamesOf(const EnumName<E> (&table)[N]) {
  std::string all;
  for (const EnumName<E>& row : table) {
    if (!all.empty()) all += ", ";
    all += row.name;
  }
  return all;
}

}  // namespace gemtb

#endif  // GEMTB_MODEL_COMMON_ENUM_NAMES_H_
