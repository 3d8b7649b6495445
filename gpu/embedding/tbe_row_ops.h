// The arithmetic of the embedding kernels on one 4-column chunk of a row, host and device: id ->
// row under the bounds mode, loads and stores in the storage type, the pooling and gradient terms,
// the sort key that puts duplicate ids in the oracle's order, and the optimizer step on a chunk.
// The kernels call these per lane; the CPU tests call the same functions in the kernels' order and
// compare with the oracle bit for bit.
#ifndef GEMTB_GPU_EMBEDDING_TBE_ROW_OPS_H_
#define GEMTB_GPU_EMBEDDING_TBE_ROW_OPS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/embedding/tbe_params.h"
#include "model/embedding/embedding_math.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/host_device.h"

namespace gemtb::gpu::embedding {

namespace em = gemtb::embedding;

// Columns per lane and per call: D is a multiple of 4, so a chunk never straddles rows and its
// load is one 16-byte (fp32) or 8-byte (fp16/bf16) access.
inline constexpr int kChunk = 4;

// The row an id reads, or -1 when it contributes nothing (invalid under `zero`); `error` ids were
// rejected on the host before any launch, so here they cannot occur (treated as `zero`).
GEMTB_HD inline int64_t ResolveRow(const TableParams& t, int64_t id) {
  int64_t row = 0;
  if (em::IdToRow(id, t.hashing, t.rows, t.hash_seed, &row)) return row;
  return t.bounds == BoundsMode::kRemap0 ? 0 : -1;
}

// A chunk's storage bits: four fp32 words, or four 16-bit values packed two to a word (element
// 0 in the low half), as one 16- or 8-byte load brings them.
template <ElementType kDtype>
struct StoredChunk {
  static constexpr int kWords = kDtype == ElementType::kFloat32 ? 4 : 2;
  uint32_t word[kWords];
};

template <ElementType kDtype>
GEMTB_HD inline StoredChunk<kDtype> LoadStoredChunk(const TableParams& t, int64_t row, int64_t c) {
  StoredChunk<kDtype> s;
  const int64_t i = row * t.dim + c;
  if constexpr (kDtype == ElementType::kFloat32) {
#if defined(__CUDA_ARCH__)
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint32_t*>(t.weights) + i);
    s.word[0] = v.x, s.word[1] = v.y, s.word[2] = v.z, s.word[3] = v.w;
#else
    std::memcpy(s.word, static_cast<const uint32_t*>(t.weights) + i, sizeof(s.word));
#endif
  } else {
#if defined(__CUDA_ARCH__)
    const uint2 v = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(t.weights) + i);
    s.word[0] = v.x, s.word[1] = v.y;
#else
    const uint16_t* h = static_cast<const uint16_t*>(t.weights) + i;
    s.word[0] = static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
    s.word[1] = static_cast<uint32_t>(h[2]) | static_cast<uint32_t>(h[3]) << 16;
#endif
  }
  return s;
}

// The chunk widened exactly to fp32; one conversion per storage type, chosen at compile time.
template <ElementType kDtype>
GEMTB_HD inline void WidenChunk(const StoredChunk<kDtype>& s, float out[kChunk]) {
  for (int k = 0; k < kChunk; ++k) {
    if constexpr (kDtype == ElementType::kFloat32) {
      out[k] = numerics::BitsToFloat(s.word[k]);
    } else {
      const uint16_t bits = static_cast<uint16_t>(s.word[k / 2] >> (16 * (k % 2)));
      out[k] = kDtype == ElementType::kBFloat16 ? numerics::Bf16BitsToFloat(bits) : numerics::Fp16BitsToFloat(bits);
    }
  }
}

// Elements c..c+3 of `row`, widened exactly to fp32.
GEMTB_HD inline void LoadChunk(const TableParams& t, int64_t row, int64_t c, float out[kChunk]) {
  switch (t.dtype) {
    case ElementType::kFloat32: WidenChunk(LoadStoredChunk<ElementType::kFloat32>(t, row, c), out); return;
    case ElementType::kBFloat16: WidenChunk(LoadStoredChunk<ElementType::kBFloat16>(t, row, c), out); return;
    default: WidenChunk(LoadStoredChunk<ElementType::kFloat16>(t, row, c), out); return;
  }
}

