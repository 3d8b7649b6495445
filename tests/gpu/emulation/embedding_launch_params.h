// The LaunchParams (gpu/embedding/launch.h) of a drawn embedding case on host arrays, for the emulated
// TBE kernels: its tables, features, and the KJT's offsets, ids and weights. The caller adds what its
// kernels read beyond these (the pooled gradient, the seed and step).
#ifndef GEMTB_TESTS_GPU_EMULATION_EMBEDDING_LAUNCH_PARAMS_H_
#define GEMTB_TESTS_GPU_EMULATION_EMBEDDING_LAUNCH_PARAMS_H_

#include <cstdint>
#include <vector>

#include "gpu/embedding/kjt_check.h"
#include "gpu/embedding/launch.h"
#include "tools/check/embed_cases.h"

namespace gemtb::gpu::embedding {

inline LaunchParams HostLaunchParams(const check::EmbedCase& c, const KjtLayout& layout,
                                     const std::vector<TableParams>& tables,
                                     const std::vector<FeatureParams>& features) {
  LaunchParams p;
  p.tables = tables.data();
  p.features = features.data();
  p.num_tables = static_cast<int>(tables.size());
  p.kjt = {layout.offsets.data(), c.kjt.values.data(), c.kjt.weights.empty() ? nullptr : c.kjt.weights.data(),
           c.kjt.stride, static_cast<int64_t>(c.kjt.keys.size())};
  return p;
}

}  // namespace gemtb::gpu::embedding

#endif  // GEMTB_TESTS_GPU_EMULATION_EMBEDDING_LAUNCH_PARAMS_H_
