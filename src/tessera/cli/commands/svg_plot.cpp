#include "tessera/cli/commands/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tessera::cli {
namespace {

// Layout in SVG user units (pixels at 100% zoom).
constexpr double kWidth = 760, kLeft = 80, kRight = 20;
constexpr double kTop = 40, kPanelHeight = 190, kPanelGap = 60, kBottom = 50;
constexpr int kTargetTicks = 5;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// A tick label with as many decimals as the tick step needs ("0.0010", "12000"),
// scientific for very large or very small steps.
std::string tick_label(double v, double step) {
  char buf[32];
  const int decimals = static_cast<int>(std::max(0.0, -std::floor(std::log10(step) + 1e-9)));
  if (std::abs(v) < step * 1e-6) v = 0;  // no "-0.000" from rounding
  if (decimals > 6 || std::abs(v) >= 1e7) {
    std::snprintf(buf, sizeof(buf), "%.2g", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  }
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
  // A flat range still needs a height to draw into.
  void widen() {
    if (empty()) lo = 0, hi = 1;
    if (hi - lo <= std::abs(hi) * 1e-12) {
      const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
      lo -= pad, hi += pad;
    }
  }
};

// Maps data coordinates into a panel's pixel box (y grows downwards in SVG).
struct Frame {
  double x0, x1, y0, y1;      // pixel box: left, right, top, bottom
  double xlo, xhi, ylo, yhi;  // data domain
  double px(double x) const { return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0); }
  double py(double y) const { return y1 - (y - ylo) / (yhi - ylo) * (y1 - y0); }
};

bool has_points(const PlotPanel& p) {
  for (const auto& s : p.series) {
    for (double v : s.y) {
      if (std::isfinite(v)) return true;
    }
  }
  return false;
}

void draw_axes(std::string& out, const Frame& f, const std::vector<double>& xt,
               const std::vector<double>& yt) {
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double y : yt) {
    const std::string py = num(f.py(y));
    out += "<line class=\"grid\" x1=\"" + num(f.x0) + "\" y1=\"" + py + "\" x2=\"" + num(f.x1) +
           "\" y2=\"" + py + "\" stroke=\"#e5e5e5\"/>\n";
    out += "<line class=\"tick\" x1=\"" + num(f.x0 - 5) + "\" y1=\"" + py + "\" x2=\"" + num(f.x0) +
           "\" y2=\"" + py + "\" stroke=\"#333\"/>\n";
    out += "<text class=\"tick-label\" x=\"" + num(f.x0 - 8) + "\" y=\"" + num(f.py(y) + 4) +
           "\" text-anchor=\"end\">" + tick_label(y, ystep) + "</text>\n";
  }
  for (double x : xt) {
    const std::string px = num(f.px(x));
    out += "<line class=\"tick\" x1=\"" + px + "\" y1=\"" + num(f.y1) + "\" x2=\"" + px +
           "\" y2=\"" + num(f.y1 + 5) + "\" stroke=\"#333\"/>\n";
    out += "<text class=\"tick-label\" x=\"" + px + "\" y=\"" + num(f.y1 + 18) +
           "\" text-anchor=\"middle\">" + tick_label(x, xstep) + "</text>\n";
  }
  out += "<line class=\"axis\" x1=\"" + num(f.x0) + "\" y1=\"" + num(f.y1) + "\" x2=\"" +
         num(f.x1) + "\" y2=\"" + num(f.y1) + "\" stroke=\"#333\"/>\n";
  out += "<line class=\"axis\" x1=\"" + num(f.x0) + "\" y1=\"" + num(f.y0) + "\" x2=\"" +
         num(f.x0) + "\" y2=\"" + num(f.y1) + "\" stroke=\"#333\"/>\n";
}

