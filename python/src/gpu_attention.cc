// gemtb._core.gpu_attention_*: gpu/'s attention kernels on tensors that already live on the device
// (PyTorch, CuPy, JAX: anything with __dlpack__), zero copy. Built only with CUDA (python/
// CMakeLists.txt); the package's gemtb.gpu wraps it (python/gemtb/gpu.py).
//
// Each call validates its arguments, builds a gpu::DeviceCall (device_call.h: the shape checks,
// the kernel choice and the tile lists, which it builds on the host from the offsets, which is
// why the offsets and kv_index are host arrays) and launches into output tensors the caller
// allocated. The kernels run on the CUDA legacy default stream with no synchronisation at the
// end: gemtb.gpu orders that stream against the caller's current stream.
//
// Errors name the argument: a wrong dtype is TypeError, a wrong device, layout or shape
// ValueError (the library's InvalidArgument/FailedPrecondition), a CUDA failure RuntimeError.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/attention/api.h"
#include "gpu/attention/device_call.h"
#include "reference/io/attention_case.h"
#include "python/src/arrays.h"

namespace gemtb::python {
namespace {

using AnyArray = nb::ndarray<nb::ro>;
using DLDtype = nb::dlpack::dtype;

constexpr DLDtype kBf16{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
constexpr DLDtype kFp16{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
constexpr DLDtype kFp32{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 32, 1};
constexpr DLDtype kI64{static_cast<uint8_t>(nb::dlpack::dtype_code::Int), 64, 1};

// As DLPack names it ("bfloat16", "float32", "int64", ...); other codes by number.
std::string DTypeText(DLDtype t) {
  using Code = nb::dlpack::dtype_code;
  const std::pair<Code, const char*> names[] = {{Code::Int, "int"},       {Code::UInt, "uint"},
                                                {Code::Float, "float"},   {Code::Bfloat, "bfloat"},
                                                {Code::Complex, "complex"}, {Code::Bool, "bool"}};
  std::string code = absl::StrCat("code", t.code, "_");
  for (const auto& [c, name] : names) {
    if (static_cast<uint8_t>(c) == t.code) code = name;
  }
  return absl::StrCat(code, t.bits, t.lanes == 1 ? "" : absl::StrCat("x", t.lanes));
}

std::vector<int64_t> ShapeOf(const AnyArray& a) {
  std::vector<int64_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = static_cast<int64_t>(a.shape(i));
  return shape;
}

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ","), "]"); }

[[noreturn]] void BadValue(const std::string& message) { throw nb::value_error(message.c_str()); }
[[noreturn]] void BadType(const std::string& message) { throw nb::type_error(message.c_str()); }

// Row-major and dense (strides in elements; a dimension of extent 1 may have any stride).
bool RowMajor(const AnyArray& a) {
  // An empty array has no element to address: any strides will do (frameworks give such arrays
  // strides of their own choosing, e.g. through DLPack).
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (a.shape(i) == 0) return true;
  }
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

// `name` must have `dtype`, sit on `device_type` and be row-major.
void CheckArray(const char* name, const AnyArray& a, DLDtype dtype, int device_type) {
  if (a.dtype() != dtype) BadType(absl::StrCat(name, ": dtype ", DTypeText(a.dtype()), ", want ", DTypeText(dtype)));
  if (a.device_type() != device_type) {
    BadValue(absl::StrCat(name, ": on ", device_type == nb::device::cuda::value ? "the host" : "a device",
                          ", want ", device_type == nb::device::cuda::value ? "a CUDA device" : "the host (CPU)"));
  }
  if (!RowMajor(a)) BadValue(absl::StrCat(name, ": not contiguous (row-major); pass a contiguous copy"));
}

void CheckShape(const char* name, const AnyArray& a, const std::vector<int64_t>& want) {
  if (ShapeOf(a) != want) BadValue(absl::StrCat(name, ": shape ", ShapeText(ShapeOf(a)), ", want ", ShapeText(want)));
}

// The host view of an int64 vector argument (offsets, kv_index).
gpu::HostTensor<int64_t> HostInts(const char* name, const AnyArray& a) {
  CheckArray(name, a, kI64, nb::device::cpu::value);
  if (a.ndim() != 1) BadValue(absl::StrCat(name, ": rank ", a.ndim(), ", want a vector"));
  const auto* data = static_cast<const int64_t*>(a.data());
  return {absl::MakeConstSpan(data, a.shape(0)), {static_cast<int64_t>(a.shape(0))}};
}

// The attention options travel as a case spec's option fields (io::AttentionOptionsOf parses
// them as it does for `gemtb gpu attention`), plus what only the GPU call has.
struct Options {
  io::AttentionCaseSpec spec;
  int64_t max_lq, max_lk;
  bool tanh_approx;
};

// gemtb.gpu passes every option by name in one dict; a missing or mistyped one names its key.
template <typename T>
T Option(const nb::dict& options, const char* key) {
  if (!options.contains(key)) BadValue(absl::StrCat("options: no \"", key, "\""));
  T value;
  if (!nb::try_cast(options[key], value)) {
    BadType(absl::StrCat(key, ": ", nb::repr(options[key]).c_str(), " has the wrong type"));
  }
  return value;
}

Options ParseOptions(const nb::dict& d) {
  Options o;
  o.spec.act = Option<std::string>(d, "act");
  o.spec.mask = Option<std::string>(d, "mask");
  o.spec.align = Option<std::string>(d, "align");
  o.spec.pre_scale = Option<std::optional<double>>(d, "pre_scale");
  o.spec.post_scale = Option<std::optional<double>>(d, "post_scale");
  o.spec.window_left = Option<int64_t>(d, "window_left");
  o.spec.window_right = Option<int64_t>(d, "window_right");
  o.spec.block = Option<int64_t>(d, "block");
  o.spec.broadcast_q = Option<bool>(d, "broadcast_q");
  o.max_lq = Option<int64_t>(d, "max_lq");
  o.max_lk = Option<int64_t>(d, "max_lk");
  o.tanh_approx = Option<bool>(d, "tanh_approx");
  return o;
}

// The call's arguments; q, k and v carry shapes only (DeviceCall never reads host values).
struct Call {
  gpu::AttentionArgs args;
  int device = 0;
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
};

// Checks q, k, v (one 16-bit dtype, one CUDA device, the current one) and the host arrays.
Call MakeCall(const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& q_offsets,
              const AnyArray& kv_offsets, const std::optional<AnyArray>& kv_index, const Options& o) {
  Call c;
  const DLDtype dtype = q.dtype();
  if (dtype != kBf16 && dtype != kFp16) BadType(absl::StrCat("q: dtype ", DTypeText(dtype), ", want bfloat16 or float16"));
  const std::pair<const char*, const AnyArray*> inputs[] = {{"q", &q}, {"k", &k}, {"v", &v}};
  for (const auto& [name, a] : inputs) {
    CheckArray(name, *a, dtype, nb::device::cuda::value);
    if (a->ndim() != 3) BadValue(absl::StrCat(name, ": rank ", a->ndim(), ", want 3 ([T, heads, D])"));
    if (a->device_id() != q.device_id()) {
      BadValue(absl::StrCat(name, ": on CUDA device ", a->device_id(), ", q on device ", q.device_id()));
    }
  }
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed: no usable CUDA device");
  if (q.device_id() != current) {
    BadValue(absl::StrCat("q: on CUDA device ", q.device_id(), " but the current device is ", current,
                          "; make it current first (torch.cuda.device)"));
  }
  c.device = current;
  c.args.dtype = dtype == kBf16 ? ElementType::kBFloat16 : ElementType::kFloat16;
  c.args.q = {{}, ShapeOf(q)};
  c.args.k = {{}, ShapeOf(k)};
  c.args.v = {{}, ShapeOf(v)};
  c.args.q_offsets = HostInts("q_offsets", q_offsets);
  c.args.kv_offsets = HostInts("kv_offsets", kv_offsets);
  if (kv_index) c.args.kv_index = HostInts("kv_index", *kv_index);
  c.args.max_lq = o.max_lq;
  c.args.max_lk = o.max_lk;
  c.args.options = Value(io::AttentionOptionsOf(o.spec, ""));
  c.args.options.tanh_approx = o.tanh_approx;
  c.q = static_cast<const uint16_t*>(q.data());
  c.k = static_cast<const uint16_t*>(k.data());
  c.v = static_cast<const uint16_t*>(v.data());
  return c;
}

// An output or cotangent on q's device, in `dtype`, shaped `shape`.
void CheckDeviceTensor(const char* name, const AnyArray& a, DLDtype dtype, const std::vector<int64_t>& shape,
                       int device) {
  CheckArray(name, a, dtype, nb::device::cuda::value);
  if (a.device_id() != device) BadValue(absl::StrCat(name, ": on CUDA device ", a.device_id(), ", q on device ", device));
  CheckShape(name, a, shape);
}

std::unique_ptr<gpu::DeviceCall> Create(const gpu::AttentionArgs& args, bool with_backward) {
  absl::StatusOr<std::unique_ptr<gpu::DeviceCall>> call;
  {
    nb::gil_scoped_release release;
    call = gpu::DeviceCall::Create(args, with_backward);
  }
  return Value(std::move(call));
}

void Forward(const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& q_offsets,
             const AnyArray& kv_offsets, const std::optional<AnyArray>& kv_index, const Options& o,
             nb::ndarray<> out, std::optional<nb::ndarray<>> lse) {
  const Call c = MakeCall(q, k, v, q_offsets, kv_offsets, kv_index, o);
  const std::unique_ptr<gpu::DeviceCall> call = Create(c.args, /*with_backward=*/false);
  const std::vector<int64_t> o_shape = {call->out_rows(), call->heads(), c.args.v.shape[2]};
  CheckDeviceTensor("out", AnyArray(out), q.dtype(), o_shape, c.device);
  float* lse_ptr = nullptr;
  if (call->softmax()) {
    if (!lse) BadValue("lse: the softmax forward writes LSE [H, TO]; pass a float32 tensor");
    CheckDeviceTensor("lse", AnyArray(*lse), kFp32, {call->heads(), call->out_rows()}, c.device);
    lse_ptr = static_cast<float*>(lse->data());
  }
  absl::Status status;
  {
    nb::gil_scoped_release release;
    status = call->Forward({c.q, c.k, c.v}, static_cast<uint16_t*>(out.data()), lse_ptr);
  }
  Check(status);
}

void Backward(const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& q_offsets,
              const AnyArray& kv_offsets, const std::optional<AnyArray>& kv_index, const Options& o,
              const AnyArray& out, const std::optional<AnyArray>& lse, const AnyArray& d_out, nb::ndarray<> dq,
              nb::ndarray<> dk, nb::ndarray<> dv, std::optional<nb::ndarray<>> workspace) {
  const Call c = MakeCall(q, k, v, q_offsets, kv_offsets, kv_index, o);
  const std::unique_ptr<gpu::DeviceCall> call = Create(c.args, /*with_backward=*/true);
  const std::vector<int64_t> o_shape = {call->out_rows(), call->heads(), c.args.v.shape[2]};
  const std::vector<int64_t> rows_shape = {call->heads(), call->out_rows()};
  CheckDeviceTensor("out", out, q.dtype(), o_shape, c.device);
  CheckDeviceTensor("d_out", d_out, q.dtype(), o_shape, c.device);
  CheckDeviceTensor("dq", AnyArray(dq), q.dtype(), c.args.q.shape, c.device);
  CheckDeviceTensor("dk", AnyArray(dk), q.dtype(), c.args.k.shape, c.device);
  CheckDeviceTensor("dv", AnyArray(dv), q.dtype(), c.args.v.shape, c.device);
  const float* lse_ptr = nullptr;
  float* rows_ptr = nullptr;
  if (call->softmax()) {
    if (!lse) BadValue("lse: the softmax backward reads the forward's LSE [H, TO]");
    if (!workspace) BadValue("workspace: the softmax backward needs a float32 [H, TO] scratch tensor");
    CheckDeviceTensor("lse", *lse, kFp32, rows_shape, c.device);
    CheckDeviceTensor("workspace", AnyArray(*workspace), kFp32, rows_shape, c.device);
    lse_ptr = static_cast<const float*>(lse->data());
    rows_ptr = static_cast<float*>(workspace->data());
  }
  const gpu::DeviceGradients grads{static_cast<uint16_t*>(dq.data()), static_cast<uint16_t*>(dk.data()),
                                   static_cast<uint16_t*>(dv.data()), rows_ptr};
  absl::Status status;
  {
    nb::gil_scoped_release release;
    status = call->Backward({c.q, c.k, c.v}, static_cast<const uint16_t*>(out.data()), lse_ptr,
                            static_cast<const uint16_t*>(d_out.data()), grads);
  }
  Check(status);
}

}  // namespace

