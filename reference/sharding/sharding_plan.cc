#include "reference/sharding/sharding_plan.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/common/status_macros.h"

namespace gemtb::reference {
namespace {

constexpr std::array<std::pair<ShardingType, const char*>, 6> kTypes = {{{ShardingType::kDataParallel, "DP"},
                                                                         {ShardingType::kTableWise, "TW"},
                                                                         {ShardingType::kRowWise, "RW"},
                                                                         {ShardingType::kColumnWise, "CW"},
                                                                         {ShardingType::kTableRowWise, "TWRW"},
                                                                         {ShardingType::kGrid, "GRID"}}};

absl::Status Bad(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}
absl::Status BadValue(absl::string_view path, const nlohmann::json& value, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", value.dump(), " ", what));
}

absl::Status GetInt(const nlohmann::json& j, absl::string_view path, int lo, int* out) {
  if (!j.is_number_integer()) return BadValue(path, j, "is not an integer");
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > (int64_t{1} << 30)) return BadValue(path, j, absl::StrCat("is out of range (must be >= ", lo, ")"));
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

absl::Status GetBool(const nlohmann::json& j, absl::string_view path, bool* out) {
  if (!j.is_boolean()) return BadValue(path, j, "is not a boolean");
  *out = j.get<bool>();
  return absl::OkStatus();
}

bool NeedsHosts(ShardingType t) { return t == ShardingType::kTableRowWise || t == ShardingType::kGrid; }
bool NeedsShards(ShardingType t) { return t == ShardingType::kColumnWise || t == ShardingType::kGrid; }

// A table or default entry as written: which fields it sets.
struct Entry {
  std::optional<ShardingType> type;
  std::optional<int> owner;
  std::optional<int> shards;
};

absl::StatusOr<Entry> ParseEntry(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) return BadValue(path, j, "is not an object");
  Entry e;
  for (const auto& [key, value] : j.items()) {
    const std::string field = absl::StrCat(path, ".", key);
    if (key == "type") {
      bool known = false;
      for (const auto& [type, name] : kTypes) {
        if (value.is_string() && value.get<std::string>() == name) {
          e.type = type;
          known = true;
        }
      }
      if (!known) return BadValue(field, value, "is not one of DP, TW, RW, CW, TWRW, GRID");
    } else if (key == "owner") {
      int v = 0;
      GEMTB_RETURN_IF_ERROR(GetInt(value, field, 0, &v));
      e.owner = v;
    } else if (key == "shards") {
      int v = 0;
      GEMTB_RETURN_IF_ERROR(GetInt(value, field, 1, &v));
      e.shards = v;
    } else {
      return BadValue(field, value, "is not a known key (type, owner, shards)");
    }
  }
  if (e.owner && e.type && *e.type != ShardingType::kTableWise) {
    return Bad(absl::StrCat(path, ".owner"),
               absl::StrCat(*e.owner, ": only TW tables have an owner (type is ", ShardingTypeName(*e.type), ")"));
  }
  if (e.shards && e.type && !NeedsShards(*e.type)) {
    return Bad(absl::StrCat(path, ".shards"), absl::StrCat(*e.shards, ": only CW and GRID tables have shards (type is ",
                                                           ShardingTypeName(*e.type), ")"));
  }
  return e;
}

// Paths to name in errors about one resolved table.
struct TablePaths {
  std::string type, owner, shards;
};

absl::Status CheckTable(const EmbeddingConfig& config, size_t t, const TableSharding& s, const TablePaths& paths,
                        int mp_group, int replicas, int gpus_per_host) {
  const TableConfig& tc = config.tables[t];
  if (s.type == ShardingType::kTableWise && s.owner >= mp_group) {
    return Bad(paths.owner, absl::StrCat(s.owner, " is out of range [0, ", mp_group, ") (MP group positions)"));
  }
  if (s.type != ShardingType::kTableWise && s.owner != -1) {
    return Bad(paths.owner, absl::StrCat(s.owner, ": only TW tables have an owner"));
  }
  if (NeedsShards(s.type)) {
    if (s.shards < 1) return Bad(paths.shards, absl::StrCat(s.shards, " must be >= 1"));
    if (tc.dim % s.shards != 0) {
      return Bad(paths.shards, absl::StrCat(s.shards, " does not divide dim ", tc.dim, " of table '", tc.name, "'"));
    }
  } else if (s.shards != 1) {
    return Bad(paths.shards, absl::StrCat(s.shards, ": only CW and GRID tables have shards"));
  }
  if (NeedsHosts(s.type)) {
    absl::StatusOr<int> g = HostGroupPositions(mp_group, replicas, gpus_per_host);
    if (!g.ok()) return Bad(paths.type, absl::StrCat(ShardingTypeName(s.type), " on hosts: ", g.status().message()));
  }
  return absl::OkStatus();
}

absl::Status CheckWorld(int world_size, int gpus_per_host) {
  if (world_size < 1) return Bad("world_size", absl::StrCat(world_size, " must be >= 1"));
  if (gpus_per_host < 1) return Bad("gpus_per_host", absl::StrCat(gpus_per_host, " must be >= 1"));
  return absl::OkStatus();
}

}  // namespace

