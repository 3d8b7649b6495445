#include "gpu/train/gem_model.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/train/attention_input.h"
#include "gpu/train/ffn_forward.h"
#include "gpu/train/ffn_hidden_grad.h"
#include "gpu/train/ffn_fused.h"
#include "gpu/train/gate.h"
#include "gpu/train/gdpa.h"
#include "gpu/train/gdpa_tensor_core.h"
#include "gpu/train/gemm.h"
#include "gpu/train/head_rms_norm.h"
#include "gpu/train/layer_norm.h"
#include "gpu/train/linear.h"
#include "gpu/train/loss.h"
#include "gpu/train/qk_norm_rope.h"
#include "gpu/train/model_kernels.h"
#include "gpu/train/projection_backward.h"
#include "model/attention/rope_table.h"
#include "model/common/status_macros.h"
#include "model/description/layer_params.h"

namespace gemtb::gpu::train {
namespace {

using gemtb::model::GemGeometry;
using gemtb::model::ParamLayout;
using gemtb::model::ParamRef;

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Stream-ordered scratch of one pass: every array is freed (stream-ordered) when the pass ends, or
// earlier by Free, as soon as the work that reads it is enqueued: the backward frees each region's
// temporaries after the region and each layer's forward tape after the layer's backward, so the peak
// is the forward's tape plus one region's temporaries, not the sum of every array of the pass.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() {
    for (void* p : ptrs_)
      if (p) cudaFreeAsync(p, stream_);
  }
  // The position of the next array in allocation order.
  size_t Mark() const { return ptrs_.size(); }
  // Frees the arrays allocated at positions [begin, end): nothing enqueued after this call may read them.
  absl::Status Free(size_t begin, size_t end) {
    for (size_t i = begin; i < end && i < ptrs_.size(); ++i) {
      if (ptrs_[i] == nullptr) continue;
      GEMTB_RETURN_IF_ERROR(Cuda(cudaFreeAsync(ptrs_[i], stream_), "scratch free"));
      ptrs_[i] = nullptr;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<float*> Floats(int64_t n, bool zero = false) {
    void* p = nullptr;
    GEMTB_RETURN_IF_ERROR(Cuda(cudaMallocAsync(&p, std::max<int64_t>(n, 1) * sizeof(float), stream_), "scratch"));
    ptrs_.push_back(p);
    if (zero) GEMTB_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(p, 0, n * sizeof(float), stream_), "scratch zero"));
    return static_cast<float*>(p);
  }
  // n int32, uninitialised (written by a kernel).
  absl::StatusOr<int32_t*> IntsOfSize(int64_t n) {
    void* p = nullptr;
    GEMTB_RETURN_IF_ERROR(Cuda(cudaMallocAsync(&p, std::max<int64_t>(n, 1) * sizeof(int32_t), stream_), "scratch"));
    ptrs_.push_back(p);
    return static_cast<int32_t*>(p);
  }
  // The host's values uploaded.
  absl::StatusOr<int32_t*> Ints(const std::vector<int32_t>& host) {
    int32_t* p = nullptr;
    GEMTB_ASSIGN_OR_RETURN(p, IntsOfSize(static_cast<int64_t>(host.size())));
    if (!host.empty())
      GEMTB_RETURN_IF_ERROR(Cuda(
          cudaMemcpyAsync(p, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "upload"));
    // The host vector may go away before the copy runs: pageable copies are staged before the call
    // returns, so no wait is needed here.
    return p;
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> ptrs_;
};

// [rows] of `width` floats at src (pitch src_ld) copied to dst (pitch dst_ld).
absl::Status Copy2D(const float* src, int64_t src_ld, float* dst, int64_t dst_ld, int64_t rows, int64_t width,
                    cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  return Cuda(cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float), width * sizeof(float), rows,
                                cudaMemcpyDeviceToDevice, stream),
              "Copy2D");
}

// Bound parameter slices.
using LinearP = gemtb::model::LinearSlices;
using NormP = gemtb::model::LayerNormSlices;
using MixP = gemtb::model::TokenMixSlices;
using AttnP = gemtb::model::AttentionSlices;
struct CrossP {
  MixP lce_s;
  LinearP x_gate;
  std::vector<ParamRef> seeds;
  std::vector<AttnP> pma;
  std::vector<LinearP> sum_gate;
};
// One Wukong expert of several: its first Linear and its second layer's weight (the experts share
// one output bias).
struct ExpertP {
  LinearP mlp1;
  ParamRef w2;
};
struct WukongP {
  ParamRef y;
  NormP ln_flat, ln_out;
  LinearP mlp1, mlp2;          // one expert: the FMB MLP
  std::vector<ExpertP> experts;  // several: in place of mlp1 and mlp2's weight
  ParamRef mlp2_bias;            // several: their shared output bias
  MixP lcb, res;
};
struct SeqP {
  NormP ln_a, ln_b, ln_c;
  AttnP attn_a, attn_b;
  LinearP ffn1, ffn2;
};
struct LayerP {
  CrossP cross;
  WukongP wukong;
  std::vector<SeqP> seq;
};

LinearP BindLinear(const ParamLayout& L, const std::string& n, int in, int out) { return gemtb::model::LinearAt(L, n, in, out); }
NormP BindNorm(const ParamLayout& L, const std::string& n, int w) { return gemtb::model::LayerNormAt(L, n, w); }
MixP BindMix(const ParamLayout& L, const std::string& n, int n_in, int n_out) {
  return gemtb::model::TokenMixAt(L, n, n_in, n_out);
}
AttnP BindAttn(const ParamLayout& L, const std::string& n, int d) { return gemtb::model::AttentionAt(L, n, d); }

// One attention use over the batch: rows, offsets and mask.
struct AttnUse {
  int64_t batch = 0;
  int64_t nq = 0, nk = 0;  // query rows, key rows
  const int32_t* q_off = nullptr;
  const int32_t* k_off = nullptr;
  int32_t max_q = 0, max_k = 0;
  int window = -1, block = 0;
  float post = 1.0f;
  bool rope = false;
  GdpaTiles q_tiles, k_tiles;  // GDPA's tile lists of the sides with sequence rows (else every sample's)
};
struct AttnTape {
  const float* xq = nullptr;
  const float* xkv = nullptr;
  float *q, *k, *v, *q_inv, *k_inv, *qr, *kr, *o;
};

// An attention block in bf16 (AttentionBlockPrecision::kBf16): the projections' inputs, the weights
// rounded for the step, and the block's bf16 arrays; the inverse RMS of the QK-norm fp32. The PMA's
// has no xq, wq, q: its qr is the seeds' normed queries broadcast.
// Where one product computes the projections that read xkv (kv_cols > 0): k and v, and q first where
// the block attends to itself, are the column blocks of one [rows, kv_cols] array (kv_cols 2 d or 3 d),
// their weights side by side in w_kv [d + 1, kv_cols] (the weights' rows, then the biases'); their
// gradients take the same layout. Else (the fused input kernel's self-attention) q, k, v are dense and
// wq, wk, wv their weights.
struct AttnTape16 {
  const __nv_bfloat16 *xq = nullptr, *xkv = nullptr;
  __nv_bfloat16 *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr, *q = nullptr, *k = nullptr, *v = nullptr,
                *qr = nullptr, *kr = nullptr, *o = nullptr;
  float *q_inv = nullptr, *k_inv = nullptr;
  __nv_bfloat16* w_kv = nullptr;
  int64_t kv_cols = 0;
  // Whether q is the first column block of the packed projections (self-attention).
  bool QPacked() const { return kv_cols > 0 && xq == xkv; }
  // The row strides of q and of k and v (and of their gradients).
  int64_t LdQ(int d) const { return QPacked() ? kv_cols : d; }
  int64_t LdKv(int d) const { return kv_cols > 0 ? kv_cols : d; }
};
struct CrossSeqTape {
  float *pma_q, *pma_q_inv, *pma_qn;  // the seeds' projection [k_p, d], before broadcast
  AttnTape pma;                        // xq unused; qr is the broadcast [B k_p, d]
  AttnTape16 pma16;                    // AttentionBlockPrecision::kBf16: in place of pma
  float *pma_out, *cat, *cat_a, *sig, *s_sum;
  const float* s_in = nullptr;
  int32_t* cat_index;  // [B n_sum]: the S_j row each summary row copies (CLS, REC), -1 otherwise
};
struct CrossTape {
  const float* x_in = nullptr;
  float *xs_pre, *xs_a, *xs_sig, *x_sum;
  // AttentionBlockPrecision::kBf16, a layer's: X_sum rounded once for every sequence's
  // cross-attention keys.
  __nv_bfloat16* x_sum16 = nullptr;
  std::vector<CrossSeqTape> seq;
};
struct WukongTape {
  float *z, *a, *bm, *ln_mean, *ln_rstd, *h1, *u1, *g1, *pre, *out_mean, *out_rstd, *x_out;
  // Several experts: the rows they ran on (the EP group's samples, or h1 without an exchange), and
  // u1 and g1 hold the rank's experts' hidden units side by side, expert by expert.
  const float* h1_all = nullptr;
  int64_t rows_all = 0;
};
struct SeqTape {
  const float *s_a, *s_b, *s_c;  // S_j entering (a), (b), (c)
  float *h_a, *mean_a, *rstd_a, *h_b, *mean_b, *rstd_b, *h_c, *mean_c, *rstd_c, *u, *g;
  // FfnPrecision::kBf16: the feed-forward block's input, hidden arrays and weights in bf16 (instead of
  // h_c, u and g).
  __nv_bfloat16 *h_c16 = nullptr, *u16 = nullptr, *g16 = nullptr, *w1_16 = nullptr, *w2_16 = nullptr;
  AttnTape a, b;
  // AttentionBlockPrecision::kBf16: the blocks' LayerNorm outputs and tapes in bf16 (instead of h_a,
  // h_b, a and b).
  __nv_bfloat16 *h_a16 = nullptr, *h_b16 = nullptr;
  AttnTape16 a16, b16;
};
struct LayerTape {
  CrossTape cross;
  WukongTape wukong;
  std::vector<SeqTape> seq;
};

}  // namespace

// Rows of one block of a weight gradient's partitioned sum (WeightGrad).
constexpr int64_t kWeightGradRows = 8192;

struct GemModelGpu::Impl {
  GemGeometry g;
  size_t param_total = 0;      // the parameter and gradient arrays' size (the placement's layout)
  std::vector<int> placed;     // with a placement: the experts it holds (others are not bound)
  RegionHook region_hook;
  LinearP dense_proj;
  MixP lce_in;
  std::vector<LayerP> layers;
  CrossP final_cross;
  std::vector<LinearP> head;
  GemModelOptions options;
  std::unique_ptr<Fp32Matmul> mm;
  std::unique_ptr<LinearMatmuls> lin;  // the bf16 blocks' matmuls (FfnPrecision, AttentionBlockPrecision)
  float* rope_table = nullptr;  // device RopeTable<float>(rope_rows, dh)

  ~Impl() {
    if (rope_table) cudaFree(rope_table);
  }

  // Per pass.
  const float* w = nullptr;
  float* gr = nullptr;
  cudaStream_t st = nullptr;
  Scratch* mem = nullptr;
  int64_t B = 0;
  ExpertExchange* ex = nullptr;  // the pass's expert exchange (null: every expert here)
  std::vector<int> running;      // the Wukong experts the pass runs here (with E > 1)
  const float* W(ParamRef r) const { return w + r.offset; }
  float* G(ParamRef r) const { return gr + r.offset; }

