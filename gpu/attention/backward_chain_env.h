// The chain length a caller asked for through GEMTB_DKDV_CHAIN or GEMTB_DQ_CHAIN (host only, so that
// both the chain launchers and api.cc, which sizes backward v6's workspace, read it the same way).
#ifndef GEMTB_GPU_ATTENTION_BACKWARD_CHAIN_ENV_H_
#define GEMTB_GPU_ATTENTION_BACKWARD_CHAIN_ENV_H_

#include <cstdlib>

namespace gemtb::gpu {

// Tiles per chain from the variable `env_name`, clamped to 0..64 (0: the launcher's "no chain");
// -1 when it is unset or empty.
inline int BwdChainTilesFromEnv(const char* env_name) {
  const char* env = std::getenv(env_name);
  if (env == nullptr || *env == '\0') return -1;
  const long n = std::strtol(env, nullptr, 10);
  return n < 0 ? 0 : (n > 64 ? 64 : static_cast<int>(n));
}

}  // namespace gemtb::gpu

#endif  // GEMTB_GPU_ATTENTION_BACKWARD_CHAIN_ENV_H_
