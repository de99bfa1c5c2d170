#include "tessera/cli/commands/loss_plot.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/check.h"

namespace tessera::cli {
namespace {

PlotSeries series(const std::string& name, const std::string& color,
                  const std::map<double, double>& points, bool markers = false) {
  PlotSeries s{name, color, {}, {}, markers};
  for (const auto& [x, y] : points) {
    s.x.push_back(x);
    s.y.push_back(y);
  }
  return s;
}

void add_if(const nlohmann::json& j, const char* key, double step, std::map<double, double>& to) {
  auto it = j.find(key);
  if (it != j.end() && it->is_number()) to[step] = it->get<double>();
}

}  // namespace

MetricsSeries read_metrics(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK_T(ConfigError, in.good(), "cannot read metrics file '", path,
             "'; pass the output directory of a `tessera train` run (its train.out_dir)");
  MetricsSeries m;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    TS_CHECK_T(ConfigError, j.is_object() && j.contains("step") && j["step"].is_number(), path, ":",
               line_no,
               " is not a metrics record (a JSON object with a \"step\"): ", line.substr(0, 80));
    const double step = j["step"].get<double>();
    add_if(j, "loss", step, m.train_loss);
    add_if(j, "val_loss", step, m.eval_loss);
    add_if(j, "lr", step, m.lr);
    add_if(j, "tokens_per_s", step, m.tokens_per_s);
    add_if(j, "images_per_s", step, m.images_per_s);
  }
  return m;
}

std::vector<PlotPanel> loss_panels(const MetricsSeries& m) {
  std::vector<PlotPanel> panels = {
      {"loss",
       {series("train loss", "#1f77b4", m.train_loss),
        series("eval loss", "#ff7f0e", m.eval_loss, /*markers=*/true)}},
      {"learning rate", {series("lr", "#2ca02c", m.lr)}},
      {"throughput",
       {series("tokens/s", "#d62728", m.tokens_per_s),
        series("images/s", "#9467bd", m.images_per_s)}},
  };
  for (auto& p : panels) {
    auto& s = p.series;
    s.erase(std::remove_if(s.begin(), s.end(), [](const PlotSeries& x) { return x.x.empty(); }),
            s.end());
  }
  return panels;
}

void write_loss_plot(const std::string& metrics_path, const std::string& svg_path,
                     const std::string& title) {
  const MetricsSeries m = read_metrics(metrics_path);
  TS_CHECK_T(ConfigError, !m.empty(), "metrics file '", metrics_path,
             "' has no loss records yet; plot after the first steps_per_print steps");
  const std::string svg = render_svg(title, loss_panels(m), "step");
  const std::string tmp = svg_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << svg;
    out.close();
    TS_CHECK_T(ConfigError, out.good(), "cannot write plot file '", tmp,
               "'; check that its directory exists and is writable");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, svg_path, ec);
  TS_CHECK_T(ConfigError, !ec, "cannot rename '", tmp, "' to '", svg_path, "': ", ec.message());
}

void write_run_plot(const std::string& out_dir, const std::string& metrics_name) {
  const std::string svg = out_dir + "/loss.svg";
  try {
    write_loss_plot(out_dir + "/" + metrics_name, svg, "tessera train: " + out_dir);
    std::printf("loss plot: %s\n", svg.c_str());
  } catch (const Error& e) {
    std::printf("warning: no loss plot written: %s\n", e.what());
  }
}

}  // namespace tessera::cli
