// The communication report: one record per collective call of a
// virtual-rank run, with the bytes each group member sends to and receives from the others as a
// direct exchange. The oracle writes it; `sim/` reads the same JSON and reproduces the volumes.
#ifndef GEMTB_REFERENCE_COLLECTIVES_COMM_REPORT_H_
#define GEMTB_REFERENCE_COLLECTIVES_COMM_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gemtb::reference {

enum class CommPhase { kForward, kBackward, kSync };
enum class CollectiveOp { kAllToAll, kAllGather, kReduceScatter, kAllReduce, kBroadcast };
// The process-group classes: sparse-mp (1D sharding inside an MP group),
// sparse-replica (2D V2 weight/state sync), sparse-intra (V3's gather/scatter inside the replica
// group), and the dense classes.
enum class GroupClass {
  kSparseMp,
  kSparseReplica,
  kSparseIntra,
  kDenseShard,
  kDenseReplica,
  kExpertParallel,
  kExpertShard
};

// JSON names: "fwd" | "bwd" | "sync"; "all_to_all" | ...; "sparse-mp" | ...
const char* CommPhaseName(CommPhase phase);
const char* CollectiveOpName(CollectiveOp op);
const char* GroupClassName(GroupClass group_class);

struct CollectiveRecord {
  int64_t step = 0;
  CommPhase phase = CommPhase::kForward;
  CollectiveOp op = CollectiveOp::kAllToAll;
  GroupClass group_class = GroupClass::kSparseMp;
  std::vector<int> group;           // global ranks, in group order
  std::vector<int64_t> send_bytes;  // per member, in group order
  std::vector<int64_t> recv_bytes;

  bool operator==(const CollectiveRecord&) const = default;
};

struct CommReport {
  int64_t wire_bytes_per_element = 4;  // e_a: 4 for the oracle, 2 for the GPU trainer
  std::vector<CollectiveRecord> collectives;

  bool operator==(const CommReport&) const = default;
};

// {"unit": "bytes", "wire_bytes_per_element": 4, "collectives": [{"step", "phase", "op",
// "group_class", "group", "send_bytes", "recv_bytes"}, ...]}, keys in that order.
nlohmann::ordered_json CommReportToJson(const CommReport& report);

// The inverse, validating every field (InvalidArgument naming the JSON path).
absl::StatusOr<CommReport> CommReportFromJson(const nlohmann::json& json);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_COLLECTIVES_COMM_REPORT_H_
