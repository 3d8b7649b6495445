// The files a what-if study writes and the table it prints. Everything but
// perf.json is a pure function of the study's inputs: byte-identical for the same scenario, seed and
// options, whatever the thread count.
//   summary.json     reference point in full (step times, bound, MFUs, SR, indicators, memory, rank
//                    aggregates, attribution), the sweep table, assumptions, sensitivity, checks
//   ranks.csv        per rank of the reference point
//   collectives.csv  per collective call site of the reference point
//   trace.json       Chrome/Perfetto trace of the reference point's traced ranks and step
//   sweep.csv        one row per sweep point with its attribution
//   sweep.svg        SR and E2E MFU vs GPUs over stacked attribution bars
//   perf.json        wall-clock time and events per run (the only non-deterministic file)
#ifndef GEMTB_SIM_REPORT_REPORT_FILES_H_
#define GEMTB_SIM_REPORT_REPORT_FILES_H_

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "sim/report/study.h"

namespace gemtb::sim::report {

// (file name, content) in a fixed order.
std::vector<std::pair<std::string, std::string>> RenderReport(const Study& study);

nlohmann::ordered_json SummaryJson(const Study& study);
std::string SweepCsv(const Study& study);
std::string PerfJson(const Study& study);

// What `gemtb whatif` prints: the sweep table (GPUs, step ms, Local MFU, E2E MFU, SR, biggest loss
// and its cause), points that are invalid or do not fit, the checks, the assumptions and the
// sensitivity analysis.
std::string ConsoleReport(const Study& study);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_REPORT_FILES_H_
