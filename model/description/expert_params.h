// Where expert parallelism keeps the dense parameters (spec embeddings-and-model §3.3). Under EP of
// degree D over R ranks, expert e's parameters (per layer l: L<l>.wukong.mlp1.e<e>.w and .b,
// L<l>.wukong.mlp2.e<e>.w) live only on the ranks that run it, EP member i = e mod D of each EP
// group (ExpertsOfMember, gem_geometry.h), FSDP-sharded over S_E of them; every other parameter
// (the experts' shared output bias too) is FSDP-sharded over the dense shard group as without EP.
//
// Ranks: EP group g is ranks [g D, (g + 1) D), member i = r mod D. The ranks of member i, in rank
// order, are i, i + D, i + 2 D, ...; m = r / D is a rank's place among them. Expert shard group:
// S_E consecutive places (m / S_E equal), ordered by m; expert replica group: the places with equal
// m mod S_E, ordered by m.
#ifndef GEMTB_MODEL_DESCRIPTION_EXPERT_PARAMS_H_
#define GEMTB_MODEL_DESCRIPTION_EXPERT_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/description/gem_geometry.h"
#include "model/description/param_layout.h"

namespace gemtb::model {

// [first, first + count) of the flat layout.
struct ParamRange {
  int64_t first = 0, count = 0;
};

// The expert whose parameter `name` is (L<l>.wukong.mlp1.e<e>.*, L<l>.wukong.mlp2.e<e>.w), or none.
std::optional<int> ExpertOfParam(const std::string& name);

// What EP member `member` holds of the flat layout, in layout order, adjacent parameters merged:
// the parameters that are no expert's, and those of its experts.
struct MemberParams {
  std::vector<ParamRange> dense, experts;
  int64_t dense_count() const;
  int64_t expert_count() const;
};
MemberParams MemberParamsOf(const GemGeometry& g, int degree, int member);

// Each unit's values among `ranges`, as a range of the packed array (PackRanges): the FSDP units of
// an EP member's dense array (a unit's parameters that are no expert's are adjacent there). A unit
// with none of them gets an empty range at its place.
std::vector<ParamUnit> PackedUnits(const std::vector<ParamUnit>& units, const std::vector<ParamRange>& ranges);

// The values of `ranges` of `whole`, one after the other; and back (`whole` keeps its other values).
std::vector<float> PackRanges(const std::vector<float>& whole, const std::vector<ParamRange>& ranges);
void UnpackRanges(const std::vector<float>& packed, const std::vector<ParamRange>& ranges, std::vector<float>& whole);

// The parameter layout a model on EP member `member` reads its parameter and gradient arrays by:
// the parameters that are no expert's in layout order from 0 (their packed order), then from
// `experts_at` (>= their count: where the gathered dense array ends, padding included) its experts'
// in layout order. The other experts' parameters are not in it. Same names, shapes and inits.
ParamLayout MemberLayout(const GemGeometry& g, int degree, int member, int64_t experts_at);

// A rank's groups for the experts' parameters (see above), each as its ranks in member order.
struct ExpertGroups {
  std::vector<int> shard, replica;
  int shard_member = 0;  // this rank's place in `shard`
};
// InvalidArgument naming the value unless D divides R and S_E divides R / D (`field` names S_E).
absl::Status CheckExpertShardGroup(int world_size, int degree, int expert_shard_group, const std::string& field);
ExpertGroups ExpertGroupsOf(int rank, int world_size, int degree, int expert_shard_group);

}  // namespace gemtb::model

#endif  // GEMTB_MODEL_DESCRIPTION_EXPERT_PARAMS_H_
