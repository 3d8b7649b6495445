// A CPU stand-in for one CUDA thread block, so that the kernels' own source can run (and be
// debugged) on a machine without a GPU. Each CUDA thread is a fiber on one OS thread; fibers switch
// only at collective operations: block barriers (__syncthreads) and warp exchanges (shuffles,
// mma.sync, ldmatrix). A warp exchange waits for the 32 lanes of its warp only, so warps may pass
// different numbers of them (as a kernel whose warps take different numbers of chunks does); a
// barrier waits for every fiber of the block that has not returned. Lanes of a warp must pass the
// same warp exchanges, and all fibers the same barriers, which is what CUDA requires; RunBlock
// checks it. Between two collectives a fiber runs alone; data exchanged at a warp exchange
// (WarpExchange) is double-buffered by the parity of the warp's exchange count.
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

// The running fiber's threadIdx / blockIdx, and blockDim (RunBlock's threads, in x).
const Dim& ThreadIdx();
const Dim& BlockIdx();
const Dim& BlockDim();

// gridDim: the grid of the blocks that RunBlock runs, as the emulated launch sets it.
void SetGridDim(Dim grid);
const Dim& GridDim();

// A block-wide barrier.
void Barrier();

// Lane `l` of the caller's warp gets the `bytes` that lane l passed in `mine`: out[l*bytes..).
void WarpExchange(const void* mine, size_t bytes, void* out);

// Runs `body` as `threads` fibers with blockIdx = block. Aborts with a message if the fibers do not
// all pass the same number of collectives.
void RunBlock(Dim block, int threads, const std::function<void()>& body);

}  // namespace gemtb::emu

#endif  // GEMTB_TESTS_GPU_EMULATION_FIBER_BLOCK_H_
