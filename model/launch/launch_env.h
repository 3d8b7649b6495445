// Who this process is in a multi-process job: rank, world size, local rank and the rendezvous
// address, read from the variables the launcher sets. The CLI reads the process environment once
// (ProcessEnvironment) and passes this typed struct down; nothing below the CLI reads the
// environment. The trainers on the GPU and on the CPU share it, so it lives beside the model
// vocabulary rather than in either executor.
//
// Launchers, in order of precedence (torchrun run under srun sees SLURM's variables of the outer
// step too, and mpirun under a SLURM allocation sees SLURM_PROCID of the batch step):
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK (required), LOCAL_WORLD_SIZE (checked when set),
//             MASTER_ADDR, MASTER_PORT (required: torchrun always sets them)
//   Open MPI  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK (required)
//   SLURM     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (required)
// Under Open MPI and SLURM the rendezvous address comes from MASTER_ADDR and MASTER_PORT when both
// are set (mpirun -x MASTER_ADDR=... ), and is absent otherwise. Under torchrun it is MASTER_PORT + 1:
// torchrun's agent already serves its own store on MASTER_PORT. No launcher variable at all is a
// single process: rank 0 of 1, no rendezvous needed.
#ifndef GEMTB_MODEL_LAUNCH_LAUNCH_ENV_H_
#define GEMTB_MODEL_LAUNCH_LAUNCH_ENV_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace gemtb::launch {

enum class Launcher { kSingleProcess, kTorchrun, kOpenMpi, kSlurm };

const char* LauncherName(Launcher launcher);

struct Rendezvous {
  std::string host;
  int port = 0;  // 1 .. 65535
};

struct LaunchInfo {
  Launcher launcher = Launcher::kSingleProcess;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::optional<Rendezvous> rendezvous;
};

// Variable name -> value, as the launcher set them.
using Environment = std::map<std::string, std::string>;

// The current process's environment (the CLI calls this once).
Environment ProcessEnvironment();

// InvalidArgument naming the variable and its value for a missing, non-integer or out-of-range
// value, or values that contradict each other (RANK=4 with WORLD_SIZE=4).
absl::StatusOr<LaunchInfo> ParseLaunchEnvironment(const Environment& env);

// The rendezvous address, or FailedPrecondition saying how to give one.
absl::StatusOr<Rendezvous> RequireRendezvous(const LaunchInfo& info);

}  // namespace gemtb::launch

#endif  // GEMTB_MODEL_LAUNCH_LAUNCH_ENV_H_