// Writes values that are already representable in the storage type (StoreUpdated's results), so
// the narrowing here is exact; one 16- or 8-byte store on the device.
template <ElementType kDtype>
GEMTB_HD inline void StoreChunkAs(const TableParams& t, int64_t row, int64_t c, const float in[kChunk]) {
  const int64_t i = row * t.dim + c;
  StoredChunk<kDtype> s;
  for (int k = 0; k < kChunk; ++k) {
    if constexpr (kDtype == ElementType::kFloat32) {
      s.word[k] = numerics::FloatToBits(in[k]);
    } else {
      const uint32_t bits = kDtype == ElementType::kBFloat16 ? numerics::FloatToBf16BitsRne(in[k])
                                                             : numerics::FloatToFp16BitsRne(in[k]);
      s.word[k / 2] = k % 2 == 0 ? bits : s.word[k / 2] | bits << 16;
    }
  }
  if constexpr (kDtype == ElementType::kFloat32) {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<uint4*>(static_cast<uint32_t*>(t.weights) + i) = make_uint4(s.word[0], s.word[1], s.word[2], s.word[3]);
#else
    std::memcpy(static_cast<uint32_t*>(t.weights) + i, s.word, sizeof(s.word));
#endif
  } else {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(t.weights) + i) = make_uint2(s.word[0], s.word[1]);
#else
    uint16_t* h = static_cast<uint16_t*>(t.weights) + i;
    for (int k = 0; k < kChunk; ++k) h[k] = static_cast<uint16_t>(s.word[k / 2] >> (16 * (k % 2)));
#endif
  }
}

GEMTB_HD inline void StoreChunk(const TableParams& t, int64_t row, int64_t c, const float in[kChunk]) {
  switch (t.dtype) {
    case ElementType::kFloat32: StoreChunkAs<ElementType::kFloat32>(t, row, c, in); return;
    case ElementType::kBFloat16: StoreChunkAs<ElementType::kBFloat16>(t, row, c, in); return;
    default: StoreChunkAs<ElementType::kFloat16>(t, row, c, in); return;
  }
}

