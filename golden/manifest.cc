#include "golden/manifest.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/common/sha256.h"
#include "model/common/status_macros.h"

namespace gemtb::golden {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status GetString(const json& j, const char* key, const std::string& path, std::string* out) {
  if (!j.contains(key)) return Bad(absl::StrCat(path, ".", key), "missing");
  if (!j[key].is_string()) return Bad(absl::StrCat(path, ".", key), absl::StrCat(j[key].dump(), " is not a string"));
  *out = j[key].get<std::string>();
  return absl::OkStatus();
}

// A relative path of plain names: no absolute paths, no "." or ".." parts, no empty parts.
bool IsSafeRelativePath(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '-' || c == '.';
      if (!ok) return false;
    }
    start = end + 1;
  }
  return true;
}

bool IsHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<ManifestFile> ParseFile(const json& j, const std::string& path, const std::string& producer) {
  if (!j.is_object()) return Bad(path, "must be an object");
  ManifestFile f;
  GEMTB_RETURN_IF_ERROR(GetString(j, "path", path, &f.path));
  if (!IsSafeRelativePath(f.path) || !absl::StartsWith(f.path, producer + "/")) {
    return Bad(path + ".path", absl::StrCat("'", f.path, "' is not a plain relative path inside '", producer, "/'"));
  }
  GEMTB_RETURN_IF_ERROR(GetString(j, "role", path, &f.role));
  if (f.role != "input" && f.role != "output") return Bad(path + ".role", absl::StrCat("'", f.role, "' is not input|output"));
  GEMTB_RETURN_IF_ERROR(GetString(j, "format", path, &f.format));
  if (f.format != "npy" && f.format != "json") return Bad(path + ".format", absl::StrCat("'", f.format, "' is not npy|json"));
  if (f.format == "npy") {
    GEMTB_RETURN_IF_ERROR(GetString(j, "dtype", path, &f.dtype));
    if (!j.contains("shape") || !j["shape"].is_array()) return Bad(path + ".shape", "missing or not an array");
    for (const json& d : j["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return Bad(path + ".shape", absl::StrCat(j["shape"].dump(), " is not a shape"));
      f.shape.push_back(d.get<int64_t>());
    }
  }
  GEMTB_RETURN_IF_ERROR(GetString(j, "sha256", path, &f.sha256));
  if (!IsHex64(f.sha256)) return Bad(path + ".sha256", absl::StrCat("'", f.sha256, "' is not 64 lower-case hex digits"));
  if (!j.contains("bytes") || !j["bytes"].is_number_integer() || j["bytes"].get<int64_t>() < 0) {
    return Bad(path + ".bytes", "missing or not a non-negative integer");
  }
  f.bytes = j["bytes"].get<int64_t>();
  return f;
}

}  // namespace

bool Selected(const std::string& name, const std::string& prefix) { return absl::StartsWith(name, prefix); }

absl::StatusOr<Manifest> ParseManifest(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object()) return Bad("(top)", "must be an object");
  std::string format;
  GEMTB_RETURN_IF_ERROR(GetString(j, "format", "(top)", &format));
  if (format != kGoldenManifestFormat) return Bad("format", absl::StrCat("'", format, "', expected '", kGoldenManifestFormat, "'"));
  Manifest m;
  GEMTB_RETURN_IF_ERROR(GetString(j, "command", "(top)", &m.command));
  GEMTB_RETURN_IF_ERROR(GetString(j, "commit", "(top)", &m.commit));
  if (!j.contains("producers") || !j["producers"].is_array()) return Bad("producers", "missing or not an array");
  std::set<std::string> names, paths;
  for (size_t i = 0; i < j["producers"].size(); ++i) {
    const json& pj = j["producers"][i];
    const std::string path = absl::StrCat("producers[", i, "]");
    if (!pj.is_object()) return Bad(path, "must be an object");
    ManifestProducer p;
    GEMTB_RETURN_IF_ERROR(GetString(pj, "name", path, &p.name));
    if (!IsSafeRelativePath(p.name)) return Bad(path + ".name", absl::StrCat("'", p.name, "' is not a plain relative path"));
    if (!names.insert(p.name).second) return Bad(path + ".name", absl::StrCat("'", p.name, "' appears twice"));
    GEMTB_RETURN_IF_ERROR(GetString(pj, "kind", path, &p.kind));
    if (!IsGoldenKind(p.kind)) return Bad(path + ".kind", absl::StrCat("'", p.kind, "' is not a producer kind"));
    if (!pj.contains("params") || !pj["params"].is_object()) return Bad(path + ".params", "missing or not an object");
    p.params = pj["params"];
    if (!pj.contains("files") || !pj["files"].is_array()) return Bad(path + ".files", "missing or not an array");
    for (size_t k = 0; k < pj["files"].size(); ++k) {
      absl::StatusOr<ManifestFile> f = ParseFile(pj["files"][k], absl::StrCat(path, ".files[", k, "]"), p.name);
      if (!f.ok()) return f.status();
      if (!paths.insert(f->path).second) return Bad(absl::StrCat(path, ".files[", k, "].path"), absl::StrCat("'", f->path, "' appears twice"));
      p.files.push_back(*std::move(f));
    }
    m.producers.push_back(std::move(p));
  }
  return m;
}

std::string ManifestToText(const Manifest& m) {
  json producers = json::array();
  for (const ManifestProducer& p : m.producers) {
    json files = json::array();
    for (const ManifestFile& f : p.files) {
      json fj = {{"path", f.path}, {"role", f.role}, {"format", f.format}, {"sha256", f.sha256}, {"bytes", f.bytes}};
      if (f.format == "npy") {
        fj["dtype"] = f.dtype;
        fj["shape"] = f.shape;
      }
      files.push_back(std::move(fj));
    }
    producers.push_back({{"name", p.name}, {"kind", p.kind}, {"params", p.params}, {"files", std::move(files)}});
  }
  const json j = {{"format", kGoldenManifestFormat}, {"command", m.command}, {"commit", m.commit},
                  {"producers", std::move(producers)}};
  return j.dump(1) + "\n";
}

ManifestProducer DescribeProducer(const GoldenProducer& producer, const std::vector<GoldenFile>& files) {
  ManifestProducer p;
  p.name = producer.name;
  p.kind = producer.kind;
  p.params = producer.params;
  for (const GoldenFile& g : files) {
    ManifestFile f;
    f.path = absl::StrCat(producer.name, "/", g.name);
    f.role = g.is_input ? "input" : "output";
    f.format = g.array ? "npy" : "json";
    if (g.array) {
      f.dtype = std::string(io::NpyDescr(g.array->dtype));
      f.shape = g.array->shape;
    }
    const std::vector<uint8_t> bytes = g.Bytes();
    f.sha256 = Sha256Hex(bytes.data(), bytes.size());
    f.bytes = static_cast<int64_t>(bytes.size());
    p.files.push_back(std::move(f));
  }
  return p;
}

}  // namespace gemtb::golden