void draw_series(std::string& out, const Frame& f, const PlotSeries& s) {
  std::string points, dots;
  int count = 0;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
    const std::string p = num(f.px(s.x[i])) + "," + num(f.py(s.y[i]));
    points += (points.empty() ? "" : " ") + p;
    ++count;
    dots += "<circle cx=\"" + num(f.px(s.x[i])) + "\" cy=\"" + num(f.py(s.y[i])) +
            "\" r=\"3\" fill=\"" + escape(s.color) + "\"/>\n";
  }
  out += "<polyline class=\"series\" data-name=\"" + escape(s.name) + "\" fill=\"none\" stroke=\"" +
         escape(s.color) + "\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n";
  // A single point draws no line, so it always gets its dot.
  if (s.markers || count == 1) out += dots;
}

void draw_legend(std::string& out, const Frame& f, const std::vector<PlotSeries>& series) {
  out += "<g class=\"legend\">\n";
  // A box behind the entries keeps them readable where a curve runs under them.
  const double x = f.x1 - 130;
  out += "<rect x=\"" + num(x - 8) + "\" y=\"" + num(f.y0 + 2) + "\" width=\"132\" height=\"" +
         num(16.0 * series.size() + 4) +
         "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
  double y = f.y0 + 14;
  for (const auto& s : series) {
    out += "<line x1=\"" + num(x) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(x + 20) +
           "\" y2=\"" + num(y - 4) + "\" stroke=\"" + escape(s.color) + "\" stroke-width=\"2\"/>\n";
    out += "<text x=\"" + num(x + 26) + "\" y=\"" + num(y) + "\">" + escape(s.name) + "</text>\n";
    y += 16;
  }
  out += "</g>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double frac = raw / mag * (1 + 1e-12);  // 0.3 / 0.1 is 2.9999999999999996
  // Rounded to the nearest of 1, 2, 5, 10 (Heckbert), so the count stays near target.
  const double step = (frac < 1.5 ? 1 : frac < 3 ? 2 : frac < 7 ? 5 : 10) * mag;
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last + 1e-9; k += 1) ticks.push_back(k * step);
  return ticks;
}

std::string render_svg(const std::string& title, const std::vector<PlotPanel>& panels,
                       const std::string& x_label) {
  std::vector<const PlotPanel*> shown;
  Range xr;
  for (const auto& p : panels) {
    if (!has_points(p)) continue;
    shown.push_back(&p);
    for (const auto& s : p.series) {
      for (double x : s.x) xr.add(x);
    }
  }
  xr.widen();
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, kTargetTicks + 3);
  const size_t n = std::max<size_t>(shown.size(), 1);
  const double height = kTop + n * kPanelHeight + (n - 1) * kPanelGap + kBottom;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"" + num(kWidth / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
         escape(title) + "</text>\n";
  double top = kTop;
  for (const PlotPanel* p : shown) {
    Range yr;
    for (const auto& s : p->series) {
      for (double y : s.y) yr.add(y);
    }
    yr.widen();
    const std::vector<double> yt = nice_ticks(yr.lo, yr.hi, kTargetTicks);
    const Frame f{kLeft,      kWidth - kRight, top,        top + kPanelHeight,
                  xt.front(), xt.back(),       yt.front(), yt.back()};
    out += "<g class=\"panel\" data-title=\"" + escape(p->title) + "\">\n";
    out += "<text x=\"" + num(f.x0) + "\" y=\"" + num(f.y0 - 8) + "\" font-weight=\"bold\">" +
           escape(p->title) + "</text>\n";
    draw_axes(out, f, xt, yt.size() > 1 ? yt : std::vector<double>{yt.front()});
    for (const auto& s : p->series) draw_series(out, f, s);
    draw_legend(out, f, p->series);
    out += "</g>\n";
    top += kPanelHeight + kPanelGap;
  }
  out += "<text x=\"" + num((kLeft + kWidth - kRight) / 2) + "\" y=\"" + num(height - 12) +
         "\" text-anchor=\"middle\">" + escape(x_label) + "</text>\n";
  if (shown.empty()) {
    out += "<text x=\"" + num(kWidth / 2) + "\" y=\"" + num(kTop + kPanelHeight / 2) +
           "\" text-anchor=\"middle\">no data</text>\n";
  }
  out += "</svg>\n";
  return out;
}

}  // namespace tessera::cli