// seqsum: the first term as is, then ((x1 + x2) + x3) ...; empty = +0.
struct SeqSum4 {
  float v[kChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
  bool any = false;
  GEMTB_HD void Add(const float x[kChunk]) {
    for (int k = 0; k < kChunk; ++k) v[k] = any ? numerics::AddRn(v[k], x[k]) : x[k];
    any = true;
  }
  GEMTB_HD float Get(int k) const { return any ? v[k] : 0.0f; }
};

// G_r's sum when the samples are partitioned into blocks (a sharded module's holder: one block per
// source rank's local batch; the oracle's SumPartition::batch_blocks): the seqsum over all
// `num_blocks` blocks of each block's seqsum, an empty block adding +0. Terms come in sample
// order, so each block's are consecutive. Adding +0 changes only a -0 (to +0) and commutes with
// the other additions, so the empty blocks are one +0 at the end, whatever their places.
struct BlockSeqSum4 {
  SeqSum4 outer, inner;
  int64_t block = -1;
  int64_t blocks_seen = 0;
  GEMTB_HD void Add(int64_t b, const float x[kChunk]) {
    if (b != block) {
      if (inner.any) outer.Add(inner.v);
      inner = SeqSum4{};
      block = b;
      ++blocks_seen;
    }
    inner.Add(x);
  }
  GEMTB_HD SeqSum4 Finish(int64_t num_blocks) const {
    SeqSum4 out = outer;
    if (inner.any) out.Add(inner.v);
    if (blocks_seen < num_blocks) {
      const float zero[kChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
      out.Add(zero);
    }
    return out;
  }
};

// The forward term of one valid id: e (SUM, MEAN) or w*e (weighted SUM).
GEMTB_HD inline void PoolTerm(Pooling pooling, float weight, float e[kChunk]) {
  if (pooling != Pooling::kWeightedSum) return;
  for (int k = 0; k < kChunk; ++k) e[k] = numerics::MulRn(weight, e[k]);
}

// The pooled output from the bag's seqsum and its count n of valid ids (MEAN: sum/n, +0 if n = 0).
GEMTB_HD inline void FinishPool(Pooling pooling, const SeqSum4& sum, int64_t n, float out[kChunk]) {
  for (int k = 0; k < kChunk; ++k) {
    const float s = sum.Get(k);
    out[k] = pooling != Pooling::kMean ? s : (n == 0 ? 0.0f : em::DivRn(s, static_cast<float>(n)));
  }
}

// The backward contribution c_o of one occurrence: gamma (SUM, NONE), w*gamma (WSUM), gamma/n (MEAN).
GEMTB_HD inline void ContributionTerm(Pooling pooling, float weight, int64_t n, float g[kChunk]) {
  for (int k = 0; k < kChunk; ++k) {
    if (pooling == Pooling::kWeightedSum) g[k] = numerics::MulRn(weight, g[k]);
    if (pooling == Pooling::kMean) g[k] = em::DivRn(g[k], static_cast<float>(n));
  }
}

// The key that a stable sort of occurrences (given in KJT order: key, sample, position) puts in the
// oracle's order: global row ascending, then sample b; KJT order keeps key, then position, inside
// (row, b). Invalid occurrences get InvalidSortKey and sort last.
GEMTB_HD inline uint64_t SortKey(int64_t global_row, int64_t b, int64_t batch) {
  return static_cast<uint64_t>(global_row) * static_cast<uint64_t>(batch) + static_cast<uint64_t>(b);
}
GEMTB_HD inline uint64_t InvalidSortKey(int64_t total_rows, int64_t batch) {
  return static_cast<uint64_t>(total_rows) * static_cast<uint64_t>(batch);
}

// The samples the sort key counts: B, or 1 when no table is read by two keys of the KJT. A
// table's occurrences come in KJT order (key, sample, position); with one key per table that is
// already the oracle's (sample, key, position) order, so the stable sort needs the row alone
// (SortKey(row, 0, 1): fewer key bits, fewer radix passes). Host only.
inline int64_t SortKeySamples(const FeatureParams* features, int64_t num_keys, int num_tables, int64_t batch) {
  std::vector<int> keys_of_table(static_cast<size_t>(num_tables), 0);
  for (int64_t f = 0; f < num_keys; ++f) {
    if (++keys_of_table[static_cast<size_t>(features[f].table)] > 1) return batch > 1 ? batch : 1;
  }
  return 1;
}

// The table that holds global row `global_row` (tables are few; a scan is enough).
GEMTB_HD inline int TableOfRow(const TableParams* tables, int num_tables, int64_t global_row) {
  int t = 0;
  while (t + 1 < num_tables && tables[t + 1].row_offset <= global_row) ++t;
  return t;
}

// SGD and Adam on a chunk: element-wise, exactly as the oracle's row functions on these columns.
GEMTB_HD inline void ElementwiseUpdate(const TableParams& t, int64_t row, int64_t c, float w[kChunk],
                                       const float g[kChunk]) {
  if (t.optimizer.kind == OptimizerKind::kSgd) {
    em::SgdRow(w, g, kChunk, t.optimizer.lr);
  } else if (t.optimizer.kind == OptimizerKind::kAdam) {
    const int64_t i = row * t.dim + c;
    em::AdamRow(w, g, kChunk, t.adam_m + i, t.adam_v + i, t.adam_step, t.optimizer);
  }
}

// Rowwise Adagrad on a chunk, given the row's seqsum of g~^2 over all norm_dim columns (computed once per
// row, summed over the column shards that share the state) and the row's state before the step; returns the state after it (the same for every chunk).
GEMTB_HD inline float AdagradChunkUpdate(const TableParams& t, float square_sum, float state_before,
                                         float w[kChunk], const float g[kChunk]) {
  float state = state_before;
  em::RowwiseAdagradApply(w, g, kChunk, square_sum, t.norm_dim, &state, t.optimizer);
  return state;
}

// Rounds the updated chunk to storage: SR with the oracle's Philox word for (t, s, r, j) of the
// whole table, else RNE. The chunk's first element r*D + c is a multiple of 4 (D, a shard's first
// column and c all are), so its four words are one Philox block.
GEMTB_HD inline void RoundChunk(const TableParams& t, uint64_t seed, int64_t step, int64_t row, int64_t c,
                                float w[kChunk]) {
  if (!t.stochastic_rounding) {
    for (int k = 0; k < kChunk; ++k) w[k] = em::StoreUpdated(w[k], t.dtype, false, 0);
    return;
  }
  const numerics::Philox4x32 words = em::SrBlock(seed, t.table, step, t.global_dim, t.row_base + row, t.col_base + c);
  for (int k = 0; k < kChunk; ++k) w[k] = em::StoreUpdated(w[k], t.dtype, true, static_cast<uint16_t>(words.v[k]));
}

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_TBE_ROW_OPS_H_