  absl::Status Gemm(const GemmF32& spec, const float* a, const float* b, float* c) { return mm->Run(spec, a, b, c, st); }
  // Stream-ordered scratch of n bf16 values.
  absl::StatusOr<__nv_bfloat16*> Bf16s(int64_t n) {
    float* f;
    GEMTB_ASSIGN_OR_RETURN(f, mem->Floats((n + 1) / 2));
    return reinterpret_cast<__nv_bfloat16*>(f);
  }
  // A parameter slice rounded to bf16 into scratch.
  absl::StatusOr<__nv_bfloat16*> Bf16Param(ParamRef r) {
    __nv_bfloat16* out;
    GEMTB_ASSIGN_OR_RETURN(out, Bf16s(static_cast<int64_t>(r.size)));
    GEMTB_RETURN_IF_ERROR(ToBf16(W(r), static_cast<int64_t>(r.size), out, st));
    return out;
  }
  // Parameter slices rounded to bf16 for the step, in the order given. A block's parameters lie side
  // by side in the layout, so one rounding pass over the span that holds them replaces one launch per
  // slice, where the span is at most twice the slices and every slice starts a whole 16 bytes into it
  // (what cuBLASLt's fast kernels load); else one pass per slice.
  absl::StatusOr<std::vector<__nv_bfloat16*>> Bf16Params(const std::vector<ParamRef>& refs) {
    size_t lo = param_total, hi = 0, total = 0;
    for (const ParamRef& r : refs) {
      lo = std::min(lo, r.offset);
      hi = std::max(hi, r.offset + r.size);
      total += r.size;
    }
    bool aligned = true;
    for (const ParamRef& r : refs) aligned = aligned && (r.offset - lo) % 8 == 0;
    std::vector<__nv_bfloat16*> out;
    if (!refs.empty() && aligned && hi - lo <= 2 * total) {
      __nv_bfloat16* span;
      GEMTB_ASSIGN_OR_RETURN(span, Bf16s(static_cast<int64_t>(hi - lo)));
      GEMTB_RETURN_IF_ERROR(ToBf16(w + lo, static_cast<int64_t>(hi - lo), span, st));
      for (const ParamRef& r : refs) out.push_back(span + (r.offset - lo));
      return out;
    }
    for (const ParamRef& r : refs) {
      __nv_bfloat16* one;
      GEMTB_ASSIGN_OR_RETURN(one, Bf16Param(r));
      out.push_back(one);
    }
    return out;
  }
  // A bias for cuBLASLt's fp32 epilogue, which reads it in 16-byte vectors: the parameter slice, or
  // an aligned copy in scratch where its place in the parameter array is not 16-byte aligned.
  absl::StatusOr<const float*> AlignedBias(ParamRef r) {
    const float* b = W(r);
    if (reinterpret_cast<uintptr_t>(b) % 16 == 0) return b;
    float* copy;
    GEMTB_ASSIGN_OR_RETURN(copy, mem->Floats(static_cast<int64_t>(r.size)));
    GEMTB_RETURN_IF_ERROR(
        Cuda(cudaMemcpyAsync(copy, b, r.size * sizeof(float), cudaMemcpyDeviceToDevice, st), "bias copy"));
    return copy;
  }
  // Whether the bf16 feed-forward block's backward runs on ffn_fused.h's kernel (BlockKernels::kFused,
  // and its widths are ones it takes).
  bool FusedFfn() const {
    return options.block_kernels == BlockKernels::kFused && ValidateFfnShape(FfnShape{1, g.d, g.ffn}).ok();
  }
  // Whether the block's widths are the Hopper kernels' (ffn_forward.h, ffn_hidden_grad.h): then its
  // forward's products and GELU run on the first with either BlockKernels choice, and where the
  // backward runs separate kernels, dg and GELU's backward on the second (each measured faster than
  // the separate kernels it replaces).
  bool HopperFfn() const { return ValidateFfnHopperShape(FfnShape{1, g.d, g.ffn}, "ffn").ok(); }
  absl::Status FfnFwdBf16(const SeqP& p, int64_t n, const float* cur, SeqTape& t, float* out,
                          const __nv_bfloat16** out16);
  // next (null: none): where the block's LayerNorm backward runs as its own kernel, it hands the new ds
  // on in bf16 (layer_norm.h's Bf16Handoff) and *handed points at next->rows; else *handed is null.
  absl::Status FfnBwdBf16(const SeqP& p, int64_t n, const SeqTape& t, float* ds, float* dh, const Bf16Handoff* next,
                          const __nv_bfloat16** handed);
  // norm: the LayerNorm whose output xq is (norm->h == xq), run here: with the query projection (and,
  // when xkv is xq, the key and value projections) and their QK-norms in one kernel
  // (attention_input.h); null: xq is already there.
  absl::Status AttnFwdBf16(const AttnP& p, const AttnUse& u, const __nv_bfloat16* xq, const __nv_bfloat16* xkv,
                           AttnTape16& t, float* y, const float* residual, const AttentionNorm* norm = nullptr);
  absl::Status AttnOutBf16(const AttnP& p, const AttnUse& u, AttnTape16& t, const float* residual, float* y,
                           const __nv_bfloat16* q, const GdpaQueryNorm* query_norm);
  // Whether the bf16 attention blocks' input side runs as one kernel (BlockKernels::kFused, at widths
  // attention_input.h takes).
  bool FusedAttentionInput() const {
    return options.block_kernels == BlockKernels::kFused &&
           ValidateAttentionInputShape(AttentionInputShape{1, g.d, g.dh()}).ok();
  }
  // ln: the LayerNorm whose output the queries (and, when t.xkv is t.xq, the keys and values) read; its
  // backward then runs with the projections' input gradient in one kernel (projection_backward.h),
  // adding to ln->dx, and dxq (and such a dxkv) is not written. dy16 (null: made here from dy): dy
  // already in bf16 with its column sums already in the output bias's gradient (a Bf16Handoff).
  absl::Status AttnBwdBf16(const AttnP& p, const AttnUse& u, const AttnTape16& t, const float* dy, float* dxq,
                           float* dxkv, __nv_bfloat16** dqr_out = nullptr, const LayerNormGrads* ln = nullptr,
                           const __nv_bfloat16* dy16 = nullptr);
  // The handoff of the residual stream's gradient [n, d] into a bf16 attention block's output gradient.
  absl::StatusOr<Bf16Handoff> HandoffTo(const AttnP& consumer, int64_t n) {
    Bf16Handoff h;
    GEMTB_ASSIGN_OR_RETURN(h.rows, Bf16s(n * g.d));
    h.column_sums = G(consumer.wo.b);
    return h;
  }
  absl::Status PackedWeightGrads(const AttnP& p, const AttnTape16& t, int64_t n, const __nv_bfloat16* dkv);
  // The projections that one product computes together (q, k, v where with_q, else k, v), each as the
  // [d + 1, d] matrix of its weight's rows and then its bias (the parameter layout keeps a linear's
  // bias right after its weight), at its weight's place in the parameters (or in the gradients).
  absl::StatusOr<ColumnBlocks<ParamRef>> PackedProjections(const AttnP& p, bool with_q) const {
    ColumnBlocks<ParamRef> blocks;
    blocks.count = with_q ? 3 : 2;
    const LinearP* parts[3] = {&p.wq, &p.wk, &p.wv};
    for (int i = 0; i < blocks.count; ++i) {
      const LinearP& part = *parts[i + (with_q ? 0 : 1)];
      if (part.b.offset != part.w.offset + part.w.size || part.w.size != static_cast<size_t>(g.d) * g.d ||
          part.b.size != static_cast<size_t>(g.d)) {
        return absl::InternalError("PackedProjections: a projection's bias does not follow its [d, d] weight");
      }
      blocks.at[i] = part.w;
      blocks.cols[i] = g.d;
    }
    return blocks;
  }
  // Whether the bf16 attention blocks' input gradients run with their LayerNorm's backward in one
  // kernel (projection_backward.h takes the width).
  bool FusedProjections() const {
    return options.block_kernels == BlockKernels::kFused && ValidateProjectionsShape(1, g.d).ok();
  }
  // A sequence layer's bf16 attention block with its LayerNorm: h16 = LayerNorm(x) (a new bf16 array;
  // mean, rstd its statistics), then AttnFwdBf16 with queries h16 and keys xkv (null: h16, the
  // self-attention), out = x + the block. With FusedAttentionInput the LayerNorm runs in the block's
  // input kernel.
  absl::Status NormAttnFwdBf16(const NormP& ln, const AttnP& attn, const AttnUse& u, const float* x,
                               const __nv_bfloat16* xkv, __nv_bfloat16*& h16, float* mean, float* rstd,
                               AttnTape16& t, float* out) {
    GEMTB_ASSIGN_OR_RETURN(h16, Bf16s(u.nq * g.d));
    const __nv_bfloat16* keys = xkv != nullptr ? xkv : h16;
    if (FusedAttentionInput()) {
      const AttentionNorm norm{x, W(ln.gamma), W(ln.beta), h16, mean, rstd};
      return AttnFwdBf16(attn, u, h16, keys, t, out, x, &norm);
    }
    GEMTB_RETURN_IF_ERROR(NormFwd16(ln, u.nq, x, h16, mean, rstd));
    return AttnFwdBf16(attn, u, h16, keys, t, out, x);
  }
  // Its backward, adding the block's input gradient (through the LayerNorm) to ds; dxkv gets the keys'
  // and values' input gradient (null: the self-attention's, part of the block's). dh: scratch for the
  // separate kernels' path; with FusedProjections the LayerNorm's backward runs in the projections'.
  // ds16: ds handed on in bf16 by the LayerNorm before (null: none). next and *handed as FfnBwdBf16's.
  absl::Status NormAttnBwdBf16(const NormP& ln, const AttnP& attn, const AttnUse& u, const AttnTape16& t,
                               const float* x, const float* mean, const float* rstd, float* ds, float* dh,
                               float* dxkv, const __nv_bfloat16* ds16, const Bf16Handoff* next,
                               const __nv_bfloat16** handed) {
    *handed = nullptr;
    if (FusedProjections() && !t.QPacked()) {
      const LayerNormGrads grads{x, W(ln.gamma), mean, rstd, ds, G(ln.gamma), G(ln.beta)};
      return AttnBwdBf16(attn, u, t, ds, nullptr, dxkv, nullptr, &grads, ds16);
    }
    GEMTB_RETURN_IF_ERROR(AttnBwdBf16(attn, u, t, ds, dh, dxkv != nullptr ? dxkv : dh, nullptr, nullptr, ds16));
    GEMTB_RETURN_IF_ERROR(NormBwdAdd(ln, u.nq, x, mean, rstd, dh, ds, next));
    if (next != nullptr) *handed = next->rows;
    return absl::OkStatus();
  }

  // y[n, out] = x[n, in] W + b (+ residual), x and y with row strides ldx, ldy; residual (null: none)
  // [n, out] with row stride ldy. In the training precision (TF32), one cuBLASLt product with the bias
  // and the residual in its epilogue, where every operand is in 16-byte vectors (rows and strides of
  // whole vectors, 16-byte aligned bases: what the tensor-core kernels load; the head's last layer,
  // 2 or 3 wide, is not). Otherwise, and in the check precision, a bias pass writes y = residual + b
  // and cuBLAS's product adds x W to it: the check precision stays on the pedantic SGEMM that its
  // bounds against the oracle were set on. A setup cuBLASLt has no algorithm for takes that path too.
  absl::Status LinearFwd(const LinearP& p, int64_t n, const float* x, int64_t ldx, float* y, int64_t ldy,
                         const float* residual) {
    if (n == 0) return absl::OkStatus();
    const float* bias = W(p.b);
    auto vec = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const bool vectors = p.in % 4 == 0 && p.out % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && vec(x) && vec(y) &&
                         vec(bias) && vec(W(p.w)) && (residual == nullptr || vec(residual));
    if (options.matmul == MatmulPrecision::kTf32 && vectors) {
      const absl::Status fused = mm->Linear(LinearF32{n, p.in, p.out, ldx, ldy}, x, W(p.w), bias, residual, y, st);
      if (!absl::IsUnimplemented(fused)) return fused;
    }
    GEMTB_RETURN_IF_ERROR(BiasRows(residual, bias, n, p.out, y, ldy, st));
    GemmF32 s;
    s.m = n, s.n = p.out, s.k = p.in, s.lda = ldx, s.ldb = p.out, s.ldc = ldy, s.beta = 1.0f;
    return Gemm(s, x, W(p.w), y);
  }
  // dW += x^T dy over n rows. One GEMM's reduction over many rows runs on the few tiles of a small
  // [in, out] (cuBLAS splits K only with atomics or workspace it is not given here), so beyond
  // kWeightGradRows rows each block of rows gets its own product, side by side, and the products are
  // added in block order (ColumnSums): deterministic, and summed as a partitioned sum.
  absl::Status WeightGrad(const LinearP& p, int64_t n, const float* x, int64_t ldx, const float* dy, int64_t ldy) {
    GemmF32 s;
    s.m = p.in, s.n = p.out, s.trans_a = true, s.lda = ldx, s.ldb = ldy, s.ldc = p.out;
    if (n <= kWeightGradRows) {
      s.k = n, s.beta = 1.0f;
      return Gemm(s, x, dy, G(p.w));
    }
    const int64_t full = n / kWeightGradRows, tail = n - full * kWeightGradRows, blocks = full + (tail > 0 ? 1 : 0);
    const int64_t per = int64_t{p.in} * p.out;
    float* part;
    GEMTB_ASSIGN_OR_RETURN(part, mem->Floats(blocks * per));
    s.k = kWeightGradRows, s.beta = 0.0f, s.batch = full;
    s.stride_a = kWeightGradRows * ldx, s.stride_b = kWeightGradRows * ldy, s.stride_c = per;
    GEMTB_RETURN_IF_ERROR(Gemm(s, x, dy, part));
    if (tail > 0) {
      GemmF32 t = s;
      t.k = tail, t.batch = 1, t.stride_a = t.stride_b = t.stride_c = 0;
      GEMTB_RETURN_IF_ERROR(Gemm(t, x + full * kWeightGradRows * ldx, dy + full * kWeightGradRows * ldy, part + full * per));
    }
    return ColumnSums(part, blocks, per, per, G(p.w), true, st);
  }
  // dW += x^T dy, db += column sums of dy, dx (+)= dy W^T when dx is set.
  absl::Status LinearBwd(const LinearP& p, int64_t n, const float* x, int64_t ldx, const float* dy, int64_t ldy,
                         float* dx, int64_t lddx, bool accumulate_dx) {
    if (n == 0) return absl::OkStatus();
    GEMTB_RETURN_IF_ERROR(WeightGrad(p, n, x, ldx, dy, ldy));
    GEMTB_RETURN_IF_ERROR(ColumnSums(dy, n, p.out, ldy, G(p.b), true, st));
    if (dx) {
      GemmF32 t;
      t.m = n, t.n = p.in, t.k = p.out, t.trans_b = true, t.lda = ldy, t.ldb = p.out, t.ldc = lddx;
      t.beta = accumulate_dx ? 1.0f : 0.0f;
      GEMTB_RETURN_IF_ERROR(Gemm(t, dy, W(p.w), dx));
    }
    return absl::OkStatus();
  }
  // Y_b (+)= M X_b for every sample: X_b [n_in, d] at x + b * x_stride, Y_b [n_out, d] at y + b * y_stride.
  absl::Status MixFwd(const MixP& p, const float* x, int64_t x_stride, float* y, int64_t y_stride, bool accumulate) {
    GemmF32 s;
    s.m = p.n_out, s.n = g.d, s.k = p.n_in, s.lda = p.n_in, s.ldb = g.d, s.ldc = g.d;
    s.stride_a = 0, s.stride_b = x_stride, s.stride_c = y_stride, s.batch = B, s.beta = accumulate ? 1.0f : 0.0f;
    return Gemm(s, W(p.m), x, y);
  }
  // dX_b += M^T dY_b; dM += sum over samples (in order) of dY_b X_b^T.
  absl::Status MixBwd(const MixP& p, const float* x, int64_t x_stride, const float* dy, int64_t dy_stride, float* dx,
                      int64_t dx_stride) {
    GemmF32 s;
    s.m = p.n_in, s.n = g.d, s.k = p.n_out, s.trans_a = true, s.lda = p.n_in, s.ldb = g.d, s.ldc = g.d;
    s.stride_a = 0, s.stride_b = dy_stride, s.stride_c = dx_stride, s.batch = B, s.beta = 1.0f;
    GEMTB_RETURN_IF_ERROR(Gemm(s, W(p.m), dy, dx));
    const int64_t per = static_cast<int64_t>(p.n_out) * p.n_in;
    float* part;
    GEMTB_ASSIGN_OR_RETURN(part, mem->Floats(B * per));
    GemmF32 t;
    t.m = p.n_out, t.n = p.n_in, t.k = g.d, t.trans_b = true, t.lda = g.d, t.ldb = g.d, t.ldc = p.n_in;
    t.stride_a = dy_stride, t.stride_b = x_stride, t.stride_c = per, t.batch = B;
    GEMTB_RETURN_IF_ERROR(Gemm(t, dy, x, part));
    return ColumnSums(part, B, per, per, G(p.m), true, st);
  }
  absl::Status NormFwd(const NormP& p, int64_t n, const float* x, float* y, float* mean, float* rstd) {
    if (n == 0) return absl::OkStatus();
    return LayerNormForward<float>(RowsShape{n, p.width}, x, W(p.gamma), W(p.beta), y, mean, rstd, st);
  }
  // The same with the normalized rows rounded to bf16 (mean and rstd fp32).
  absl::Status NormFwd16(const NormP& p, int64_t n, const float* x, __nv_bfloat16* y, float* mean, float* rstd) {
    if (n == 0) return absl::OkStatus();
    return LayerNormForward(RowsShape{n, p.width}, x, W(p.gamma), W(p.beta), y, mean, rstd, st);
  }
  // dx += LayerNorm's input gradient; with next, the new dx also handed on in bf16.
  absl::Status NormBwdAdd(const NormP& p, int64_t n, const float* x, const float* mean, const float* rstd,
                          const float* dy, float* dx, const Bf16Handoff* next = nullptr) {
    if (n == 0) return absl::OkStatus();
    if (next != nullptr) {
      return LayerNormBackwardRows<float>(RowsShape{n, p.width}, x, W(p.gamma), mean, rstd, dy, dx, G(p.gamma),
                                          G(p.beta), next, st, /*accumulate_dx=*/true);
    }
    return LayerNormBackward<float>(RowsShape{n, p.width}, x, W(p.gamma), mean, rstd, dy, dx, G(p.gamma), G(p.beta),
                                    st, /*accumulate_dx=*/true);
  }

