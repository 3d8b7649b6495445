#include "reference/attention/row_kernels.h"

#include <vector>

namespace gemtb::reference {

namespace row_kernels_baseline {
extern const RowKernels kKernels;
}
#if defined(GEMTB_ROW_KERNELS_X86)
namespace row_kernels_avx2 {
extern const RowKernels kKernels;
}
namespace row_kernels_avx512 {
extern const RowKernels kKernels;
}
#endif

namespace {

std::vector<const RowKernels*> Levels() {
  std::vector<const RowKernels*> levels = {&row_kernels_baseline::kKernels};
#if defined(GEMTB_ROW_KERNELS_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) levels.push_back(&row_kernels_avx2::kKernels);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) levels.push_back(&row_kernels_avx512::kKernels);
#endif
  return levels;
}

const std::vector<const RowKernels*>& AllLevels() {
  static const std::vector<const RowKernels*> levels = Levels();
  return levels;
}

}  // namespace

const RowKernels& Kernels() {
  static const RowKernels& chosen = *AllLevels().back();
  return chosen;
}

int NumRowKernelLevels() { return static_cast<int>(AllLevels().size()); }
const RowKernels& RowKernelLevel(int index) { return *AllLevels()[index]; }

}  // namespace gemtb::reference
