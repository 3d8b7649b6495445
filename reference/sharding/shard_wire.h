// Bytes of what a sharded run's processes hand each other outside the model's collectives: a rank's
// shards (to reassemble the tables) and its embedding output (to hand the dense model every sample).
// Host-order fp32, as every other payload between the oracle's processes.
#ifndef GEMTB_REFERENCE_SHARDING_SHARD_WIRE_H_
#define GEMTB_REFERENCE_SHARDING_SHARD_WIRE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "reference/embedding/tbe.h"
#include "reference/sharding/shard_math.h"

namespace gemtb::reference {

std::vector<uint8_t> SerializeShards(const std::vector<ShardState>& shards);
// DataLoss naming what is short or left over.
absl::StatusOr<std::vector<ShardState>> DeserializeShards(const std::vector<uint8_t>& bytes);

std::vector<uint8_t> SerializeOutput(const EmbeddingOutput& output);
absl::StatusOr<EmbeddingOutput> DeserializeOutput(const std::vector<uint8_t>& bytes);

}  // namespace gemtb::reference

#endif  // GEMTB_REFERENCE_SHARDING_SHARD_WIRE_H_
