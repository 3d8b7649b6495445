// gemtb golden verify | regen: the frozen oracle answers in golden/ (see golden/README.md).
//
// verify: checks every stored file against the manifest (size, SHA-256), reruns every producer and
// compares the bytes of each array; exit 0 when all match, 1 naming each file that differs (first
// differing element, both values), 2 when the manifest is missing or malformed.
// regen --force: recomputes and rewrites the set and its manifest (each file atomically, the manifest
// last); without --force it refuses (exit 2) and writes nothing.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/common/sha256.h"
#include "model/common/status_macros.h"
#include "model/json/user_file.h"
#include "golden/compare.h"
#include "golden/manifest.h"
#include "golden/registry.h"
#include "model/description/data_dir.h"
#include "tools/gemtb/command.h"
#include "tools/gemtb/flags.h"

namespace gemtb::cli {
namespace {

namespace fs = std::filesystem;
using golden::DescribeNpyDifference;
using golden::DescribeProducer;
using golden::DescribeTextDifference;
using golden::GoldenFile;
using golden::kGoldenRegenCommand;
using golden::GoldenProducer;
using golden::GoldenProducers;
using golden::Manifest;
using golden::ManifestFile;
using golden::ManifestProducer;
using golden::ManifestToText;
using golden::ParseManifest;
using golden::RunGoldenProducer;
using golden::Selected;

constexpr char kManifestName[] = "manifest.json";

// golden/ of the data folder (model/description/data_dir.h).
std::string DefaultGoldenDir() { return (fs::path(model::DataDir()) / "golden").string(); }

absl::StatusOr<std::vector<uint8_t>> ReadBytes(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUserFile(path);
  if (!text.ok()) return text.status();
  return std::vector<uint8_t>(text->begin(), text->end());
}

absl::StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  absl::StatusOr<std::vector<uint8_t>> bytes = ReadBytes(path);
  if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat("--dir=", dir, ": ", bytes.status().message()));
  absl::StatusOr<Manifest> m = ParseManifest(std::string(bytes->begin(), bytes->end()));
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", m.status().message()));
  return m;
}

std::string FormatBytes(int64_t n) {
  return n >= (1 << 20) ? absl::StrFormat("%.2f MiB", n / 1048576.0) : absl::StrFormat("%.1f KiB", n / 1024.0);
}

