#include "gpu/train/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <set>

#include <utility>

#include "absl/strings/str_cat.h"
#include "gpu/train/lt_descriptors.h"

namespace gemtb::gpu::train {

struct Fp32Matmul::Handles {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  // The heuristic's choice per linear product's description (shape with the row count at
  // lt_descriptors.h's HeuristicRows, strides, bias and residual, the four alignments): asked once per
  // description, as a step repeats each shape several times (q, k and v of one block share theirs).
  std::map<std::array<int64_t, 11>, cublasLtMatmulAlgo_t> linear_algos;
  std::set<std::array<int64_t, 11>> linear_unsupported;  // setups the heuristic had no algorithm for

  ~Handles() {
    if (handle) cublasDestroy(handle);
    if (lt) cublasLtDestroy(lt);
    if (workspace) cudaFree(workspace);
  }
};

namespace {

// cuBLAS's recommended workspace on Hopper; it holds split-K partial sums among others.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

absl::Status CublasStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(s), " (", cublasGetStatusString(s), ")"));
}

#define GEMTB_CUBLAS(expr, what)                            \
  do {                                                      \
    const absl::Status status_ = CublasStatus(expr, what);  \
    if (!status_.ok()) return status_;                      \
  } while (0)

absl::Status Invalid(auto... parts) { return absl::InvalidArgumentError(absl::StrCat("gemm ", parts...)); }

}  // namespace

absl::Status ValidateLinearF32(const LinearF32& s) {
  constexpr int64_t kMax = int64_t{1} << 31;
  for (const auto& [name, value] : {std::pair{"n", s.n}, {"in", s.in}, {"out", s.out}}) {
    if (value < 1 || value >= kMax) return Invalid("linear ", name, "=", value, ": want 1 .. 2^31-1");
  }
  if (s.ldx < s.in || s.ldx >= kMax) return Invalid("linear ldx=", s.ldx, ": want ", s.in, " .. 2^31-1 (x rows of in)");
  if (s.ldy < s.out || s.ldy >= kMax) {
    return Invalid("linear ldy=", s.ldy, ": want ", s.out, " .. 2^31-1 (y rows of out)");
  }
  return absl::OkStatus();
}

absl::Status ValidateGemmF32(const GemmF32& g) {
  constexpr int64_t kMax = int64_t{1} << 31;
  for (const auto& [name, value] : {std::pair{"m", g.m}, {"n", g.n}, {"k", g.k}, {"batch", g.batch}}) {
    if (value < 1 || value >= kMax) return Invalid(name, "=", value, ": want 1 .. 2^31-1");
  }
  struct Stored {
    const char* ld_name;
    int64_t ld;
    const char* matrix;
    int64_t rows, width;
  };
  const Stored stored[] = {
      {"lda", g.lda, g.trans_a ? "A (trans_a) is stored [k, m]" : "A is stored [m, k]", g.trans_a ? g.k : g.m,
       g.trans_a ? g.m : g.k},
      {"ldb", g.ldb, g.trans_b ? "B (trans_b) is stored [n, k]" : "B is stored [k, n]", g.trans_b ? g.n : g.k,
       g.trans_b ? g.k : g.n},
      {"ldc", g.ldc, "C is [m, n]", g.m, g.n},
  };
  for (const Stored& s : stored) {
    if (s.ld < s.width || s.ld >= kMax) {
      return Invalid(s.ld_name, "=", s.ld, ": want ", s.width, " .. 2^31-1 (", s.matrix, " = [", s.rows, ", ",
                     s.width, "], rows of ", s.width, ")");
    }
  }
  for (const auto& [name, value] : {std::pair{"stride_a", g.stride_a}, {"stride_b", g.stride_b},
                                    {"stride_c", g.stride_c}}) {
    if (value < 0) return Invalid(name, "=", value, ": want >= 0");
  }
  // Overlapping C entries would be written by concurrent kernels in no fixed order. Two layouts are
  // disjoint: one block per entry, or entries side by side within C's rows ([m, batch, n] and the
  // like). The second is checked by division, so that no product can overflow.
  if (g.batch > 1) {
    const int64_t block = (g.m - 1) * g.ldc + g.n;
    const bool blocks = g.stride_c >= block;
    const bool interleaved = g.stride_c >= g.n && (g.batch - 1) <= (g.ldc - g.n) / g.stride_c;
    if (!blocks && !interleaved) {
      return Invalid("stride_c=", g.stride_c, ": the ", g.batch, " C matrices overlap (m=", g.m, ", n=", g.n,
                     ", ldc=", g.ldc, "): want >= (m-1)*ldc+n = ", block, ", or n .. (ldc-n)/(batch-1) = ", g.n,
                     " .. ", (g.ldc - g.n) / (g.batch - 1), " for matrices side by side within C's rows");
    }
  }
  return absl::OkStatus();
}

