#include "gpu/numerics/numerics_device.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "model/numerics/float_formats.h"
#include "model/numerics/fp4_fp6.h"
#include "model/numerics/fp8.h"
#include "model/numerics/philox.h"
#include "model/numerics/stochastic_rounding.h"

namespace gemtb::gpu {
namespace {

__global__ void EncodeKernel(const float* x, int64_t n, uint64_t seed, uint64_t stream, uint16_t* bf16,
                             uint16_t* fp16, uint16_t* bf16_sr, uint8_t* e4m3, uint8_t* e5m2,
                             uint8_t* e2m3, uint8_t* e3m2, uint8_t* e2m1, uint32_t* philox) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  bf16[i] = numerics::FloatToBf16BitsRne(v);
  fp16[i] = numerics::FloatToFp16BitsRne(v);
  const uint32_t word = numerics::PhiloxWord(seed, stream, static_cast<uint64_t>(i));
  philox[i] = word;
  bf16_sr[i] = numerics::FloatToBf16BitsSr(v, static_cast<uint16_t>(word & 0xFFFFu));
  e4m3[i] = numerics::FloatToE4m3Rne(v);
  e5m2[i] = numerics::FloatToE5m2Rne(v);
  e2m3[i] = numerics::FloatToE2m3Rne(v);
  e3m2[i] = numerics::FloatToE3m2Rne(v);
  e2m1[i] = numerics::FloatToE2m1Rne(v);
}

absl::Status Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  ~DeviceBuffer() { cudaFree(ptr); }
  absl::Status Allocate(size_t n) { return Check(cudaMalloc(&ptr, n * sizeof(T) + 1), "cudaMalloc"); }
};

}  // namespace

bool HasSm90Device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major == 9 && prop.minor == 0;
}

absl::StatusOr<DeviceCodes> EncodeOnDevice(absl::Span<const float> x, uint64_t seed, uint64_t stream) {
  const size_t n = x.size();
  DeviceBuffer<float> dx;
  DeviceBuffer<uint16_t> dbf, dfp, dsr;
  DeviceBuffer<uint8_t> d43, d52, d23, d32, d21;
  DeviceBuffer<uint32_t> dph;
  for (absl::Status s : {dx.Allocate(n), dbf.Allocate(n), dfp.Allocate(n), dsr.Allocate(n),
                         d43.Allocate(n), d52.Allocate(n), d23.Allocate(n), d32.Allocate(n), d21.Allocate(n),
                         dph.Allocate(n)}) {
    if (!s.ok()) return s;
  }
  if (absl::Status s = Check(cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy in");
      !s.ok()) {
    return s;
  }
  const int threads = 256;
  const int64_t blocks = (static_cast<int64_t>(n) + threads - 1) / threads;
  if (n > 0) {
    EncodeKernel<<<static_cast<unsigned>(blocks), threads>>>(dx.ptr, static_cast<int64_t>(n), seed, stream,
                                                             dbf.ptr, dfp.ptr, dsr.ptr, d43.ptr, d52.ptr, d23.ptr,
                                                             d32.ptr, d21.ptr, dph.ptr);
  }
  if (absl::Status s = Check(cudaDeviceSynchronize(), "EncodeKernel"); !s.ok()) return s;
  DeviceCodes out;
  out.bf16.resize(n);
  out.fp16.resize(n);
  out.bf16_sr.resize(n);
  out.e4m3.resize(n);
  out.e5m2.resize(n);
  out.e2m3.resize(n);
  out.e3m2.resize(n);
  out.e2m1.resize(n);
  out.philox.resize(n);
  for (absl::Status s :
       {Check(cudaMemcpy(out.bf16.data(), dbf.ptr, n * 2, cudaMemcpyDeviceToHost), "copy bf16"),
        Check(cudaMemcpy(out.fp16.data(), dfp.ptr, n * 2, cudaMemcpyDeviceToHost), "copy fp16"),
        Check(cudaMemcpy(out.bf16_sr.data(), dsr.ptr, n * 2, cudaMemcpyDeviceToHost), "copy bf16 sr"),
        Check(cudaMemcpy(out.e4m3.data(), d43.ptr, n, cudaMemcpyDeviceToHost), "copy e4m3"),
        Check(cudaMemcpy(out.e5m2.data(), d52.ptr, n, cudaMemcpyDeviceToHost), "copy e5m2"),
        Check(cudaMemcpy(out.e2m3.data(), d23.ptr, n, cudaMemcpyDeviceToHost), "copy e2m3"),
        Check(cudaMemcpy(out.e3m2.data(), d32.ptr, n, cudaMemcpyDeviceToHost), "copy e3m2"),
        Check(cudaMemcpy(out.e2m1.data(), d21.ptr, n, cudaMemcpyDeviceToHost), "copy e2m1"),
        Check(cudaMemcpy(out.philox.data(), dph.ptr, n * 4, cudaMemcpyDeviceToHost), "copy philox")}) {
    if (!s.ok()) return s;
  }
  return out;
}

}  // namespace gemtb::gpu
