#include "sim/scenario/torchrec_plan.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/common/status_macros.h"
#include "model/description/model_graph.h"
#include "model/json/json_reader.h"

namespace gemtb::sim {
namespace {

using namespace ::gemtb::json;  // the strict reader: ObjectReader, BadValue, JoinPath, ...

// TorchRec's ShardingType values (torchrec/distributed/types.py) this plan reads.
const std::vector<std::pair<std::string, ShardingType>>& TorchRecTypes() {
  static const std::vector<std::pair<std::string, ShardingType>> types = {
      {"data_parallel", ShardingType::kDataParallel}, {"table_wise", ShardingType::kTableWise},
      {"row_wise", ShardingType::kRowWise},           {"column_wise", ShardingType::kColumnWise},
      {"table_row_wise", ShardingType::kTableRowWise}};
  return types;
}

absl::StatusOr<ShardingType> ReadType(const nlohmann::json& value, const std::string& path) {
  std::string names;
  for (const auto& [name, type] : TorchRecTypes()) {
    if (value.is_string() && value.get<std::string>() == name) return type;
    names += (names.empty() ? "" : ", ") + name;
  }
  return BadValue(path, value, absl::StrCat("is not one of ", names));
}

// The ranks, each a position of the group, none twice.
absl::StatusOr<std::vector<int>> ReadRanks(const nlohmann::json& value, const std::string& path, int mp_group) {
  if (!value.is_array() || value.empty()) return BadValue(path, value, "is not a non-empty array of ranks");
  std::vector<int> ranks;
  std::set<int> seen;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = IndexPath(path, i);
    if (!value[i].is_number_integer() || value[i].get<int64_t>() < 0) {
      return BadValue(at, value[i], "is not a rank (an integer >= 0)");
    }
    const int64_t r = value[i].get<int64_t>();
    if (r >= mp_group) {
      return BadValue(at, value[i],
                      absl::StrCat("is not a rank of the sharding group of ", mp_group,
                                   " (plan.sparse.mp_group; the world size in 1D)"));
    }
    if (!seen.insert(static_cast<int>(r)).second) return BadValue(at, value[i], "appears twice");
    ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace

absl::Status ApplyTorchRecPlan(const nlohmann::json& json, const model::ModelGraph& model, int mp_group,
                               int host_positions, SparsePlan* sparse) {
  const std::string root = "plan.torchrec_plan";
  absl::StatusOr<ObjectReader> r = ObjectReader::Open(json, root, {"tables"});
  if (!r.ok()) return r.status();
  GEMTB_RETURN_IF_ERROR(r->Require("tables"));
  const nlohmann::json& tables = *r->Get("tables");
  const std::string tables_path = JoinPath(root, "tables");
  if (!tables.is_object()) return BadValue(tables_path, tables, "is not an object of table -> sharding");
  const int M = std::max(1, mp_group);
  const int g = std::max(1, host_positions);
  for (const auto& [name, entry] : tables.items()) {
    const std::string path = JoinPath(tables_path, name);
    const std::string& table_name = name;  // a lambda cannot capture a structured binding (clang 14)
    const auto it = std::find_if(model.tables.begin(), model.tables.end(),
                                 [&](const model::GraphTable& t) { return t.name == table_name; });
    if (it == model.tables.end()) return BadField(path, "is not a table of the model");
    const model::GraphTable& table = *it;
    absl::StatusOr<ObjectReader> e = ObjectReader::Open(entry, path, {"sharding_type", "ranks"});
    if (!e.ok()) return e.status();
    GEMTB_RETURN_IF_ERROR(e->Require("sharding_type"));
    GEMTB_RETURN_IF_ERROR(e->Require("ranks"));
    absl::StatusOr<ShardingType> type = ReadType(*e->Get("sharding_type"), JoinPath(path, "sharding_type"));
    if (!type.ok()) return type.status();
    const std::string ranks_path = JoinPath(path, "ranks");
    absl::StatusOr<std::vector<int>> ranks = ReadRanks(*e->Get("ranks"), ranks_path, M);
    if (!ranks.ok()) return ranks.status();
    const int n = static_cast<int>(ranks->size());
    const std::string type_name = e->Get("sharding_type")->get<std::string>();

    TableSharding s;
    s.type = *type;
    switch (*type) {
      case ShardingType::kDataParallel:
      case ShardingType::kRowWise:
        if (n != M) {
          return BadValue(ranks_path, *e->Get("ranks"),
                          absl::StrCat("has ", n, " ranks: ", type_name, " uses every rank of the group of ", M));
        }
        break;
      case ShardingType::kTableWise:
        if (n != 1) return BadValue(ranks_path, *e->Get("ranks"), "must name one rank: table_wise has one owner");
        s.owner = ranks->front();
        break;
      case ShardingType::kColumnWise:
        if (table.dim % n != 0) {
          return BadValue(ranks_path, *e->Get("ranks"),
                          absl::StrCat("has ", n, " ranks (column shards), which do not divide dim ", table.dim,
                                       " of table '", name, "'"));
        }
        s.shards = n;
        s.ranks = *ranks;
        break;
      case ShardingType::kTableRowWise: {
        std::vector<int> sorted = *ranks;
        std::sort(sorted.begin(), sorted.end());
        const int host = sorted.front() / g;
        if (n != g || sorted.front() != host * g || sorted.back() != host * g + g - 1) {
          return BadValue(ranks_path, *e->Get("ranks"),
                          absl::StrCat("must be the ", g, " ranks of one host (", g,
                                       " MP positions per host): table_row_wise splits rows inside a host"));
        }
        s.ranks = *ranks;
        break;
      }
      case ShardingType::kGrid:
        break;
    }
    sparse->tables[static_cast<size_t>(it - model.tables.begin())] = std::move(s);
  }
  return absl::OkStatus();
}

}  // namespace gemtb::sim
