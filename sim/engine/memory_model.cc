#include "sim/engine/memory_model.h"

#include <algorithm>
#include <numeric>

namespace gemtb::sim {

void CheckpointOrder(const std::vector<double>& saved, const std::vector<double>& secs, std::vector<int>& order) {
  const auto before = [&](int a, int b) {
    const double fa = saved[a] * std::max(secs[b], 1e-30), fb = saved[b] * std::max(secs[a], 1e-30);
    return fa > fb || (!(fb > fa) && a < b);
  };
  // Insertion sort: few moves when `order` is nearly sorted already.
  for (size_t q = 1; q < order.size(); ++q) {
    const int v = order[q];
    size_t w = q;
    for (; w > 0 && before(v, order[w - 1]); --w) order[w] = order[w - 1];
    order[w] = v;
  }
}

MemoryPlanOutput PlanMemory(const StepTemplate& tpl, const Scenario& scenario, const std::vector<double>& stats,
                            int steps, int world, bool no_recompute) {
  MemoryPlanOutput out;
  const int U = static_cast<int>(tpl.regions.size());
  const int width = tpl.layout.size();
  out.checkpointed.assign(static_cast<size_t>(steps) * world * U, 0);
  out.peak_activation_bytes.assign(world, 0.0);
  out.static_bytes.assign(world, tpl.static_bytes);
  const double available = scenario.cluster.gpu.hbm_bytes - scenario.plan.memory.reserve_bytes;
  out.fit.available_bytes = available;
  out.fit.static_bytes = tpl.static_bytes;
  out.fit.activation_budget_bytes = available - tpl.static_bytes;
  const std::string& policy = scenario.plan.memory.budget_policy;
  const bool allow = !no_recompute && policy != "none";
  const bool by_ratio = policy != "uniform";
  bool fits = true;
  double needed = 0, dropped = 0, saved_total = 0;
  std::vector<double> saved(U), secs(U);
  std::vector<int> order(U);
  std::iota(order.begin(), order.end(), 0);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const absl::Span<const double> x(stats.data() + (static_cast<size_t>(s) * world + r) * width, width);
      const double static_bytes = tpl.static_bytes + std::max(0.0, tpl.batch_static_bytes.Eval(x));
      const double budget = available - static_bytes;
      out.static_bytes[r] = std::max(out.static_bytes[r], static_bytes);
      if (static_bytes > out.fit.static_bytes) {
        out.fit.static_bytes = static_bytes;
        out.fit.activation_budget_bytes = budget;
      }
      if (static_bytes > available) fits = false;
      double total = 0;
      for (int u = 0; u < U; ++u) {
        saved[u] = std::max(0.0, tpl.regions[u].saved_bytes.Eval(x));
        total += saved[u];
      }
      saved_total += total;
      // The smallest peak reachable: everything recomputed, one region at a time.
      double smallest = total;
      if (allow) {
        smallest = 0;
        for (int u = 0; u < U; ++u) smallest = std::max(smallest, saved[u]);
      }
      needed = std::max(needed, static_bytes + smallest);
      // Recomputing is a trade of time for memory that only pays when it makes the rank-step fit;
      // where nothing can (does_not_fit), the rank-step runs as if memory were no limit, so the
      // infeasible point's time is not dominated by a recompute that would not help.
      const bool can_fit = static_bytes + smallest <= available;
      double kept = total, transient = 0;
      if (allow && can_fit && kept > budget) {
        // `uniform` keeps region order; per_region sorts, from the previous rank-step's order
        // (ranks and steps differ little: few moves).
        if (by_ratio) {
          for (int u = 0; u < U; ++u) secs[u] = EvalTime(tpl.regions[u].fwd_time, tpl.regions[u].fwd_curve_terms, x);
          CheckpointOrder(saved, secs, order);
        }
        uint8_t* ck = out.checkpointed.data() + (static_cast<size_t>(s) * world + r) * U;
        for (int u : order) {
          if (kept + transient <= budget) break;
          if (saved[u] <= 0) continue;
          ck[u] = 1;
          kept -= saved[u];
          dropped += saved[u];
          transient = std::max(transient, saved[u]);
        }
      }
      const double peak = kept + transient;
      out.peak_activation_bytes[r] = std::max(out.peak_activation_bytes[r], peak);
      if (peak > budget) fits = false;
    }
  }
  out.fit.fits = fits;
  out.fit.needed_bytes = needed;
  out.fit.recomputed_fraction = saved_total > 0 ? dropped / saved_total : 0.0;
  return out;
}

}  // namespace gemtb::sim
