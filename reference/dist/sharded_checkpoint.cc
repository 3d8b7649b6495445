#include "reference/dist/sharded_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/common/sha256.h"
#include "model/json/json_reader.h"
#include "model/json/user_file.h"
#include "nlohmann/json.hpp"

namespace gemtb::reference::dist {
namespace {

namespace fs = std::filesystem;

constexpr char kFormat[] = "gemtb sharded checkpoint";
constexpr int kVersion = 1;
constexpr char kManifest[] = "manifest.json";
constexpr char kStepPrefix[] = "step-";
constexpr char kOk[] = "ok ";
constexpr char kError[] = "error ";

std::string StepDir(const std::string& dir, int64_t step) { return (fs::path(dir) / absl::StrCat(kStepPrefix, step)).string(); }
std::string ShardName(int rank) { return absl::StrCat("rank-", rank, ".ckpt"); }

// The step of a folder named "step-<digits>", or -1.
int64_t StepOf(const std::string& name) {
  if (!absl::StartsWith(name, kStepPrefix)) return -1;
  const char* begin = name.data() + sizeof(kStepPrefix) - 1;
  const char* end = name.data() + name.size();
  int64_t step = -1;
  auto [ptr, ec] = std::from_chars(begin, end, step);
  return (ec == std::errc() && ptr == end && begin != end && *begin != '-') ? step : -1;
}

struct ShardEntry {
  int rank = 0;
  std::string file;
  int64_t bytes = 0;
  std::string sha256;
};

struct Manifest {
  int64_t step = 0;
  int world_size = 0;
  std::string config_hash, plan_hash;
  std::vector<ShardEntry> shards;
};

std::string ManifestText(const Manifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["step"] = m.step;
  j["world_size"] = m.world_size;
  j["config_hash"] = m.config_hash;
  j["plan_hash"] = m.plan_hash;
  j["shards"] = nlohmann::ordered_json::array();
  for (const ShardEntry& s : m.shards)
    j["shards"].push_back({{"rank", s.rank}, {"file", s.file}, {"bytes", s.bytes}, {"sha256", s.sha256}});
  return j.dump(1) + "\n";
}

absl::StatusOr<Manifest> ParseManifest(const std::string& text, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": not valid JSON"));
  auto top = json::ObjectReader::Open(j, path, {"format", "version", "step", "world_size", "config_hash", "plan_hash", "shards"});
  if (!top.ok()) return top.status();
  Manifest m;
  std::string format;
  int version = 0;
  for (const char* key : {"format", "version", "step", "world_size", "config_hash", "plan_hash", "shards"})
    if (absl::Status s = top->Require(key); !s.ok()) return s;
  absl::Status s = top->String("format", &format);
  if (s.ok() && format != kFormat) s = json::BadValue(json::JoinPath(path, "format"), j["format"], absl::StrCat("is not \"", kFormat, "\""));
  if (s.ok()) s = top->Int("version", &version, kVersion, kVersion);
  if (s.ok()) s = top->Int64("step", &m.step, 0, INT64_MAX);
  if (s.ok()) s = top->Int("world_size", &m.world_size, 1, INT32_MAX);
  if (s.ok()) s = top->String("config_hash", &m.config_hash);
  if (s.ok()) s = top->String("plan_hash", &m.plan_hash);
  if (!s.ok()) return s;
  const nlohmann::json& shards = j["shards"];
  const std::string shards_path = json::JoinPath(path, "shards");
  if (!shards.is_array() || shards.size() != static_cast<size_t>(m.world_size))
    return json::BadValue(shards_path, shards, absl::StrCat("is not an array of world_size = ", m.world_size, " entries"));
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string p = json::IndexPath(shards_path, i);
    auto entry = json::ObjectReader::Open(shards[i], p, {"rank", "file", "bytes", "sha256"});
    if (!entry.ok()) return entry.status();
    ShardEntry e;
    for (const char* key : {"rank", "file", "bytes", "sha256"})
      if (absl::Status r = entry->Require(key); !r.ok()) return r;
    absl::Status r = entry->Int("rank", &e.rank, static_cast<int64_t>(i), static_cast<int64_t>(i));
    if (r.ok()) r = entry->String("file", &e.file);
    if (r.ok() && e.file != ShardName(e.rank))
      r = json::BadValue(json::JoinPath(p, "file"), shards[i]["file"], absl::StrCat("is not \"", ShardName(e.rank), "\""));
    if (r.ok()) r = entry->Int64("bytes", &e.bytes, 0, INT64_MAX);
    if (r.ok()) r = entry->String("sha256", &e.sha256);
    if (!r.ok()) return r;
    m.shards.push_back(std::move(e));
  }
  return m;
}

// The step folders of `dir` that hold a manifest, highest step first.
std::vector<int64_t> CommittedSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t step = StepOf(it->path().filename().string());
    if (step >= 0 && fs::exists(it->path() / kManifest, ec)) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Rank 0, after the manifest of `step`: the folders of earlier steps (committed or not) go.
