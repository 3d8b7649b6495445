#include "sim/engine/memory_model.h"

#include <algorithm>
#include <numeric>

namespace gemtb::sim {

void CheckpointOrder(const std::vector<double>& saved, const std::vector<double>& secs, std::vector<int>& order) {
  const auto before = [&](int a, int b) {
    const double fa = saved[a] * std::max(secs[b], 1e-30), fb = saved[b] * std::max(secs[a], 1e-30);
    return fa > fb || (!(fb > fa) && a < b);
  };
  // Insertion sort, called once per run: its guarded scan stays inside the array even where rounding
  // makes the cross-product comparison intransitive, which std::sort does not promise.
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
  const int P = static_cast<int>(tpl.pieces.size());
  const int width = tpl.layout.size();
  out.checkpointed.assign(static_cast<size_t>(steps) * world * P, 0);
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
  // Only pieces that save something can be dropped (per_region ranks just these).
  std::vector<int> droppable;
  for (int p = 0; p < P; ++p) {
    if (!tpl.pieces[p].saved_bytes.IsZero()) droppable.push_back(p);
  }
  const int D = static_cast<int>(droppable.size());
  std::vector<double> region_saved(U), region_dropped(U);
  std::vector<int> order(D);
  std::iota(order.begin(), order.end(), 0);
  if (allow && by_ratio && D > 0 && steps > 0 && world > 0) {
    // per_region's order, fixed for the run as a compiled trainer fixes its checkpoint policy ahead
    // of the batches: pieces by bytes freed per second of recompute at the mean rank-step. How far
    // down the order a rank-step goes is its own (its saved bytes against its budget).
    std::vector<double> mean(width, 0.0);
    const size_t rows = static_cast<size_t>(steps) * world;
    for (size_t row = 0; row < rows; ++row) {
      for (int k = 0; k < width; ++k) mean[k] += stats[row * width + k];
    }
    for (double& v : mean) v /= static_cast<double>(rows);
    std::vector<double> saved(D), secs(D);
    for (int d = 0; d < D; ++d) {
      const CheckpointPiece& piece = tpl.pieces[droppable[d]];
      saved[d] = std::max(0.0, piece.saved_bytes.Eval(mean));
      secs[d] = EvalTime(piece.fwd_time, piece.fwd_curve_terms, mean);
    }
    CheckpointOrder(saved, secs, order);
  }
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
        region_saved[u] = std::max(0.0, tpl.regions[u].saved_bytes.Eval(x));
        total += region_saved[u];
      }
      saved_total += total;
      // The smallest peak reachable: everything recomputed, one region at a time.
      double smallest = total;
      if (allow) {
        smallest = 0;
        for (int u = 0; u < U; ++u) smallest = std::max(smallest, region_saved[u]);
      }
      needed = std::max(needed, static_bytes + smallest);
      // Recomputing is a trade of time for memory that only pays when it makes the rank-step fit;
      // where nothing can (does_not_fit), the rank-step runs as if memory were no limit, so the
      // infeasible point's time is not dominated by a recompute that would not help.
      const bool can_fit = static_bytes + smallest <= available;
      double kept = total, transient = 0;
      if (allow && can_fit && kept > budget) {
        uint8_t* ck = out.checkpointed.data() + (static_cast<size_t>(s) * world + r) * P;
        if (by_ratio) {
          // per_region: pieces in the run's order until the rank-step fits. A region's dropped
          // pieces are rebuilt together in its backward, so they are its transient bytes.
          std::fill(region_dropped.begin(), region_dropped.end(), 0.0);
          for (int d : order) {
            if (kept + transient <= budget) break;
            const int p = droppable[d];
            const double bytes = std::max(0.0, tpl.pieces[p].saved_bytes.Eval(x));
            if (bytes <= 0) continue;
            ck[p] = 1;
            kept -= bytes;
            dropped += bytes;
            double& rd = region_dropped[tpl.pieces[p].region];
            rd += bytes;
            transient = std::max(transient, rd);
          }
        } else {
          // uniform: whole regions (every piece, its forward re-run in full) in region order.
          for (int u = 0; u < U; ++u) {
            if (kept + transient <= budget) break;
            if (region_saved[u] <= 0) continue;
            std::fill(ck + tpl.regions[u].piece_begin, ck + tpl.regions[u].piece_end, uint8_t{1});
            kept -= region_saved[u];
            dropped += region_saved[u];
            transient = std::max(transient, region_saved[u]);
          }
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
