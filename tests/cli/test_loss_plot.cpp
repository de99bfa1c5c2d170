// `tessera plot` and the loss plot `tessera train` writes: the SVG is well-formed
// XML (checked by a small strict parser here, no library), has axes, ticks and a
// legend, and each series' polyline points are an affine image of the data
// (x shared by every panel, y growing upwards). Also metrics.jsonl reading and
// the metrics-record -> monitor-scalar mapping of tessera train.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/loss_plot.h"
#include "tessera/cli/commands/svg_plot.h"
#include "tessera/cli/commands/train_monitor.h"
#include "tessera/core/error.h"
#include "testing/files.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// --- a strict, minimal XML parser: elements, attributes, text, entities ------

struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<XmlNode> children;
  std::string text;  // character data directly inside, entities decoded
};

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}

  XmlNode parse_document() {
    if (s_.compare(0, 5, "<?xml") == 0) {
      const size_t end = s_.find("?>");
      if (end == std::string::npos) fail("unterminated XML declaration");
      i_ = end + 2;
    }
    skip_space();
    XmlNode root = element();
    skip_space();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at offset " + std::to_string(i_));
  }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) ||
                              std::string(":_-.").find(s_[i_]) != std::string::npos)) {
      ++i_;
    }
    if (i_ == start) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  // Decodes one entity at s_[i_] == '&'; anything but the five XML ones and
  // numeric references is an error (an unescaped '&').
  std::string entity() {
    const size_t end = s_.find(';', i_);
    if (end == std::string::npos || end - i_ > 10) fail("bare '&'");
    const std::string e = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    static const std::map<std::string, std::string> known = {
        {"amp", "&"}, {"lt", "<"}, {"gt", ">"}, {"quot", "\""}, {"apos", "'"}};
    if (known.count(e)) return known.at(e);
    if (!e.empty() && e[0] == '#') return "?";
    fail("unknown entity &" + e + ";");
  }
  XmlNode element() {
    if (s_[i_] != '<') fail("expected '<'");
    ++i_;
    XmlNode node;
    node.name = name();
    for (;;) {
      skip_space();
      if (i_ >= s_.size()) fail("unterminated tag");
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return node;
      }
      if (s_[i_] == '>') {
        ++i_;
        break;
      }
      const std::string key = name();
      skip_space();
      if (s_[i_] != '=') fail("attribute without '='");
      ++i_;
      skip_space();
      const char quote = s_[i_];
      if (quote != '"' && quote != '\'') fail("unquoted attribute value");
      ++i_;
      std::string value;
      while (i_ < s_.size() && s_[i_] != quote) {
        if (s_[i_] == '<') fail("'<' in an attribute value");
        if (s_[i_] == '&') {
          value += entity();
        } else {
          value += s_[i_++];
        }
      }
      ++i_;
      if (!node.attrs.emplace(key, value).second) fail("duplicate attribute " + key);
    }
    for (;;) {
      if (i_ >= s_.size()) fail("unclosed <" + node.name + ">");
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        if (name() != node.name) fail("mismatched closing tag for <" + node.name + ">");
        skip_space();
        if (s_[i_] != '>') fail("bad closing tag");
        ++i_;
        return node;
      }
      if (s_[i_] == '<') {
        node.children.push_back(element());
      } else if (s_[i_] == '&') {
        node.text += entity();
      } else if (s_[i_] == '>') {
        fail("bare '>' in text");
      } else {
        node.text += s_[i_++];
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

void collect(const XmlNode& n, const std::string& tag, std::vector<const XmlNode*>& out) {
  if (n.name == tag) out.push_back(&n);
  for (const auto& c : n.children) collect(c, tag, out);
}

std::vector<const XmlNode*> all(const XmlNode& root, const std::string& tag) {
  std::vector<const XmlNode*> out;
  collect(root, tag, out);
  return out;
}

std::vector<std::pair<double, double>> points_of(const XmlNode& polyline) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(polyline.attrs.at("points"));
  std::string p;
  while (in >> p) {
    const size_t comma = p.find(',');
    out.emplace_back(std::stod(p.substr(0, comma)), std::stod(p.substr(comma + 1)));
  }
  return out;
}

// --- tests ------------------------------------------------------------------

