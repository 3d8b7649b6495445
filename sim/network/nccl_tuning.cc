// Constants and formulas from NVIDIA/nccl src/graph/tuning.cc @5067397c (Hopper rows). Comments
// name the NCCL code each step mirrors, so a reader can check them side by side.
#include "sim/network/nccl_tuning.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gemtb::sim::nccl {
namespace {

// ncclTunerConstantsDefaults.baseLatencies (µs), [algo][proto]: Tree, Ring, NVLS, PAT.
constexpr double kBaseLat[kNumAlgos][kNumProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {8.0, 8.0, 8.0}};
// hwLatencies[NVLINK] and hwLatencies[NET].
constexpr double kNvlinkLat[kNumAlgos][kNumProtos] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 25}, {0, 0, 4.0}};
constexpr double kNetLat[kNumAlgos][kNumProtos] = {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 18}, {0, 0, 14}};
// llMaxBws rows: [0] Intel multi-host, [1] AMD multi-host, [2] Hopper single host; cols N1/N2/N4.
constexpr double kLlMaxBw[3][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}};
constexpr double kPerChMaxRingLL128Bw = 36.7;                          // Hopper, N1/N2/N4
constexpr double kPerChMaxTreeLL128Bw[3] = {36.7, 36.7, 29.0};         // Hopper
constexpr double kPerChMaxTreeBw[3] = {38.7, 41.4, 36.0};              // Hopper
constexpr double kNvlsEfficiency = 0.85;                               // Hopper
// treeCorrectionFactor[proto][log2(nBytes / 64)], 64 B .. 256 MiB.
constexpr double kTreeCorrection[kNumProtos][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

// log2i: floor(log2(n)), -1 for n = 0 (log2Down).
int Log2i(uint64_t n) {
  int l = -1;
  while (n != 0) {
    n >>= 1;
    ++l;
  }
  return l;
}

bool IsAllGatherOrReduceScatter(CollectiveOp op) {
  return op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter;
}

}  // namespace

