#include "gpu/train/linear.h"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/train/lt_descriptors.h"
#include "gpu/train/model_kernels.h"
#include "model/common/status_macros.h"

namespace gemtb::gpu::train {
namespace {

// A product's description as the heuristic sees it, its row count at HeuristicRows: transposes, m, n,
// k, leading dimensions, output type, epilogue, bias, C, beta, the four alignments.
using AlgoKey = std::array<int64_t, 17>;
using AlgoCache = std::map<AlgoKey, cublasLtMatmulAlgo_t>;

// The handle, workspace and heuristic choices a product runs with.
struct Context {
  cublasLtHandle_t lt;
  void* workspace;
  size_t workspace_bytes;
  AlgoCache* algos;
};

}  // namespace

struct LinearMatmuls::Handles {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  AlgoCache algos;

  Context context() { return {lt, workspace, workspace_bytes, &algos}; }

  ~Handles() {
    if (workspace) cudaFree(workspace);
    if (lt) cublasLtDestroy(lt);
  }
};

namespace {

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasLtGetStatusName(s), " (", cublasLtGetStatusString(s), ")"));
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

#define GEMTB_LT(expr, what)                          \
  do {                                                \
    const absl::Status status_ = LtStatus(expr, what); \
    if (!status_.ok()) return status_;                \
  } while (0)

// One column-major product D = op(A) op(B) + beta D, D [m, n], with an epilogue.
struct Gemm {
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  const void* c = nullptr;  // the beta term's matrix (D's layout); D itself when null
  cudaDataType_t d_type = CUDA_R_16BF;  // A and B are bf16
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // the bias added (BIAS epilogues); D's type
  bool rows_in_n = false, rows_in_k = false;  // which dimension is the layer's row count
};


}  // namespace