TEST(SvgPlot, NiceTicksCoverTheRangeInRoundSteps) {
  const auto unit = nice_ticks(0, 1, 5);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * i, 1e-12);
  const auto t = nice_ticks(3.7, 5.2, 5);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_DOUBLE_EQ(t.front(), 3.5);
  EXPECT_DOUBLE_EQ(t.back(), 5.5);
  const auto big = nice_ticks(0, 12345, 5);
  EXPECT_DOUBLE_EQ(big[1] - big[0], 2000);
  EXPECT_GE(big.back(), 12345);
}

TEST(SvgPlot, XmlParserRejectsMalformedDocuments) {
  for (const std::string bad : {"<a><b></a>", "<a x=1/>", "<a>&</a>", "<a x=\"<\"/>", "<a/><b/>",
                                "<a x=\"1\" x=\"2\"/>", "<a>"}) {
    EXPECT_THROW(XmlParser(bad).parse_document(), std::runtime_error) << bad;
  }
  EXPECT_NO_THROW(
      XmlParser("<?xml version=\"1.0\"?>\n<a x='1'><b/>t &amp; u</a>\n").parse_document());
}

MetricsSeries sample_metrics() {
  MetricsSeries m;
  for (int s = 1; s <= 20; ++s) {
    m.train_loss[s] = 5.0 - 0.15 * s + 0.05 * std::sin(s);
    m.lr[s] = s <= 4 ? 1e-3 * s / 4 : 1e-3 * (1 - (s - 4) / 20.0);
    m.tokens_per_s[s] = 12000 + 300 * std::cos(s);
  }
  for (int s : {5, 10, 15, 20}) m.eval_loss[s] = 5.1 - 0.14 * s;
  return m;
}

TEST(LossPlot, SvgIsWellFormedWithAxesLegendAndTheDataAsPolylines) {
  const MetricsSeries m = sample_metrics();
  const std::string svg = render_svg("run <a & b>", loss_panels(m), "step");
  XmlNode root;
  ASSERT_NO_THROW(root = XmlParser(svg).parse_document()) << svg;
  EXPECT_EQ(root.name, "svg");
  EXPECT_EQ(root.attrs.at("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_TRUE(root.attrs.count("viewBox"));
  EXPECT_NE(svg.find("run &lt;a &amp; b&gt;"), std::string::npos);

  auto panels = all(root, "g");
  std::vector<std::string> titles;
  for (auto* g : panels) {
    if (g->attrs.count("class") && g->attrs.at("class") == "panel")
      titles.push_back(g->attrs.at("data-title"));
  }
  EXPECT_EQ(titles, (std::vector<std::string>{"loss", "learning rate", "throughput"}));

  int axes = 0, ticks = 0;
  for (auto* l : all(root, "line")) {
    if (!l->attrs.count("class")) continue;
    axes += l->attrs.at("class") == "axis";
    ticks += l->attrs.at("class") == "tick";
  }
  EXPECT_EQ(axes, 6);  // x and y per panel
  EXPECT_GE(ticks, 3 * 6);
  std::vector<std::string> legend;
  for (auto* g : panels) {
    if (g->attrs.count("class") && g->attrs.at("class") == "legend") {
      for (auto* t : all(*g, "text")) legend.push_back(t->text);
    }
  }
  EXPECT_EQ(legend, (std::vector<std::string>{"train loss", "eval loss", "lr", "tokens/s"}));
  int tick_labels = 0;
  for (auto* t : all(root, "text")) {
    if (t->attrs.count("class") && t->attrs.at("class") == "tick-label") {
      ++tick_labels;
      EXPECT_NO_THROW(std::stod(t->text)) << t->text;
    }
  }
  EXPECT_GE(tick_labels, 3 * 6);

  // Every polyline is an affine image of its series: x = a*step + b with one
  // (a, b) for the whole chart, y = c*value + d with c < 0 within each panel.
  std::map<std::string, const std::map<double, double>*> data = {{"train loss", &m.train_loss},
                                                                 {"eval loss", &m.eval_loss},
                                                                 {"lr", &m.lr},
                                                                 {"tokens/s", &m.tokens_per_s}};
  const auto lines = all(root, "polyline");
  ASSERT_EQ(lines.size(), 4u);
  auto train = points_of(*lines[0]);
  ASSERT_EQ(train.size(), 20u);
  const double a = (train.back().first - train.front().first) / (20 - 1);
  const double b = train.front().first - a * 1;
  EXPECT_GT(a, 0);
  double loss_c = 0, loss_d = 0;
  for (auto* line : lines) {
    const std::string name = line->attrs.at("data-name");
    ASSERT_TRUE(data.count(name)) << name;
    const auto pts = points_of(*line);
    const auto& series = *data.at(name);
    ASSERT_EQ(pts.size(), series.size()) << name;
    // Fit y from the extreme values, where pixel rounding matters least.
    size_t lo = 0, hi = 0, k = 0;
    std::vector<double> values;
    for (const auto& kv : series) values.push_back(kv.second);
    for (k = 0; k < values.size(); ++k) {
      if (values[k] < values[lo]) lo = k;
      if (values[k] > values[hi]) hi = k;
    }
    double c = (pts[hi].second - pts[lo].second) / (values[hi] - values[lo]);
    double d = pts[lo].second - c * values[lo];
    if (name == "eval loss") c = loss_c, d = loss_d;  // shares the loss panel's y axis
    if (name == "train loss") loss_c = c, loss_d = d;
    EXPECT_LT(c, 0) << name;
    size_t i = 0;
    for (const auto& [step, value] : series) {
      EXPECT_NEAR(pts[i].first, a * step + b, 0.02) << name << " step " << step;
      EXPECT_NEAR(pts[i].second, c * value + d, 0.02) << name << " step " << step;
      ++i;
    }
  }
}

TEST(LossPlot, ReadsMetricsJsonlKeepingTheLastRecordOfAStep) {
  testing::TempDir tmp("plot");
  const std::string path = tmp.path() + "/metrics.jsonl";
  std::ofstream(path) << R"({"step": 1, "loss": 5.0, "lr": 0.001, "tokens_per_s": 100.0}
{"step": 1, "param_bytes": 1000}
{"step": 2, "loss": 4.5, "lr": 0.002, "tokens_per_s": 110.0}
{"step": 2, "val_loss": 4.7}
{"step": 2, "loss": 4.4, "lr": 0.002, "tokens_per_s": 120.0}
)";
  const MetricsSeries m = read_metrics(path);
  EXPECT_EQ(m.train_loss, (std::map<double, double>{{1, 5.0}, {2, 4.4}}));
  EXPECT_EQ(m.eval_loss, (std::map<double, double>{{2, 4.7}}));
  EXPECT_EQ(m.tokens_per_s.at(2), 120.0);

  std::ofstream(path, std::ios::app) << "not json\n";
  try {
    read_metrics(path);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:6 is not a metrics record"),
              std::string::npos)
        << e.what();
  }
}

