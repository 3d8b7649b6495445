#include "sim/network/alpha_beta.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gemtb::sim::alpha_beta {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double CeilLog2(double m) { return m <= 1 ? 0.0 : std::ceil(std::log2(m) - 1e-12); }

bool IsPowerOfTwo(double m) {
  const double l = std::log2(m);
  return std::fabs(l - std::round(l)) < 1e-12;
}

}  // namespace

int Profile::Top() const {
  for (int k = 2; k >= 0; --k) {
    if (level[k].members > 1) return k;
  }
  return 0;
}

double Profile::FlatRingBw() const {
  const double m0 = level[0].members, m1 = level[1].members, m2 = level[2].members;
  double bw = kInf;
  if (m0 > 1) bw = std::min(bw, level[0].bw_Bps);
  if (m1 * m2 > 1) bw = std::min(bw, m0 * level[1].bw_Bps);
  if (m2 > 1) bw = std::min(bw, m0 * m1 * level[2].bw_Bps);
  return bw == kInf ? level[0].bw_Bps : bw;
}

double Profile::MinBw() const {
  // Level 0 is crossed when a host holds several members; level 1 (the NIC) whenever the group
  // spans hosts, also across zones; level 2 when it spans zones.
  double bw = kInf;
  if (level[0].members > 1) bw = std::min(bw, level[0].bw_Bps);
  if (level[1].members * level[2].members > 1) bw = std::min(bw, level[1].bw_Bps);
  if (level[2].members > 1) bw = std::min(bw, level[2].bw_Bps);
  return bw == kInf ? level[0].bw_Bps : bw;
}

double Profile::RingStepLatency() const {
  const double m1 = level[1].members, m2 = level[2].members;
  const double hosts = m1 * m2;
  const double cross_zone = m2 - 1;
  const double cross_host = hosts - m2;
  const double intra = (p - 1) - (hosts - 1);
  return intra * level[0].alpha_s + cross_host * level[1].alpha_s + cross_zone * level[2].alpha_s;
}

double Profile::TreeDepthLatency() const {
  double t = 0;
  for (const Level& l : level) t += CeilLog2(l.members) * l.alpha_s;
  return t;
}

double RingAllGather(const Profile& g, double S) {
  return g.RingStepLatency() + ((g.p - 1) / g.p) * S / g.FlatRingBw();
}

double RingAllReduce(const Profile& g, double S) {
  return 2 * g.RingStepLatency() + 2 * ((g.p - 1) / g.p) * S / g.FlatRingBw();
}

double RingBroadcast(const Profile& g, double S) { return g.RingStepLatency() + S / g.FlatRingBw(); }

double TreeAllReduce(const Profile& g, double S) { return 2 * g.TreeDepthLatency() + 2 * S / g.FlatRingBw(); }

double TreeBroadcast(const Profile& g, double S) { return g.TreeDepthLatency() + S / g.FlatRingBw(); }

namespace {

// Recursive halving (or doubling) innermost level first: level k carries
// ((m_k − 1)/m_k) · S / Π_{j<k} m_j per GPU over bw_k in log2(m_k) steps of alpha_k.
double TieredRecursive(const Profile& g, double S) {
  double t = 0, chunk = S;
  for (const Level& l : g.level) {
    if (l.members <= 1) continue;
    t += std::log2(l.members) * l.alpha_s + ((l.members - 1) / l.members) * chunk / l.bw_Bps;
    chunk /= l.members;
  }
  return t;
}

bool AllLevelsPowerOfTwo(const Profile& g) {
  for (const Level& l : g.level) {
    if (!IsPowerOfTwo(l.members)) return false;
  }
  return true;
}

}  // namespace

double RecursiveAllGather(const Profile& g, double S) {
  if (AllLevelsPowerOfTwo(g)) return TieredRecursive(g, S);
  // Not a power of two: one flat pass at the outermost latency and the slowest bandwidth.
  return CeilLog2(g.p) * g.level[g.Top()].alpha_s + ((g.p - 1) / g.p) * S / g.MinBw();
}

double HalvingDoublingAllReduce(const Profile& g, double S) {
  if (AllLevelsPowerOfTwo(g)) return 2 * TieredRecursive(g, S);
  // p not 2^k (Thakur, Rabenseifner & Gropp 2005): the r = p − p' extra ranks fold into partners in a
  // pre-step exchanging half vectors (α + S/2B) and get the result in a post-step (α + S/B); the body
  // is halving-doubling on p' = 2^⌊log2 p⌋.
  const double k = std::floor(std::log2(g.p));
  const double p2 = std::exp2(k);
  const double alpha = g.level[g.Top()].alpha_s, bw = g.MinBw();
  return 2 * k * alpha + 2 * ((p2 - 1) / p2) * S / bw + 2 * alpha + 1.5 * S / bw;
}

double HierarchicalAllGather(const Profile& g, double S) {
  double t = 0, chunk = S;
  for (const Level& l : g.level) {
    if (l.members <= 1) continue;
    t += (l.members - 1) * l.alpha_s + ((l.members - 1) / l.members) * chunk / l.bw_Bps;
    chunk /= l.members;
  }
  return t;
}

double HierarchicalAllReduce(const Profile& g, double S) { return 2 * HierarchicalAllGather(g, S); }

double AllToAllLatency(const Profile& g, int window) {
  const int top = g.Top();
  if (top == 0) return std::ceil((g.p - 1) / std::max(1, window)) * g.level[0].alpha_s;
  return g.level[top].alpha_s + (g.p - 1) * g.post_overhead_s;
}

double DirectAllToAll(const Profile& g, double S, int window) {
  const double m0 = g.level[0].members, zone = g.level[0].members * g.level[1].members;
  double bw_term = 0;
  if (m0 > 1) bw_term = std::max(bw_term, S * (m0 - 1) / (g.p * g.level[0].bw_Bps));
  if (g.p > m0) bw_term = std::max(bw_term, S * (g.p - m0) / (g.p * g.level[1].bw_Bps));
  if (g.p > zone) bw_term = std::max(bw_term, S * (g.p - zone) / (g.p * g.level[2].bw_Bps));
  return AllToAllLatency(g, window) + bw_term;
}

double AllToAllv(const Profile& g, const std::array<double, 3>& bytes, int window) {
  const double bw_term = std::max({bytes[0] / g.level[0].bw_Bps, (bytes[1] + bytes[2]) / g.level[1].bw_Bps,
                                   bytes[2] / g.level[2].bw_Bps});
  return AllToAllLatency(g, window) + bw_term;
}

double NvlsAllReduce(const Profile& g, double S, double nvls_busbw_Bps) {
  const double algbw = nvls_busbw_Bps * g.p / (2 * (g.p - 1));
  return 2 * g.level[0].alpha_s + S / algbw;
}

}  // namespace gemtb::sim::alpha_beta