absl::Status ValidateLinearShape(const LinearShape& s) {
  constexpr int64_t kMax = int64_t{1} << 31;
  for (const auto& [name, value] : {std::pair{"n", s.n}, {"in", s.in}, {"out", s.out}}) {
    if (value < 1 || value >= kMax) {
      return absl::InvalidArgumentError(absl::StrCat("linear shape ", name, "=", value, ": want 1 .. 2^31-1"));
    }
  }
  for (const auto& [name, value] : {std::pair{"in", s.in}, {"out", s.out}}) {
    if (value % 8 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("linear shape ", name, "=", value,
                                                     ": want a multiple of 8 (16-byte bf16 rows)"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The stored layouts of A, B and D for the product's m, n, k (op(A) is [m, k], so A is [k, m] when
// transposed).
absl::Status CreateLayouts(const Gemm& g, int64_t n, int64_t k, LtDescriptors& desc) {
  GEMTB_LT(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_16BF, g.transpose_a ? k : g.m, g.transpose_a ? g.m : k, g.lda),
           "layout A");
  GEMTB_LT(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_16BF, g.transpose_b ? n : k, g.transpose_b ? k : n, g.ldb),
           "layout B");
  GEMTB_LT(cublasLtMatrixLayoutCreate(&desc.d, g.d_type, g.m, n, g.ldd), "layout D");
  return absl::OkStatus();
}

// The heuristic's first algorithm for the product at rows `n` and `k`; NotFound when it has none.
absl::StatusOr<cublasLtMatmulAlgo_t> HeuristicAlgo(const Context& h, const Gemm& g, cublasLtMatmulDesc_t op,
                                                   cublasLtMatmulPreference_t preference, int64_t n, int64_t k) {
  LtDescriptors layouts;
  if (absl::Status s = CreateLayouts(g, n, k, layouts); !s.ok()) return s;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  GEMTB_LT(cublasLtMatmulAlgoGetHeuristic(h.lt, op, layouts.a, layouts.b, layouts.d, layouts.d, preference, 1, &result,
                                          &found),
           "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) return absl::NotFoundError(absl::StrCat("cuBLASLt has no algorithm for m=", g.m, " n=", n, " k=", k));
  return result.algo;
}

absl::Status RunGemm(const Context& h, const Gemm& g, cudaStream_t stream) {
  LtDescriptors desc;
  GEMTB_LT(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  GEMTB_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  GEMTB_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  GEMTB_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof(g.epilogue)),
           "EPILOGUE");
  if (g.bias) {
    GEMTB_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)),
             "BIAS_POINTER");
  }
  GEMTB_RETURN_IF_ERROR(CreateLayouts(g, g.n, g.k, desc));
  GEMTB_LT(cublasLtMatmulPreferenceCreate(&desc.preference), "cublasLtMatmulPreferenceCreate");
  GEMTB_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &h.workspace_bytes, sizeof(h.workspace_bytes)),
           "MAX_WORKSPACE_BYTES");
  // Split-K only with its partial sums kept in fp32 and reduced by a separate pass: reducing in the
  // output type would round bf16 partials (more than one rounding per element), and reducing in place
  // orders the partial sums by atomics (not the same bytes every run).
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  GEMTB_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &reductions, sizeof(reductions)),
           "REDUCTION_SCHEME_MASK");
  // The heuristic may assume only the alignments the pointers have (a gradient's place in the flat
  // parameter array is 16-byte aligned, not 256).
  const void* c = g.c ? g.c : g.d;
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligned[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.a}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.d}};
  for (const auto& [attr, ptr] : aligned) {
    const uint32_t align = AlignmentBytes(ptr);
    GEMTB_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, attr, &align, sizeof(align)), "MIN_ALIGNMENT");
  }
  // The heuristic's algorithm at the rounded rows (lt_descriptors.h's HeuristicRows), once per
  // description, if it runs these rows; else the heuristic at these rows.
  const int64_t n_key = g.rows_in_n ? HeuristicRows(g.n) : g.n;
  const int64_t k_key = g.rows_in_k ? HeuristicRows(g.k) : g.k;
  const AlgoKey key = {g.transpose_a, g.transpose_b, g.m, n_key, k_key, g.lda, g.ldb, g.ldd, g.d_type, g.epilogue,
                       g.bias != nullptr, g.c != nullptr, g.beta != 0.0f, AlignmentBytes(g.a), AlignmentBytes(g.b),
                       AlignmentBytes(c), AlignmentBytes(g.d)};
  auto cached = h.algos->find(key);
  if (cached == h.algos->end()) {
    absl::StatusOr<cublasLtMatmulAlgo_t> chosen = HeuristicAlgo(h, g, desc.op, desc.preference, n_key, k_key);
    if (!chosen.ok() && !absl::IsNotFound(chosen.status())) return chosen.status();
    if (chosen.ok()) {
      if (h.algos->size() >= 4096) h.algos->clear();
      cached = h.algos->emplace(key, *chosen).first;
    }
  }
  cublasLtMatmulAlgo_t algo{};
  if (cached != h.algos->end() && AlgoRuns(h.lt, desc, cached->second, h.workspace_bytes)) {
    algo = cached->second;
  } else {
    absl::StatusOr<cublasLtMatmulAlgo_t> chosen = HeuristicAlgo(h, g, desc.op, desc.preference, g.n, g.k);
    if (!chosen.ok()) return absl::InternalError(chosen.status().message());
    algo = *chosen;
  }
  const float alpha = 1.0f;
  GEMTB_LT(cublasLtMatmul(h.lt, desc.op, &alpha, g.a, desc.a, g.b, desc.b, &g.beta, g.c ? g.c : g.d, desc.d, g.d, desc.d,
                          &algo, h.workspace, h.workspace_bytes, stream),
           "cublasLtMatmul");
  return absl::OkStatus();
}

}  // namespace

LinearMatmuls::LinearMatmuls(std::unique_ptr<Handles> h) : h_(std::move(h)) {}
LinearMatmuls::~LinearMatmuls() = default;

absl::StatusOr<std::unique_ptr<LinearMatmuls>> LinearMatmuls::Create(size_t workspace_bytes) {
  auto h = std::make_unique<Handles>();
  GEMTB_LT(cublasLtCreate(&h->lt), "cublasLtCreate");
  if (workspace_bytes > 0) {
    const absl::Status s = CudaStatus(cudaMalloc(&h->workspace, workspace_bytes), "cudaMalloc (cuBLASLt workspace)");
    if (!s.ok()) return s;
  }
  h->workspace_bytes = workspace_bytes;
  return std::unique_ptr<LinearMatmuls>(new LinearMatmuls(std::move(h)));
}

