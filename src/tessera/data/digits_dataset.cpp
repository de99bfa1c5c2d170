#include "tessera/data/digits_dataset.h"

#include <ATen/ATen.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "tessera/core/check.h"

namespace tessera::data {
namespace {

constexpr int kPixels = 64;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

}  // namespace

DigitsDataset DigitsDataset::load(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> in(gzopen(path.c_str(), "rb"));
  TS_CHECK_T(ConfigError, in != nullptr, "cannot read the digits data '", path, "': ",
             std::strerror(errno), "; install Debian's python3-sklearn, which ships it, or point "
             "data.path at a copy of digits.csv.gz");
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  char line[1024];
  int64_t line_no = 0;
  while (gzgets(in.get(), line, sizeof(line)) != nullptr) {
    ++line_no;
    if (line[0] == '\n' || line[0] == '\0') continue;
    const char* p = line;
    for (int col = 0; col <= kPixels; ++col) {
      char* end = nullptr;
      const long v = std::strtol(p, &end, 10);
      const bool last = col == kPixels;
      const bool ok = end != p && (last ? (*end == '\n' || *end == '\0' || *end == '\r') : *end == ',');
      TS_CHECK_T(ConfigError, ok && v >= 0 && v <= (last ? 9 : 16), "digits data '", path,
                 "' line ", line_no, ", column ", col + 1, ": expected ",
                 last ? "a label 0-9 as the 65th value" : "a pixel value 0-16", " (64 pixels and "
                 "a label per line)");
      if (last) {
        labels.push_back(v);
      } else {
        pixels.push_back(static_cast<float>(v) / 16.0f);
      }
      p = end + 1;
    }
  }
  int err = 0;
  gzerror(in.get(), &err);
  TS_CHECK_T(ConfigError, err == Z_OK || err == Z_STREAM_END, "digits data '", path,
             "' is not a complete gzip file (zlib error ", err, ")");
  TS_CHECK_T(ConfigError, !labels.empty(), "digits data '", path, "' holds no images");
  DigitsDataset d;
  const int64_t n = static_cast<int64_t>(labels.size());
  d.images_ = at::from_blob(pixels.data(), {n, 1, 8, 8}, at::kFloat).clone();
  d.labels_ = at::from_blob(labels.data(), {n}, at::kLong).clone();
  return d;
}

DigitsDataset DigitsDataset::split(Split which) const {
  if (which == Split::kAll) return *this;
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < size(); ++i) {
    if ((i % 5 == 0) == (which == Split::kTest)) keep.push_back(i);
  }
  const auto index = at::tensor(keep, at::kLong);
  DigitsDataset d;
  d.images_ = images_.index_select(0, index);
  d.labels_ = labels_.index_select(0, index);
  return d;
}

}  // namespace tessera::data