const char* ShardingTypeName(ShardingType type) {
  for (const auto& [t, name] : kTypes) {
    if (t == type) return name;
  }
  return "?";
}

int MpGroupSize(const ShardingPlanSpec& plan, int world_size) { return plan.mp_group > 0 ? plan.mp_group : world_size; }
int ReplicaCount(const ShardingPlanSpec& plan, int world_size) { return world_size / MpGroupSize(plan, world_size); }

absl::StatusOr<int> HostGroupPositions(int mp_group, int replicas, int gpus_per_host) {
  // Rank m*N + rho lives on host floor((m*N + rho) / gpus_per_host). Positions m share a host in
  // runs of gpus_per_host / N when N divides gpus_per_host, and never when gpus_per_host divides N.
  int per_host = 0;
  if (gpus_per_host % replicas == 0) {
    per_host = std::min(gpus_per_host / replicas, mp_group);
  } else if (replicas % gpus_per_host == 0) {
    per_host = 1;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpus_per_host ", gpus_per_host, " and the replica count N=", replicas, " do not divide one another"));
  }
  if (mp_group % per_host != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hosts of ", per_host, " MP-group positions (gpus_per_host ",
                                                   gpus_per_host, ", N=", replicas, ") do not divide the MP group of ",
                                                   mp_group));
  }
  return per_host;
}