  // Q/K/V projections, QK-norm, RoPE, GDPA and y (+)= Wo o + bo. xq null: the queries are `q_shared`
  // (the PMA's seeds), already projected and normed per seed and broadcast by the caller into t.qr.
  absl::Status AttnFwd(const AttnP& p, const AttnUse& u, const float* xq, const float* xkv, AttnTape& t, float* y,
                       const float* residual) {
    const int d = g.d, H = g.heads, dh = g.dh();
    t.xq = xq;
    t.xkv = xkv;
    GEMTB_ASSIGN_OR_RETURN(t.k, mem->Floats(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(t.v, mem->Floats(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(t.kr, mem->Floats(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(t.k_inv, mem->Floats(u.nk * H));
    GEMTB_ASSIGN_OR_RETURN(t.o, mem->Floats(u.nq * d));
    // With RoPE (self-attention: q and k rows are the samples' rows) the QK-norm and the rotation are
    // one pass (qk_norm_rope.h); without, the norm alone.
    if (xq) {
      GEMTB_ASSIGN_OR_RETURN(t.q, mem->Floats(u.nq * d));
      GEMTB_ASSIGN_OR_RETURN(t.qr, mem->Floats(u.nq * d));
      GEMTB_ASSIGN_OR_RETURN(t.q_inv, mem->Floats(u.nq * H));
      GEMTB_RETURN_IF_ERROR(LinearFwd(p.wq, u.nq, xq, d, t.q, d, nullptr));
      if (u.rope) {
        GEMTB_RETURN_IF_ERROR(QkNormRopeForward(QRows(u), t.q, t.qr, t.q_inv, st));
      } else if (u.nq > 0) {
        GEMTB_RETURN_IF_ERROR(HeadRmsNormForward<float>(HeadRowsShape{u.nq * H, dh}, t.q, t.qr, t.q_inv, st));
      }
    }
    GEMTB_RETURN_IF_ERROR(LinearFwd(p.wk, u.nk, xkv, d, t.k, d, nullptr));
    GEMTB_RETURN_IF_ERROR(LinearFwd(p.wv, u.nk, xkv, d, t.v, d, nullptr));
    if (u.rope) {
      GEMTB_RETURN_IF_ERROR(QkNormRopeForward(KRows(u), t.k, t.kr, t.k_inv, st));
    } else if (u.nk > 0) {
      GEMTB_RETURN_IF_ERROR(HeadRmsNormForward<float>(HeadRowsShape{u.nk * H, dh}, t.k, t.kr, t.k_inv, st));
    }
    GEMTB_RETURN_IF_ERROR(options.attention == AttentionPrecision::kBf16
                              ? GdpaForwardTensorCore(Batch(u), t.qr, t.kr, t.v, t.o, st)
                              : GdpaForward(Batch(u), t.qr, t.kr, t.v, t.o, st));
    return LinearFwd(p.wo, u.nq, t.o, d, y, d, residual);
  }
  // The rows of q and k under RoPE, for qk_norm_rope.h.
  // ld: the row stride of the projection side (x, dx), 0 dense.
  RopeRows QRows(const AttnUse& u, int64_t ld = 0) const {
    return RopeRows{u.batch, u.q_off, u.max_q, g.heads, g.dh(), rope_table, ld};
  }
  RopeRows KRows(const AttnUse& u, int64_t ld = 0) const {
    return RopeRows{u.batch, u.k_off, u.max_k, g.heads, g.dh(), rope_table, ld};
  }
  // v_ld: the row stride of v and dv, 0 dense.
  GdpaBatch Batch(const AttnUse& u, int64_t v_ld = 0) const {
    GdpaBatch b;
    b.batch = u.batch, b.heads = g.heads, b.dh = g.dh(), b.window = u.window, b.block = u.block;
    b.post_scale = u.post, b.q_offsets = u.q_off, b.k_offsets = u.k_off, b.max_q = u.max_q, b.max_k = u.max_k;
    b.v_ld = v_ld, b.q_tiles = u.q_tiles, b.k_tiles = u.k_tiles;
    return b;
  }
  // dxq += (null: *dqr_out gets the gradient of the normed, roped queries instead), dxkv += . With
  // dxq_fresh, dxq's old values are not read: the query projection's gradient is written, not added
  // (the first term of a sum that the caller would otherwise zero first), before dxkv's terms are
  // added, so dxq may also be dxkv.
  absl::Status AttnBwd(const AttnP& p, const AttnUse& u, const AttnTape& t, const float* dy, float* dxq, float* dxkv,
                       float** dqr_out, bool dxq_fresh = false) {
    const int d = g.d, H = g.heads, dh = g.dh();
    float *d_o, *dqr, *dkr, *dv, *dk;
    GEMTB_ASSIGN_OR_RETURN(d_o, mem->Floats(u.nq * d));
    GEMTB_ASSIGN_OR_RETURN(dqr, mem->Floats(u.nq * d));
    GEMTB_ASSIGN_OR_RETURN(dkr, mem->Floats(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(dv, mem->Floats(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(dk, mem->Floats(u.nk * d));
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.wo, u.nq, t.o, d, dy, d, d_o, d, false));
    GEMTB_RETURN_IF_ERROR(options.attention == AttentionPrecision::kBf16
                              ? GdpaBackwardTensorCore(Batch(u), t.qr, t.kr, t.v, d_o, dqr, dkr, dv, st)
                              : GdpaBackward(Batch(u), t.qr, t.kr, t.v, d_o, dqr, dkr, dv, st));
    if (u.rope) {
      GEMTB_RETURN_IF_ERROR(QkNormRopeBackward(KRows(u), t.k, t.k_inv, dkr, dk, st));
    } else if (u.nk > 0) {
      GEMTB_RETURN_IF_ERROR(HeadRmsNormBackward<float>(HeadRowsShape{u.nk * H, dh}, t.k, t.k_inv, dkr, dk, st));
    }
    if (t.xq) {
      float* dq;
      GEMTB_ASSIGN_OR_RETURN(dq, mem->Floats(u.nq * d));
      if (u.rope) {
        GEMTB_RETURN_IF_ERROR(QkNormRopeBackward(QRows(u), t.q, t.q_inv, dqr, dq, st));
      } else if (u.nq > 0) {
        GEMTB_RETURN_IF_ERROR(HeadRmsNormBackward<float>(HeadRowsShape{u.nq * H, dh}, t.q, t.q_inv, dqr, dq, st));
      }
      GEMTB_RETURN_IF_ERROR(LinearBwd(p.wq, u.nq, t.xq, d, dq, d, dxq, d, /*accumulate_dx=*/!dxq_fresh));
    } else {
      *dqr_out = dqr;  // the PMA's seeds: no RoPE (the caller's own norm backward follows)
    }
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.wk, u.nk, t.xkv, d, dk, d, dxkv, d, true));
    return LinearBwd(p.wv, u.nk, t.xkv, d, dv, d, dxkv, d, true);
  }

  // Batch geometry of one pass.
  std::vector<int64_t> rows;             // per j: sum_b (n_s + len_jb)
  std::vector<int32_t> max_rows;         // per j: max_b (n_s + len_jb)
  std::vector<int32_t*> s_off;           // per j: device [B + 1] row offsets of S_j
  std::vector<int32_t*> cls_index;       // per j: device [rows_j]: the X_sum row of a CLS row, -1 for events
  std::vector<int32_t*> event_index;     // per j: device [rows_j]: the event row of an event row, -1 for CLS
  std::vector<int32_t*> event_rows;      // per j: device [events_j]: the S_j row of each event
  std::vector<int64_t> events;           // per j: sum_b len_jb
  std::vector<std::vector<int32_t>> cat_index_host;  // per j: [B n_sum]
  int32_t* xsum_off = nullptr;           // [B + 1]: b * n_s
  int32_t* pma_off = nullptr;            // [B + 1]: b * k_p
  int32_t* seed_index = nullptr;         // [B k_p]: row r % k_p
  // Per j: GDPA's tile lists over S_j's rows (GdpaTiles), as the self-attention's queries and keys, the
  // cross-attention's queries and the PMA's keys.
  std::vector<GdpaTiles> self_tiles, cross_tiles, pma_tiles;
  // Per j: S_j as the last block that wrote it also wrote it in bf16 (the fused feed-forward forward's
  // y16), for the next cross block's bf16 PMA keys; null where S_j has no such copy (ToBf16 then).
  std::vector<const __nv_bfloat16*> s16;

  absl::Status Plan(const GemBatchInput& in);
  absl::Status CrossFwd(const CrossP& p, CrossTape& t, const float* x, std::vector<float*>& s, const GemBatchInput* first);
  absl::Status CrossBwd(const CrossP& p, const CrossTape& t, float* dx_sum, std::vector<float*>& ds_sum,
                        std::vector<float*>& ds, float* dx, const GemBatchOutput* first);
  absl::Status WukongFwd(const WukongP& p, const CrossTape& ct, const float* x, WukongTape& t);
  absl::Status WukongBwd(const WukongP& p, const WukongTape& t, const float* dout, float* dx,
                         std::vector<float*>& ds_sum);
  absl::Status ExpertsFwd(const WukongP& p, WukongTape& t);
  absl::Status ExpertsBwd(const WukongP& p, const WukongTape& t, const float* dpre, float* dh1);
  absl::Status SeqFwd(const SeqP& p, int layer, int j, const CrossTape& ct, std::vector<float*>& s, SeqTape& t);
  absl::Status SeqBwd(const SeqP& p, int layer, int j, const SeqTape& t, float* ds, float* dx_sum);
  AttnUse CrossUse(int j) const {
    AttnUse u;
    u.batch = B, u.nq = rows[j], u.nk = B * g.n_s, u.q_off = s_off[j], u.k_off = xsum_off, u.max_q = max_rows[j];
    u.max_k = g.n_s, u.post = static_cast<float>(1.0 / g.n_s), u.q_tiles = cross_tiles[j];
    return u;
  }
  AttnUse SelfUse(int j) const {
    AttnUse u;
    u.batch = B, u.nq = rows[j], u.nk = rows[j], u.q_off = s_off[j], u.k_off = s_off[j], u.max_q = max_rows[j];
    u.max_k = max_rows[j], u.window = g.seqs[j].window, u.block = g.seqs[j].block;
    u.post = static_cast<float>(g.seqs[j].self_post), u.rope = g.seqs[j].rope;
    u.q_tiles = u.k_tiles = self_tiles[j];
    return u;
  }
  AttnUse PmaUse(int j) const {
    AttnUse u;
    u.batch = B, u.nq = B * g.k_p, u.nk = rows[j], u.q_off = pma_off, u.k_off = s_off[j], u.max_q = g.k_p;
    u.max_k = max_rows[j], u.post = static_cast<float>(1.0 / g.seqs[j].lmax), u.k_tiles = pma_tiles[j];
    return u;
  }
};

absl::Status GemModelGpu::Impl::Plan(const GemBatchInput& in) {
  const int J = g.num_sequences(), n_s = g.n_s, k_p = g.k_p, k_r = g.k_r, n_sum = g.n_sum();
  rows.assign(J, 0), max_rows.assign(J, 0), events.assign(J, 0);
  s_off.assign(J, nullptr), cls_index.assign(J, nullptr), event_index.assign(J, nullptr), event_rows.assign(J, nullptr);
  cat_index_host.assign(J, {});
  self_tiles.assign(J, {}), cross_tiles.assign(J, {}), pma_tiles.assign(J, {});
  s16.assign(J, nullptr);
  std::vector<int32_t*> tile_off(J, nullptr);
  for (int j = 0; j < J; ++j) {
    // Sample b's rows [off[b], off[b + 1]): n_s CLS rows, then its events [ev_off[b], ev_off[b + 1]).
    // The per-row indices are made on the device from these (SequenceRowIndex), not on the host: at a
    // batch of 1,024 the rows number millions.
    std::vector<int32_t> off(B + 1, 0), ev_off(B + 1, 0);
    std::vector<int32_t>& cat = cat_index_host[j];
    cat.assign(static_cast<size_t>(B) * n_sum, -1);
    for (int64_t b = 0; b < B; ++b) {
      const int len = in.lengths[j][b];
      const int n = n_s + len;
      off[b + 1] = off[b] + n;
      ev_off[b + 1] = ev_off[b] + len;
      max_rows[j] = std::max(max_rows[j], n);
      for (int r = 0; r < n_s; ++r) cat[b * n_sum + r] = off[b] + r;
      // REC_j: the last K_r events, right-aligned, missing ones (short sequences) left at -1 (zeros).
      for (int r = 0; r < k_r; ++r) {
        const int e = len - k_r + r;
        if (e >= 0) cat[b * n_sum + n_s + k_p + r] = off[b] + n_s + e;
      }
    }
    rows[j] = off[B];
    events[j] = ev_off[B];
    int32_t* ev_off_d = nullptr;
    GEMTB_ASSIGN_OR_RETURN(s_off[j], mem->Ints(off));
    const std::vector<int32_t> tiles = GdpaTileOffsets(off);
    GEMTB_ASSIGN_OR_RETURN(tile_off[j], mem->Ints(tiles));
    for (std::vector<GdpaTiles>* list : {&self_tiles, &cross_tiles, &pma_tiles}) (*list)[j].count = tiles.back();
    GEMTB_ASSIGN_OR_RETURN(ev_off_d, mem->Ints(ev_off));
    GEMTB_ASSIGN_OR_RETURN(cls_index[j], mem->IntsOfSize(rows[j]));
    GEMTB_ASSIGN_OR_RETURN(event_index[j], mem->IntsOfSize(rows[j]));
    GEMTB_ASSIGN_OR_RETURN(event_rows[j], mem->IntsOfSize(events[j]));
    GEMTB_RETURN_IF_ERROR(
        SequenceRowIndex(s_off[j], ev_off_d, B, n_s, cls_index[j], event_index[j], event_rows[j], st));
  }
  std::vector<int32_t> xo(B + 1), po(B + 1), seeds(static_cast<size_t>(B) * k_p);
  for (int64_t b = 0; b <= B; ++b) xo[b] = static_cast<int32_t>(b * n_s), po[b] = static_cast<int32_t>(b * k_p);
  for (size_t r = 0; r < seeds.size(); ++r) seeds[r] = static_cast<int32_t>(r % k_p);
  GEMTB_ASSIGN_OR_RETURN(xsum_off, mem->Ints(xo));
  GEMTB_ASSIGN_OR_RETURN(pma_off, mem->Ints(po));
  GEMTB_ASSIGN_OR_RETURN(seed_index, mem->Ints(seeds));
  // The tile lists, each over S_j's rows as its own side: written on the device from the offsets.
  for (int j = 0; j < J; ++j) {
    const std::pair<std::vector<GdpaTiles>*, std::pair<const int32_t*, const int32_t*>> uses[] = {
        {&self_tiles, {s_off[j], s_off[j]}}, {&cross_tiles, {s_off[j], xsum_off}}, {&pma_tiles, {pma_off, s_off[j]}}};
    for (const auto& [list, offsets] : uses) {
      GdpaTiles& t = (*list)[j];
      int32_t* entries;
      GEMTB_ASSIGN_OR_RETURN(entries, mem->IntsOfSize(t.count * kGdpaTileInts));
      GEMTB_RETURN_IF_ERROR(GdpaWriteTiles(B, offsets.first, offsets.second, tile_off[j], entries, st));
      t.entries = entries;
    }
  }
  return absl::OkStatus();
}

absl::Status GemModelGpu::Impl::CrossFwd(const CrossP& p, CrossTape& t, const float* x, std::vector<float*>& s,
                                         const GemBatchInput* first) {
  const int d = g.d, n_s = g.n_s, k_p = g.k_p, n_sum = g.n_sum(), H = g.heads, dh = g.dh();
  const int J = g.num_sequences();
  t.x_in = x;
  const int64_t nxs = B * n_s * d;
  GEMTB_ASSIGN_OR_RETURN(t.xs_pre, mem->Floats(nxs));
  GEMTB_ASSIGN_OR_RETURN(t.xs_a, mem->Floats(nxs));
  GEMTB_ASSIGN_OR_RETURN(t.xs_sig, mem->Floats(nxs));
  GEMTB_ASSIGN_OR_RETURN(t.x_sum, mem->Floats(nxs));
  GEMTB_RETURN_IF_ERROR(MixFwd(p.lce_s, x, int64_t{g.n_x} * d, t.xs_pre, int64_t{n_s} * d, false));
  GEMTB_RETURN_IF_ERROR(LinearFwd(p.x_gate, B * n_s, t.xs_pre, d, t.xs_a, d, nullptr));
  GEMTB_RETURN_IF_ERROR(GateForward<float>(t.xs_pre, t.xs_a, nxs, t.x_sum, t.xs_sig, st));
  if (first) {
    // Layer 1 prepends its X_sum to every sequence as the n_s CLS tokens.
    for (int j = 0; j < J; ++j) {
      GEMTB_ASSIGN_OR_RETURN(s[j], mem->Floats(rows[j] * d));
      s16[j] = nullptr;
      GEMTB_RETURN_IF_ERROR(
          AssembleSequenceRows(t.x_sum, cls_index[j], first->events[j], event_index[j], rows[j], d, s[j], st));
    }
  }
  t.seq.resize(J);
  for (int j = 0; j < J; ++j) {
    CrossSeqTape& c = t.seq[j];
    c.s_in = s[j];
    // PMA: the seeds' queries are the same for every sample; project and norm them once, then
    // broadcast them to each sample's k_p query rows.
    GEMTB_ASSIGN_OR_RETURN(c.pma_q, mem->Floats(int64_t{k_p} * d));
    GEMTB_ASSIGN_OR_RETURN(c.pma_qn, mem->Floats(int64_t{k_p} * d));
    GEMTB_ASSIGN_OR_RETURN(c.pma_q_inv, mem->Floats(int64_t{k_p} * H));
    GEMTB_RETURN_IF_ERROR(LinearFwd(p.pma[j].wq, k_p, W(p.seeds[j]), d, c.pma_q, d, nullptr));
    GEMTB_RETURN_IF_ERROR(HeadRmsNormForward<float>(HeadRowsShape{int64_t{k_p} * H, dh}, c.pma_q, c.pma_qn,
                                                    c.pma_q_inv, st));
    const AttnUse u = PmaUse(j);
    GEMTB_ASSIGN_OR_RETURN(c.pma.qr, mem->Floats(u.nq * d));
    GEMTB_RETURN_IF_ERROR(GatherRows(c.pma_qn, seed_index, u.nq, d, c.pma.qr, false, st));
    GEMTB_ASSIGN_OR_RETURN(c.pma_out, mem->Floats(u.nq * d));
    if (options.attention_blocks == AttentionBlockPrecision::kBf16) {
      // The broadcast queries (B k_p rows) and the keys' side S_j rounded to bf16 for the block (by the
      // block that wrote S_j where it did).
      GEMTB_ASSIGN_OR_RETURN(c.pma16.qr, Bf16s(u.nq * d));
      GEMTB_RETURN_IF_ERROR(ToBf16(c.pma.qr, u.nq * d, c.pma16.qr, st));
      const __nv_bfloat16* keys16 = s16[j];
      if (keys16 == nullptr) {
        __nv_bfloat16* rounded;
        GEMTB_ASSIGN_OR_RETURN(rounded, Bf16s(u.nk * d));
        GEMTB_RETURN_IF_ERROR(ToBf16(s[j], u.nk * d, rounded, st));
        keys16 = rounded;
      }
      GEMTB_RETURN_IF_ERROR(AttnFwdBf16(p.pma[j], u, nullptr, keys16, c.pma16, c.pma_out, nullptr));
    } else {
      GEMTB_RETURN_IF_ERROR(AttnFwd(p.pma[j], u, nullptr, s[j], c.pma, c.pma_out, nullptr));
    }
    // S_sum_j = Gate([CLS_j || PMA_j || REC_j]).
    const int64_t ncat = B * n_sum * d;
    GEMTB_ASSIGN_OR_RETURN(c.cat, mem->Floats(ncat));
    GEMTB_ASSIGN_OR_RETURN(c.cat_a, mem->Floats(ncat));
    GEMTB_ASSIGN_OR_RETURN(c.sig, mem->Floats(ncat));
    GEMTB_ASSIGN_OR_RETURN(c.s_sum, mem->Floats(ncat));
    GEMTB_ASSIGN_OR_RETURN(c.cat_index, mem->Ints(cat_index_host[j]));
    GEMTB_RETURN_IF_ERROR(GatherRows(s[j], c.cat_index, B * n_sum, d, c.cat, false, st));
    GEMTB_RETURN_IF_ERROR(Copy2D(c.pma_out, int64_t{k_p} * d, c.cat + int64_t{n_s} * d, int64_t{n_sum} * d, B,
                                 int64_t{k_p} * d, st));
    GEMTB_RETURN_IF_ERROR(LinearFwd(p.sum_gate[j], B * n_sum, c.cat, d, c.cat_a, d, nullptr));
    GEMTB_RETURN_IF_ERROR(GateForward<float>(c.cat, c.cat_a, ncat, c.s_sum, c.sig, st));
  }
  return absl::OkStatus();
}

absl::Status GemModelGpu::Impl::CrossBwd(const CrossP& p, const CrossTape& t, float* dx_sum,
                                         std::vector<float*>& ds_sum, std::vector<float*>& ds, float* dx,
                                         const GemBatchOutput* first) {
  const int d = g.d, n_s = g.n_s, k_p = g.k_p, n_sum = g.n_sum(), H = g.heads, dh = g.dh();
  const int J = g.num_sequences();
  for (int j = 0; j < J; ++j) {
    const CrossSeqTape& c = t.seq[j];
    const int64_t ncat = B * n_sum * d;
    float *dcat, *da;
    GEMTB_ASSIGN_OR_RETURN(dcat, mem->Floats(ncat));
    GEMTB_ASSIGN_OR_RETURN(da, mem->Floats(ncat));
    GEMTB_RETURN_IF_ERROR(GateBackward<float>(c.cat, c.sig, ds_sum[j], ncat, da, dcat, st));
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.sum_gate[j], B * n_sum, c.cat, d, da, d, dcat, d, true));
    // CLS and REC rows back to their S_j rows (distinct rows: race-free).
    GEMTB_RETURN_IF_ERROR(ScatterAddRows(dcat, c.cat_index, B * n_sum, d, ds[j], st));
    const AttnUse u = PmaUse(j);
    float *d_pma, *dqr = nullptr, *dq_sum, *dq;
    GEMTB_ASSIGN_OR_RETURN(d_pma, mem->Floats(u.nq * d));
    GEMTB_RETURN_IF_ERROR(Copy2D(dcat + int64_t{n_s} * d, int64_t{n_sum} * d, d_pma, int64_t{k_p} * d, B,
                                 int64_t{k_p} * d, st));
    // The broadcast queries' gradient summed over samples, then the seeds' norm and projection.
    GEMTB_ASSIGN_OR_RETURN(dq_sum, mem->Floats(int64_t{k_p} * d));
    GEMTB_ASSIGN_OR_RETURN(dq, mem->Floats(int64_t{k_p} * d));
    if (options.attention_blocks == AttentionBlockPrecision::kBf16) {
      __nv_bfloat16* dqr16 = nullptr;
      GEMTB_RETURN_IF_ERROR(AttnBwdBf16(p.pma[j], u, c.pma16, d_pma, nullptr, ds[j], &dqr16));
      GEMTB_RETURN_IF_ERROR(ColumnSums(dqr16, B, int64_t{k_p} * d, int64_t{k_p} * d, dq_sum, false, st));
    } else {
      GEMTB_RETURN_IF_ERROR(AttnBwd(p.pma[j], u, c.pma, d_pma, nullptr, ds[j], &dqr));
      GEMTB_RETURN_IF_ERROR(ColumnSums(dqr, B, int64_t{k_p} * d, int64_t{k_p} * d, dq_sum, false, st));
    }
    GEMTB_RETURN_IF_ERROR(
        HeadRmsNormBackward<float>(HeadRowsShape{int64_t{k_p} * H, dh}, c.pma_q, c.pma_q_inv, dq_sum, dq, st));
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.pma[j].wq, k_p, W(p.seeds[j]), d, dq, d, G(p.seeds[j]), d, true));
  }
  if (first) {
    for (int j = 0; j < J; ++j) {
      // dX_sum += the CLS rows' gradient (sequence by sequence); the events' gradients go to the embeddings.
      GEMTB_RETURN_IF_ERROR(ScatterAddRows(ds[j], cls_index[j], rows[j], d, dx_sum, st));
      GEMTB_RETURN_IF_ERROR(GatherRows(ds[j], event_rows[j], events[j], d, first->events_grad[j], false, st));
    }
  }
  const int64_t nxs = B * n_s * d;
  float *dxs_pre, *da;
  GEMTB_ASSIGN_OR_RETURN(dxs_pre, mem->Floats(nxs));
  GEMTB_ASSIGN_OR_RETURN(da, mem->Floats(nxs));
  GEMTB_RETURN_IF_ERROR(GateBackward<float>(t.xs_pre, t.xs_sig, dx_sum, nxs, da, dxs_pre, st));
  GEMTB_RETURN_IF_ERROR(LinearBwd(p.x_gate, B * n_s, t.xs_pre, d, da, d, dxs_pre, d, true));
  return MixBwd(p.lce_s, t.x_in, int64_t{g.n_x} * d, dxs_pre, int64_t{n_s} * d, dx, int64_t{g.n_x} * d);
}

absl::Status GemModelGpu::Impl::WukongFwd(const WukongP& p, const CrossTape& ct, const float* x, WukongTape& t) {
  const int d = g.d, n_x = g.n_x, k = g.wk_k, n_z = g.n_z(), n_sum = g.n_sum();
  const int J = g.num_sequences();
  const int64_t zs = int64_t{n_z} * d;
  GEMTB_ASSIGN_OR_RETURN(t.z, mem->Floats(B * zs));
  GEMTB_RETURN_IF_ERROR(Copy2D(x, int64_t{n_x} * d, t.z, zs, B, int64_t{n_x} * d, st));
  for (int j = 0; j < J; ++j)
    GEMTB_RETURN_IF_ERROR(Copy2D(ct.seq[j].s_sum, int64_t{n_sum} * d, t.z + int64_t{n_x + j * n_sum} * d, zs, B,
                                 int64_t{n_sum} * d, st));
  // FMB = MLP(LN(flatten(Z (Z^T Y)))): a_b = Z_b^T Y [d, k], bm_b = Z_b a_b [n_z, k].
  GEMTB_ASSIGN_OR_RETURN(t.a, mem->Floats(B * d * k));
  GEMTB_ASSIGN_OR_RETURN(t.bm, mem->Floats(B * n_z * k));
  GemmF32 s;
  s.m = d, s.n = k, s.k = n_z, s.trans_a = true, s.lda = d, s.ldb = k, s.ldc = k;
  s.stride_a = zs, s.stride_b = 0, s.stride_c = int64_t{d} * k, s.batch = B;
  GEMTB_RETURN_IF_ERROR(Gemm(s, t.z, W(p.y), t.a));
  GemmF32 s2;
  s2.m = n_z, s2.n = k, s2.k = d, s2.lda = d, s2.ldb = k, s2.ldc = k;
  s2.stride_a = zs, s2.stride_b = int64_t{d} * k, s2.stride_c = int64_t{n_z} * k, s2.batch = B;
  GEMTB_RETURN_IF_ERROR(Gemm(s2, t.z, t.a, t.bm));
  const int64_t flat = int64_t{n_z} * k;
  GEMTB_ASSIGN_OR_RETURN(t.h1, mem->Floats(B * flat));
  GEMTB_ASSIGN_OR_RETURN(t.ln_mean, mem->Floats(B));
  GEMTB_ASSIGN_OR_RETURN(t.ln_rstd, mem->Floats(B));
  GEMTB_RETURN_IF_ERROR(NormFwd(p.ln_flat, B, t.bm, t.h1, t.ln_mean, t.ln_rstd));
  // pre = [MLP out (n_F tokens) || LCB(Z) (n_L tokens)] + LCE_res(Z).
  const int64_t xs = int64_t{n_x} * d;
  GEMTB_ASSIGN_OR_RETURN(t.pre, mem->Floats(B * xs));
  if (p.experts.empty()) {
    GEMTB_ASSIGN_OR_RETURN(t.u1, mem->Floats(B * g.wk_h));
    GEMTB_ASSIGN_OR_RETURN(t.g1, mem->Floats(B * g.wk_h));
    GEMTB_RETURN_IF_ERROR(LinearFwd(p.mlp1, B, t.h1, flat, t.u1, g.wk_h, nullptr));
    GEMTB_RETURN_IF_ERROR(GeluForward<float>(t.u1, B * g.wk_h, t.g1, st));
    GEMTB_RETURN_IF_ERROR(LinearFwd(p.mlp2, B, t.g1, g.wk_h, t.pre, xs, nullptr));
  } else {
    GEMTB_RETURN_IF_ERROR(ExpertsFwd(p, t));
  }
  GEMTB_RETURN_IF_ERROR(MixFwd(p.lcb, t.z, zs, t.pre + int64_t{g.n_f} * d, xs, false));
  GEMTB_RETURN_IF_ERROR(MixFwd(p.res, t.z, zs, t.pre, xs, true));
  GEMTB_ASSIGN_OR_RETURN(t.x_out, mem->Floats(B * xs));
  GEMTB_ASSIGN_OR_RETURN(t.out_mean, mem->Floats(B * n_x));
  GEMTB_ASSIGN_OR_RETURN(t.out_rstd, mem->Floats(B * n_x));
  return NormFwd(p.ln_out, B * n_x, t.pre, t.x_out, t.out_mean, t.out_rstd);
}

absl::Status GemModelGpu::Impl::WukongBwd(const WukongP& p, const WukongTape& t, const float* dout, float* dx,
                                          std::vector<float*>& ds_sum) {
  const int d = g.d, n_x = g.n_x, k = g.wk_k, n_z = g.n_z(), n_sum = g.n_sum();
  const int J = g.num_sequences();
  const int64_t zs = int64_t{n_z} * d, xs = int64_t{n_x} * d, flat = int64_t{n_z} * k;
  float *dpre, *dz, *dg1, *du1, *dh1, *dbm, *da, *part;
  GEMTB_ASSIGN_OR_RETURN(dpre, mem->Floats(B * xs, true));
  GEMTB_ASSIGN_OR_RETURN(dz, mem->Floats(B * zs, true));
  GEMTB_RETURN_IF_ERROR(NormBwdAdd(p.ln_out, B * n_x, t.pre, t.out_mean, t.out_rstd, dout, dpre));
  GEMTB_RETURN_IF_ERROR(MixBwd(p.res, t.z, zs, dpre, xs, dz, zs));
  GEMTB_RETURN_IF_ERROR(MixBwd(p.lcb, t.z, zs, dpre + int64_t{g.n_f} * d, xs, dz, zs));
  GEMTB_ASSIGN_OR_RETURN(dh1, mem->Floats(B * flat));
  GEMTB_ASSIGN_OR_RETURN(dbm, mem->Floats(B * flat, true));
  if (p.experts.empty()) {
    GEMTB_ASSIGN_OR_RETURN(dg1, mem->Floats(B * g.wk_h));
    GEMTB_ASSIGN_OR_RETURN(du1, mem->Floats(B * g.wk_h));
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.mlp2, B, t.g1, g.wk_h, dpre, xs, dg1, g.wk_h, false));
    GEMTB_RETURN_IF_ERROR(GeluBackward<float>(t.u1, dg1, B * g.wk_h, du1, st));
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.mlp1, B, t.h1, flat, du1, g.wk_h, dh1, flat, false));
  } else {
    GEMTB_RETURN_IF_ERROR(ExpertsBwd(p, t, dpre, dh1));
  }
  GEMTB_RETURN_IF_ERROR(NormBwdAdd(p.ln_flat, B, t.bm, t.ln_mean, t.ln_rstd, dh1, dbm));
  // bm_b = Z_b a_b: dZ_b += dbm_b a_b^T, da_b = Z_b^T dbm_b.
  GemmF32 s;
  s.m = n_z, s.n = d, s.k = k, s.trans_b = true, s.lda = k, s.ldb = k, s.ldc = d;
  s.stride_a = flat, s.stride_b = int64_t{d} * k, s.stride_c = zs, s.batch = B, s.beta = 1.0f;
  GEMTB_RETURN_IF_ERROR(Gemm(s, dbm, t.a, dz));
  GEMTB_ASSIGN_OR_RETURN(da, mem->Floats(B * d * k));
  GemmF32 s2;
  s2.m = d, s2.n = k, s2.k = n_z, s2.trans_a = true, s2.lda = d, s2.ldb = k, s2.ldc = k;
  s2.stride_a = zs, s2.stride_b = flat, s2.stride_c = int64_t{d} * k, s2.batch = B;
  GEMTB_RETURN_IF_ERROR(Gemm(s2, t.z, dbm, da));
  // a_b = Z_b^T Y: dZ_b += Y da_b^T, dY += sum over samples of Z_b da_b.
  GemmF32 s3;
  s3.m = n_z, s3.n = d, s3.k = k, s3.trans_b = true, s3.lda = k, s3.ldb = k, s3.ldc = d;
  s3.stride_a = 0, s3.stride_b = int64_t{d} * k, s3.stride_c = zs, s3.batch = B, s3.beta = 1.0f;
  GEMTB_RETURN_IF_ERROR(Gemm(s3, W(p.y), da, dz));
  GEMTB_ASSIGN_OR_RETURN(part, mem->Floats(B * flat));
  GemmF32 s4;
  s4.m = n_z, s4.n = k, s4.k = d, s4.lda = d, s4.ldb = k, s4.ldc = k;
  s4.stride_a = zs, s4.stride_b = int64_t{d} * k, s4.stride_c = flat, s4.batch = B;
  GEMTB_RETURN_IF_ERROR(Gemm(s4, t.z, da, part));
  GEMTB_RETURN_IF_ERROR(ColumnSums(part, B, flat, flat, G(p.y), true, st));
  GEMTB_RETURN_IF_ERROR(Copy2D(dz, zs, dx, xs, B, xs, st));
  // The summaries' gradients overwrite the caller's ds_sum arrays (the next cross's inputs; the
  // previous cross's backward has read them already).
  for (int j = 0; j < J; ++j) {
    GEMTB_RETURN_IF_ERROR(Copy2D(dz + int64_t{n_x + j * n_sum} * d, zs, ds_sum[j], int64_t{n_sum} * d, B,
                                 int64_t{n_sum} * d, st));
  }
  return absl::OkStatus();
}

