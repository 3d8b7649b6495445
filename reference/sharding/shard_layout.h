// The sum partition a sharding plan's placement (model/sharding/shard_layout.h) induces on the
// unsharded oracle.
#ifndef GEMTB_REFERENCE_SHARDING_SHARD_LAYOUT_H_
#define GEMTB_REFERENCE_SHARDING_SHARD_LAYOUT_H_

#include <cstdint>

#include "model/sharding/shard_layout.h"
#include "model/sharding/sharding_types.h"
#include "reference/embedding/tbe.h"

namespace gemtb::reference {

// The partition under which the unsharded oracle, run on one MP group's M local batches of
// `local_batch` samples (in position order), is bit-identical to the sharded run: batch blocks =
// the local batches; pooled row blocks = RW's or TWRW/GRID's blocks; rowwise-Adagrad column shards =
// CW/GRID's c. cw_state=per_shard has no unsharded equivalent (its column shards get 1 here).
SumPartition InducedSumPartition(const GroupLayout& layout, int64_t local_batch, CwState cw_state);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_SHARD_LAYOUT_H_
