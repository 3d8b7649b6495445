// The few CUDA runtime calls gpu/attention/api.cc makes, on host memory, for the fiber emulation.
// "Device" arrays are host allocations laid out like Electric Fence: each ends where an
// inaccessible page begins (after rounding the size up to 16 bytes), with one more such page in
// front, so that a kernel reading or writing past either end of a buffer crashes instead of reading
// a neighbour. Fresh allocations hold 0xFF bytes (NaN in bf16, fp16 and fp32).
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>

namespace {

struct Mapping {
  void* base;
  size_t length;
};

std::map<void*, Mapping>& Mappings() {
  static auto* m = new std::map<void*, Mapping>();
  return *m;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (size + 15) & ~size_t{15};
  const size_t data_pages = (rounded + page - 1) / page;
  const size_t length = (data_pages + 2) * page;
  void* base = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return cudaErrorMemoryAllocation;
  auto* data_begin = static_cast<unsigned char*>(base) + page;
  if (mprotect(data_begin, data_pages * page, PROT_READ | PROT_WRITE) != 0) return cudaErrorMemoryAllocation;
  unsigned char* p = data_begin + data_pages * page - rounded;
  std::memset(p, 0xFF, rounded);
  *ptr = p;
  Mappings()[p] = {base, length};
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  auto it = Mappings().find(ptr);
  if (it == Mappings().end()) return cudaErrorInvalidValue;
  munmap(it->second.base, it->second.length);
  Mappings().erase(it);
  return cudaSuccess;
}

// DeviceArray's pooled mode (gpu/common/device_buffer.h, off unless a tool asks for it): the same
// guarded allocations, since the emulation runs one stream in order.
cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t) { return cudaMalloc(ptr, size); }
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  std::memcpy(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

// The H200's SM count (api.cc sizes the fused-dQ workspace with it; the emulation never runs that
// kernel).
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  *value = attr == cudaDevAttrMultiProcessorCount ? 132 : 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "CPU emulation of sm_90", sizeof(prop->name) - 1);
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

}  // extern "C"