Fp32Matmul::Fp32Matmul(std::unique_ptr<Handles> h, MatmulPrecision precision)
    : h_(std::move(h)), precision_(precision) {}
Fp32Matmul::~Fp32Matmul() = default;
MatmulPrecision Fp32Matmul::precision() const { return precision_; }

absl::StatusOr<std::unique_ptr<Fp32Matmul>> Fp32Matmul::Create(MatmulPrecision precision) {
  auto h = std::make_unique<Handles>();
  if (const cudaError_t e = cudaMalloc(&h->workspace, kWorkspaceBytes); e != cudaSuccess) {
    h->workspace = nullptr;
    return absl::InternalError(absl::StrCat("cudaMalloc (cuBLAS workspace): ", cudaGetErrorString(e)));
  }
  GEMTB_CUBLAS(cublasCreate(&h->handle), "cublasCreate");
  GEMTB_CUBLAS(cublasLtCreate(&h->lt), "cublasLtCreate");
  // kFp32, pedantic: fp32 products and sums as IEEE fp32 operations, never TF32 or the bf16x9
  // emulation (the compute type in Run says the same; the math mode keeps the handle from allowing
  // them). The fast precisions' compute types ask for the tensor cores themselves.
  GEMTB_CUBLAS(cublasSetMathMode(h->handle, precision == MatmulPrecision::kFp32 ? CUBLAS_PEDANTIC_MATH
                                                                                : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
  // No atomics: results never depend on the order in which blocks finish.
  GEMTB_CUBLAS(cublasSetAtomicsMode(h->handle, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
  GEMTB_CUBLAS(cublasSetPointerMode(h->handle, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  return std::unique_ptr<Fp32Matmul>(new Fp32Matmul(std::move(h), precision));
}

absl::Status Fp32Matmul::Run(const GemmF32& g, const float* a, const float* b, float* c, cudaStream_t stream) {
  if (absl::Status v = ValidateGemmF32(g); !v.ok()) return v;
  for (const auto& [name, ptr] : {std::pair{"a", static_cast<const void*>(a)}, {"b", b}, {"c", c}}) {
    if (ptr == nullptr) return Invalid(name, ": null device pointer");
  }
  GEMTB_CUBLAS(cublasSetStream(h_->handle, stream), "cublasSetStream");
  // cublasSetStream puts the handle back on cuBLAS's shared workspace pool; this object's own keeps
  // the choice of kernels independent of what other streams run.
  GEMTB_CUBLAS(cublasSetWorkspace(h_->handle, h_->workspace, kWorkspaceBytes), "cublasSetWorkspace");
  // Column-major C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m] (gemm.h): B's memory read column-major
  // is B^T when B is stored [k, n] (no transpose needed) and op(B) itself when stored [n, k] (so
  // transposed); likewise A. cuBLAS's leading-dimension rules (>= its stored rows) are then exactly
  // ValidateGemmF32's row widths.
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // beta = 0: cuBLAS does not read C (NaN there does not propagate). CUBLAS_GEMM_DEFAULT: the
  // heuristic's choice, a function of the shape and compute type alone.
  const cublasComputeType_t compute =
      precision_ == MatmulPrecision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
  GEMTB_CUBLAS(cublasGemmStridedBatchedEx_64(h_->handle, op_b, op_a, g.n, g.m, g.k, &g.alpha, b, CUDA_R_32F, g.ldb,
                                             g.stride_b, a, CUDA_R_32F, g.lda, g.stride_a, &g.beta, c, CUDA_R_32F,
                                             g.ldc, g.stride_c, g.batch, compute,
                                             CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
  return absl::OkStatus();
}

absl::Status Fp32Matmul::Linear(const LinearF32& s, const float* x, const float* w, const float* bias,
                                const float* residual, float* y, cudaStream_t stream) {
  if (absl::Status v = ValidateLinearF32(s); !v.ok()) return v;
  for (const auto& [name, ptr] : {std::pair{"x", static_cast<const void*>(x)}, {"w", w}, {"y", y}}) {
    if (ptr == nullptr) return Invalid("linear ", name, ": null device pointer");
  }
  if (bias != nullptr && AlignmentBytes(bias) < 16) {
    return Invalid("linear bias: not 16-byte aligned (address ", reinterpret_cast<uintptr_t>(bias), ")");
  }
  // Column-major y^T [out, n] = W^T [out, in] x^T [in, n]: W's packed memory is W^T with leading
  // dimension out, x's is x^T with ldx, y's is y^T with ldy; the residual, in y's layout, is C.
  LtDescriptors d;
  // cuBLASLt takes the compute type as the whole choice (it has no math mode): PEDANTIC is IEEE fp32
  // arithmetic (never TF32, never the bf16x9 emulation that the default 32F may pick where it is
  // faster), FAST_TF32 the tensor cores on TF32-rounded operands; as Run's.
  const cublasComputeType_t compute =
      precision_ == MatmulPrecision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
  GEMTB_CUBLAS(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasLtEpilogue_t epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  GEMTB_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "EPILOGUE");
  if (bias != nullptr) {
    const cudaDataType_t bias_type = CUDA_R_32F;
    GEMTB_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)),
                 "BIAS_DATA_TYPE");
    GEMTB_CUBLAS(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                 "BIAS_POINTER");
  }
  GEMTB_CUBLAS(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, s.out, s.in, s.out), "layout W");
  GEMTB_CUBLAS(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, s.in, s.n, s.ldx), "layout x");
  GEMTB_CUBLAS(cublasLtMatrixLayoutCreate(&d.d, CUDA_R_32F, s.out, s.n, s.ldy), "layout y");
  GEMTB_CUBLAS(cublasLtMatmulPreferenceCreate(&d.preference), "cublasLtMatmulPreferenceCreate");
  const size_t workspace = kWorkspaceBytes;
  GEMTB_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace, sizeof(workspace)),
               "MAX_WORKSPACE_BYTES");
  // Split-K only with fp32 partial sums reduced by a separate pass (never atomics: the same bytes
  // every run).
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  GEMTB_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                    &reductions, sizeof(reductions)),
               "REDUCTION_SCHEME_MASK");
  // The heuristic may assume only the alignments the pointers have (offsets into jagged arrays and
  // the flat parameter array are not 256-byte aligned).
  const float* c = residual != nullptr ? residual : y;
  const uint32_t aligns[4] = {AlignmentBytes(w), AlignmentBytes(x), AlignmentBytes(c), AlignmentBytes(y)};
  const int64_t n_key = HeuristicRows(s.n);
  const std::array<int64_t, 11> key = {n_key,      s.in,      s.out,     s.ldx,     s.ldy,    bias != nullptr,
                                       residual != nullptr, aligns[0], aligns[1], aligns[2], aligns[3]};
  if (h_->linear_unsupported.count(key) != 0) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for the linear product n=", s.n,
                                                 " in=", s.in, " out=", s.out));
  }
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    GEMTB_CUBLAS(cublasLtMatmulPreferenceSetAttribute(d.preference, attrs[i], &aligns[i], sizeof(aligns[i])),
                 "MIN_ALIGNMENT");
  }
  auto cached = h_->linear_algos.find(key);
  if (cached == h_->linear_algos.end()) {
    LtDescriptors rounded;  // x and y at the rounded row count
    GEMTB_CUBLAS(cublasLtMatrixLayoutCreate(&rounded.b, CUDA_R_32F, s.in, n_key, s.ldx), "layout x");
    GEMTB_CUBLAS(cublasLtMatrixLayoutCreate(&rounded.d, CUDA_R_32F, s.out, n_key, s.ldy), "layout y");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    GEMTB_CUBLAS(cublasLtMatmulAlgoGetHeuristic(h_->lt, d.op, d.a, rounded.b, rounded.d, rounded.d, d.preference, 1,
                                                &result, &found),
                 "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) {
      if (h_->linear_unsupported.size() >= 4096) h_->linear_unsupported.clear();
      h_->linear_unsupported.insert(key);
      return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for the linear product n=", s.n,
                                                   " in=", s.in, " out=", s.out));
    }
    // Row counts change from batch to batch (jagged sequences): keep the map from growing without end.
    if (h_->linear_algos.size() >= 4096) h_->linear_algos.clear();
    cached = h_->linear_algos.emplace(key, result.algo).first;
  }
  cublasLtMatmulAlgo_t algo = cached->second;
  if (!AlgoRuns(h_->lt, d, algo, kWorkspaceBytes)) {  // not at these rows: the heuristic at these rows
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    GEMTB_CUBLAS(cublasLtMatmulAlgoGetHeuristic(h_->lt, d.op, d.a, d.b, d.d, d.d, d.preference, 1, &result, &found),
                 "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0) {
      return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for the linear product n=", s.n,
                                                   " in=", s.in, " out=", s.out));
    }
    algo = result.algo;
  }
  const float alpha = 1.0f, beta = residual != nullptr ? 1.0f : 0.0f;
  GEMTB_CUBLAS(cublasLtMatmul(h_->lt, d.op, &alpha, w, d.a, x, d.b, &beta, c, d.d, y, d.d, &algo, h_->workspace,
                              kWorkspaceBytes, stream),
               "cublasLtMatmul");
  return absl::OkStatus();
}

}  // namespace gemtb::gpu::train
