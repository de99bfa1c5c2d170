// DigitsDataset: the 1,797 handwritten digits of 8 x 8 pixels that Debian's
// python3-sklearn ships (sklearn/datasets/data/digits.csv.gz, from the UCI
// optical digits set): a real image classification task small enough to train
// in seconds on a CPU.
//
// Each line of the gzip'd CSV holds 64 pixel values (0-16, row by row) and the
// label (0-9); the file is read with zlib. images() is [N, 1, 8, 8] float32
// scaled to [0, 1], labels() [N] int64. The split is fixed and needs no
// randomness: every fifth image (index % 5 == 0) is a test image (360), the
// rest train (1,437); the images come grouped by writer, so both splits hold
// every writer and every class.
//
// A plain value; the tensors are shared, not copied, by the accessors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace tessera::data {

// Where Debian's python3-sklearn installs the file.
inline constexpr const char* kDebianDigitsPath =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

class DigitsDataset {
 public:
  // ConfigError naming the path when it cannot be read (with the package to
  // install), and the line and column of a malformed value.
  static DigitsDataset load(const std::string& path = kDebianDigitsPath);

  enum class Split { kTrain, kTest, kAll };
  // The images and labels of one split (index % 5 == 0: test).
  DigitsDataset split(Split which) const;

  int64_t size() const { return labels_.defined() ? labels_.size(0) : 0; }
  const at::Tensor& images() const { return images_; }
  const at::Tensor& labels() const { return labels_; }

 private:
  at::Tensor images_;  // [N, 1, 8, 8]
  at::Tensor labels_;  // [N]
};

}  // namespace tessera::data