void BindGpuAttention(nb::module_& m) {
  m.def("gpu_attention_available", [] {
    const absl::Status status = gpu::DeviceAvailable();
    return nb::make_tuple(status.ok(), std::string(status.message()));
  });
  m.def(
      "gpu_attention_forward",
      [](const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& q_offsets,
         const AnyArray& kv_offsets, std::optional<AnyArray> kv_index, const nb::dict& options, nb::ndarray<> out,
         std::optional<nb::ndarray<>> lse) {
        Forward(q, k, v, q_offsets, kv_offsets, kv_index, ParseOptions(options), out, lse);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("q_offsets"), nb::arg("kv_offsets"),
      nb::arg("kv_index").none(), nb::arg("options"), nb::arg("out"), nb::arg("lse").none());
  m.def(
      "gpu_attention_backward",
      [](const AnyArray& q, const AnyArray& k, const AnyArray& v, const AnyArray& q_offsets,
         const AnyArray& kv_offsets, std::optional<AnyArray> kv_index, const nb::dict& options, const AnyArray& out,
         std::optional<AnyArray> lse, const AnyArray& d_out, nb::ndarray<> dq, nb::ndarray<> dk, nb::ndarray<> dv,
         std::optional<nb::ndarray<>> workspace) {
        Backward(q, k, v, q_offsets, kv_offsets, kv_index, ParseOptions(options), out, lse, d_out, dq, dk, dv,
                 workspace);
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("q_offsets"), nb::arg("kv_offsets"),
      nb::arg("kv_index").none(), nb::arg("options"), nb::arg("out"), nb::arg("lse").none(), nb::arg("d_out"),
      nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("workspace").none());
}

}  // namespace gemtb::python
