// trace.json: the traced ranks and step as a Chrome/Perfetto trace: one "X"
// event per task, pid = rank, tid = stream, named by "M" metadata events; times in microseconds.
#ifndef GEMTB_SIM_REPORT_TRACE_H_
#define GEMTB_SIM_REPORT_TRACE_H_

#include <string>

#include "sim/scenario/result.h"

namespace gemtb::sim::report {

// Events sorted by (rank, stream, start, name) so the bytes do not depend on the engine's event
// order; one event per line.
std::string TraceJson(const SimResult& result);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_TRACE_H_
