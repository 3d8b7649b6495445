#include "model/launch/launch_env.h"

#include <charconv>
#include <climits>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace gemtb::launch {
namespace {

struct Names {
  Launcher launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

// Precedence order (launch_env.h says why).
constexpr Names kLaunchers[] = {
    {Launcher::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

const std::string* Find(const Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// A decimal integer in [lo, hi], the whole value.
absl::StatusOr<int> ReadInt(const Environment& env, const char* name, const char* launcher, int lo, int hi) {
  const std::string* v = Find(env, name);
  if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": not set (", launcher, " sets it)"));
  int64_t x = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (v->empty() || ec != std::errc() || end != v->data() + v->size())
    return absl::InvalidArgumentError(absl::StrCat(name, "=\"", *v, "\": must be a decimal integer"));
  if (x < lo || x > hi)
    return absl::InvalidArgumentError(absl::StrCat(name, "=", x, ": must be in [", lo, ", ", hi, "]"));
  return static_cast<int>(x);
}

// MASTER_ADDR and MASTER_PORT: both or neither (required for torchrun).
absl::StatusOr<std::optional<Rendezvous>> ReadRendezvous(const Environment& env, bool required,
                                                         const char* launcher) {
  const std::string* addr = Find(env, "MASTER_ADDR");
  const std::string* port = Find(env, "MASTER_PORT");
  if (addr == nullptr && port == nullptr && !required) return std::optional<Rendezvous>();
  if (addr == nullptr) return absl::InvalidArgumentError(absl::StrCat("MASTER_ADDR: not set (", launcher, " with MASTER_PORT needs it)"));
  if (addr->empty()) return absl::InvalidArgumentError("MASTER_ADDR=\"\": must name a host");
  auto p = ReadInt(env, "MASTER_PORT", launcher, 1, 65535);
  if (!p.ok()) return p.status();
  return std::optional<Rendezvous>(Rendezvous{*addr, *p});
}

}  // namespace

const char* LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kSingleProcess: return "single process";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kOpenMpi: return "Open MPI";
    case Launcher::kSlurm: return "SLURM";
  }
  return "?";
}

Environment ProcessEnvironment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

absl::StatusOr<LaunchInfo> ParseLaunchEnvironment(const Environment& env) {
  for (const Names& n : kLaunchers) {
    if (Find(env, n.rank) == nullptr && Find(env, n.world_size) == nullptr) continue;
    const char* name = LauncherName(n.launcher);
    LaunchInfo info;
    info.launcher = n.launcher;
    auto world = ReadInt(env, n.world_size, name, 1, INT_MAX);
    if (!world.ok()) return world.status();
    auto rank = ReadInt(env, n.rank, name, 0, INT_MAX);
    if (!rank.ok()) return rank.status();
    if (*rank >= *world)
      return absl::InvalidArgumentError(
          absl::StrCat(n.rank, "=", *rank, ": must be < ", n.world_size, "=", *world));
    auto local = ReadInt(env, n.local_rank, name, 0, INT_MAX);
    if (!local.ok()) return local.status();
    if (*local > *rank)
      return absl::InvalidArgumentError(absl::StrCat(n.local_rank, "=", *local, ": must be <= ", n.rank, "=", *rank,
                                                     " (ranks of a host are numbered within the job's)"));
    if (n.launcher == Launcher::kTorchrun && Find(env, "LOCAL_WORLD_SIZE") != nullptr) {
      auto local_world = ReadInt(env, "LOCAL_WORLD_SIZE", name, 1, *world);
      if (!local_world.ok()) return local_world.status();
      if (*local >= *local_world)
        return absl::InvalidArgumentError(
            absl::StrCat("LOCAL_RANK=", *local, ": must be < LOCAL_WORLD_SIZE=", *local_world));
    }
    auto rendezvous = ReadRendezvous(env, n.launcher == Launcher::kTorchrun, name);
    if (!rendezvous.ok()) return rendezvous.status();
    if (n.launcher == Launcher::kTorchrun) {  // the agent's store holds MASTER_PORT
      if ((*rendezvous)->port == 65535)
        return absl::InvalidArgumentError("MASTER_PORT=65535: must be < 65535 under torchrun (gemtb's store uses MASTER_PORT + 1)");
      ++(*rendezvous)->port;
    }
    info.world_size = *world;
    info.rank = *rank;
    info.local_rank = *local;
    info.rendezvous = *rendezvous;
    return info;
  }
  LaunchInfo single;
  auto rendezvous = ReadRendezvous(env, false, "a single process");
  if (!rendezvous.ok()) return rendezvous.status();
  single.rendezvous = *rendezvous;
  return single;
}

absl::StatusOr<Rendezvous> RequireRendezvous(const LaunchInfo& info) {
  if (info.rendezvous) return *info.rendezvous;
  return absl::FailedPreconditionError(absl::StrCat(
      "rendezvous: ", LauncherName(info.launcher),
      " gives no rendezvous address: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port) for every rank"));
}

}  // namespace gemtb::launch