// Several experts: y = sum_e g1_e W2_e (expert by expert, each product added to the last), then
// the shared bias, into the first n_F d columns of pre. Under expert parallelism the rank's experts
// run on the EP group's samples (h1 all-gathered, member order) and the group's outputs are summed
// back to each member's own samples (reduce-scatter) before the bias.
absl::Status GemModelGpu::Impl::ExpertsFwd(const WukongP& p, WukongTape& t) {
  const int64_t flat = int64_t{g.n_z()} * g.wk_k, nf = int64_t{g.n_f} * g.d, xs = int64_t{g.n_x} * g.d;
  const int D = ex ? ex->degree() : 1;
  t.rows_all = D * B;
  t.h1_all = t.h1;
  if (D > 1) {
    float* all;
    GEMTB_ASSIGN_OR_RETURN(all, mem->Floats(t.rows_all * flat));
    GEMTB_RETURN_IF_ERROR(ex->AllGather(t.h1, all, B * flat, st));
    t.h1_all = all;
  }
  const std::vector<int>& mine = running;
  const int64_t he = g.wk_h / g.experts, width = static_cast<int64_t>(mine.size()) * he;
  GEMTB_ASSIGN_OR_RETURN(t.u1, mem->Floats(t.rows_all * width));
  GEMTB_ASSIGN_OR_RETURN(t.g1, mem->Floats(t.rows_all * width));
  for (size_t k = 0; k < mine.size(); ++k)
    GEMTB_RETURN_IF_ERROR(
        LinearFwd(p.experts[static_cast<size_t>(mine[k])].mlp1, t.rows_all, t.h1_all, flat, t.u1 + k * he, width, nullptr));
  GEMTB_RETURN_IF_ERROR(GeluForward<float>(t.u1, t.rows_all * width, t.g1, st));
  // Without an exchange the sum lands in pre directly; with one, in the group's rows first.
  float* y = t.pre;
  int64_t ldy = xs;
  if (D > 1) {
    GEMTB_ASSIGN_OR_RETURN(y, mem->Floats(t.rows_all * nf));
    ldy = nf;
  }
  for (size_t k = 0; k < mine.size(); ++k) {
    GemmF32 s;
    s.m = t.rows_all, s.n = nf, s.k = he, s.lda = width, s.ldb = nf, s.ldc = ldy, s.beta = k == 0 ? 0.0f : 1.0f;
    GEMTB_RETURN_IF_ERROR(Gemm(s, t.g1 + k * he, W(p.experts[static_cast<size_t>(mine[k])].w2), y));
  }
  if (D > 1) {
    float* summed;
    GEMTB_ASSIGN_OR_RETURN(summed, mem->Floats(B * nf));
    GEMTB_RETURN_IF_ERROR(ex->ReduceScatter(y, summed, B * nf, st));
    GEMTB_RETURN_IF_ERROR(Copy2D(summed, nf, t.pre, xs, B, nf, st));
  }
  return BiasRows(t.pre, W(p.mlp2_bias), B, nf, t.pre, xs, st);
}