// A typo in --only must not pass as "verified nothing".
absl::Status CheckSelection(const std::string& only) {
  for (const GoldenProducer& p : GoldenProducers()) {
    if (Selected(p.name, only)) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--only=", only, ": selects no producer (names look like attention/silu_causal)"));
}

// Every difference found, one line each, so a reviewer sees the whole damage at once.
class Findings {
 public:
  explicit Findings(std::string dir) : dir_(std::move(dir)) {}
  void Add(const std::string& path, const std::string& what) {
    std::cerr << "gemtb golden verify: MISMATCH " << (fs::path(dir_) / path).string() << ": " << what << "\n";
    ++count_;
  }
  int count() const { return count_; }

 private:
  std::string dir_;
  int count_ = 0;
};

absl::Status Verify(const std::vector<std::string>& args, bool* help) {
  std::string dir = DefaultGoldenDir(), only;
  FlagSet flags("gemtb golden verify [--dir DIR] [--only PREFIX]",
                "Recomputes every golden producer and compares each stored file bit for bit (and its\n"
                "SHA-256 against manifest.json). Exit 0: all match; 1: a file differs (each is named, with\n"
                "the first differing element and both values); 2: the manifest is missing or malformed.");
  flags.String("dir", &dir, absl::StrCat("golden folder (default ", DefaultGoldenDir(), ")"));
  flags.String("only", &only, "verify only the producers whose name starts with PREFIX (e.g. attention/)");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  GEMTB_RETURN_IF_ERROR(CheckSelection(only));
  absl::StatusOr<Manifest> manifest = ReadManifest(dir);
  if (!manifest.ok()) return manifest.status();

  Findings findings(dir);
  // The manifest and the registry must list the same producers with the same parameters.
  std::map<std::string, const ManifestProducer*> stored;
  for (const ManifestProducer& p : manifest->producers) stored[p.name] = &p;
  std::set<std::string> registered;
  for (const GoldenProducer& p : GoldenProducers()) registered.insert(p.name);
  for (const ManifestProducer& p : manifest->producers) {
    if (Selected(p.name, only) && !registered.count(p.name)) {
      findings.Add(kManifestName, absl::StrCat("producer '", p.name, "' is no longer registered (run ", kGoldenRegenCommand, ")"));
    }
  }
  int64_t producers = 0, files = 0, bytes = 0;
  for (const GoldenProducer& producer : GoldenProducers()) {
    if (!Selected(producer.name, only)) continue;
    ++producers;
    const auto it = stored.find(producer.name);
    if (it == stored.end()) {
      findings.Add(kManifestName, absl::StrCat("producer '", producer.name, "' is registered but not in the manifest (run ",
                                               kGoldenRegenCommand, ")"));
      continue;
    }
    const ManifestProducer& entry = *it->second;
    if (entry.kind != producer.kind || entry.params.dump() != producer.params.dump()) {
      findings.Add(kManifestName, absl::StrCat("producer '", producer.name, "': kind/params in the manifest differ from the registry's ",
                                               producer.kind, " ", producer.params.dump()));
      continue;
    }
    // Stored files against the manifest.
    std::map<std::string, std::vector<uint8_t>> on_disk;
    for (const ManifestFile& f : entry.files) {
      ++files;
      absl::StatusOr<std::vector<uint8_t>> b = ReadBytes((fs::path(dir) / f.path).string());
      if (!b.ok()) {
        findings.Add(f.path, "missing or unreadable");
        continue;
      }
      bytes += static_cast<int64_t>(b->size());
      const std::string sha = Sha256Hex(b->data(), b->size());
      if (static_cast<int64_t>(b->size()) != f.bytes || sha != f.sha256) {
        findings.Add(f.path, absl::StrCat("SHA-256 ", sha, " (", b->size(), " bytes) differs from the manifest's ", f.sha256,
                                          " (", f.bytes, " bytes)"));
      }
      on_disk[f.path] = *std::move(b);
    }
    // Recompute and compare bytes.
    absl::StatusOr<std::vector<GoldenFile>> fresh = RunGoldenProducer(producer);
    if (!fresh.ok()) {
      findings.Add(producer.name, absl::StrCat("recomputing failed: ", fresh.status().message()));
      continue;
    }
    std::set<std::string> fresh_paths;
    for (const GoldenFile& g : *fresh) {
      const std::string path = absl::StrCat(producer.name, "/", g.name);
      fresh_paths.insert(path);
      const auto disk = on_disk.find(path);
      if (disk == on_disk.end()) {
        bool listed = false;
        for (const ManifestFile& f : entry.files) listed = listed || f.path == path;
        if (!listed) findings.Add(path, "recomputed but not in the manifest");
        continue;
      }
      const std::vector<uint8_t> recomputed = g.Bytes();
      const std::optional<std::string> diff = g.array ? DescribeNpyDifference(disk->second, recomputed)
                                                      : DescribeTextDifference(disk->second, recomputed);
      if (diff) findings.Add(path, *diff);
    }
    for (const ManifestFile& f : entry.files) {
      if (!fresh_paths.count(f.path)) findings.Add(f.path, "in the manifest but no longer produced");
    }
  }
  if (findings.count() > 0) {
    return absl::AbortedError(absl::StrCat(findings.count(), " mismatch(es) in ", dir, " (", producers, " producers, ", files,
                                           " files checked); if the change is intended, run ", kGoldenRegenCommand));
  }
  std::cout << "gemtb golden verify: OK: " << producers << " producers, " << files << " files (" << FormatBytes(bytes)
            << ") in " << dir << " match bit for bit\n";
  return absl::OkStatus();
}

// The commit the set is made at: `git rev-parse HEAD` in the golden folder, or "unknown".
std::string CurrentCommit(const std::string& dir) {
  for (char c : dir) {
    if (c == '\'' || c == '\n') return "unknown";
  }
  FILE* pipe = ::popen(absl::StrCat("git -C '", dir, "' rev-parse HEAD 2>/dev/null").c_str(), "r");
  if (!pipe) return "unknown";
  char buf[128] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, pipe);
  ::pclose(pipe);
  std::string out(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.size() == 40 ? out : "unknown";
}

absl::Status Regen(const std::vector<std::string>& args, bool* help) {
  std::string dir = DefaultGoldenDir(), only;
  bool force = false;
  FlagSet flags("gemtb golden regen --force [--dir DIR] [--only PREFIX]",
                "Recomputes the golden producers and rewrites their files and manifest.json (each file\n"
                "atomically, the manifest last). Refuses without --force: the golden set is the oracle's\n"
                "record, and rewriting it should be a decision. With --only, the other producers' entries\n"
                "are kept as they are.");
  flags.String("dir", &dir, absl::StrCat("golden folder (default ", DefaultGoldenDir(), ")"));
  flags.String("only", &only, "regenerate only the producers whose name starts with PREFIX");
  flags.Bool("force", &force, "really overwrite the golden files");
  GEMTB_RETURN_IF_ERROR(flags.Parse(args));
  if (flags.help_requested()) {
    std::cout << flags.Help();
    *help = true;
    return absl::OkStatus();
  }
  if (!force) return absl::InvalidArgumentError("--force: required; regen overwrites the golden set (nothing was written)");
  GEMTB_RETURN_IF_ERROR(CheckSelection(only));

  // With --only the other entries are kept, so the old manifest must be sound; a full regen only
  // uses it (if readable) to remove files that are no longer produced.
  std::optional<Manifest> old;
  {
    absl::StatusOr<Manifest> m = ReadManifest(dir);
    if (m.ok()) {
      old = *std::move(m);
    } else if (!only.empty()) {
      return m.status();
    }
  }
  std::map<std::string, ManifestProducer> kept;
  if (old) {
    for (const ManifestProducer& p : old->producers) kept[p.name] = p;
  }

  // Compute everything before writing anything.
  Manifest manifest;
  manifest.commit = CurrentCommit(dir);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> writes;
  for (const GoldenProducer& producer : GoldenProducers()) {
    if (!Selected(producer.name, only)) {
      const auto it = kept.find(producer.name);
      if (it != kept.end()) manifest.producers.push_back(it->second);
      continue;
    }
    absl::StatusOr<std::vector<GoldenFile>> files = RunGoldenProducer(producer);
    if (!files.ok()) return absl::InternalError(std::string(files.status().message()));
    manifest.producers.push_back(DescribeProducer(producer, *files));
    for (const GoldenFile& g : *files) writes.emplace_back(absl::StrCat(producer.name, "/", g.name), g.Bytes());
  }
  int64_t total = 0;
  for (const auto& [path, bytes] : writes) {
    const fs::path full = fs::path(dir) / path;
    std::error_code ec;
    fs::create_directories(full.parent_path(), ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat(full.parent_path().string(), ": ", ec.message()));
    GEMTB_RETURN_IF_ERROR(WriteTextAtomically(full.string(), std::string(bytes.begin(), bytes.end())));
    total += static_cast<int64_t>(bytes.size());
  }
  // Files of the selected producers that the old manifest listed and the new one does not: remove
  // them (and folders left empty).
  std::set<std::string> now;
  for (const ManifestProducer& p : manifest.producers) {
    for (const ManifestFile& f : p.files) now.insert(f.path);
  }
  if (old) {
    for (const ManifestProducer& p : old->producers) {
      if (!Selected(p.name, only)) continue;
      for (const ManifestFile& f : p.files) {
        if (now.count(f.path)) continue;
        std::error_code ec;
        const fs::path full = fs::path(dir) / f.path;
        fs::remove(full, ec);
        for (fs::path d = full.parent_path(); d != fs::path(dir) && d.has_relative_path(); d = d.parent_path()) {
          if (!fs::is_empty(d, ec) || ec || !fs::remove(d, ec)) break;
        }
      }
    }
  }
  GEMTB_RETURN_IF_ERROR(WriteTextAtomically((fs::path(dir) / kManifestName).string(), ManifestToText(manifest)));
  std::cout << "gemtb golden regen: wrote " << writes.size() << " files (" << FormatBytes(total) << ") and "
            << kManifestName << " in " << dir << " at commit " << manifest.commit << "\n";
  return absl::OkStatus();
}

}  // namespace

int RunGoldenVerify(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Verify(args, &help); !s.ok()) return ReportError("golden verify", s);
  return kExitOk;
}

int RunGoldenRegen(const std::vector<std::string>& args) {
  bool help = false;
  if (absl::Status s = Regen(args, &help); !s.ok()) return ReportError("golden regen", s);
  return kExitOk;
}

}  // namespace gemtb::cli
