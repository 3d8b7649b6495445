// One measured training step as a Chrome/Perfetto trace (the JSON object format with "X" events),
// laid out as `gemtb whatif --trace` lays out a simulated step: process "rank r" per rank, the GPU's
// work on the track "compute" (thread 0) under the simulator's task names ("sparse.lookup",
// "<region>.fwd", "<region>.bwd", "sparse.update", "optimizer"), a job's collectives on the tracks of
// their group classes ("dense-shard", ...), so the two open side by side in ui.perfetto.dev. Work of
// other tracks (the host's data generation, the collectives) gets threads 1, 2, ... of its rank in
// order of first appearance.
#ifndef GEMTB_TOOLS_GEMTB_STEP_TRACE_H_
#define GEMTB_TOOLS_GEMTB_STEP_TRACE_H_

#include <string>
#include <vector>

namespace gemtb::cli {

struct TraceSpan {
  std::string name;
  std::string category;  // "compute", "host", ...
  std::string track;     // "compute" or another track's name
  double start_ms = 0, dur_ms = 0;
};

// One rank's step (process "rank 0").
std::string StepTraceJson(const std::vector<TraceSpan>& spans);
// Every rank's step, rank r as process r.
std::string StepTraceJson(const std::vector<std::vector<TraceSpan>>& ranks);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_STEP_TRACE_H_