// The experts' backward from dpre's first n_F d columns: the shared bias's gradient from this
// rank's samples; under expert parallelism the output gradients all-gathered in the EP group, and
// the input gradients of every member's samples reduce-scattered back to them. dh1 [B, flat] is
// written.
absl::Status GemModelGpu::Impl::ExpertsBwd(const WukongP& p, const WukongTape& t, const float* dpre, float* dh1) {
  const int64_t flat = int64_t{g.n_z()} * g.wk_k, nf = int64_t{g.n_f} * g.d, xs = int64_t{g.n_x} * g.d;
  const int D = ex ? ex->degree() : 1;
  GEMTB_RETURN_IF_ERROR(ColumnSums(dpre, B, nf, xs, G(p.mlp2_bias), true, st));
  const float* dy = dpre;
  int64_t lddy = xs;
  if (D > 1) {
    float *own, *all;
    GEMTB_ASSIGN_OR_RETURN(own, mem->Floats(B * nf));
    GEMTB_ASSIGN_OR_RETURN(all, mem->Floats(t.rows_all * nf));
    GEMTB_RETURN_IF_ERROR(Copy2D(dpre, xs, own, nf, B, nf, st));
    GEMTB_RETURN_IF_ERROR(ex->AllGather(own, all, B * nf, st));
    dy = all;
    lddy = nf;
  }
  const std::vector<int>& mine = running;
  const int64_t he = g.wk_h / g.experts, width = static_cast<int64_t>(mine.size()) * he;
  float *dg1, *du1;
  GEMTB_ASSIGN_OR_RETURN(dg1, mem->Floats(t.rows_all * width));
  GEMTB_ASSIGN_OR_RETURN(du1, mem->Floats(t.rows_all * width));
  for (size_t k = 0; k < mine.size(); ++k) {
    const ExpertP& e = p.experts[static_cast<size_t>(mine[k])];
    LinearP second;  // the expert's weight alone (WeightGrad reads w, in, out)
    second.w = e.w2, second.in = static_cast<int>(he), second.out = static_cast<int>(nf);
    GEMTB_RETURN_IF_ERROR(WeightGrad(second, t.rows_all, t.g1 + k * he, width, dy, lddy));
    GemmF32 s;
    s.m = t.rows_all, s.n = he, s.k = nf, s.trans_b = true, s.lda = lddy, s.ldb = nf, s.ldc = width;
    GEMTB_RETURN_IF_ERROR(Gemm(s, dy, W(e.w2), dg1 + k * he));
  }
  GEMTB_RETURN_IF_ERROR(GeluBackward<float>(t.u1, dg1, t.rows_all * width, du1, st));
  float* dh1_all = dh1;
  if (D > 1) {
    GEMTB_ASSIGN_OR_RETURN(dh1_all, mem->Floats(t.rows_all * flat));
  }
  for (size_t k = 0; k < mine.size(); ++k)
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.experts[static_cast<size_t>(mine[k])].mlp1, t.rows_all, t.h1_all, flat,
                                    du1 + k * he, width, dh1_all, flat, /*accumulate_dx=*/k > 0));
  if (D > 1) GEMTB_RETURN_IF_ERROR(ex->ReduceScatter(dh1_all, dh1, B * flat, st));
  return absl::OkStatus();
}

absl::Status GemModelGpu::Impl::SeqFwd(const SeqP& p, int layer, int j, const CrossTape& ct, std::vector<float*>& s,
                                       SeqTape& t) {
  const int d = g.d;
  const int64_t n = rows[j], nd = n * d;
  // Each block writes a new residual stream, cur + the block's output (the tape keeps cur).
  const float* cur = s[j];
  s16[j] = nullptr;
  const bool bf16_blocks = options.attention_blocks == AttentionBlockPrecision::kBf16;
  if (g.DoA(layer)) {
    t.s_a = cur;
    GEMTB_ASSIGN_OR_RETURN(t.mean_a, mem->Floats(n));
    GEMTB_ASSIGN_OR_RETURN(t.rstd_a, mem->Floats(n));
    float* out;
    GEMTB_ASSIGN_OR_RETURN(out, mem->Floats(nd));
    if (bf16_blocks) {
      GEMTB_RETURN_IF_ERROR(
          NormAttnFwdBf16(p.ln_a, p.attn_a, CrossUse(j), cur, ct.x_sum16, t.h_a16, t.mean_a, t.rstd_a, t.a16, out));
    } else {
      GEMTB_ASSIGN_OR_RETURN(t.h_a, mem->Floats(nd));
      GEMTB_RETURN_IF_ERROR(NormFwd(p.ln_a, n, cur, t.h_a, t.mean_a, t.rstd_a));
      GEMTB_RETURN_IF_ERROR(AttnFwd(p.attn_a, CrossUse(j), t.h_a, ct.x_sum, t.a, out, cur));
    }
    cur = out;
  }
  if (g.DoB(layer)) {
    t.s_b = cur;
    GEMTB_ASSIGN_OR_RETURN(t.mean_b, mem->Floats(n));
    GEMTB_ASSIGN_OR_RETURN(t.rstd_b, mem->Floats(n));
    float* out;
    GEMTB_ASSIGN_OR_RETURN(out, mem->Floats(nd));
    if (bf16_blocks) {
      GEMTB_RETURN_IF_ERROR(
          NormAttnFwdBf16(p.ln_b, p.attn_b, SelfUse(j), cur, nullptr, t.h_b16, t.mean_b, t.rstd_b, t.b16, out));
    } else {
      GEMTB_ASSIGN_OR_RETURN(t.h_b, mem->Floats(nd));
      GEMTB_RETURN_IF_ERROR(NormFwd(p.ln_b, n, cur, t.h_b, t.mean_b, t.rstd_b));
      GEMTB_RETURN_IF_ERROR(AttnFwd(p.attn_b, SelfUse(j), t.h_b, t.h_b, t.b, out, cur));
    }
    cur = out;
  }
  t.s_c = cur;
  GEMTB_ASSIGN_OR_RETURN(t.mean_c, mem->Floats(n));
  GEMTB_ASSIGN_OR_RETURN(t.rstd_c, mem->Floats(n));
  if (options.ffn == FfnPrecision::kBf16 && n > 0) {
    float* out;
    GEMTB_ASSIGN_OR_RETURN(out, mem->Floats(nd));
    GEMTB_RETURN_IF_ERROR(FfnFwdBf16(p, n, cur, t, out, &s16[j]));
    s[j] = out;
    return absl::OkStatus();
  }
  GEMTB_ASSIGN_OR_RETURN(t.h_c, mem->Floats(nd));
  GEMTB_RETURN_IF_ERROR(NormFwd(p.ln_c, n, cur, t.h_c, t.mean_c, t.rstd_c));
  GEMTB_ASSIGN_OR_RETURN(t.u, mem->Floats(n * g.ffn));
  GEMTB_ASSIGN_OR_RETURN(t.g, mem->Floats(n * g.ffn));
  GEMTB_RETURN_IF_ERROR(LinearFwd(p.ffn1, n, t.h_c, d, t.u, g.ffn, nullptr));
  if (n > 0) GEMTB_RETURN_IF_ERROR(GeluForward<float>(t.u, n * g.ffn, t.g, st));
  float* out;
  GEMTB_ASSIGN_OR_RETURN(out, mem->Floats(nd));
  GEMTB_RETURN_IF_ERROR(LinearFwd(p.ffn2, n, t.g, g.ffn, out, d, cur));
  s[j] = out;
  return absl::OkStatus();
}

// The feed-forward block in bf16 (FfnPrecision::kBf16): out = cur + FFN(LayerNorm(cur)). LayerNorm
// writes bf16 rows h; the first linear's pre-activation u = h W1 + b1 and g = GELU(u) are bf16 arrays
// (the backward reads both); the second linear writes the fp32 residual stream, g W2 + b2 + cur. The
// weights are rounded to bf16 for the step; every product accumulates in fp32: LayerNorm's kernel, then
// with HopperFfn one kernel for the rest (ffn_forward.h), else a cuBLASLt product (bias in its
// epilogue), GELU's elementwise kernel and a second product (bias and residual in its epilogue).
absl::Status GemModelGpu::Impl::FfnFwdBf16(const SeqP& p, int64_t n, const float* cur, SeqTape& t, float* out,
                                           const __nv_bfloat16** out16) {
  const int d = g.d;
  std::vector<__nv_bfloat16*> w16;
  GEMTB_ASSIGN_OR_RETURN(w16, Bf16Params({p.ffn1.w, p.ffn1.b, p.ffn2.w}));
  t.w1_16 = w16[0];
  __nv_bfloat16* const b1 = w16[1];
  t.w2_16 = w16[2];
  GEMTB_ASSIGN_OR_RETURN(t.h_c16, Bf16s(n * d));
  GEMTB_ASSIGN_OR_RETURN(t.u16, Bf16s(n * g.ffn));
  GEMTB_ASSIGN_OR_RETURN(t.g16, Bf16s(n * g.ffn));
  const float* b2;
  GEMTB_ASSIGN_OR_RETURN(b2, AlignedBias(p.ffn2.b));
  GEMTB_RETURN_IF_ERROR(LayerNormForward(RowsShape{n, p.ln_c.width}, cur, W(p.ln_c.gamma), W(p.ln_c.beta), t.h_c16,
                                         t.mean_c, t.rstd_c, st));
  if (HopperFfn()) {
    __nv_bfloat16* y16 = nullptr;
    if (options.attention_blocks == AttentionBlockPrecision::kBf16) {
      GEMTB_ASSIGN_OR_RETURN(y16, Bf16s(n * d));
    }
    GEMTB_RETURN_IF_ERROR(FfnForwardFused(FfnShape{n, d, g.ffn}, t.h_c16,
                                          FfnForwardWeights{t.w1_16, b1, t.w2_16, b2}, cur, t.u16, t.g16, out, y16,
                                          st));
    *out16 = y16;
    return absl::OkStatus();
  }
  GEMTB_RETURN_IF_ERROR(lin->Forward(LinearShape{n, d, g.ffn}, t.h_c16, t.w1_16, b1, t.u16, st));
  GEMTB_RETURN_IF_ERROR(GeluForward<__nv_bfloat16>(t.u16, n * g.ffn, t.g16, st));
  return lin->ForwardToFp32(LinearShape{n, g.ffn, d}, t.g16, t.w2_16, b2, cur, out, st);
}

