// SvgPlot: line charts as a standalone SVG document (no scripts, no external
// fonts or styles), so any browser or image viewer shows the file as it is.
//
// A chart is a column of panels sharing one x axis; each panel has its own y
// axis with "nice" ticks (1, 2 or 5 times a power of ten), grid lines, a title
// and a legend naming its series. Each series is one <polyline class="series"
// data-name="..."> whose points map x and y affinely into the panel, so a test
// can read the data back. Pure functions of their arguments; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

struct PlotSeries {
  std::string name;          // the legend's text
  std::string color;         // any SVG color ("#1f77b4")
  std::vector<double> x, y;  // same length; x ascending
  bool markers = false;      // a dot on every point (sparse series, e.g. eval loss)
};

struct PlotPanel {
  std::string title;  // above the panel ("loss")
  std::vector<PlotSeries> series;
};

// Tick values covering [lo, hi]: about `target` steps of 1, 2 or 5 x 10^k,
// from the multiple at or below lo to the one at or above hi.
std::vector<double> nice_ticks(double lo, double hi, int target);

// The SVG document: `title` on top, the panels stacked (empty ones left out),
// `x_label` under the last panel's x axis. Non-finite points are skipped.
std::string render_svg(const std::string& title, const std::vector<PlotPanel>& panels,
                       const std::string& x_label);

}  // namespace tessera::cli
