// The GPU trainer's attention, as reference/model/gdpa.h defines it: GDPA (pointwise SiLU scores,
// post_scale, window or block mask), forward and backward, on a batch of samples laid out jagged (the
// QK-norm and RoPE before it: head_rms_norm.h, qk_norm_rope.h). fp32 throughout, every product and sum rounded explicitly (no FMA contraction) and
// every output element summing its terms in increasing key (or query) order, as the reference does,
// with no atomics: every run gives the same bytes. Device pointers, asynchronous on `stream`; the
// host fields are checked first (errors name the field and the value).
#ifndef GEMTB_GPU_TRAIN_GDPA_H_
#define GEMTB_GPU_TRAIN_GDPA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace gemtb::gpu::train {

// A list of the 64-row tiles of one side of a batch that hold rows (gdpa_tensor_core.h's GdpaTilesOf
// makes one): device memory, 16-byte aligned, `count` entries.
struct GdpaTiles {
  const int32_t* entries = nullptr;
  int64_t count = 0;
};

// One attention use over a batch: sample b's queries are rows [q_offsets[b], q_offsets[b+1]) of q/o,
// its keys/values rows [k_offsets[b], k_offsets[b+1]) of k/v; each row holds heads*dh floats,
// element (row, h, i) at row*heads*dh + h*dh + i (the reference's layout). Query i and key j are
// indices local to the sample; mask as reference GdpaShape::Keep (window >= 0: |i-j| <= window;
// block > 0: i/block == j/block; else all). o = sum_j silu(q_i . k_j) * post_scale * v_j.
//
// The offsets are not read on the host: they must be nondecreasing, and no sample may have more than
// max_q queries or max_k keys (rows beyond are not computed). Rows outside every sample are not touched.
struct GdpaBatch {
  int64_t batch = 0;          // samples
  int heads = 0, dh = 0;      // dh in {16, 32, 64}
  int window = -1, block = 0;
  float post_scale = 1.0f;
  const int32_t* q_offsets = nullptr;  // device [batch + 1]
  const int32_t* k_offsets = nullptr;  // device [batch + 1]
  int32_t max_q = 0, max_k = 0;        // the largest per-sample query / key count (host values, for grids/shared memory)
  // The row stride of v and dv in elements, 0: heads*dh (dense, like q, k, o and their gradients). A
  // larger stride reads v out of (and writes dv into) a wider row, such as the [rows, 3 d] output of
  // one product for q, k and v together. Only the tensor-core functions (gdpa_tensor_core.h) take one;
  // GdpaForward and GdpaBackward take dense v only.
  int64_t v_ld = 0;
  // Optional, for the tensor-core functions: the tiles of the queries' side (for o and dq) and of the
  // keys' side (for dk and dv) that hold rows, so that their grids take only those (with samples of
  // unequal lengths, a grid over every sample's max_q / 64 tiles has CTAs that find no rows). They must
  // be GdpaTilesOf the batch's offsets; entries null: every sample's tiles. GdpaForward and GdpaBackward
  // do not read them.
  GdpaTiles q_tiles, k_tiles;
};

// Host-side checks of the host fields: batch 0 .. 2^31-1, heads 1 .. 65535, dh 16/32/64,
// window -1 .. 2^30, block 0 .. 2^30, post_scale finite, max_q and max_k 0 .. 2^20, v_ld 0 or
// heads*dh .. 2^31-1, tile counts 0 .. 2^31-1 with 16-byte aligned entries where given, offsets
// non-null where batch > 0.
absl::Status ValidateGdpaBatch(const GdpaBatch& b);

// o (written) for every query row of every sample; a query with no kept key gets zeros.
absl::Status GdpaForward(const GdpaBatch& b, const float* q, const float* k, const float* v, float* o,
                         cudaStream_t stream);
// dq, dk, dv are WRITTEN (not accumulated); scores recomputed. They must not overlap each other or
// the inputs.
absl::Status GdpaBackward(const GdpaBatch& b, const float* q, const float* k, const float* v, const float* d_o,
                          float* dq, float* dk, float* dv, cudaStream_t stream);

}  // namespace gemtb::gpu::train

#endif  // GEMTB_GPU_TRAIN_GDPA_H_
