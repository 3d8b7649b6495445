#include "model/sharding/sharding_plan_json.h"

#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/common/status_macros.h"
#include "model/json/json_reader.h"

namespace gemtb {
namespace {

using json::BadField;
using json::BadValue;
using json::JoinPath;
using json::ObjectReader;

constexpr int kMaxGroup = 1 << 24;
constexpr int kMaxShards = 1 << 20;

std::string OneOf(const std::vector<std::string>& names) { return absl::StrJoin(names, ", "); }

// A table or default entry as written: which fields it sets.
struct Entry {
  std::optional<ShardingType> type;
  std::optional<int> owner;
  std::optional<int> shards;
};

absl::StatusOr<Entry> ParseEntry(const nlohmann::json& j, const std::string& path) {
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(j, path, {"type", "owner", "shards"});
  if (!r.ok()) return r.status();
  Entry e;
  if (const nlohmann::json* type = r->Get("type"); type != nullptr) {
    e.type = type->is_string() ? ShardingTypeFromName(type->get<std::string>()) : std::nullopt;
    if (!e.type) return BadValue(JoinPath(path, "type"), *type, "is not one of " + OneOf(ShardingTypeNames()));
  }
  if (r->Has("owner")) {
    int v = 0;
    GEMTB_RETURN_IF_ERROR(r->Int("owner", &v, 0, kMaxGroup));
    e.owner = v;
  }
  if (r->Has("shards")) {
    int v = 0;
    GEMTB_RETURN_IF_ERROR(r->Int("shards", &v, 1, kMaxShards));
    e.shards = v;
  }
  if (e.owner && e.type && *e.type != ShardingType::kTableWise) {
    return BadField(JoinPath(path, "owner"), absl::StrCat(*e.owner, ": only TW tables have an owner (type is ",
                                                          ShardingTypeName(*e.type), ")"));
  }
  if (e.shards && e.type && !HasColumnShards(*e.type)) {
    return BadField(JoinPath(path, "shards"), absl::StrCat(*e.shards, ": only CW and GRID tables have shards (type is ",
                                                           ShardingTypeName(*e.type), ")"));
  }
  return e;
}

// Paths to name in errors about one resolved table.
struct TablePaths {
  std::string type, owner, shards;
};

absl::Status CheckTable(const PlanTable& table, const TableSharding& s, const TablePaths& paths, int mp_group,
                        int replicas, int gpus_per_host) {
  if (s.type == ShardingType::kTableWise && s.owner >= mp_group) {
    return BadField(paths.owner, absl::StrCat(s.owner, " is out of range [0, ", mp_group, ") (MP group positions)"));
  }
  if (s.type != ShardingType::kTableWise && s.owner != -1) {
    return BadField(paths.owner, absl::StrCat(s.owner, ": only TW tables have an owner"));
  }
  if (HasColumnShards(s.type)) {
    if (s.shards < 1) return BadField(paths.shards, absl::StrCat(s.shards, " must be >= 1"));
    if (table.dim % s.shards != 0) {
      return BadField(paths.shards,
                      absl::StrCat(s.shards, " does not divide dim ", table.dim, " of table '", table.name, "'"));
    }
  } else if (s.shards != 1) {
    return BadField(paths.shards, absl::StrCat(s.shards, ": only CW and GRID tables have shards"));
  }
  if (PlacedOnHosts(s.type)) {
    absl::StatusOr<int> g = HostGroupPositions(mp_group, replicas, gpus_per_host);
    if (!g.ok()) {
      return BadField(paths.type, absl::StrCat(ShardingTypeName(s.type), " on hosts: ", g.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWorld(int world_size, int gpus_per_host) {
  if (world_size < 1) return BadField("world_size", absl::StrCat(world_size, " must be >= 1"));
  if (gpus_per_host < 1) return BadField("gpus_per_host", absl::StrCat(gpus_per_host, " must be >= 1"));
  return absl::OkStatus();
}

}  // namespace

std::vector<PlanTable> PlanTablesOf(const EmbeddingConfig& config) {
  std::vector<PlanTable> tables;
  for (const TableConfig& t : config.tables) tables.push_back({t.name, t.dim});
  return tables;
}

absl::Status ValidateShardingPlan(const ShardingPlanSpec& plan, absl::Span<const PlanTable> tables, int world_size,
                                  int gpus_per_host, const ShardingPlanOptions& options) {
  GEMTB_RETURN_IF_ERROR(CheckWorld(world_size, gpus_per_host));
  const std::string& path = options.path;
  if (plan.mp_group < 0) return BadField(JoinPath(path, "mp_group"), absl::StrCat(plan.mp_group, " must be >= 1"));
  const int m = MpGroupSize(plan, world_size);
  if (world_size % m != 0) {
    return BadField(JoinPath(path, "mp_group"), absl::StrCat(m, " does not divide world_size ", world_size));
  }
  if (plan.sync_period < 1) {
    return BadField(JoinPath(path, "sync_period"), absl::StrCat(plan.sync_period, " must be >= 1"));
  }
  if (plan.tables.size() != tables.size()) {
    return BadField(JoinPath(path, "tables"),
                    absl::StrCat(plan.tables.size(), " resolved entries for ", tables.size(), " tables"));
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::string base = JoinPath(JoinPath(path, "tables"), tables[t].name);
    GEMTB_RETURN_IF_ERROR(CheckTable(tables[t], plan.tables[t], {base + ".type", base + ".owner", base + ".shards"}, m,
                                     world_size / m, gpus_per_host));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardingPlanSpec> ParseShardingPlan(const nlohmann::json& json, absl::Span<const PlanTable> tables,
                                                   int world_size, int gpus_per_host,
                                                   const ShardingPlanOptions& options) {
  GEMTB_RETURN_IF_ERROR(CheckWorld(world_size, gpus_per_host));
  const std::string& path = options.path;
  absl::StatusOr<ObjectReader> r =
      ObjectReader::Open(json, path,
                         {"default", "tables", "mp_group", "fully_sharded", "sync_period", "state_sync", "cw_state",
                          "gather", "keep_gathered"});
  if (!r.ok()) return r.status();
  ShardingPlanSpec plan;
  GEMTB_RETURN_IF_ERROR(r->Int("mp_group", &plan.mp_group, 1, kMaxGroup));
  if (options.cap_mp_group_at_world_size && plan.mp_group > world_size) plan.mp_group = world_size;
  if (plan.mp_group > 0 && world_size % plan.mp_group != 0) {
    return BadField(JoinPath(path, "mp_group"), absl::StrCat(plan.mp_group, " does not divide world_size ", world_size));
  }
  GEMTB_RETURN_IF_ERROR(r->Bool("fully_sharded", &plan.fully_sharded));
  GEMTB_RETURN_IF_ERROR(r->Int("sync_period", &plan.sync_period, 1, kMaxShards));
  GEMTB_RETURN_IF_ERROR(r->Bool("state_sync", &plan.state_sync));
  GEMTB_RETURN_IF_ERROR(r->Bool("keep_gathered", &plan.keep_gathered));
  if (const nlohmann::json* v = r->Get("cw_state"); v != nullptr) {
    const std::optional<CwState> s = v->is_string() ? CwStateFromName(v->get<std::string>()) : std::nullopt;
    if (!s) return BadValue(JoinPath(path, "cw_state"), *v, "is not one of " + OneOf(CwStateNames()));
    plan.cw_state = *s;
  }
  if (const nlohmann::json* v = r->Get("gather"); v != nullptr) {
    const std::optional<GatherMode> g = v->is_string() ? GatherModeFromName(v->get<std::string>()) : std::nullopt;
    if (!g) return BadValue(JoinPath(path, "gather"), *v, "is not one of " + OneOf(GatherModeNames()));
    plan.gather = *g;
  }

  const std::string default_path = JoinPath(path, "default");
  const std::string tables_path = JoinPath(path, "tables");
  Entry def;
  if (const nlohmann::json* d = r->Get("default"); d != nullptr) {
    absl::StatusOr<Entry> e = ParseEntry(*d, default_path);
    if (!e.ok()) return e.status();
    def = *e;
  }
  std::vector<std::optional<Entry>> entries(tables.size());
  if (const nlohmann::json* t = r->Get("tables"); t != nullptr) {
    if (!t->is_object()) return BadValue(tables_path, *t, "is not an object of table name -> sharding");
    for (const auto& [name, entry] : t->items()) {
      const std::string table_path = JoinPath(tables_path, name);
      size_t i = 0;
      while (i < tables.size() && tables[i].name != name) ++i;
      if (i == tables.size()) return BadValue(table_path, entry, "names no table of the model");
      absl::StatusOr<Entry> e = ParseEntry(entry, table_path);
      if (!e.ok()) return e.status();
      entries[i] = *e;
    }
  }

  const int m = MpGroupSize(plan, world_size);
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::string own = JoinPath(tables_path, tables[t].name);
    const Entry e = entries[t].value_or(Entry{});
    TableSharding s;
    s.type = e.type ? *e.type : def.type.value_or(ShardingType::kTableWise);
    // Errors about a value the default supplied name the default.
    TablePaths paths{e.type || !def.type ? own + ".type" : default_path + ".type", own + ".owner",
                     e.type || e.shards ? own + ".shards" : default_path + ".shards"};
    if (s.type == ShardingType::kTableWise) {
      if (e.owner) {
        s.owner = *e.owner;
      } else if (def.owner) {
        s.owner = *def.owner;
        paths.owner = default_path + ".owner";
      }
    } else if (e.owner) {
      return BadField(paths.owner,
                      absl::StrCat(*e.owner, ": only TW tables have an owner (type is ", ShardingTypeName(s.type), ")"));
    }
    if (HasColumnShards(s.type)) {
      if (e.shards) {
        s.shards = *e.shards;
      } else if (def.shards) {
        s.shards = *def.shards;
        paths.shards = default_path + ".shards";
      } else {
        return BadField(paths.shards, absl::StrCat("missing: ", ShardingTypeName(s.type), " table '", tables[t].name,
                                                   "' needs a column shard count"));
      }
    } else if (e.shards) {
      return BadField(paths.shards, absl::StrCat(*e.shards, ": only CW and GRID tables have shards (type is ",
                                                 ShardingTypeName(s.type), ")"));
    }
    GEMTB_RETURN_IF_ERROR(CheckTable(tables[t], s, paths, m, world_size / m, gpus_per_host));
    plan.tables.push_back(s);
  }
  return plan;
}

}  // namespace gemtb
