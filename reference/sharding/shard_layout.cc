#include "reference/sharding/shard_layout.h"

namespace gemtb::reference {

SumPartition InducedSumPartition(const GroupLayout& layout, int64_t local_batch, CwState cw_state) {
  SumPartition p;
  p.batch_blocks.assign(static_cast<size_t>(layout.size), local_batch);
  for (const TableLayout& t : layout.tables) {
    SumPartition::RowBlocks rb;
    if (t.block_rows > 0) rb = {t.block_rows, t.row_blocks};
    p.pool_row_blocks.push_back(rb);
    p.norm_col_shards.push_back(cw_state == CwState::kShared ? t.col_shards : 1);
  }
  return p;
}

}  // namespace gemtb::reference
