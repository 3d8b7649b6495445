// The one sharding plan parser (model/sharding/sharding_plan_json.h) on arbitrary JSON text.
//
// An input is two bytes that pick the world (world_size, gpus_per_host) from small tables, then
// the text of the simulator's `plan.sparse` object. The embedding config is fixed: tables t0, t1,
// t2 of dims 4, 8 and 12 (the embedding_spec target fuzzes configs; this one spends its
// executions on plans).
//
// Promises checked:
//  * Any text gives a plan or InvalidArgument naming the JSON path (or the world), never a crash.
//  * An accepted plan passes ValidateShardingPlan for the same world; M divides world_size; every
//    table has its resolved type, an owner in [0, M) only when TW, a shard count dividing its dim
//    only when CW or GRID, and host groups that exist when TWRW or GRID.
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/byte_reader.h"
#include "model/sharding/sharding_plan_json.h"
#include "nlohmann/json.hpp"

namespace {

using gemtb::fuzz::Check;
using gemtb::fuzz::Fail;
using gemtb::ShardingType;

const gemtb::EmbeddingConfig& Config() {
  static const gemtb::EmbeddingConfig config = [] {
    gemtb::EmbeddingConfig c;
    for (int t = 0; t < 3; ++t) {
      gemtb::TableConfig tc;
      tc.name = absl::StrCat("t", t);
      tc.rows = 16 >> t;
      tc.dim = 4 * (t + 1);
      c.tables.push_back(tc);
    }
    return c;
  }();
  return config;
}

constexpr int kWorlds[16] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 4096, 0, -1, 5};
constexpr int kGpusPerHost[8] = {1, 2, 4, 8, 3, 16, 0, 6};

bool IsTableWise(ShardingType t) { return t == ShardingType::kTableWise; }
bool HasShards(ShardingType t) { return t == ShardingType::kColumnWise || t == ShardingType::kGrid; }
bool OnHosts(ShardingType t) { return t == ShardingType::kTableRowWise || t == ShardingType::kGrid; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gemtb::fuzz::ByteReader r(data, size);
  const int world_size = kWorlds[r.U8() % 16];
  const int gpus_per_host = kGpusPerHost[r.U8() % 8];
  const size_t skip = size < 2 ? size : 2;
  const nlohmann::json j =
      nlohmann::json::parse(data + skip, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  const gemtb::EmbeddingConfig& config = Config();
  absl::StatusOr<gemtb::ShardingPlanSpec> plan =
      gemtb::ParseShardingPlan(j, gemtb::PlanTablesOf(config), world_size, gpus_per_host);
  if (!plan.ok()) {
    const absl::string_view m = plan.status().message();
    Check(absl::IsInvalidArgument(plan.status()) &&
              (absl::StartsWith(m, "plan") || absl::StartsWith(m, "world_size") ||
               absl::StartsWith(m, "gpus_per_host")),
          absl::StrCat("plan error is not InvalidArgument naming its path: ", plan.status().ToString()));
    return 0;
  }
  const absl::Status valid =
      gemtb::ValidateShardingPlan(*plan, gemtb::PlanTablesOf(config), world_size, gpus_per_host);
  if (!valid.ok()) Fail(absl::StrCat("parsed plan fails validation: ", valid.ToString()));
  const int m = gemtb::MpGroupSize(*plan, world_size);
  const int n = gemtb::ReplicaCount(*plan, world_size);
  Check(m >= 1 && n >= 1 && m * n == world_size, "M * N != world_size");
  Check(plan->tables.size() == config.tables.size(), "one sharding per table");
  for (size_t t = 0; t < plan->tables.size(); ++t) {
    const gemtb::TableSharding& s = plan->tables[t];
    const std::string what = absl::StrCat("table ", t, " (", gemtb::ShardingTypeName(s.type), "): ");
    Check(IsTableWise(s.type) ? s.owner >= -1 && s.owner < m : s.owner == -1, what + "bad owner");
    Check(HasShards(s.type) ? s.shards >= 1 && config.tables[t].dim % s.shards == 0 : s.shards == 1,
          what + "bad shard count");
    if (OnHosts(s.type)) {
      Check(gemtb::HostGroupPositions(m, n, gpus_per_host).ok(), what + "no host groups");
    }
  }
  Check(plan->sync_period >= 1, "sync_period < 1");
  return 0;
}