void RemoveEarlierSteps(const std::string& dir, int64_t step) {
  std::error_code ec;
  std::vector<fs::path> earlier;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t s = StepOf(it->path().filename().string());
    if (s >= 0 && s < step) earlier.push_back(it->path());
  }
  for (const fs::path& p : earlier) fs::remove_all(p, ec);
}

// Step 1 of a write: this rank's shard, atomically, as its manifest entry (size and SHA-256 of the
// bytes written) or the write's error.
absl::StatusOr<ShardEntry> WriteShard(const std::string& step_dir, int rank, const model::NamedArrays& arrays,
                                      const model::CheckpointWriteOptions& options) {
  const std::vector<uint8_t> bytes = model::SerializeCheckpoint(arrays);
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(step_dir, ": cannot create: ", ec.message()));
  const std::string file = ShardName(rank);
  if (absl::Status s = model::WriteFileAtomically((fs::path(step_dir) / file).string(), bytes, options); !s.ok()) return s;
  return ShardEntry{rank, file, static_cast<int64_t>(bytes.size()), Sha256Hex(bytes.data(), bytes.size())};
}

// The commit (rank 0, once every shard is on disk): the manifest, atomically. Returns its text.
absl::StatusOr<std::string> Commit(const std::string& step_dir, const Manifest& m,
                                   const model::CheckpointWriteOptions& options) {
  const std::string text = ManifestText(m);
  if (absl::Status s = model::WriteFileAtomically(
          (fs::path(step_dir) / kManifest).string(),
          absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()), options);
      !s.ok())
    return s;
  return text;
}

}  // namespace

absl::Status WriteShardedCheckpoint(const std::string& dir, int64_t step, const CheckpointIdentity& identity,
                                    const model::NamedArrays& arrays, launch::TcpStoreClient& store,
                                    const ShardedWriteOptions& options) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", step, ": must be >= 0"));
  if (identity.world_size != store.world_size())
    return absl::InvalidArgumentError(absl::StrCat("checkpoint world_size ", identity.world_size,
                                                   ": the job runs ", store.world_size(), " ranks"));
  const int rank = store.rank();
  const std::string step_dir = StepDir(dir, step);
  // 1. This rank's shard, atomically; its size and SHA-256 (of the bytes written) or its error.
  const absl::StatusOr<ShardEntry> written = WriteShard(step_dir, rank, arrays, options.shard);
  const std::string report = written.ok() ? absl::StrCat(kOk, written->bytes, " ", written->sha256)
                                          : absl::StrCat(kError, written.status().message());
  // 2. Every rank learns every rank's outcome: all written, or the first rank's error everywhere.
  auto reports = launch::StoreAllGather(store, absl::StrCat("checkpoint/", step, "/shard"), report);
  if (!reports.ok()) return reports.status();
  Manifest m{step, identity.world_size, identity.config_hash, identity.plan_hash, {}};
  for (int r = 0; r < identity.world_size; ++r) {
    const std::string& rep = (*reports)[static_cast<size_t>(r)];
    if (absl::StartsWith(rep, kError))
      return absl::AbortedError(absl::StrCat("checkpoint step ", step, ": rank ", r, " could not write its shard: ",
                                             rep.substr(sizeof(kError) - 1)));
    ShardEntry e{r, ShardName(r), 0, ""};
    const size_t space = rep.find(' ', sizeof(kOk) - 1);
    e.bytes = std::stoll(rep.substr(sizeof(kOk) - 1, space - (sizeof(kOk) - 1)));
    e.sha256 = rep.substr(space + 1);
    m.shards.push_back(std::move(e));
  }
  // 3. Rank 0 commits with the manifest; every rank waits for the commit.
  const std::string commit_key = absl::StrCat("checkpoint/", step, "/manifest");
  if (rank == 0) {
    absl::StatusOr<std::string> text = Commit(step_dir, m, options.manifest);
    if (!text.ok()) {
      store.Fail(absl::StrCat("checkpoint step ", step, ": manifest: ", text.status().message())).IgnoreError();
      return text.status();
    }
    if (absl::Status set = store.Set(commit_key, Sha256Hex(*text)); !set.ok()) return set;
    RemoveEarlierSteps(dir, step);
    return absl::OkStatus();
  }
  return store.Get(commit_key).status();
}

absl::Status WriteOneProcessCheckpoint(const std::string& dir, int64_t step, const CheckpointIdentity& identity,
                                       const model::NamedArrays& arrays, const ShardedWriteOptions& options) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", step, ": must be >= 0"));
  if (identity.world_size != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint world_size ", identity.world_size, ": one process writes world size 1"));
  const std::string step_dir = StepDir(dir, step);
  absl::StatusOr<ShardEntry> written = WriteShard(step_dir, 0, arrays, options.shard);
  if (!written.ok()) return written.status();
  absl::StatusOr<std::string> text =
      Commit(step_dir, Manifest{step, 1, identity.config_hash, identity.plan_hash, {*std::move(written)}}, options.manifest);
  if (!text.ok()) return text.status();
  RemoveEarlierSteps(dir, step);
  return absl::OkStatus();
}

