// sweep.svg, drawn by sim/ itself: SR and E2E MFU against log2(GPUs) over
// stacked bars of the loss attribution (each cause's share of the step time, plus the non-layer work).
// Plain SVG 1.1, well-formed XML, deterministic bytes.
#ifndef GEMTB_SIM_REPORT_SWEEP_PLOT_H_
#define GEMTB_SIM_REPORT_SWEEP_PLOT_H_

#include <string>

#include "sim/report/study.h"

namespace gemtb::sim::report {

// Plots the points sharing the reference point's field settings (one curve per plot).
std::string SweepSvg(const Study& study);

}  // namespace gemtb::sim::report

#endif  // GEMTB_SIM_REPORT_SWEEP_PLOT_H_
