// Programmatic dependent launch (sm_90): a kernel launched with LaunchDependent may be scheduled while
// the kernel before it in the stream is still running its last CTAs, so that its launch, the placing
// of its CTAs and their start no longer sit in the gap between the two. Both sides cooperate:
//
// - every kernel launched with LaunchDependent calls AwaitPriorGrids() as its first statement, before
//   it reads or writes any global memory: the call blocks until every kernel it depends on has
//   completed and its writes are visible (griddepcontrol.wait), so what the kernel computes is what a
//   plain launch computes, byte for byte;
// - the same call then lets the next kernel in the stream be scheduled (griddepcontrol.launch_dependents):
//   once every CTA of this grid has passed it, the next grid's CTAs may take free SM slots and wait
//   there in their own AwaitPriorGrids() for this grid to finish. Signalling only after the wait keeps
//   the chain ordered: a kernel's dependents are placed only once it is itself running for real.
//
// A kernel launched plainly (<<<...>>>, cuBLAS) after or before one of these simply serialises as
// usual, and AwaitPriorGrids() in a plainly launched kernel returns at once. The host compiler (the
// CPU emulation's build of the kernels' headers through tests/gpu/emulation/cuda_shim.h) sees an empty
// function. A trace of a dependent kernel's time (CUPTI) starts when its CTAs were placed, which can be
// before the previous kernel ended: kernel spans of neighbouring kernels may overlap by that wait.
#ifndef GEMTB_GPU_COMMON_DEPENDENT_LAUNCH_CUH_
#define GEMTB_GPU_COMMON_DEPENDENT_LAUNCH_CUH_

#ifdef __CUDACC__
#include <cuda_runtime.h>

#include <utility>
#endif

namespace gemtb::gpu {

__device__ __forceinline__ void AwaitPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

#ifdef __CUDACC__
// kernel<<<grid, block, shared_bytes, stream>>>(args...) with programmatic stream serialisation
// allowed; the kernel must begin with AwaitPriorGrids(). Returns the launch's error (as
// cudaGetLastError() would after <<<...>>>).
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#endif

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_COMMON_DEPENDENT_LAUNCH_CUH_
