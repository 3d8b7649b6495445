// The plain parameter structs that the table-batched embedding kernels read (host fills, device
// reads; no CUDA types, so the CPU tests build them too). Sizes count elements, not bytes.
#ifndef GEMTB_GPU_EMBEDDING_TBE_PARAMS_H_
#define GEMTB_GPU_EMBEDDING_TBE_PARAMS_H_

#include <cstdint>

#include "model/embedding/embedding_config.h"
#include "model/embedding/embedding_math.h"

namespace gemtb::gpu::embedding {

// One table: its storage, id rule, optimizer and optimizer state.
struct TableParams {
  void* weights = nullptr;   // [rows, dim] in `dtype` (fp32, or fp16/bf16 bits)
  int64_t rows = 0;
  int64_t dim = 0;           // a multiple of 4
  int64_t row_offset = 0;    // first global row: tables are numbered consecutively for the sort
  ElementType dtype = ElementType::kFloat32;
  Hashing hashing = Hashing::kIdentity;
  BoundsMode bounds = BoundsMode::kError;
  uint64_t hash_seed = 0;
  bool stochastic_rounding = false;  // fp16/bf16 with SR on; false for fp32
  int table = 0;                      // index t: keys the SR stream
  OptimizerConfig optimizer;
  float* adagrad = nullptr;  // [rows] (rowwise Adagrad)
  float* adam_m = nullptr;   // [rows, dim] (Adam)
  float* adam_v = nullptr;   // [rows, dim] (Adam)
  gemtb::embedding::AdamStep adam_step;  // this step's bias products (already advanced)
  // Where these rows and columns sit in the whole table when this is one shard of it (a sharded
  // module's holder, gpu/embedding/sharded_tbe.h): the init values, stochastic-rounding words and
  // rowwise Adagrad's mean over D are those of the whole table. A whole table: itself.
  int64_t global_rows = 0;  // the whole table's rows (InitValue)
  int64_t global_dim = 0;   // its D (InitValue, SR words)
  int64_t row_base = 0;     // this shard's first global row
  int64_t col_base = 0;     // its first global column
  int64_t norm_dim = 0;     // rowwise Adagrad's D: the whole row's when column shards share state
};

// One KJT key: which table and pooling, and where its output and upstream gradient live.
struct FeatureParams {
  int table = 0;
  Pooling pooling = Pooling::kSum;
  int64_t out_col = 0;          // pooled: first column in [B, W]
  int64_t value_begin = 0;      // offsets[f*B]: the key's first value
  float* sequence = nullptr;    // NONE: [sum_b len, dim] output
  const float* sequence_grad = nullptr;  // NONE: upstream gradient, same shape
};

// The KJT on the device after host validation.
struct KjtParams {
  const int64_t* offsets = nullptr;  // [F*B+1]
  const int64_t* values = nullptr;   // ids
  const float* weights = nullptr;    // per value, or null
  int64_t batch = 0;
  int64_t num_keys = 0;
};

// Everything one launch over all bags needs.
struct LaunchParams {
  const TableParams* tables = nullptr;
  const FeatureParams* features = nullptr;
  int num_tables = 0;
  KjtParams kjt;
  float* pooled = nullptr;              // [B, W] forward output
  const float* pooled_grad = nullptr;   // [B, W] upstream gradient
  int64_t pooled_width = 0;             // W
  uint64_t seed = 0;                    // Philox key (SR)
  int64_t step = 0;                     // SR step s
  uint32_t forward_kinds = 0;           // ForwardKindsOf: which forward kernels have bags to do
};

// The kinds of bag in a KJT, each run by a forward kernel of its own (forward.cu): pooled bags by
// storage type and by whether the table has D = 128 (a kernel with D fixed at compile time: no
// column loop, and no spills of the general one's registers).
inline constexpr uint32_t kForwardSequence = 1u << 0;        // pooling NONE: the rows gathered
inline constexpr uint32_t kForwardPooledF32 = 1u << 1;       // pooled, fp32 table, D != 128
inline constexpr uint32_t kForwardPooledBf16 = 1u << 2;      // pooled, bf16 table, D != 128
inline constexpr uint32_t kForwardPooledF16 = 1u << 3;       // pooled, fp16 table, D != 128
inline constexpr uint32_t kForwardPooledF32D128 = 1u << 4;   // pooled, fp32 table, D = 128
inline constexpr uint32_t kForwardPooledBf16D128 = 1u << 5;  // pooled, bf16 table, D = 128
inline constexpr uint32_t kForwardPooledF16D128 = 1u << 6;   // pooled, fp16 table, D = 128
// Not a kind: a pooled bag's table has 2^31 rows or more, so the pooling kernels index rows in 64 bits.
inline constexpr uint32_t kForwardWideRows = 1u << 7;

// The kind of a pooled bag of a table of `dtype` and `dim` columns.
inline constexpr uint32_t ForwardPooledKind(ElementType dtype, int64_t dim) {
  const bool d128 = dim == 128;
  switch (dtype) {
    case ElementType::kFloat32: return d128 ? kForwardPooledF32D128 : kForwardPooledF32;
    case ElementType::kBFloat16: return d128 ? kForwardPooledBf16D128 : kForwardPooledBf16;
    default: return d128 ? kForwardPooledF16D128 : kForwardPooledF16;
  }
}

// The kinds of bag of `features` over `tables` (host copies of the launch's parameters).
inline uint32_t ForwardKindsOf(const FeatureParams* features, int64_t num_keys, const TableParams* tables) {
  uint32_t kinds = 0;
  for (int64_t f = 0; f < num_keys; ++f) {
    if (features[f].pooling == Pooling::kNone) {
      kinds |= kForwardSequence;
      continue;
    }
    const TableParams& t = tables[features[f].table];
    if (t.rows > INT32_MAX) kinds |= kForwardWideRows;
    kinds |= ForwardPooledKind(t.dtype, t.dim);
  }
  return kinds;
}

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_GPU_EMBEDDING_TBE_PARAMS_H_
