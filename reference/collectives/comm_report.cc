#include "reference/collectives/comm_report.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gemtb::reference {
namespace {

constexpr std::array<std::pair<CommPhase, const char*>, 3> kPhases = {
    {{CommPhase::kForward, "fwd"}, {CommPhase::kBackward, "bwd"}, {CommPhase::kSync, "sync"}}};
constexpr std::array<std::pair<CollectiveOp, const char*>, 5> kOps = {{{CollectiveOp::kAllToAll, "all_to_all"},
                                                                       {CollectiveOp::kAllGather, "all_gather"},
                                                                       {CollectiveOp::kReduceScatter, "reduce_scatter"},
                                                                       {CollectiveOp::kAllReduce, "all_reduce"},
                                                                       {CollectiveOp::kBroadcast, "broadcast"}}};
constexpr std::array<std::pair<GroupClass, const char*>, 7> kClasses = {{{GroupClass::kSparseMp, "sparse-mp"},
                                                                         {GroupClass::kSparseReplica, "sparse-replica"},
                                                                         {GroupClass::kSparseIntra, "sparse-intra"},
                                                                         {GroupClass::kDenseShard, "dense-shard"},
                                                                         {GroupClass::kDenseReplica, "dense-replica"},
                                                                         {GroupClass::kExpertParallel, "ep"},
                                                                         {GroupClass::kExpertShard, "expert-shard"}}};

template <typename E, size_t N>
const char* NameOf(const std::array<std::pair<E, const char*>, N>& table, E value) {
  for (const auto& [e, name] : table) {
    if (e == value) return name;
  }
  return "?";
}

template <typename E, size_t N>
absl::Status ParseName(const std::array<std::pair<E, const char*>, N>& table, const nlohmann::json& j,
                       const std::string& path, E* out) {
  if (j.is_string()) {
    for (const auto& [e, name] : table) {
      if (j.get<std::string>() == name) {
        *out = e;
        return absl::OkStatus();
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.dump(), " is not a known name"));
}

absl::Status Bad(const std::string& path, const nlohmann::json& j, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.dump(), " ", what));
}

template <typename T>
absl::Status ParseIntList(const nlohmann::json& j, const std::string& path, std::vector<T>* out) {
  if (!j.is_array()) return Bad(path, j, "is not an array");
  out->clear();
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0) {
      return Bad(absl::StrCat(path, "[", i, "]"), j[i], "is not a non-negative integer");
    }
    out->push_back(static_cast<T>(j[i].get<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace

const char* CommPhaseName(CommPhase phase) { return NameOf(kPhases, phase); }
const char* CollectiveOpName(CollectiveOp op) { return NameOf(kOps, op); }
const char* GroupClassName(GroupClass group_class) { return NameOf(kClasses, group_class); }

nlohmann::ordered_json CommReportToJson(const CommReport& report) {
  nlohmann::ordered_json out;
  out["unit"] = "bytes";
  out["wire_bytes_per_element"] = report.wire_bytes_per_element;
  out["collectives"] = nlohmann::ordered_json::array();
  for (const CollectiveRecord& r : report.collectives) {
    nlohmann::ordered_json c;
    c["step"] = r.step;
    c["phase"] = CommPhaseName(r.phase);
    c["op"] = CollectiveOpName(r.op);
    c["group_class"] = GroupClassName(r.group_class);
    c["group"] = r.group;
    c["send_bytes"] = r.send_bytes;
    c["recv_bytes"] = r.recv_bytes;
    out["collectives"].push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<CommReport> CommReportFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return Bad("report", json, "is not an object");
  for (const auto& [key, value] : json.items()) {
    if (key != "unit" && key != "wire_bytes_per_element" && key != "collectives") {
      return Bad(absl::StrCat("report.", key), value, "is not a known key");
    }
  }
  if (!json.contains("unit") || json["unit"] != "bytes") {
    return Bad("report.unit", json.value("unit", nlohmann::json()), "must be \"bytes\"");
  }
  CommReport report;
  const nlohmann::json& e = json.value("wire_bytes_per_element", nlohmann::json());
  if (!e.is_number_integer() || e.get<int64_t>() < 1) {
    return Bad("report.wire_bytes_per_element", e, "is not a positive integer");
  }
  report.wire_bytes_per_element = e.get<int64_t>();
  const nlohmann::json& list = json.value("collectives", nlohmann::json());
  if (!list.is_array()) return Bad("report.collectives", list, "is not an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& c = list[i];
    const std::string path = absl::StrCat("report.collectives[", i, "]");
    if (!c.is_object()) return Bad(path, c, "is not an object");
    CollectiveRecord r;
    for (const auto& [key, value] : c.items()) {
      const std::string field = absl::StrCat(path, ".", key);
      absl::Status s;
      if (key == "step") {
        if (!value.is_number_integer() || value.get<int64_t>() < 0) return Bad(field, value, "is not a step");
        r.step = value.get<int64_t>();
      } else if (key == "phase") {
        s = ParseName(kPhases, value, field, &r.phase);
      } else if (key == "op") {
        s = ParseName(kOps, value, field, &r.op);
      } else if (key == "group_class") {
        s = ParseName(kClasses, value, field, &r.group_class);
      } else if (key == "group") {
        s = ParseIntList(value, field, &r.group);
      } else if (key == "send_bytes") {
        s = ParseIntList(value, field, &r.send_bytes);
      } else if (key == "recv_bytes") {
        s = ParseIntList(value, field, &r.recv_bytes);
      } else {
        return Bad(field, value, "is not a known key");
      }
      if (!s.ok()) return s;
    }
    for (const char* key : {"step", "phase", "op", "group_class", "group", "send_bytes", "recv_bytes"}) {
      if (!c.contains(key)) return absl::InvalidArgumentError(absl::StrCat(path, ".", key, ": missing"));
    }
    if (r.send_bytes.size() != r.group.size() || r.recv_bytes.size() != r.group.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": send_bytes/recv_bytes need one entry per group member (", r.group.size(), ")"));
    }
    report.collectives.push_back(std::move(r));
  }
  return report;
}

}  // namespace gemtb::reference
