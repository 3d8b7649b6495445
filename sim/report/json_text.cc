#include "sim/report/json_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace gemtb::sim::report {
namespace {

bool IsScalar(const nlohmann::ordered_json& j) { return !j.is_object() && !j.is_array(); }

void Append(const nlohmann::ordered_json& j, int depth, std::string& out) {
  const std::string pad(static_cast<size_t>(2 * (depth + 1)), ' ');
  const std::string close_pad(static_cast<size_t>(2 * depth), ' ');
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::number_float: {
      const double v = j.get<double>();
      out += std::isfinite(v) ? FormatDouble(v) : "null";
      return;
    }
    case nlohmann::ordered_json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += "{\n";
      bool first = true;
      for (const auto& [key, value] : j.items()) {
        if (!first) out += ",\n";
        first = false;
        out += pad;
        out += nlohmann::ordered_json(key).dump();
        out += ": ";
        Append(value, depth + 1, out);
      }
      out += "\n" + close_pad + "}";
      return;
    }
    case nlohmann::ordered_json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      bool scalars = true;
      for (const auto& v : j) scalars = scalars && IsScalar(v);
      if (scalars) {
        out += "[";
        for (size_t i = 0; i < j.size(); ++i) {
          if (i > 0) out += ", ";
          Append(j[i], depth + 1, out);
        }
        out += "]";
        return;
      }
      out += "[\n";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i > 0) out += ",\n";
        out += pad;
        Append(j[i], depth + 1, out);
      }
      out += "\n" + close_pad + "]";
      return;
    }
    default:
      // Strings (escaped by nlohmann), integers, booleans, null.
      out += j.dump();
      return;
  }
}

}  // namespace

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";  // also -0
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string FormatShort(double v, int digits) {
  if (!std::isfinite(v)) return FormatDouble(v);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string JsonText(const nlohmann::ordered_json& json) {
  std::string out;
  Append(json, 0, out);
  out += "\n";
  return out;
}

std::string CsvField(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace gemtb::sim::report