absl::Status ValidateShardingPlan(const ShardingPlanSpec& plan, const EmbeddingConfig& config, int world_size,
                                  int gpus_per_host) {
  GEMTB_RETURN_IF_ERROR(CheckWorld(world_size, gpus_per_host));
  if (plan.mp_group < 0) return Bad("plan.mp_group", absl::StrCat(plan.mp_group, " must be >= 1"));
  const int m = MpGroupSize(plan, world_size);
  if (world_size % m != 0) return Bad("plan.mp_group", absl::StrCat(m, " does not divide world_size ", world_size));
  if (plan.sync_period < 1) return Bad("plan.sync_period", absl::StrCat(plan.sync_period, " must be >= 1"));
  if (plan.tables.size() != config.tables.size()) {
    return Bad("plan.tables", absl::StrCat(plan.tables.size(), " entries for ", config.tables.size(), " tables"));
  }
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const std::string base = absl::StrCat("plan.tables.", config.tables[t].name);
    GEMTB_RETURN_IF_ERROR(CheckTable(config, t, plan.tables[t], {base + ".type", base + ".owner", base + ".shards"}, m,
                                     world_size / m, gpus_per_host));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardingPlanSpec> ParseShardingPlan(const nlohmann::json& json, const EmbeddingConfig& config,
                                                   int world_size, int gpus_per_host) {
  GEMTB_RETURN_IF_ERROR(CheckWorld(world_size, gpus_per_host));
  if (!json.is_object()) return BadValue("plan", json, "is not an object");
  ShardingPlanSpec plan;
  std::optional<Entry> def;
  std::vector<std::optional<Entry>> entries(config.tables.size());
  for (const auto& [key, value] : json.items()) {
    const std::string path = absl::StrCat("plan.", key);
    if (key == "default") {
      absl::StatusOr<Entry> e = ParseEntry(value, path);
      if (!e.ok()) return e.status();
      if (!e->type) return Bad(path + ".type", "missing");
      def = *e;
    } else if (key == "tables") {
      if (!value.is_object()) return BadValue(path, value, "is not an object");
      for (const auto& [name, entry] : value.items()) {
        const std::string table_path = absl::StrCat(path, ".", name);
        size_t t = 0;
        while (t < config.tables.size() && config.tables[t].name != name) ++t;
        if (t == config.tables.size()) return BadValue(table_path, entry, "names no table of the embedding config");
        absl::StatusOr<Entry> e = ParseEntry(entry, table_path);
        if (!e.ok()) return e.status();
        entries[t] = *e;
      }
    } else if (key == "mp_group") {
      GEMTB_RETURN_IF_ERROR(GetInt(value, path, 1, &plan.mp_group));
      if (world_size % plan.mp_group != 0) {
        return Bad(path, absl::StrCat(plan.mp_group, " does not divide world_size ", world_size));
      }
    } else if (key == "fully_sharded") {
      GEMTB_RETURN_IF_ERROR(GetBool(value, path, &plan.fully_sharded));
    } else if (key == "sync_period") {
      GEMTB_RETURN_IF_ERROR(GetInt(value, path, 1, &plan.sync_period));
    } else if (key == "state_sync") {
      GEMTB_RETURN_IF_ERROR(GetBool(value, path, &plan.state_sync));
    } else if (key == "keep_gathered") {
      GEMTB_RETURN_IF_ERROR(GetBool(value, path, &plan.keep_gathered));
    } else if (key == "cw_state") {
      if (value == "shared") {
        plan.cw_state = CwState::kShared;
      } else if (value == "per_shard") {
        plan.cw_state = CwState::kPerShard;
      } else {
        return BadValue(path, value, "is not \"shared\" or \"per_shard\"");
      }
    } else if (key == "gather") {
      if (value == "all") {
        plan.gather = GatherMode::kAll;
      } else if (value == "touched") {
        plan.gather = GatherMode::kTouched;
      } else {
        return BadValue(path, value, "is not \"all\" or \"touched\"");
      }
    } else {
      return BadValue(path, value, "is not a known key");
    }
  }
  const int m = MpGroupSize(plan, world_size);
  for (size_t t = 0; t < config.tables.size(); ++t) {
    const std::string own = absl::StrCat("plan.tables.", config.tables[t].name);
    const Entry e = entries[t].value_or(Entry{});
    if (!e.type && !def) {
      return Bad(entries[t] ? own + ".type" : std::string("plan.default"),
                 absl::StrCat("missing: table '", config.tables[t].name, "' has no sharding type"));
    }
    TableSharding s;
    s.type = e.type ? *e.type : *def->type;
    // Errors about a value the default supplied name the default.
    TablePaths paths{e.type ? own + ".type" : "plan.default.type", own + ".owner",
                     e.type || e.shards ? own + ".shards" : "plan.default.shards"};
    if (s.type == ShardingType::kTableWise) {
      if (e.owner) {
        s.owner = *e.owner;
      } else if (def && def->owner) {
        s.owner = *def->owner;
        paths.owner = "plan.default.owner";
      }
    } else if (e.owner) {
      return Bad(paths.owner,
                 absl::StrCat(*e.owner, ": only TW tables have an owner (type is ", ShardingTypeName(s.type), ")"));
    }
    if (NeedsShards(s.type)) {
      if (e.shards) {
        s.shards = *e.shards;
      } else if (def && def->shards) {
        s.shards = *def->shards;
        paths.shards = "plan.default.shards";
      } else {
        return Bad(paths.shards, absl::StrCat("missing: ", ShardingTypeName(s.type), " table '", config.tables[t].name,
                                              "' needs a column shard count"));
      }
    } else if (e.shards) {
      return Bad(paths.shards, absl::StrCat(*e.shards, ": only CW and GRID tables have shards (type is ",
                                            ShardingTypeName(s.type), ")"));
    }
    GEMTB_RETURN_IF_ERROR(CheckTable(config, t, s, paths, m, world_size / m, gpus_per_host));
    plan.tables.push_back(s);
  }
  return plan;
}

}  // namespace gemtb::reference
