#include "model/description/expert_params.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace gemtb::model {
namespace {

void Append(std::vector<ParamRange>& ranges, const ParamRef& ref) {
  const int64_t first = static_cast<int64_t>(ref.offset), count = static_cast<int64_t>(ref.size);
  if (!ranges.empty() && ranges.back().first + ranges.back().count == first) {
    ranges.back().count += count;
    return;
  }
  ranges.push_back({first, count});
}

int64_t Count(const std::vector<ParamRange>& ranges) {
  int64_t n = 0;
  for (const ParamRange& r : ranges) n += r.count;
  return n;
}

}  // namespace

std::optional<int> ExpertOfParam(const std::string& name) {
  for (const char* marker : {".wukong.mlp1.e", ".wukong.mlp2.e"}) {
    const size_t at = name.find(marker);
    if (at == std::string::npos) continue;
    size_t k = at + std::char_traits<char>::length(marker);
    const size_t digits = k;
    int e = 0;
    while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k]))) e = 10 * e + (name[k++] - '0');
    if (k > digits && k < name.size() && name[k] == '.') return e;
  }
  return std::nullopt;
}

int64_t MemberParams::dense_count() const { return Count(dense); }
int64_t MemberParams::expert_count() const { return Count(experts); }

MemberParams MemberParamsOf(const GemGeometry& g, int degree, int member) {
  MemberParams m;
  for (const ParamInfo& p : g.layout.params()) {
    const std::optional<int> e = ExpertOfParam(p.name);
    if (!e) {
      Append(m.dense, p.ref);
    } else if (MemberRunsExpert(*e, degree, member)) {
      Append(m.experts, p.ref);
    }
  }
  return m;
}

std::vector<ParamUnit> PackedUnits(const std::vector<ParamUnit>& units, const std::vector<ParamRange>& ranges) {
  // The packed place of layout offset x: the ranges' values before it.
  auto packed_at = [&](int64_t x) {
    int64_t n = 0;
    for (const ParamRange& r : ranges) n += std::clamp<int64_t>(x - r.first, 0, r.count);
    return n;
  };
  std::vector<ParamUnit> packed;
  for (const ParamUnit& u : units) {
    const int64_t first = packed_at(u.first);
    packed.push_back({u.region, first, packed_at(u.first + u.count) - first});
  }
  return packed;
}

std::vector<float> PackRanges(const std::vector<float>& whole, const std::vector<ParamRange>& ranges) {
  std::vector<float> packed;
  packed.reserve(static_cast<size_t>(Count(ranges)));
  for (const ParamRange& r : ranges)
    packed.insert(packed.end(), whole.begin() + r.first, whole.begin() + r.first + r.count);
  return packed;
}

void UnpackRanges(const std::vector<float>& packed, const std::vector<ParamRange>& ranges, std::vector<float>& whole) {
  int64_t at = 0;
  for (const ParamRange& r : ranges) {
    std::copy(packed.begin() + at, packed.begin() + at + r.count, whole.begin() + r.first);
    at += r.count;
  }
}

ParamLayout MemberLayout(const GemGeometry& g, int degree, int member, int64_t experts_at) {
  ParamLayout L;
  for (const ParamInfo& p : g.layout.params())
    if (!ExpertOfParam(p.name)) L.Add(p.name, p.shape, p.init, p.fan_in);
  const int64_t pad = experts_at - static_cast<int64_t>(L.total());
  if (pad < 0) {
    std::fprintf(stderr, "MemberLayout: experts_at %lld is below the dense count %zu\n",
                 static_cast<long long>(experts_at), L.total());
    std::abort();
  }
  if (pad > 0) L.Add("(the gathered dense array's padding)", {pad}, ParamInit::kZero);
  for (const ParamInfo& p : g.layout.params()) {
    const std::optional<int> e = ExpertOfParam(p.name);
    if (e && MemberRunsExpert(*e, degree, member)) L.Add(p.name, p.shape, p.init, p.fan_in);
  }
  return L;
}

absl::Status CheckExpertShardGroup(int world_size, int degree, int expert_shard_group, const std::string& field) {
  if (degree < 1 || world_size % degree != 0)
    return absl::InvalidArgumentError(absl::StrCat("EP degree ", degree, " does not divide the world of ", world_size));
  if (expert_shard_group < 1 || (world_size / degree) % expert_shard_group != 0)
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", expert_shard_group, " does not divide the ",
                                                   world_size / degree, " ranks that run each expert (world ",
                                                   world_size, " / EP degree ", degree, ")"));
  return absl::OkStatus();
}

ExpertGroups ExpertGroupsOf(int rank, int world_size, int degree, int expert_shard_group) {
  const int i = rank % degree, m = rank / degree, places = world_size / degree, S = expert_shard_group;
  ExpertGroups groups;
  for (int k = (m / S) * S; k < (m / S + 1) * S; ++k) groups.shard.push_back(k * degree + i);
  for (int k = m % S; k < places; k += S) groups.replica.push_back(k * degree + i);
  groups.shard_member = m % S;
  return groups;
}

}  // namespace gemtb::model
