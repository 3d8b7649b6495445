// Deterministic text for reports: doubles in shortest round-trip form (std::to_chars), JSON written
// with keys in insertion order (nlohmann::ordered_json) and a fixed layout, CSV fields quoted only
// when needed. Same values -> same bytes, on any machine and thread count.
#ifndef GEMTB_SIM_REPORT_JSON_TEXT_H_
#define GEMTB_SIM_REPORT_JSON_TEXT_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace gemtb::sim::report {

// Shortest text that parses back to exactly `v` ("0.1", "1e+20", "4096"); "nan"/"inf"/"-inf" for
// non-finite values (JSON writes those as null).
std::string FormatDouble(double v);

// `v` with at most `digits` significant digits, for tables meant for people (never in JSON/CSV).
std::string FormatShort(double v, int digits = 4);

// JSON text: objects one key per line, indented by two spaces; arrays of scalars on one line;
// non-finite doubles as null; ends with a newline.
std::string JsonText(const nlohmann::ordered_json& json);

// One CSV field: as is, or double-quoted (quotes doubled) when it holds a comma, quote or newline.
std::string CsvField(std::string_view text);

// Escapes &, <, >, " and ' for XML text and attribute values.
std::string XmlEscape(std::string_view text);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_JSON_TEXT_H_