Tables TuneModel(CollectiveOp op, const CommParams& comm) {
  Tables t;
  const int nranks = comm.nranks, nnodes = comm.nnodes;
  if (nranks <= 1) return t;
  const int index2 = nnodes <= 2 ? nnodes - 1 : 2;
  const int index1 = nnodes == 1 ? 2 : (comm.amd_cpu ? 1 : 0);
  const double ll_max_bw = kLlMaxBw[index1][index2];
  const double ppn = static_cast<double>(nranks) / nnodes;
  const bool all_reduce = op == CollectiveOp::kAllReduce;
  // nsteps: 2(p-1) all-reduce, p-1 all-gather/reduce-scatter, p otherwise (broadcast).
  const int nsteps = all_reduce ? 2 * (nranks - 1) : IsAllGatherOrReduceScatter(op) ? nranks - 1 : nranks;

  for (int a = 0; a < kNumAlgos; ++a) {
    // Which algorithms exist for which function (ncclTopoTuneModel's `continue`s, plus the
    // enable/disable pass: NVLS needs support and one host without CollNet; PAT one GPU per host).
    if (op == CollectiveOp::kBroadcast && a != kRing) continue;
    if (IsAllGatherOrReduceScatter(op) && a == kTree) continue;
    if (all_reduce && a == kPat) continue;
    if (a == kNvls && (!comm.nvls || nnodes > 1 || comm.nvls_nchannels < 2 ||
                       (!all_reduce && ppn > 32))) continue;
    if (a == kPat && nnodes != nranks) continue;
    const int nch = a == kNvls ? comm.nvls_nchannels : comm.nchannels;
    for (int p = 0; p < kNumProtos; ++p) {
      if (a == kNvls && p != kSimple) continue;
      if (a == kPat && p != kSimple) continue;
      double bw = nnodes <= 2 ? comm.bw_intra_GBps : comm.bw_inter_GBps;
      if (a == kTree && nnodes <= 2 && comm.tree_bw_intra_GBps > 0) bw = comm.tree_bw_intra_GBps;
      if (a == kNvls) {
        double intra = comm.nvls_bw_intra_GBps * kNvlsEfficiency * (nch - 1) / nch;
        intra *= all_reduce ? 2.0 : (ppn - 1) / ppn;  // AllReduce pipelines two operations
        bw = intra;  // one host: bwInter does not bind
      }
      double bus = nch * bw;
      if (a == kRing && p == kLL) bus = std::min(ll_max_bw, bus * .5);
      if (a == kRing && p == kLL128) bus = std::min(bus * 0.92, nch * kPerChMaxRingLL128Bw);
      if (a == kTree && all_reduce) bus = std::min(bus * .92, nch * kPerChMaxTreeBw[index2]);
      if (a == kTree && p == kLL) bus = std::min(bus * 1.0 / 3.8, ll_max_bw);
      if (a == kTree && p == kLL128) {
        bus = std::min(bus * (nnodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * kPerChMaxTreeLL128Bw[index2]);
      }
      if (a == kPat) bus *= .75;
      // Bus bandwidth -> algorithm bandwidth (none for non-ring AG/RS).
      if (!(a != kRing && IsAllGatherOrReduceScatter(op))) {
        const double ratio = (a == kRing || a == kNvls) ? static_cast<double>(nranks) / nsteps : .5;
        bus *= ratio;
      }
      if (p == kLL128 && !comm.ll128) bus = 0;
      t.bw_GBps[a][p] = bus;

      double lat = kBaseLat[a][p];
      double intra_lat = kNvlinkLat[a][p];
      // With ppn = 1 latencies are fully exposed: the Tree network latency.
      double inter_lat = ppn == 1 ? kNetLat[kTree][p] : kNetLat[a][p];
      inter_lat += comm.latency_inter_us;
      if (p == kSimple) inter_lat += comm.latency_inter_us;  // flush
      if (a == kRing) {
        const double hw_lat = nnodes == 1 ? kNvlinkLat[a][p] : kNetLat[a][p];
        if (op == CollectiveOp::kBroadcast) {
          if (comm.same_channels) {
            lat += hw_lat;
          } else {
            const double chunk_lat = p == kSimple ? (nnodes == 1 ? kNvlinkLat[kTree][p] : kNetLat[kTree][p]) : hw_lat;
            lat += nsteps * chunk_lat;
          }
        } else {
          double net_overhead = 0;
          if (nnodes > 1) {
            net_overhead = comm.net_overhead_us;
            if (p == kSimple) net_overhead *= 3;
          }
          intra_lat = std::max(intra_lat, net_overhead);
          const int inter_steps = nnodes == 1 ? 0 : all_reduce ? 2 * (nnodes - 1) : nnodes - 1;
          lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
        }
      } else if (a == kTree) {
        if (all_reduce) lat += 2 * ((nranks / nnodes - 1) * intra_lat + Log2i(static_cast<uint64_t>(nnodes)) * inter_lat);
      } else if (a == kNvls) {
        lat = intra_lat;
        if (nnodes > 1) lat += inter_lat;
      } else if (a == kPat) {
        lat += Log2i(static_cast<uint64_t>(nnodes)) * (inter_lat / 3.5) + nranks * 2.8;
      }
      t.lat_us[a][p] = lat;
    }
  }
  return t;
}

double AlgoTime(const Tables& tables, CollectiveOp op, const CommParams& comm, Algo algo, Proto proto,
                double bytes) {
  double bw = tables.bw_GBps[algo][proto];
  double lat = tables.lat_us[algo][proto];
  if (bw == 0) return -1.0;
  const uint64_t nbytes = static_cast<uint64_t>(bytes);
  const int log_size = Log2i(nbytes >> 6);
  if (comm.tree_correction && algo == kTree && op == CollectiveOp::kAllReduce && log_size >= 0 && log_size < 23) {
    bw *= kTreeCorrection[proto][log_size];
  }
  if (algo == kRing && proto == kSimple && comm.nnodes > 1 && op == CollectiveOp::kAllReduce &&
      nbytes / (static_cast<uint64_t>(comm.nchannels) * comm.nranks) >= 64) {
    lat *= 1.4;  // plateau effect of ring (compute capability >= 80)
  }
  return lat + bytes / (1000 * bw);
}

Choice Choose(const Tables& tables, CollectiveOp op, const CommParams& comm, double bytes, int only_algo) {
  Choice best;
  double min_time = 3.4e38;  // FLT_MAX
  for (int a = 0; a < kNumAlgos; ++a) {
    if (only_algo >= 0 && a != only_algo) continue;
    for (int p = 0; p < kNumProtos; ++p) {
      const double time = AlgoTime(tables, op, comm, static_cast<Algo>(a), static_cast<Proto>(p), bytes);
      // NCCL compares in float; the times here are far apart enough that double gives the same order.
      if (time >= 0.0 && time < min_time) {
        best = {static_cast<Algo>(a), static_cast<Proto>(p), time};
        min_time = time;
      }
    }
  }
  return best;
}

const char* AlgoName(Algo algo) {
  switch (algo) {
    case kTree: return "Tree";
    case kRing: return "Ring";
    case kNvls: return "NVLS";
    case kPat: return "PAT";
    default: return "?";
  }
}

const char* ProtoName(Proto proto) {
  switch (proto) {
    case kLL: return "LL";
    case kLL128: return "LL128";
    case kSimple: return "Simple";
    default: return "?";
  }
}

}  // namespace gemtb::sim::nccl
