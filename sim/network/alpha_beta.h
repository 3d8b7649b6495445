// The α–β closed forms on a group's tier profile, as pure functions.
//
// A group is seen as up to three nested levels: members on one host (m0 = g, NVLink), hosts in one
// zone (m1, RoCE), zones (m2, oversubscribed). Level k has a per-step latency alpha_k and a per-GPU
// one-direction bandwidth bw_k (level 0: the tier's effective busbw; levels 1-2: effective NIC
// bandwidth × NICs per GPU ÷ oversubscription). A single-level group reduces every formula to the
// one-tier textbook forms.
#ifndef GEMTB_SIM_NETWORK_ALPHA_BETA_H_
#define GEMTB_SIM_NETWORK_ALPHA_BETA_H_

#include <array>

namespace gemtb::sim::alpha_beta {

struct Level {
  double members = 1;  // m_k: the group's fan-out at this level
  double alpha_s = 0;
  double bw_Bps = 0;
};

struct Profile {
  std::array<Level, 3> level;
  double p = 1;  // m0 * m1 * m2
  // Per-peer cost of posting one network transfer (NCCL's proxy posts each peer's send and receive
  // in turn; tuning.cc charges ~1 µs per post on Intel hosts). Paid serially per peer by an
  // all-to-all that leaves the host; the peers' network latencies overlap.
  double post_overhead_s = 0;
  // Outermost level with m_k > 1 (0 when the group is one member).
  int Top() const;
  // The bottleneck busbw of a flat ring over all levels ([SimAI-BW]): min(B0, m0·B1, m0·m1·B2) over
  // the levels the ring crosses (a ring channel crosses each host/zone boundary once, so it sees the
  // host's or zone's aggregate NIC bandwidth).
  double FlatRingBw() const;
  // The slowest per-GPU bandwidth among the levels used (for flat tree / halving-doubling fallbacks).
  double MinBw() const;
  // Per-step latencies of a ring of p-1 steps: intra-host steps at alpha0, steps crossing a host
  // boundary inside a zone at alpha1, steps crossing zones at alpha2.
  double RingStepLatency() const;
  // ⌈log2 m0⌉α0 + ⌈log2 m1⌉α1 + ⌈log2 m2⌉α2: one pass down a binary tree.
  double TreeDepthLatency() const;
};

// All times in seconds, S in bytes as nccl-tests counts it.
double RingAllGather(const Profile& g, double S);     // also reduce-scatter
double RingAllReduce(const Profile& g, double S);
double RingBroadcast(const Profile& g, double S);
double TreeAllReduce(const Profile& g, double S);     // double binary tree, pipelined
double TreeBroadcast(const Profile& g, double S);
double HalvingDoublingAllReduce(const Profile& g, double S);
double RecursiveAllGather(const Profile& g, double S);  // recursive doubling AG / halving RS
double HierarchicalAllReduce(const Profile& g, double S);
double HierarchicalAllGather(const Profile& g, double S);  // also reduce-scatter
// Direct (multi-tier) all-to-all. Inside one host: ⌈(p−1)/w⌉α0, w peers contacted per latency step.
// Across hosts every peer's transfer is in flight at once: one α of the outermost tier plus (p−1)
// serial per-peer posts (post_overhead_s), not (p−1) network latencies in a row.
double AllToAllLatency(const Profile& g, int window);
double DirectAllToAll(const Profile& g, double S, int window);
// All-to-allv from per-level max(send, recv) bytes of the busiest rank: bytes[k] to peers whose
// nearest shared level is k. NIC traffic (k >= 1) shares the level-1 bandwidth.
double AllToAllv(const Profile& g, const std::array<double, 3>& bytes, int window);
// NVLink SHARP all-reduce inside one host: 2α0 + S / algbw, algbw = busbw · p / (2(p−1)).
double NvlsAllReduce(const Profile& g, double S, double nvls_busbw_Bps);

}  // namespace gemtb::sim::alpha_beta

#endif  // GEMTB_SIM_NETWORK_ALPHA_BETA_H_
