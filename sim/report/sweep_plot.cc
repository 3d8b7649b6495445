#include "sim/report/sweep_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "sim/report/json_text.h"

namespace gemtb::sim::report {
namespace {

// The legend sits below the plot in two columns of kLegendColumn pixels, wide enough for the longest
// label at 12 px (about 7 px per character), so no label runs past the right edge.
constexpr double kWidth = 860, kHeight = 580;
constexpr double kLeft = 70, kRight = 30, kTop = 50, kBottom = 140;  // margins
constexpr double kLegendColumn = 380;
constexpr const char* kLossColors[kLossCauses + 1] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#bab0ac"};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

}  // namespace

std::string SweepSvg(const Study& study) {
  const auto& settings = study.points[static_cast<size_t>(study.reference)].settings;
  std::vector<const SweepPoint*> points;
  for (const SweepPoint& p : study.points) {
    if (p.status.ok() && p.base && p.settings == settings) points.push_back(&p);
  }
  std::stable_sort(points.begin(), points.end(), [](const SweepPoint* a, const SweepPoint* b) { return a->gpus < b->gpus; });

  if (points.empty()) {
    return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
           "width=\"400\" height=\"60\"><text x=\"10\" y=\"30\">no valid sweep point to plot</text></svg>\n";
  }
  double xmin = std::log2(points.front()->gpus), xmax = std::log2(points.back()->gpus);
  xmin -= 0.5;
  xmax += 0.5;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto X = [&](double log2g) { return kLeft + (log2g - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double frac) { return kTop + (1 - std::clamp(frac, 0.0, 1.0)) * ph; };

  std::string svg = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"",
      Num(kWidth), "\" height=\"", Num(kHeight), "\" viewBox=\"0 0 ", Num(kWidth), " ", Num(kHeight),
      "\" font-family=\"sans-serif\" font-size=\"12\">\n");
  absl::StrAppend(&svg, "<rect x=\"0\" y=\"0\" width=\"", Num(kWidth), "\" height=\"", Num(kHeight), "\" fill=\"white\"/>\n");
  std::string title = absl::StrCat(study.scenario, ": scaling ratio and E2E MFU vs GPUs (weak scaling)");
  for (const auto& [path, value] : settings) absl::StrAppend(&title, ", ", path, "=", value);
  absl::StrAppend(&svg, "<text x=\"", Num(kLeft), "\" y=\"22\" font-size=\"15\">", XmlEscape(title), "</text>\n");
  absl::StrAppend(&svg, "<text x=\"", Num(kLeft), "\" y=\"40\" fill=\"#555\">",
                  XmlEscape("bars: share of step time lost to each cause (counterfactual reruns)"), "</text>\n");

  // Axes and grid.
  for (int i = 0; i <= 5; ++i) {
    const double f = i / 5.0;
    absl::StrAppend(&svg, "<line x1=\"", Num(kLeft), "\" y1=\"", Num(Y(f)), "\" x2=\"", Num(kLeft + pw), "\" y2=\"",
                    Num(Y(f)), "\" stroke=\"#ddd\"/>\n");
    absl::StrAppend(&svg, "<text x=\"", Num(kLeft - 8), "\" y=\"", Num(Y(f) + 4), "\" text-anchor=\"end\">", Num(f),
                    "</text>\n");
  }
  absl::StrAppend(&svg, "<line x1=\"", Num(kLeft), "\" y1=\"", Num(kTop + ph), "\" x2=\"", Num(kLeft + pw), "\" y2=\"",
                  Num(kTop + ph), "\" stroke=\"black\"/>\n");
  absl::StrAppend(&svg, "<line x1=\"", Num(kLeft), "\" y1=\"", Num(kTop), "\" x2=\"", Num(kLeft), "\" y2=\"",
                  Num(kTop + ph), "\" stroke=\"black\"/>\n");
  absl::StrAppend(&svg, "<text x=\"", Num(kLeft + pw / 2), "\" y=\"", Num(kTop + ph + 36),
                  "\" text-anchor=\"middle\">GPUs (log2 scale)</text>\n");
  absl::StrAppend(&svg, "<text x=\"18\" y=\"", Num(kTop + ph / 2), "\" text-anchor=\"middle\" transform=\"rotate(-90 18 ",
                  Num(kTop + ph / 2), ")\">fraction</text>\n");

  // Bars: each cause's share of T, stacked from 0, then the non-layer work.
  const double bar = std::min(30.0, 0.6 * pw / ((xmax - xmin) + 1));
  for (const SweepPoint* p : points) {
    const double x = X(std::log2(p->gpus));
    absl::StrAppend(&svg, "<text x=\"", Num(x), "\" y=\"", Num(kTop + ph + 18), "\" text-anchor=\"middle\">", p->gpus,
                    "</text>\n");
    if (!p->attribution || !(p->attribution->t_s > 0)) continue;
    double stacked = 0;
    for (int k = 0; k <= kLossCauses; ++k) {
      const double share = std::max(0.0, (k < kLossCauses ? p->attribution->delta_s[static_cast<size_t>(k)]
                                                           : p->attribution->non_layer_s) /
                                              p->attribution->t_s);
      if (share <= 0) continue;
      const double y0 = Y(stacked), y1 = Y(stacked + share);
      stacked += share;
      absl::StrAppend(&svg, "<rect x=\"", Num(x - bar / 2), "\" y=\"", Num(y1), "\" width=\"", Num(bar), "\" height=\"",
                      Num(y0 - y1), "\" fill=\"", kLossColors[k], "\" fill-opacity=\"0.75\"/>\n");
    }
    if (!p->base->memory.fits) {
      absl::StrAppend(&svg, "<text x=\"", Num(x), "\" y=\"", Num(kTop - 2),
                      "\" text-anchor=\"middle\" fill=\"#b00\">does not fit</text>\n");
    }
  }

  // Lines: SR and E2E MFU.
  auto polyline = [&](double SimResult::*field, const char* color, const char* dash) {
    std::string pts;
    for (const SweepPoint* p : points) {
      absl::StrAppend(&pts, pts.empty() ? "" : " ", Num(X(std::log2(p->gpus))), ",", Num(Y((*p->base).*field)));
    }
    absl::StrAppend(&svg, "<polyline points=\"", pts, "\" fill=\"none\" stroke=\"", color, "\" stroke-width=\"2.5\"",
                    dash[0] != '\0' ? absl::StrCat(" stroke-dasharray=\"", dash, "\"") : std::string(), "/>\n");
    for (const SweepPoint* p : points) {
      absl::StrAppend(&svg, "<circle cx=\"", Num(X(std::log2(p->gpus))), "\" cy=\"", Num(Y((*p->base).*field)),
                      "\" r=\"3.5\" fill=\"", color, "\"/>\n");
    }
  };
  polyline(&SimResult::scaling_ratio, "#1f1f7a", "");
  polyline(&SimResult::e2e_mfu, "#b8860b", "6 3");

  // Legend: below the axis label, filled column by column.
  const double legend_top = kTop + ph + 50;
  int entry = 0;
  double lx = kLeft, ly = legend_top;
  auto legend = [&](const std::string& swatch, const std::string& text) {
    absl::StrAppend(&svg, swatch, "<text x=\"", Num(lx + 26), "\" y=\"", Num(ly + 4), "\">", XmlEscape(text), "</text>\n");
    ++entry;
    lx = kLeft + (entry / 4) * kLegendColumn;
    ly = legend_top + (entry % 4) * 20;
  };
  legend(absl::StrCat("<line x1=\"", Num(lx), "\" y1=\"", Num(ly), "\" x2=\"", Num(lx + 20), "\" y2=\"", Num(ly),
                      "\" stroke=\"#1f1f7a\" stroke-width=\"2.5\"/>"),
         "Scaling Ratio (SR)");
  legend(absl::StrCat("<line x1=\"", Num(lx), "\" y1=\"", Num(ly), "\" x2=\"", Num(lx + 20), "\" y2=\"", Num(ly),
                      "\" stroke=\"#b8860b\" stroke-width=\"2.5\" stroke-dasharray=\"6 3\"/>"),
         "E2E MFU");
  for (int k = 0; k <= kLossCauses; ++k) {
    legend(absl::StrCat("<rect x=\"", Num(lx), "\" y=\"", Num(ly - 6), "\" width=\"20\" height=\"12\" fill=\"",
                        kLossColors[k], "\" fill-opacity=\"0.75\"/>"),
           LossCause(k));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace gemtb::sim::report