TEST(LossPlot, PlotCommandWritesTheSvg) {
  testing::TempDir tmp("plot_cmd");
  std::ofstream(tmp.path() + "/metrics.jsonl")
      << "{\"step\": 1, \"loss\": 3.0, \"lr\": 0.1}\n{\"step\": 2, \"loss\": 2.0, \"lr\": 0.1}\n";
  EXPECT_EQ(plot_command({tmp.path()}), 0);
  EXPECT_NO_THROW(XmlParser(testing::read_text_file(tmp.path() + "/loss.svg")).parse_document());
  const std::string other = tmp.path() + "/other.svg";
  EXPECT_EQ(plot_command({tmp.path(), "-o", other}), 0);
  EXPECT_TRUE(fs::exists(other));
  try {
    plot_command({tmp.path() + "/missing"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read metrics file"), std::string::npos)
        << e.what();
  }
}

TEST(TrainMonitor, MetricsRecordsBecomeScalarsKeyedBySamples) {
  const auto events = monitor_events(
      {{"step", 3}, {"loss", 2.5}, {"lr", 0.01}, {"tokens_per_s", 100.0}, {"comm_bytes", 7}}, 8);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].tag, "Train/Samples/train_loss");
  EXPECT_EQ(events[0].value, 2.5);
  EXPECT_EQ(events[0].step, 24);
  EXPECT_EQ(events[1].tag, "Train/Samples/lr");
  EXPECT_EQ(events[2].tag, "Train/Samples/tokens_per_s");
  const auto eval = monitor_events({{"step", 2}, {"val_loss", 4.0}}, 8);
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0].tag, "Train/Samples/eval_loss");
  const auto mem = monitor_events({{"step", 1}, {"peak_rss_bytes", 1e9}}, 8);
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_EQ(mem[0].tag, "Memory/Samples/peak_rss_bytes");
}

}  // namespace
}  // namespace tessera::cli