// Its backward, adding the block's input gradient to the residual stream's gradient ds: ds rounded to
// bf16 feeds the second linear's products (its bias gradient sums ds itself, in fp32, in model_kernels.h's
// tree of column sums, in the pass that rounds it); dg = ds W2^T rounded to bf16, du = dg GELU'(u) in
// bf16, dh = du W1^T in fp32 and LayerNorm's backward of dh: one kernel with FusedFfn (dh stays on
// chip), else dg and du with du's column sums (the first bias's gradient) in ffn_hidden_grad.h's kernel
// where HopperFfn (dg stays on chip), or a product and GELU's elementwise backward (with the
// column sums in the same pass), then a product into dh (scratch) and LayerNorm's kernels. The linears'
// weight gradients come from linear.h's products over every row (with FusedFfn, the first bias's too).
absl::Status GemModelGpu::Impl::FfnBwdBf16(const SeqP& p, int64_t n, const SeqTape& t, float* ds, float* dh,
                                           const Bf16Handoff* next, const __nv_bfloat16** handed) {
  *handed = nullptr;
  const int d = g.d;
  __nv_bfloat16 *ds16, *du16;
  GEMTB_ASSIGN_OR_RETURN(ds16, Bf16s(n * d));
  GEMTB_RETURN_IF_ERROR(ToBf16WithColumnSums(ds, n, d, ds16, G(p.ffn2.b), true, st));
  const LinearShape second{n, g.ffn, d}, first{n, d, g.ffn};
  GEMTB_RETURN_IF_ERROR(lin->BackwardWeight(second, t.g16, ds16, G(p.ffn2.w), nullptr, st));
  GEMTB_ASSIGN_OR_RETURN(du16, Bf16s(n * g.ffn));
  if (FusedFfn()) {
    GEMTB_RETURN_IF_ERROR(FfnBackwardFused(FfnShape{n, d, g.ffn}, ds16, t.s_c,
                                           FfnWeights{W(p.ln_c.gamma), t.w1_16, t.w2_16},
                                           FfnTape{t.mean_c, t.rstd_c, t.u16}, du16, ds, G(p.ln_c.gamma),
                                           G(p.ln_c.beta), st));
  } else {
    if (HopperFfn()) {
      GEMTB_RETURN_IF_ERROR(FfnHiddenGradFused(FfnShape{n, d, g.ffn}, ds16, t.w2_16, t.u16, du16, G(p.ffn1.b), true, st));
    } else {
      __nv_bfloat16* dg16;
      GEMTB_ASSIGN_OR_RETURN(dg16, Bf16s(n * g.ffn));
      GEMTB_RETURN_IF_ERROR(lin->BackwardInput(second, ds16, t.w2_16, nullptr, dg16, st));
      GEMTB_RETURN_IF_ERROR(GeluBackwardWithColumnSums(t.u16, dg16, n, g.ffn, du16, G(p.ffn1.b), true, st));
    }
    GEMTB_RETURN_IF_ERROR(lin->BackwardInputToFp32(first, du16, t.w1_16, nullptr, dh, st));
    GEMTB_RETURN_IF_ERROR(NormBwdAdd(p.ln_c, n, t.s_c, t.mean_c, t.rstd_c, dh, ds, next));
    if (next != nullptr) *handed = next->rows;
  }
  // The first bias's gradient: du's column sums, in GELU's pass above or here.
  return lin->BackwardWeight(first, t.h_c16, du16, G(p.ffn1.w), FusedFfn() ? G(p.ffn1.b) : nullptr, st);
}

// An attention block in bf16 (AttentionBlockPrecision::kBf16), the same ops as AttnFwd: the
// projections from bf16 inputs write bf16 q, k, v (bias in the epilogue), the QK-norm (with RoPE)
// writes the normed q and k in bf16, GDPA's tensor cores read and write bf16, and the output
// projection writes fp32 (the residual stream, with the residual in the epilogue, or the PMA's
// output), its bias in the epilogue. The projections that read xkv run as one product with their
// weights side by side (AttnTape16's packed layout): xkv is read once, and the backward's input
// gradient is one product over their gradients side by side. xq null: the queries are t.qr, set by
// the caller (the PMA's seeds, projected, normed and broadcast).
absl::Status GemModelGpu::Impl::AttnFwdBf16(const AttnP& p, const AttnUse& u, const __nv_bfloat16* xq,
                                            const __nv_bfloat16* xkv, AttnTape16& t, float* y,
                                            const float* residual, const AttentionNorm* norm) {
  const int d = g.d, H = g.heads, dh = g.dh();
  t.xq = xq;
  t.xkv = xkv;
  const bool self = xkv == xq;
  // The keys and values are projected here (not by the fused input kernel), with the queries where
  // the block attends to itself.
  const bool kv_here = u.nk > 0 && !(norm != nullptr && self);
  const bool q_packed = kv_here && self;
  // The weights in bf16: the output projection's; the query projection's where it runs alone; the
  // key and value projections' where the fused input kernel runs them; else the packed ones.
  const bool q_alone = xq != nullptr && !q_packed;
  const bool kv_alone = !kv_here && self && xq != nullptr;
  std::vector<ParamRef> refs;
  refs.reserve(7);
  refs.push_back(p.wo.w);
  if (q_alone) refs.push_back(p.wq.w), refs.push_back(p.wq.b);
  if (kv_alone) refs.push_back(p.wk.w), refs.push_back(p.wk.b), refs.push_back(p.wv.w), refs.push_back(p.wv.b);
  std::vector<__nv_bfloat16*> w16;
  GEMTB_ASSIGN_OR_RETURN(w16, Bf16Params(refs));
  t.wo = w16[0];
  __nv_bfloat16 *bq = nullptr, *bk = nullptr, *bv = nullptr, *b_kv = nullptr;
  size_t next = 1;
  if (q_alone) {
    t.wq = w16[next++];
    bq = w16[next++];
  }
  if (kv_alone) {
    t.wk = w16[next++];
    bk = w16[next++];
    t.wv = w16[next++];
    bv = w16[next++];
  }
  if (kv_here) {
    // Each projection's weight and bias as one [d + 1, d] matrix (PackedProjections), packed side by
    // side: the weights' rows, then the biases' row.
    ColumnBlocks<ParamRef> parts;
    GEMTB_ASSIGN_OR_RETURN(parts, PackedProjections(p, q_packed));
    ColumnBlocks<const float*> sources;
    sources.count = parts.count;
    for (int i = 0; i < parts.count; ++i) sources.at[i] = W(parts.at[i]), sources.cols[i] = parts.cols[i];
    t.kv_cols = int64_t{parts.count} * d;
    GEMTB_ASSIGN_OR_RETURN(t.w_kv, Bf16s((d + 1) * t.kv_cols));
    GEMTB_RETURN_IF_ERROR(PackColumnsToBf16(sources, d + 1, t.w_kv, st));
    b_kv = t.w_kv + d * t.kv_cols;
  }
  if (xq) {
    GEMTB_ASSIGN_OR_RETURN(t.qr, Bf16s(u.nq * d));
    GEMTB_ASSIGN_OR_RETURN(t.q_inv, mem->Floats(u.nq * H));
    if (!q_packed) GEMTB_ASSIGN_OR_RETURN(t.q, Bf16s(u.nq * d));
  }
  GEMTB_ASSIGN_OR_RETURN(t.o, Bf16s(u.nq * d));
  GEMTB_ASSIGN_OR_RETURN(t.kr, Bf16s(u.nk * d));
  GEMTB_ASSIGN_OR_RETURN(t.k_inv, mem->Floats(u.nk * H));
  if (!kv_here) {
    GEMTB_ASSIGN_OR_RETURN(t.k, Bf16s(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(t.v, Bf16s(u.nk * d));
  }
  const LinearShape qs{u.nq, d, d};
  if (norm != nullptr && u.nq > 0) {
    std::vector<AttentionProjection> projections = {{t.wq, bq, t.q, t.qr, t.q_inv}};
    if (self) projections.insert(projections.end(), {{t.wk, bk, t.k, t.kr, t.k_inv}, {t.wv, bv, t.v, nullptr, nullptr}});
    const AttentionRope rope = u.rope ? AttentionRope{rope_table, u.q_off, u.batch} : AttentionRope{};
    GEMTB_RETURN_IF_ERROR(AttentionInputForward(AttentionInputShape{u.nq, d, dh}, *norm, projections, rope, st));
  }
  const int64_t ld_kv = t.LdKv(d), ld_q = t.LdQ(d);
  if (kv_here) {
    __nv_bfloat16* kv;
    GEMTB_ASSIGN_OR_RETURN(kv, Bf16s(u.nk * t.kv_cols));
    GEMTB_RETURN_IF_ERROR(lin->Forward(LinearShape{u.nk, d, t.kv_cols}, xkv, t.w_kv, b_kv, kv, st));
    if (q_packed) t.q = kv, kv += d;
    t.k = kv, t.v = kv + d;
    GEMTB_RETURN_IF_ERROR(u.rope ? QkNormRopeForward(KRows(u, ld_kv), t.k, t.kr, t.k_inv, st)
                                 : HeadRmsNormForward<__nv_bfloat16>(HeadRowsShape{u.nk * H, dh, H, ld_kv}, t.k,
                                                                     t.kr, t.k_inv, st));
  }
  if (u.nq == 0) return absl::OkStatus();
  if (xq && norm == nullptr) {
    // The queries' QK-norm (and RoPE) inside GDPA's forward, which writes qr and q_inv as the norm's
    // pass would (GdpaQueryNorm).
    if (q_alone) GEMTB_RETURN_IF_ERROR(lin->Forward(qs, xq, t.wq, bq, t.q, st));
    const GdpaQueryNorm query_norm{ld_q, u.rope ? rope_table : nullptr, t.qr, t.q_inv};
    return AttnOutBf16(p, u, t, residual, y, t.q, &query_norm);
  }
  return AttnOutBf16(p, u, t, residual, y, t.qr, nullptr);
}

// GDPA of the block's queries (q: the normed queries, or with query_norm their projection, normed by
// GDPA's forward) and y (+)= Wo o + bo.
absl::Status GemModelGpu::Impl::AttnOutBf16(const AttnP& p, const AttnUse& u, AttnTape16& t, const float* residual,
                                            float* y, const __nv_bfloat16* q, const GdpaQueryNorm* query_norm) {
  const int d = g.d;
  const LinearShape qs{u.nq, d, d};
  GEMTB_RETURN_IF_ERROR(GdpaForwardTensorCore(Batch(u, t.LdKv(d)), q, t.kr, t.v, t.o, st, query_norm));
  const float* bo;
  GEMTB_ASSIGN_OR_RETURN(bo, AlignedBias(p.wo.b));
  return lin->ForwardToFp32(qs, t.o, t.wo, bo, residual, y, st);
}

// Its backward: the output's gradient dy rounded to bf16 feeds the output projection's products (its
// bias gradient sums dy itself, in fp32, in the pass that rounds it); GDPA and the QK-norm's backward
// in bf16, writing the packed projections' gradients side by side; their weight and bias gradients
// from one product and one column sum, added to each projection's; the input gradients in fp32, dxq
// written (the first term of the block's input gradient) and then dxkv added to (dxkv is dxq where the
// block attends to itself). Without xq (the PMA) *dqr_out gets the gradient of the broadcast queries
// instead (bf16, [nq, d]).
absl::Status GemModelGpu::Impl::AttnBwdBf16(const AttnP& p, const AttnUse& u, const AttnTape16& t, const float* dy,
                                            float* dxq, float* dxkv, __nv_bfloat16** dqr_out,
                                            const LayerNormGrads* ln, const __nv_bfloat16* dy16_in) {
  const int d = g.d, H = g.heads, dh = g.dh();
  const LinearShape qs{u.nq, d, d}, ks{u.nk, d, d};
  const bool packed = t.kv_cols > 0, q_packed = t.QPacked(), self = t.xkv == t.xq;
  if (q_packed && (dxq != dxkv || ln != nullptr)) {
    return absl::InternalError(
        "AttnBwdBf16: a packed self-attention block takes one input gradient array and no fused LayerNorm");
  }
  const int64_t ld_q = t.LdQ(d), ld_kv = t.LdKv(d);
  // The head RMS-normed sides whose walks are whole (GdpaHeadNorm: GDPA writes their gradient through
  // the norm's backward, after RoPE's transpose where the block applies RoPE, and the norm's own
  // backward pass is skipped): every block's own queries, the PMA's keys and the self-attention's
  // packed keys; not the cross-attention's 4 summary keys a sample, whose walks are split.
  const bool queries = t.xq != nullptr && u.nq > 0;
  const bool fold_key_norm = u.nk > 0 && packed && (t.xq == nullptr ? !u.rope : self);
  const __nv_bfloat16* dy16 = dy16_in;
  __nv_bfloat16 *d_o, *dqr = nullptr, *dq = nullptr, *dkr = nullptr, *dk, *dv;
  GEMTB_ASSIGN_OR_RETURN(d_o, Bf16s(u.nq * d));
  if (!queries) GEMTB_ASSIGN_OR_RETURN(dqr, Bf16s(u.nq * d));
  if (!fold_key_norm) GEMTB_ASSIGN_OR_RETURN(dkr, Bf16s(u.nk * d));
  if (packed) {
    __nv_bfloat16* dkv;
    GEMTB_ASSIGN_OR_RETURN(dkv, Bf16s(u.nk * t.kv_cols));
    if (q_packed) dq = dkv, dkv += d;
    dk = dkv, dv = dkv + d;
  } else {
    GEMTB_ASSIGN_OR_RETURN(dk, Bf16s(u.nk * d));
    GEMTB_ASSIGN_OR_RETURN(dv, Bf16s(u.nk * d));
  }
  if (!q_packed) GEMTB_ASSIGN_OR_RETURN(dq, Bf16s(u.nq * d));
  if (u.nq > 0) {
    if (dy16 == nullptr) {
      __nv_bfloat16* made;
      GEMTB_ASSIGN_OR_RETURN(made, Bf16s(u.nq * d));
      GEMTB_RETURN_IF_ERROR(ToBf16WithColumnSums(dy, u.nq, d, made, G(p.wo.b), true, st));
      dy16 = made;
    }
    GEMTB_RETURN_IF_ERROR(lin->BackwardInput(qs, dy16, t.wo, nullptr, d_o, st));
    GEMTB_RETURN_IF_ERROR(lin->BackwardWeight(qs, t.o, dy16, G(p.wo.w), nullptr, st));
  }
  const float* rope = u.rope ? rope_table : nullptr;
  const GdpaHeadNorm key_norm{t.k, t.k_inv, ld_kv, rope}, query_norm{t.q, t.q_inv, ld_q, rope};
  GEMTB_RETURN_IF_ERROR(GdpaBackwardTensorCore(Batch(u, ld_kv), t.qr, t.kr, t.v, d_o, queries ? dq : dqr,
                                               fold_key_norm ? dk : dkr, dv, st, fold_key_norm ? &key_norm : nullptr,
                                               queries ? &query_norm : nullptr));
  // The QK-norms' backward and the projections' weight gradients.
  if (!t.xq) *dqr_out = dqr;  // the PMA's seeds: the caller sums the broadcast rows' gradient
  if (queries) {
    if (!q_packed) GEMTB_RETURN_IF_ERROR(lin->BackwardWeight(qs, t.xq, dq, G(p.wq.w), G(p.wq.b), st));
  }
  if (u.nk > 0) {
    if (!fold_key_norm) {
      GEMTB_RETURN_IF_ERROR(u.rope ? QkNormRopeBackward(KRows(u, ld_kv), t.k, t.k_inv, dkr, dk, st)
                                   : HeadRmsNormBackward<__nv_bfloat16>(HeadRowsShape{u.nk * H, dh, H, ld_kv}, t.k,
                                                                        t.k_inv, dkr, dk, st));
    }
    if (packed) {
      GEMTB_RETURN_IF_ERROR(PackedWeightGrads(p, t, u.nk, q_packed ? dq : dk));
    } else {
      GEMTB_RETURN_IF_ERROR(lin->BackwardWeight(ks, t.xkv, dk, G(p.wk.w), G(p.wk.b), st));
      GEMTB_RETURN_IF_ERROR(lin->BackwardWeight(ks, t.xkv, dv, G(p.wv.w), G(p.wv.b), st));
    }
  }
  // The input gradients: with `ln`, the projections that read xq in one kernel with the LayerNorm's
  // backward; else dxq written, then dxkv added to.
  const bool fused_kv = ln != nullptr && self;
  if (queries && ln != nullptr) {
    std::vector<ProjectionGrad> sources = {{dq, t.wq}};
    if (fused_kv) sources.insert(sources.end(), {{dk, t.wk}, {dv, t.wv}});
    GEMTB_RETURN_IF_ERROR(ProjectionsLayerNormBackward(u.nq, d, sources, *ln, st));
  } else if (queries && !q_packed) {
    GEMTB_RETURN_IF_ERROR(lin->BackwardInputToFp32(qs, dq, t.wq, nullptr, dxq, st));
  }
  if (u.nk == 0 || fused_kv) return absl::OkStatus();
  // The packed gradients [nk, kv_cols] times the packed weights' transpose: written where they include
  // the queries' (dxq is dxkv), else added to dxkv.
  if (packed) {
    return lin->BackwardInputToFp32(LinearShape{u.nk, d, t.kv_cols}, q_packed ? dq : dk, t.w_kv,
                                    q_packed ? nullptr : dxkv, dxkv, st);
  }
  GEMTB_RETURN_IF_ERROR(lin->BackwardInputToFp32(ks, dk, t.wk, dxkv, dxkv, st));
  return lin->BackwardInputToFp32(ks, dv, t.wv, dxkv, dxkv, st);
}

// The packed projections' weight and bias gradients (AttnTape16's layout): x^T dkv [d, kv_cols] and
// dkv's column sums into scratch, then each projection's columns added to its own gradients. dkv: the
// packed gradients [n, kv_cols].
absl::Status GemModelGpu::Impl::PackedWeightGrads(const AttnP& p, const AttnTape16& t, int64_t n,
                                                  const __nv_bfloat16* dkv) {
  const int d = g.d;
  float* dw;
  GEMTB_ASSIGN_OR_RETURN(dw, mem->Floats((d + 1) * t.kv_cols));  // d weight rows, then the bias row
  GEMTB_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(dw, 0, sizeof(float) * (d + 1) * t.kv_cols, st), "packed grads"));
  GEMTB_RETURN_IF_ERROR(lin->BackwardWeight(LinearShape{n, d, t.kv_cols}, t.xkv, dkv, dw, dw + d * t.kv_cols, st));
  ColumnBlocks<ParamRef> parts;
  GEMTB_ASSIGN_OR_RETURN(parts, PackedProjections(p, t.QPacked()));
  ColumnBlocks<float*> grads;
  grads.count = parts.count;
  for (int i = 0; i < parts.count; ++i) grads.at[i] = G(parts.at[i]), grads.cols[i] = parts.cols[i];
  return AddColumnBlocks(dw, d + 1, grads, st);
}

