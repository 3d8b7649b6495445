// A batch of model/data's generator (data::Batch) as the GPU embedding's host KJT view
// (gpu/embedding/kjt_check.h): spans over its keys, lengths and ids, no copy and no weights (the
// generator's features are unweighted). Header only: the trainer and the host-side benchmarks use it.
#ifndef GEMTB_GPU_EMBEDDING_KJT_OF_BATCH_H_
#define GEMTB_GPU_EMBEDDING_KJT_OF_BATCH_H_

#include "gpu/embedding/kjt_check.h"
#include "model/data/batch.h"

namespace gemtb::gpu::embedding {

inline KjtView KjtViewOfBatch(const data::Batch& batch) {
  KjtView kjt;
  kjt.keys = batch.keys;
  kjt.batch = batch.size;
  kjt.lengths = batch.lengths;
  kjt.values = batch.values;
  return kjt;
}

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_KJT_OF_BATCH_H_
