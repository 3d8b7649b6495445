// NCCL's own cost model: the per-(algorithm, protocol) latency and
// bandwidth tables of src/graph/tuning.cc (ncclTopoTuneModel) and the time/argmin of
// ncclTopoGetAlgoTime / topoGetAlgoInfo, for one communicator on Hopper with NVLink inside hosts.
//
// Reproduced from NVIDIA/nccl master @5067397c (version 2.30.7). What is modeled: Tree, Ring, NVLS
// (one host, when enabled) and PAT (one GPU per host) with LL, LL128 and Simple; CollNet and NVLS-Tree
// are off (no CollNet/SHARP network). Not modeled: the tuner plugin and the buffer-registration
// (CTA policy) path. The graph search is replaced by inputs: nChannels and per-channel bandwidths
// (defaults make nChannels × bwIntra the tier's effective busbw).
#ifndef GEMTB_SIM_NETWORK_NCCL_TUNING_H_
#define GEMTB_SIM_NETWORK_NCCL_TUNING_H_

#include <array>
#include <string>

#include "sim/scenario/scenario.h"

namespace gemtb::sim::nccl {

enum Algo { kTree = 0, kRing = 1, kNvls = 2, kPat = 3, kNumAlgos = 4 };
enum Proto { kLL = 0, kLL128 = 1, kSimple = 2, kNumProtos = 3 };

// Inputs that NCCL gets from topology detection and the graph search.
struct CommParams {
  int nranks = 2;
  int nnodes = 1;
  int nchannels = 16;           // ring/tree graph channels (comm->nChannels)
  double bw_intra_GBps = 23.1;  // per channel, graphs[a]->bwIntra
  double tree_bw_intra_GBps = 0; // per channel, graphs[TREE]->bwIntra when the tree graph differs (0: same)
  double bw_inter_GBps = 3.0;   // per channel, graphs[a]->bwInter (used when nnodes > 2)
  double latency_inter_us = 0;  // graphs[a]->latencyInter
  double net_overhead_us = 1.0; // 1 Intel, 2 AMD (getNetOverhead)
  bool amd_cpu = false;         // llMaxBw row for multi-host
  bool same_channels = true;    // graphs[RING]->sameChannels (broadcast latency)
  bool ll128 = true;            // LL128 enabled (Hopper default)
  bool tree_correction = true;  // the size-based Tree all-reduce bandwidth correction (treeCorrectionFactor)
  bool nvls = false;            // NVLS support (NCCL_NVLS_ENABLE)
  int nvls_nchannels = 16;
  double nvls_bw_intra_GBps = 23.1;
};

// The two tables of one communicator for one collective: latency (µs) and algorithm bandwidth
// (GB/s, after the busbw -> algbw conversion); bw 0 = not available.
struct Tables {
  std::array<std::array<double, kNumProtos>, kNumAlgos> lat_us{};
  std::array<std::array<double, kNumProtos>, kNumAlgos> bw_GBps{};
};

Tables TuneModel(CollectiveOp op, const CommParams& comm);

// ncclTopoGetAlgoTime: time in µs of (algo, proto) for nBytes (the larger of send/recv buffer,
// i.e. S in nccl-tests' convention), or -1 when unavailable. numPipeOps = 1.
double AlgoTime(const Tables& tables, CollectiveOp op, const CommParams& comm, Algo algo, Proto proto,
                double bytes);

struct Choice {
  Algo algo = kRing;
  Proto proto = kSimple;
  double time_us = -1;  // -1: nothing available
};
// topoGetAlgoInfo's argmin over enabled (algo, proto); `only_algo` >= 0 restricts to one algorithm
// (NCCL_ALGO pinned). Ties keep the first in (algo, proto) order, as NCCL's strict '<'.
Choice Choose(const Tables& tables, CollectiveOp op, const CommParams& comm, double bytes, int only_algo = -1);

const char* AlgoName(Algo algo);    // "Tree", "Ring", "NVLS", "PAT"
const char* ProtoName(Proto proto); // "LL", "LL128", "Simple"

}  // namespace gemtb::sim::nccl

#endif  // GEMTB_SIM_NETWORK_NCCL_TUNING_H_