absl::Status GemModelGpu::Impl::SeqBwd(const SeqP& p, int layer, int j, const SeqTape& t, float* ds, float* dx_sum) {
  const int d = g.d;
  const int64_t n = rows[j], nd = n * d;
  if (n == 0) return absl::OkStatus();
  float *dg = nullptr, *du = nullptr, *dh;
  if (options.ffn == FfnPrecision::kFp32) {
    GEMTB_ASSIGN_OR_RETURN(dg, mem->Floats(n * g.ffn));
    GEMTB_ASSIGN_OR_RETURN(du, mem->Floats(n * g.ffn));
  }
  GEMTB_ASSIGN_OR_RETURN(dh, mem->Floats(nd));
  // Each LayerNorm backward below that runs as its own kernel hands the new ds on in bf16 to the bf16
  // attention block whose backward comes next (its output projection's operand, and its bias's sums),
  // which then skips that pass over ds (ToBf16WithColumnSums); only at widths the fused LayerNorm
  // kernel takes (wider rows keep that pass).
  const bool bf16_blocks = options.attention_blocks == AttentionBlockPrecision::kBf16;
  const bool hand_on = bf16_blocks && d <= kBackwardRowsMaxWidth;
  const AttnP* const after_ffn = !hand_on ? nullptr : g.DoB(layer) ? &p.attn_b : g.DoA(layer) ? &p.attn_a : nullptr;
  const __nv_bfloat16* ds16 = nullptr;  // ds in bf16, handed on to the next block
  if (options.ffn == FfnPrecision::kBf16) {
    Bf16Handoff next;
    if (after_ffn != nullptr) GEMTB_ASSIGN_OR_RETURN(next, HandoffTo(*after_ffn, n));
    GEMTB_RETURN_IF_ERROR(FfnBwdBf16(p, n, t, ds, dh, after_ffn != nullptr ? &next : nullptr, &ds16));
  } else {
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.ffn2, n, t.g, g.ffn, ds, d, dg, g.ffn, false));
    GEMTB_RETURN_IF_ERROR(GeluBackward<float>(t.u, dg, n * g.ffn, du, st));
    GEMTB_RETURN_IF_ERROR(LinearBwd(p.ffn1, n, t.h_c, d, du, g.ffn, dh, d, false));
    GEMTB_RETURN_IF_ERROR(NormBwdAdd(p.ln_c, n, t.s_c, t.mean_c, t.rstd_c, dh, ds));
  }
  // dh is each block's input gradient, written by its query projection's backward (no zeroing pass).
  if (g.DoB(layer)) {
    if (bf16_blocks) {
      Bf16Handoff next;
      const bool to_a = hand_on && g.DoA(layer);
      if (to_a) GEMTB_ASSIGN_OR_RETURN(next, HandoffTo(p.attn_a, n));
      GEMTB_RETURN_IF_ERROR(NormAttnBwdBf16(p.ln_b, p.attn_b, SelfUse(j), t.b16, t.s_b, t.mean_b, t.rstd_b, ds, dh,
                                            nullptr, ds16, to_a ? &next : nullptr, &ds16));
    } else {
      GEMTB_RETURN_IF_ERROR(AttnBwd(p.attn_b, SelfUse(j), t.b, ds, dh, dh, nullptr, /*dxq_fresh=*/true));
      GEMTB_RETURN_IF_ERROR(NormBwdAdd(p.ln_b, n, t.s_b, t.mean_b, t.rstd_b, dh, ds));
    }
  }
  if (g.DoA(layer)) {
    if (bf16_blocks) {
      GEMTB_RETURN_IF_ERROR(NormAttnBwdBf16(p.ln_a, p.attn_a, CrossUse(j), t.a16, t.s_a, t.mean_a, t.rstd_a, ds, dh,
                                            dx_sum, ds16, nullptr, &ds16));
    } else {
      GEMTB_RETURN_IF_ERROR(AttnBwd(p.attn_a, CrossUse(j), t.a, ds, dh, dx_sum, nullptr, /*dxq_fresh=*/true));
      GEMTB_RETURN_IF_ERROR(NormBwdAdd(p.ln_a, n, t.s_a, t.mean_a, t.rstd_a, dh, ds));
    }
  }
  return absl::OkStatus();
}

GemModelGpu::GemModelGpu(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemModelGpu::~GemModelGpu() = default;
const gemtb::model::GemGeometry& GemModelGpu::geometry() const { return impl_->g; }
void GemModelGpu::SetRegionHook(RegionHook hook) { impl_->region_hook = std::move(hook); }

absl::StatusOr<std::unique_ptr<GemModelGpu>> GemModelGpu::Create(const gemtb::model::ModelConfig& config,
                                                                 const GemModelOptions& options,
                                                                 const GemModelPlacement* placement) {
  absl::StatusOr<GemGeometry> geometry = gemtb::model::MakeGemGeometry(config);
  if (!geometry.ok()) return geometry.status();
  auto impl = std::make_unique<Impl>();
  impl->g = *std::move(geometry);
  impl->options = options;
  const GemGeometry& g = impl->g;
  const int dh = g.dh();
  if (dh != 16 && dh != 32 && dh != 64)
    return absl::UnimplementedError(
        absl::StrCat("heads: d ", g.d, " / heads ", g.heads, " = head dim ", dh, " (the GPU attention runs 16, 32, 64)"));
  if (options.ffn == FfnPrecision::kBf16) {
    if (absl::Status v = ValidateLinearShape(LinearShape{1, g.d, g.ffn}); !v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("ffn bf16: d ", g.d, " and ffn ", g.ffn, ": ", v.message()));
    }
  }
  if (options.attention_blocks == AttentionBlockPrecision::kBf16) {
    // GDPA on bf16 tensors is the tensor-core kernels'; the fp32 kernels sum in the reference's order.
    if (options.attention != AttentionPrecision::kBf16) {
      return absl::InvalidArgumentError(absl::StrCat("attention blocks bf16: needs attention bf16 (attention is ",
                                                     PrecisionName(options.attention), ")"));
    }
    if (absl::Status v = ValidateLinearShape(LinearShape{1, g.d, g.d}); !v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("attention blocks bf16: d ", g.d, ": ", v.message()));
    }
  }
  if (placement != nullptr) {
    if (g.experts == 1 || placement->experts.empty())
      return absl::InvalidArgumentError(absl::StrCat("placement: ", placement->experts.size(), " experts placed, the model has ",
                                                     g.experts, " (a placement is expert parallelism's)"));
    for (int e : placement->experts)
      if (e < 0 || e >= g.experts)
        return absl::InvalidArgumentError(absl::StrCat("placement.experts: ", e, " is not one of the ", g.experts));
    impl->placed = placement->experts;
  }
  const ParamLayout& L = placement != nullptr ? placement->layout : g.layout;
  impl->param_total = L.total();
  const int d = g.d, J = g.num_sequences();
  impl->dense_proj = BindLinear(L, "embed.dense", g.dense_m, g.n_d * d);
  impl->lce_in = BindMix(L, "embed.lce_in", g.num_features + g.n_d, g.n_x);
  auto bind_cross = [&](const std::string& name) {
    CrossP c;
    c.lce_s = BindMix(L, name + ".lce_s", g.n_x, g.n_s);
    c.x_gate = BindLinear(L, name + ".x_gate", d, d);
    for (int j = 0; j < J; ++j) {
      const std::string sj = absl::StrCat(name, ".seq", j);
      c.seeds.push_back(L.Ref(sj + ".pma.seeds", {g.k_p, d}));
      c.pma.push_back(BindAttn(L, sj + ".pma", d));
      c.sum_gate.push_back(BindLinear(L, sj + ".sum_gate", d, d));
    }
    return c;
  };
  const int n_z = g.n_z();
  for (int l = 0; l < g.layers; ++l) {
    const std::string name = absl::StrCat("L", l + 1);
    LayerP layer;
    layer.cross = bind_cross(name + ".cross");
    WukongP& w = layer.wukong;
    w.y = L.Ref(name + ".wukong.y", {n_z, g.wk_k});
    w.ln_flat = BindNorm(L, name + ".wukong.ln_flat", n_z * g.wk_k);
    if (g.experts == 1) {
      w.mlp1 = BindLinear(L, name + ".wukong.mlp1", n_z * g.wk_k, g.wk_h);
      w.mlp2 = BindLinear(L, name + ".wukong.mlp2", g.wk_h, g.n_f * d);
    } else {
      const int he = g.wk_h / g.experts;
      for (int e = 0; e < g.experts; ++e) {
        ExpertP x;  // left unbound where a placement holds no such expert
        const bool bound = impl->placed.empty() ||
                           std::find(impl->placed.begin(), impl->placed.end(), e) != impl->placed.end();
        if (bound) {
          x.mlp1 = BindLinear(L, absl::StrCat(name, ".wukong.mlp1.e", e), n_z * g.wk_k, he);
          x.w2 = L.Ref(absl::StrCat(name, ".wukong.mlp2.e", e, ".w"), {he, g.n_f * d});
        }
        w.experts.push_back(x);
      }
      w.mlp2_bias = L.Ref(name + ".wukong.mlp2.b", {g.n_f * d});
    }
    w.lcb = BindMix(L, name + ".wukong.lcb", n_z, g.n_l);
    w.res = BindMix(L, name + ".wukong.lce_res", n_z, g.n_x);
    w.ln_out = BindNorm(L, name + ".wukong.ln_out", d);
    for (int j = 0; j < J; ++j) {
      const std::string sj = absl::StrCat(name, ".seq", j);
      SeqP s;
      s.ln_a = BindNorm(L, sj + ".ln_a", d);
      s.attn_a = BindAttn(L, sj + ".attn_a", d);
      s.ln_b = BindNorm(L, sj + ".ln_b", d);
      s.attn_b = BindAttn(L, sj + ".attn_b", d);
      s.ln_c = BindNorm(L, sj + ".ln_c", d);
      s.ffn1 = BindLinear(L, sj + ".ffn1", d, g.ffn);
      s.ffn2 = BindLinear(L, sj + ".ffn2", g.ffn, d);
      layer.seq.push_back(s);
    }
    impl->layers.push_back(std::move(layer));
  }
  impl->final_cross = bind_cross("final.cross");
  for (size_t i = 0; i + 1 < g.head_widths.size(); ++i)
    impl->head.push_back(BindLinear(L, absl::StrCat("head.mlp", i), g.head_widths[i], g.head_widths[i + 1]));
  absl::StatusOr<std::unique_ptr<Fp32Matmul>> mm = Fp32Matmul::Create(options.matmul);
  if (!mm.ok()) return mm.status();
  impl->mm = *std::move(mm);
  if (options.ffn == FfnPrecision::kBf16 || options.attention_blocks == AttentionBlockPrecision::kBf16) {
    absl::StatusOr<std::unique_ptr<LinearMatmuls>> lin = LinearMatmuls::Create();
    if (!lin.ok()) return lin.status();
    impl->lin = *std::move(lin);
  }
  const std::vector<float> table = gemtb::model::RopeTable<float>(g.rope_rows, dh);
  GEMTB_RETURN_IF_ERROR(Cuda(cudaMalloc(&impl->rope_table, table.size() * sizeof(float)), "rope table"));
  GEMTB_RETURN_IF_ERROR(Cuda(cudaMemcpy(impl->rope_table, table.data(), table.size() * sizeof(float),
                                        cudaMemcpyHostToDevice), "rope table"));
  return std::unique_ptr<GemModelGpu>(new GemModelGpu(std::move(impl)));
}