namespace {

// The shards `first` .. `last` of the newest checkpoint, their arrays concatenated in rank order.
absl::StatusOr<LoadedShard> ReadShards(const std::string& dir, const CheckpointIdentity& identity, int first, int last) {
  const std::vector<int64_t> steps = CommittedSteps(dir);
  if (steps.empty())
    return absl::NotFoundError(absl::StrCat(dir, ": no checkpoint (no step-<n> folder with a ", kManifest, ")"));
  const std::string step_dir = StepDir(dir, steps[0]);
  const std::string manifest_path = (fs::path(step_dir) / kManifest).string();
  auto text = ReadUserFile(manifest_path);
  if (!text.ok()) return text.status();
  auto m = ParseManifest(*text, manifest_path);
  if (!m.ok()) return m.status();
  auto mismatch = [&](const char* field, const std::string& theirs, const std::string& ours, const char* why) {
    return absl::FailedPreconditionError(absl::StrCat(manifest_path, ": ", field, " ", theirs, ", this job's is ", ours,
                                                      " (", why, ")"));
  };
  if (m->step != steps[0])
    return absl::DataLossError(absl::StrCat(manifest_path, ": step ", m->step, " in a folder of step ", steps[0]));
  if (m->world_size != identity.world_size)
    return mismatch("world_size", absl::StrCat(m->world_size), absl::StrCat(identity.world_size),
                    "resuming needs the world size the checkpoint was written with");
  if (m->config_hash != identity.config_hash)
    return mismatch("config_hash", m->config_hash, identity.config_hash, "a checkpoint of another config");
  if (m->plan_hash != identity.plan_hash)
    return mismatch("plan_hash", m->plan_hash, identity.plan_hash, "a checkpoint of another plan");
  if (first < 0 || last >= m->world_size)
    return absl::InvalidArgumentError(absl::StrCat("rank ", first < 0 ? first : last, ": outside world size ", m->world_size));
  LoadedShard out{m->step, {}, Sha256Hex(*text)};
  for (int rank = first; rank <= last; ++rank) {
    const ShardEntry& entry = m->shards[static_cast<size_t>(rank)];
    const std::string shard_path = (fs::path(step_dir) / entry.file).string();
    auto shard = ReadUserFile(shard_path, static_cast<uint64_t>(entry.bytes) + 1);
    if (!shard.ok()) return shard.status();
    const std::string sha = Sha256Hex(*shard);
    if (static_cast<int64_t>(shard->size()) != entry.bytes || sha != entry.sha256)
      return absl::DataLossError(absl::StrCat(shard_path, ": ", shard->size(), " bytes with SHA-256 ", sha,
                                              ", the manifest says ", entry.bytes, " bytes with ", entry.sha256));
    auto arrays = model::ParseCheckpoint(std::vector<uint8_t>(shard->begin(), shard->end()), shard_path);
    if (!arrays.ok()) return arrays.status();
    for (auto& a : *arrays) out.arrays.push_back(std::move(a));
  }
  return out;
}

// Every rank reads (its shard or all), then the ranks agree on the checkpoint.
absl::StatusOr<LoadedShard> LoadAgreed(const std::string& dir, const CheckpointIdentity& identity,
                                       launch::TcpStoreClient& store, bool every_shard) {
  auto mine = every_shard ? ReadShards(dir, identity, 0, identity.world_size - 1)
                          : ReadShards(dir, identity, store.rank(), store.rank());

  const std::string report = mine.ok() ? absl::StrCat(kOk, "step ", mine->step, " manifest sha256 ", mine->manifest_sha256)
                                       : absl::StrCat(kError, mine.status().message());
  auto reports = launch::StoreAllGather(store, "checkpoint/load", report);
  if (!reports.ok()) return reports.status();
  if (!mine.ok()) return mine.status();
  for (int r = 0; r < store.world_size(); ++r) {
    const std::string& rep = (*reports)[static_cast<size_t>(r)];
    if (absl::StartsWith(rep, kError))
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint: rank ", r, " cannot resume: ", rep.substr(sizeof(kError) - 1)));
    if (rep != (*reports)[0])
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint: ranks disagree on the checkpoint to resume (a stale copy of ", dir, "?): rank 0 has ",
          (*reports)[0].substr(sizeof(kOk) - 1), ", rank ", r, " has ", rep.substr(sizeof(kOk) - 1)));
  }
  return mine;
}

}  // namespace

absl::StatusOr<LoadedShard> ReadShardOfNewestCheckpoint(const std::string& dir, const CheckpointIdentity& identity,
                                                        int rank) {
  return ReadShards(dir, identity, rank, rank);
}

absl::StatusOr<LoadedShard> LoadShardedCheckpoint(const std::string& dir, const CheckpointIdentity& identity,
                                                  launch::TcpStoreClient& store) {
  return LoadAgreed(dir, identity, store, /*every_shard=*/false);
}

absl::StatusOr<LoadedShard> LoadWholeShardedCheckpoint(const std::string& dir, const CheckpointIdentity& identity,
                                                       launch::TcpStoreClient& store) {
  return LoadAgreed(dir, identity, store, /*every_shard=*/true);
}

}  // namespace gemtb::reference::dist
