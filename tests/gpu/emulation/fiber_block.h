// A CPU stand-in for one CUDA thread block, so that the attention kernels' own source can run (and
// be debugged) on a machine without a GPU. Each CUDA thread is a fiber on one OS thread; fibers run
// round-robin and switch only at collective operations (__syncthreads, warp shuffles, mma.sync).
// Every fiber of the block must pass the same sequence of collectives, which is what CUDA requires
// of __syncthreads and what the kernels do for the warp collectives too (they never diverge around
// one); RunBlock checks it. Between two collectives a fiber runs alone, so a round of the scheduler
// is a barrier, and data exchanged at a collective (WarpExchange) is double-buffered by round.
//
// x86-64 System V only (a few lines of assembly switch the stacks).
#ifndef GEMTB_TESTS_GPU_EMULATION_FIBER_BLOCK_H_
#define GEMTB_TESTS_GPU_EMULATION_FIBER_BLOCK_H_

#include <cstddef>
#include <functional>

namespace gemtb::emu {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};

// The running fiber's threadIdx / blockIdx.
const Dim& ThreadIdx();
const Dim& BlockIdx();

// A block-wide barrier (every collective is one).
void Barrier();

// Lane `l` of the caller's warp gets the `bytes` that lane l passed in `mine`: out[l*bytes..).
void WarpExchange(const void* mine, size_t bytes, void* out);

// Runs `body` as `threads` fibers with blockIdx = block. Aborts with a message if the fibers do not
// all pass the same number of collectives.
void RunBlock(Dim block, int threads, const std::function<void()>& body);

}  // namespace gemtb::emu

#endif  // GEMTB_TESTS_GPU_EMULATION_FIBER_BLOCK_H_