absl::Status GemModelGpu::Run(const float* params, const GemBatchInput& in, const GemBatchOutput& out,
                              cudaStream_t stream, RegionTimer* timer) {
  Impl& m = *impl_;
  const GemGeometry& g = m.g;
  const int d = g.d, J = g.num_sequences(), F = g.num_features, n_s = g.n_s, n_sum = g.n_sum();
  if (in.batch < 1 || in.batch >= (int64_t{1} << 20))
    return absl::InvalidArgumentError(absl::StrCat("batch: ", in.batch, " (want 1 .. 2^20-1)"));
  if (static_cast<int>(in.lengths.size()) != J || static_cast<int>(in.events.size()) != J)
    return absl::InvalidArgumentError(absl::StrCat("lengths/events: ", in.lengths.size(), "/", in.events.size(),
                                                   " sequences, the model has ", J));
  for (int j = 0; j < J; ++j) {
    if (static_cast<int64_t>(in.lengths[j].size()) != in.batch)
      return absl::InvalidArgumentError(absl::StrCat("lengths[", j, "]: ", in.lengths[j].size(), " samples != batch ", in.batch));
    for (int64_t b = 0; b < in.batch; ++b)
      if (in.lengths[j][b] < 0 || in.lengths[j][b] > g.seqs[j].lmax)
        return absl::InvalidArgumentError(absl::StrCat("lengths[", j, "][", b, "]: ", in.lengths[j][b], " (want 0 .. Lmax ",
                                                       g.seqs[j].lmax, ")"));
    const bool any_event = std::any_of(in.lengths[j].begin(), in.lengths[j].end(), [](int32_t n) { return n > 0; });
    if (any_event && in.events[j].item == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("events[", j, "].item: null, where the batch has events"));
  }
  if (in.experts != nullptr) {
    if (absl::Status s = gemtb::model::CheckExpertDegree(g, in.experts->degree(), "experts (the exchange's degree)");
        !s.ok())
      return s;
    if (in.experts->member() < 0 || in.experts->member() >= in.experts->degree())
      return absl::InvalidArgumentError(absl::StrCat("experts: member ", in.experts->member(), " of a group of ",
                                                     in.experts->degree()));
  }
  const std::vector<int> running = in.experts ? gemtb::model::ExpertsOfMember(g.experts, in.experts->degree(),
                                                                              in.experts->member())
                                              : gemtb::model::ExpertsOfMember(g.experts, 1, 0);
  if (!m.placed.empty() && (in.experts == nullptr || running != m.placed))
    return absl::InvalidArgumentError(absl::StrCat(
        "experts: this model holds the experts {", absl::StrJoin(m.placed, ", "),
        "} of an EP member; the pass must run them under that member's exchange (",
        in.experts == nullptr ? std::string("none given")
                              : absl::StrCat("member ", in.experts->member(), " of ", in.experts->degree()),
        ")"));
  const bool backward = out.param_grad != nullptr;
  if (backward && static_cast<int>(out.events_grad.size()) != J)
    return absl::InvalidArgumentError(absl::StrCat("events_grad: ", out.events_grad.size(), " sequences, the model has ", J));
  Scratch mem(stream);
  m.w = params, m.gr = out.param_grad, m.st = stream, m.mem = &mem, m.B = in.batch, m.ex = in.experts;
  m.running = running;
  const int64_t B = in.batch;
  GEMTB_RETURN_IF_ERROR(m.Plan(in));
  // Region boundaries for the timer (the model description's region names).
  auto region = [&](const std::string& name, bool bwd) -> absl::Status {
    if (timer) GEMTB_RETURN_IF_ERROR(timer->Begin(name, bwd));
    return m.region_hook ? m.region_hook(name, bwd, stream) : absl::OkStatus();
  };
  auto layer_region = [&](size_t l, const std::string& part, bool bwd) {
    return region(absl::StrCat("L", l + 1, ".", part), bwd);
  };

  // Embedding block: X = LCE_in([E || Linear(dense)]).
  const int64_t z0s = int64_t{F + g.n_d} * d, xs = int64_t{g.n_x} * d;
  float *dense_out, *z0, *x;
  GEMTB_ASSIGN_OR_RETURN(dense_out, mem.Floats(B * g.n_d * d));
  GEMTB_ASSIGN_OR_RETURN(z0, mem.Floats(B * z0s));
  GEMTB_ASSIGN_OR_RETURN(x, mem.Floats(B * xs));
  GEMTB_RETURN_IF_ERROR(region("E.dense", false));
  GEMTB_RETURN_IF_ERROR(m.LinearFwd(m.dense_proj, B, in.dense, g.dense_m, dense_out, int64_t{g.n_d} * d, nullptr));
  GEMTB_RETURN_IF_ERROR(Copy2D(in.pooled, int64_t{F} * d, z0, z0s, B, int64_t{F} * d, stream));
  GEMTB_RETURN_IF_ERROR(Copy2D(dense_out, int64_t{g.n_d} * d, z0 + int64_t{F} * d, z0s, B, int64_t{g.n_d} * d, stream));
  GEMTB_RETURN_IF_ERROR(m.MixFwd(m.lce_in, z0, z0s, x, xs, false));

  std::vector<float*> s(J, nullptr);
  std::vector<LayerTape> tapes(m.layers.size());
  // tape_at[l]: where layer l's forward arrays start in the scratch's order (they end where layer
  // l + 1's, or the final cross's, start); nothing allocated before a layer reads them.
  std::vector<size_t> tape_at(m.layers.size() + 1);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    LayerTape& t = tapes[l];
    tape_at[l] = mem.Mark();
    GEMTB_RETURN_IF_ERROR(layer_region(l, "cross", false));
    GEMTB_RETURN_IF_ERROR(m.CrossFwd(m.layers[l].cross, t.cross, x, s, l == 0 ? &in : nullptr));
    if (m.options.attention_blocks == AttentionBlockPrecision::kBf16) {
      const int64_t nxs = m.B * n_s * d;
      GEMTB_ASSIGN_OR_RETURN(t.cross.x_sum16, m.Bf16s(nxs));
      GEMTB_RETURN_IF_ERROR(ToBf16(t.cross.x_sum, nxs, t.cross.x_sum16, stream));
    }
    GEMTB_RETURN_IF_ERROR(layer_region(l, "wukong", false));
    GEMTB_RETURN_IF_ERROR(m.WukongFwd(m.layers[l].wukong, t.cross, x, t.wukong));
    t.seq.resize(J);
    for (int j = 0; j < J; ++j) {
      GEMTB_RETURN_IF_ERROR(layer_region(l, absl::StrCat("seq", j), false));
      GEMTB_RETURN_IF_ERROR(m.SeqFwd(m.layers[l].seq[j], static_cast<int>(l), j, t.cross, s, t.seq[j]));
    }
    x = t.wukong.x_out;
  }
  tape_at[m.layers.size()] = mem.Mark();
  CrossTape final_tape;
  GEMTB_RETURN_IF_ERROR(region("F.cross", false));
  GEMTB_RETURN_IF_ERROR(m.CrossFwd(m.final_cross, final_tape, x, s, m.layers.empty() ? &in : nullptr));

  // Head: MLP([flatten(X_sum) || flatten(S_sum_1..J)]) -> T logits.
  const int hw = g.head_widths.front();
  float* hin;
  GEMTB_ASSIGN_OR_RETURN(hin, mem.Floats(B * hw));
  GEMTB_RETURN_IF_ERROR(region("head", false));
  GEMTB_RETURN_IF_ERROR(Copy2D(final_tape.x_sum, int64_t{n_s} * d, hin, hw, B, int64_t{n_s} * d, stream));
  for (int j = 0; j < J; ++j)
    GEMTB_RETURN_IF_ERROR(Copy2D(final_tape.seq[j].s_sum, int64_t{n_sum} * d, hin + int64_t{n_s + j * n_sum} * d, hw, B,
                                 int64_t{n_sum} * d, stream));
  const size_t nh = m.head.size();
  std::vector<float*> head_in(nh), head_u(nh);
  head_in[0] = hin;
  for (size_t i = 0; i < nh; ++i) {
    const LinearP& p = m.head[i];
    if (i + 1 == nh) {
      head_u[i] = out.logits;
    } else {
      GEMTB_ASSIGN_OR_RETURN(head_u[i], mem.Floats(B * p.out));
    }
    GEMTB_RETURN_IF_ERROR(m.LinearFwd(p, B, head_in[i], p.in, head_u[i], p.out, nullptr));
    if (i + 1 < nh) {
      GEMTB_ASSIGN_OR_RETURN(head_in[i + 1], mem.Floats(B * p.out));
      GEMTB_RETURN_IF_ERROR(GeluForward<float>(head_u[i], B * p.out, head_in[i + 1], stream));
    }
  }
  const int T = g.num_tasks;
  float *dlogits, *sample_loss;
  double* workspace = nullptr;
  GEMTB_ASSIGN_OR_RETURN(dlogits, mem.Floats(B * T));
  GEMTB_ASSIGN_OR_RETURN(sample_loss, mem.Floats(B));
  {
    float* ws;
    GEMTB_ASSIGN_OR_RETURN(ws, mem.Floats(2));
    workspace = reinterpret_cast<double*>(ws);
  }
  GEMTB_RETURN_IF_ERROR(BceWithLogitsLoss(LossShape{B, T, in.mask_count}, out.logits, in.labels, in.masks, dlogits, sample_loss,
                                          out.loss, workspace, stream));
  if (!backward) return timer ? timer->End() : absl::OkStatus();

  GEMTB_RETURN_IF_ERROR(region("head", true));
  GEMTB_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(out.param_grad, 0, m.param_total * sizeof(float), stream), "zero"));
  // Head backward.
  float* da = dlogits;
  for (size_t i = nh; i-- > 0;) {
    const LinearP& p = m.head[i];
    float* du = da;
    if (i + 1 < nh) {
      GEMTB_ASSIGN_OR_RETURN(du, mem.Floats(B * p.out));
      GEMTB_RETURN_IF_ERROR(GeluBackward<float>(head_u[i], da, B * p.out, du, stream));
    }
    float* dprev;
    GEMTB_ASSIGN_OR_RETURN(dprev, mem.Floats(B * p.in));
    GEMTB_RETURN_IF_ERROR(m.LinearBwd(p, B, head_in[i], p.in, du, p.out, dprev, p.in, false));
    da = dprev;
  }
  float* dx_sum;
  GEMTB_ASSIGN_OR_RETURN(dx_sum, mem.Floats(B * n_s * d));
  GEMTB_RETURN_IF_ERROR(Copy2D(da, hw, dx_sum, int64_t{n_s} * d, B, int64_t{n_s} * d, stream));
  std::vector<float*> ds_sum(J), ds(J);
  for (int j = 0; j < J; ++j) {
    GEMTB_ASSIGN_OR_RETURN(ds_sum[j], mem.Floats(B * n_sum * d));
    GEMTB_RETURN_IF_ERROR(Copy2D(da + int64_t{n_s + j * n_sum} * d, hw, ds_sum[j], int64_t{n_sum} * d, B,
                                 int64_t{n_sum} * d, stream));
    GEMTB_ASSIGN_OR_RETURN(ds[j], mem.Floats(m.rows[j] * d, true));
  }
  float* dx;
  GEMTB_ASSIGN_OR_RETURN(dx, mem.Floats(B * xs, true));
  // A region's backward, enqueued, then its temporaries freed (its outputs are allocated outside).
  auto scoped = [&](auto&& enqueue) -> absl::Status {
    const size_t from = mem.Mark();
    GEMTB_RETURN_IF_ERROR(enqueue());
    return mem.Free(from, mem.Mark());
  };
  GEMTB_RETURN_IF_ERROR(region("F.cross", true));
  GEMTB_RETURN_IF_ERROR(scoped(
      [&] { return m.CrossBwd(m.final_cross, final_tape, dx_sum, ds_sum, ds, dx, m.layers.empty() ? &out : nullptr); }));
  for (size_t l = m.layers.size(); l-- > 0;) {
    const LayerTape& t = tapes[l];
    GEMTB_ASSIGN_OR_RETURN(dx_sum, mem.Floats(B * n_s * d, true));
    for (int j = J; j-- > 0;) {
      GEMTB_RETURN_IF_ERROR(layer_region(l, absl::StrCat("seq", j), true));
      GEMTB_RETURN_IF_ERROR(
          scoped([&] { return m.SeqBwd(m.layers[l].seq[j], static_cast<int>(l), j, t.seq[j], ds[j], dx_sum); }));
    }
    float* dx_in;
    GEMTB_ASSIGN_OR_RETURN(dx_in, mem.Floats(B * xs));
    GEMTB_RETURN_IF_ERROR(layer_region(l, "wukong", true));
    GEMTB_RETURN_IF_ERROR(scoped([&] { return m.WukongBwd(m.layers[l].wukong, t.wukong, dx, dx_in, ds_sum); }));
    dx = dx_in;
    GEMTB_RETURN_IF_ERROR(layer_region(l, "cross", true));
    GEMTB_RETURN_IF_ERROR(
        scoped([&] { return m.CrossBwd(m.layers[l].cross, t.cross, dx_sum, ds_sum, ds, dx, l == 0 ? &out : nullptr); }));
    // Layer l's forward arrays: read by nothing after its backward.
    GEMTB_RETURN_IF_ERROR(mem.Free(tape_at[l], tape_at[l + 1]));
  }
  float *dz0, *ddense;
  GEMTB_ASSIGN_OR_RETURN(dz0, mem.Floats(B * z0s, true));
  GEMTB_ASSIGN_OR_RETURN(ddense, mem.Floats(B * g.n_d * d));
  GEMTB_RETURN_IF_ERROR(region("E.dense", true));
  GEMTB_RETURN_IF_ERROR(m.MixBwd(m.lce_in, z0, z0s, dx, xs, dz0, z0s));
  GEMTB_RETURN_IF_ERROR(Copy2D(dz0, z0s, out.pooled_grad, int64_t{F} * d, B, int64_t{F} * d, stream));
  GEMTB_RETURN_IF_ERROR(Copy2D(dz0 + int64_t{F} * d, z0s, ddense, int64_t{g.n_d} * d, B, int64_t{g.n_d} * d, stream));
  GEMTB_RETURN_IF_ERROR(m.LinearBwd(m.dense_proj, B, in.dense, g.dense_m, ddense, int64_t{g.n_d} * d, nullptr, 0, false));
  return timer ? timer->End() : absl::OkStatus();
}

}  // namespace gemtb::gpu::train