namespace {

// y^T [out, n] = W^T [out, in] x^T [in, n] (+ bias per row of y^T) (+ residual^T): W's memory is W^T
// column-major, x's is x^T. y of type d_type (bias of the same type), residual in y's layout.
Gemm ForwardGemm(const LinearShape& s, const void* x, const void* w, const void* bias, const void* residual, void* y,
                 cudaDataType_t d_type) {
  Gemm g;
  g.m = s.out;
  g.n = s.n;
  g.rows_in_n = true;
  g.k = s.in;
  g.a = w;
  g.lda = s.out;
  g.b = x;
  g.ldb = s.in;
  g.d = y;
  g.ldd = s.out;
  g.d_type = d_type;
  if (bias) {
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;  // bias [out], one per row of y^T
    g.bias = bias;
  }
  if (residual) {  // added to the fp32 product before y is rounded
    g.c = residual;
    g.beta = 1.0f;
  }
  return g;
}

// dx^T [in, n] = W [in, out] dy^T [out, n] (+ add^T): W is the transpose of W's memory read
// column-major. dx of type d_type, add in dx's layout.
Gemm BackwardInputGemm(const LinearShape& s, const void* dy, const void* w, const void* add, void* dx,
                       cudaDataType_t d_type) {
  Gemm g;
  g.transpose_a = true;
  g.m = s.in;
  g.n = s.n;
  g.rows_in_n = true;
  g.k = s.out;
  g.a = w;
  g.lda = s.out;
  g.b = dy;
  g.ldb = s.out;
  g.d = dx;
  g.ldd = s.in;
  g.d_type = d_type;
  if (add) {  // dx = dy W^T + add, added to the fp32 product before dx is rounded
    g.c = add;
    g.beta = 1.0f;
  }
  return g;
}

}  // namespace

absl::Status LinearMatmuls::Forward(const LinearShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                    const __nv_bfloat16* bias, __nv_bfloat16* y, cudaStream_t stream) {
  if (absl::Status v = ValidateLinearShape(s); !v.ok()) return v;
  return RunGemm(h_->context(), ForwardGemm(s, x, w, bias, nullptr, y, CUDA_R_16BF),
                 stream);
}

absl::Status LinearMatmuls::BackwardInput(const LinearShape& s, const __nv_bfloat16* dy, const __nv_bfloat16* w,
                                          const __nv_bfloat16* add, __nv_bfloat16* dx, cudaStream_t stream) {
  if (absl::Status v = ValidateLinearShape(s); !v.ok()) return v;
  return RunGemm(h_->context(),
                 BackwardInputGemm(s, dy, w, add, dx, CUDA_R_16BF), stream);
}

absl::Status LinearMatmuls::ForwardToFp32(const LinearShape& s, const __nv_bfloat16* x, const __nv_bfloat16* w,
                                          const float* bias, const float* residual, float* y, cudaStream_t stream) {
  if (absl::Status v = ValidateLinearShape(s); !v.ok()) return v;
  return RunGemm(h_->context(), ForwardGemm(s, x, w, bias, residual, y, CUDA_R_32F),
                 stream);
}

absl::Status LinearMatmuls::BackwardInputToFp32(const LinearShape& s, const __nv_bfloat16* dy, const __nv_bfloat16* w,
                                                const float* add, float* dx, cudaStream_t stream) {
  if (absl::Status v = ValidateLinearShape(s); !v.ok()) return v;
  return RunGemm(h_->context(), BackwardInputGemm(s, dy, w, add, dx, CUDA_R_32F),
                 stream);
}

absl::Status LinearMatmuls::BackwardWeight(const LinearShape& s, const __nv_bfloat16* x, const __nv_bfloat16* dy,
                                           float* dw, float* dbias, cudaStream_t stream) {
  if (absl::Status v = ValidateLinearShape(s); !v.ok()) return v;
  // dW^T [out, in] += dy^T [out, n] x [n, in]: dW's memory is dW^T column-major, x is the transpose
  // of x's memory read column-major.
  Gemm g;
  g.transpose_b = true;
  g.m = s.out;
  g.n = s.in;
  g.k = s.n;
  g.rows_in_k = true;
  g.a = dy;
  g.lda = s.out;
  g.b = x;
  g.ldb = s.in;
  g.d = dw;
  g.ldd = s.out;
  g.d_type = CUDA_R_32F;
  g.beta = 1.0f;
  GEMTB_RETURN_IF_ERROR(RunGemm(h_->context(), g, stream));
  // The bias gradient: dy's column sums (model_kernels.h's fixed tree), one more pass over dy. Not
  // cuBLASLt's BGRADA epilogue: after a split-K product cuBLASLt runs it as a kernel of its own, which
  // on the H200 at batch 1,024 took far longer than this pass; where it fuses BGRADA into the product,
  // this pass is the price (both in tools/bench/NOTES.md).
  if (dbias == nullptr) return absl::OkStatus();
  return ColumnSums(dy, s.n, s.out, s.out, dbias, /*accumulate=*/true, stream);
}

}  // namespace gemtb::gpu::train
