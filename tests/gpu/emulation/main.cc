// gemtb_emulated: `gemtb gpu attention` and `gemtb check attention` with the CUDA kernels' own
// source run on the CPU by the fiber emulation (tests/gpu/emulation). Slow (about a million times
// slower than the GPU), but it needs no GPU: for small cases in CI and for debugging kernel logic.
#include <iostream>
#include <string>
#include <vector>

#include "tools/gemtb/command.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "check" && args[1] == "attention") {
    return gemtb::cli::RunCheckAttention({args.begin() + 2, args.end()});
  }
  if (args.size() >= 2 && args[0] == "gpu" && args[1] == "attention") {
    return gemtb::cli::RunGpuAttention({args.begin() + 2, args.end()});
  }
  std::cerr << "usage: gemtb_emulated check attention|gpu attention [flags]  (CPU emulation of the "
               "CUDA kernels)\n";
  return gemtb::cli::kExitBadInput;
}
