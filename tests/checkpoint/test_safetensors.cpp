// safetensors files: every dtype round-trips bit-exactly, tensors are views of
// the file mapping that outlive the SafetensorsFile and never write back, every
// kind of malformed header is a CheckpointError naming the problem, writes are
// atomic, and the files agree with the safetensors Python library both ways.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::checkpoint {
namespace {

namespace fs = std::filesystem;
using tessera::testing::TempDir;

const std::vector<at::ScalarType> kAllDtypes = {
    at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,          at::kInt,
    at::kShort,  at::kChar,  at::kByte, at::kBool,     at::kFloat8_e4m3fn, at::kFloat8_e5m2};

// Deterministic values of `dtype`, exactly representable in it (quarters for the
// floats, wide multipliers for the integers so every byte of an element varies).
at::Tensor reference(at::ScalarType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const at::Tensor i = at::arange(n, at::kLong);
  at::Tensor v;
  if (dtype == at::kBool) {
    v = i.remainder(3).eq(0);
  } else if (dtype == at::kByte) {
    v = (i * 5).to(dtype);
  } else if (at::isIntegralType(dtype, /*includeBool=*/false)) {
    const int64_t mult = dtype == at::kLong    ? 1099511627791
                         : dtype == at::kInt   ? 70001
                         : dtype == at::kShort ? 301
                                               : 7;
    v = ((i - n / 2) * mult).to(dtype);
  } else {
    v = ((i.to(at::kDouble) - static_cast<double>(n / 2)) * 0.25).to(dtype);
  }
  return v.reshape(shape);
}

// A tensor's bytes, for bit-exact comparison (ATen has no equal() for float8).
std::string raw(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (c.nbytes() == 0) return "";
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

void expect_bits(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  EXPECT_EQ(got.scalar_type(), want.scalar_type()) << what;
  EXPECT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(raw(got) == raw(want)) << what << ": values differ";
}

// One tensor of each dtype, plus a 0-d, an empty and a 3-d one.
std::vector<std::pair<std::string, at::Tensor>> every_dtype() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto dtype : kAllDtypes) {
    out.emplace_back(safetensors_dtype_name(dtype), reference(dtype, {3, 4}));
  }
  out.emplace_back("scalar", reference(at::kDouble, {}));
  out.emplace_back("empty", reference(at::kFloat, {0, 3}));
  out.emplace_back("cube", reference(at::kInt, {2, 3, 4}));
  return out;
}

// The path of the mapped file that holds address p, "" if none: tells a view of
// the file from a copy.
std::string mapped_file_at(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    in >> std::hex >> lo >> dash >> hi;
    if (a < lo || a >= hi) continue;
    auto slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}

// The bytes of a safetensors file whose header is `header` (N = its length
// unless `length` overrides it), followed by `data_size` data bytes.
std::string craft(const std::string& header, size_t data_size, int64_t length = -1) {
  const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data_size, '\x11');
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

size_t count_entries(const std::string& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(Safetensors, EveryDtypeRoundTripsBitExactly) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/all.safetensors";
  const auto tensors = every_dtype();
  write_safetensors(path, tensors);

  auto file = SafetensorsFile::open(path);
  ASSERT_EQ(file.names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, want] = tensors[i];
    EXPECT_EQ(file.names()[i], name) << "names() keeps the written order";
    const auto& info = file.info(name);
    EXPECT_EQ(info.dtype, want.scalar_type()) << name;
    EXPECT_EQ(info.shape, want.sizes().vec()) << name;
    EXPECT_EQ(info.end - info.begin, static_cast<uint64_t>(want.nbytes())) << name;
    expect_bits(file.tensor(name), want, name);
  }
  EXPECT_TRUE(file.metadata().empty());
  // The header is padded with spaces to 8 bytes, so the data buffer is aligned.
  const std::string bytes = testing::read_text_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos) << "no metadata, no key";
}

TEST(Safetensors, DtypeNamesMapBothWays) {
  for (auto dtype : kAllDtypes) EXPECT_EQ(safetensors_dtype(safetensors_dtype_name(dtype)), dtype);
  EXPECT_EQ(safetensors_dtype_name(at::kFloat8_e4m3fn), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype_name(at::kBool), "BOOL");
  EXPECT_THROW(safetensors_dtype("F128"), CheckpointError);
  EXPECT_THROW(safetensors_dtype_name(at::kComplexFloat), CheckpointError);
}

TEST(Safetensors, MetadataRoundTrips) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/m.safetensors";
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"empty", ""}, {"unicode", "\xc3\xa9t\xc3\xa9"}, {"json", "{\"a\": 1}"}};
  write_safetensors(path, {{"w", at::ones({2})}}, metadata);
  EXPECT_EQ(SafetensorsFile::open(path).metadata(), metadata);
}

TEST(Safetensors, NonContiguousTensorsAreWrittenContiguous) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/t.safetensors";
  const at::Tensor base = reference(at::kFloat, {3, 5});
  write_safetensors(path, {{"t", base.t()}, {"step", base.slice(1, 0, 5, 2)}});
  auto file = SafetensorsFile::open(path);
  expect_bits(file.tensor("t"), base.t().contiguous(), "transposed");
  expect_bits(file.tensor("step"), base.slice(1, 0, 5, 2).contiguous(), "strided");
}

TEST(Safetensors, TensorsAreViewsOfTheMappingThatOutliveTheFile) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/z.safetensors";
  const at::Tensor want = reference(at::kFloat, {64, 64});
  write_safetensors(path, {{"w", want}});
  const std::string real = fs::canonical(path).string();

  at::Tensor t;
  {
    auto file = SafetensorsFile::open(path);
    t = file.tensor("w");
    EXPECT_EQ(mapped_file_at(t.data_ptr()), real) << "tensor() must not copy";
    EXPECT_EQ(file.tensor("w").data_ptr(), t.data_ptr());
  }
  // The SafetensorsFile is gone; the tensor keeps the mapping alive.
  EXPECT_EQ(mapped_file_at(t.data_ptr()), real);
  expect_bits(t, want, "after the file object is destroyed");
  const void* p = t.data_ptr();
  t.reset();
  EXPECT_NE(mapped_file_at(p), real) << "the last tensor releases the mapping";
}

TEST(Safetensors, EditsOfATensorAreCopyOnWrite) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/cow.safetensors";
  const at::Tensor want = reference(at::kFloat, {16, 16});
  write_safetensors(path, {{"w", want}});
  const std::string before = testing::read_text_file(path);
  {
    auto file = SafetensorsFile::open(path);
    at::Tensor t = file.tensor("w");
    t.fill_(42.0f);
    EXPECT_EQ(t[3][3].item<float>(), 42.0f);
  }
  EXPECT_TRUE(testing::read_text_file(path) == before) << "the edit reached the file";
  expect_bits(SafetensorsFile::open(path).tensor("w"), want, "after reopening");
}

TEST(Safetensors, SliceIsANarrowedView) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/s.safetensors";
  const at::Tensor want = reference(at::kBFloat16, {8, 6});
  write_safetensors(path, {{"w", want}});
  auto file = SafetensorsFile::open(path);
  const std::string real = fs::canonical(path).string();

  at::Tensor rows = file.slice("w", 0, 2, 3);
  expect_bits(rows, want.narrow(0, 2, 3), "rows 2..5");
  EXPECT_EQ(mapped_file_at(rows.data_ptr()), real) << "slice() must not copy";
  expect_bits(file.slice("w", 1, 4, 2), want.narrow(1, 4, 2), "columns 4..6");
  expect_bits(file.slice("w", 1, 6, 0), want.narrow(1, 6, 0), "empty slice at the end");

  for (auto [dim, start, length] : std::vector<std::array<int64_t, 3>>{
           {2, 0, 1}, {-1, 0, 1}, {0, 7, 2}, {0, -1, 1}, {1, 0, -1}, {1, 9, 0}}) {
    try {
      file.slice("w", dim, start, length);
      ADD_FAILURE() << "slice(" << dim << ", " << start << ", " << length << ") was accepted";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("shape [8, 6]"), std::string::npos) << e.what();
    }
  }
}

TEST(Safetensors, UnalignedTensorsComeBackAsAlignedCopies) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/u.safetensors";
  // One byte, then three floats at data offset 1: unaligned for F32.
  std::string header = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("f":{"dtype":"F32","shape":[3],"data_offsets":[1,13]}})";
  header.append((8 - header.size() % 8) % 8, ' ');  // data buffer 8-aligned, F32 at +1
  std::string bytes = craft(header, 0);
  const float values[3] = {1.5f, -2.0f, 3.25f};
  bytes += '\x07';
  bytes.append(reinterpret_cast<const char*>(values), sizeof(values));
  write_bytes(path, bytes);

  auto file = SafetensorsFile::open(path);
  at::Tensor f = file.tensor("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data_ptr()) % 4, 0u);
  EXPECT_EQ(mapped_file_at(f.data_ptr()), "") << "an unaligned tensor is a copy";
  expect_bits(f, at::tensor({1.5f, -2.0f, 3.25f}), "unaligned F32");
  expect_bits(file.slice("f", 0, 1, 2), at::tensor({-2.0f, 3.25f}), "unaligned slice");
  EXPECT_EQ(file.tensor("b").item<uint8_t>(), 7);
}

TEST(Safetensors, UnknownNamesListSomeThatExist) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/n.safetensors";
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (int i = 0; i < 8; ++i) tensors.emplace_back("layer." + std::to_string(i), at::ones({1}));
  write_safetensors(path, tensors);
  auto file = SafetensorsFile::open(path);
  EXPECT_FALSE(file.contains("nope"));
  EXPECT_TRUE(file.contains("layer.7"));
  try {
    file.tensor("nope");
    ADD_FAILURE() << "no error for an unknown name";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("has no tensor 'nope'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'layer.0', 'layer.1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("and 3 more"), std::string::npos) << msg;
  }
}

TEST(Safetensors, OpenNamesAMissingFileOrADirectory) {
  TempDir dir("safetensors");
  const std::vector<std::pair<std::string, const char*>> cases = {
      {dir.path() + "/missing.safetensors", "No such file"}, {dir.path(), "not a regular file"}};
  for (const auto& [path, problem] : cases) {
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << path << " opened";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(problem), std::string::npos) << e.what();
    }
  }
}

struct Malformed {
  const char* name;
  std::string bytes;
  const char* problem;  // the error must contain this
};

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

std::vector<Malformed> malformed_files() {
  const std::string a4 = entry("a", "F32", "[1]", "[0,4]");
  return {
      {"empty file", "", "truncated"},
      {"truncated length", std::string("\x10\x00\x00", 3), "truncated"},
      {"length beyond file", craft("{}", 4, 1000), "header length says 1000 bytes"},
      {"header not JSON", craft("{\"a\": nope}", 0), "not valid JSON"},
      {"header cut short", craft("{\"a\":{\"dtype\"", 0), "not valid JSON"},
      {"header not an object", craft("[1, 2]", 0), "not an object of tensors"},
      {"entry not an object", craft("{\"a\": 3}", 0), "not an object with dtype"},
      {"unknown dtype", craft("{" + entry("a", "F128", "[1]", "[0,16]") + "}", 16),
       "unknown dtype 'F128'"},
      {"missing dtype", craft(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "\"dtype\""},
      {"negative dim", craft("{" + entry("a", "F32", "[-1]", "[0,4]") + "}", 4),
       "not a non-negative integer"},
      {"fractional dim", craft("{" + entry("a", "F32", "[1.5]", "[0,4]") + "}", 4),
       "not a non-negative integer"},
      {"deeply nested shape",
       craft("{\"a\":{\"dtype\":\"F32\",\"shape\":" + std::string(100000, '[') +
                 std::string(100000, ']') + ",\"data_offsets\":[0,4]}}",
             4),
       "entry 0 is array"},
      {"missing offsets", craft(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "data_offsets"},
      {"three offsets", craft("{" + entry("a", "F32", "[1]", "[0,4,8]") + "}", 8), "data_offsets"},
      {"shape and bytes disagree", craft("{" + entry("a", "F32", "[3]", "[0,8]") + "}", 8),
       "needs 12 bytes"},
      {"size overflows",
       craft("{" + entry("a", "F32", "[4611686018427387904,4]", "[0,8]") + "}", 8),
       "more than 2^63"},
      {"offsets past the data", craft("{" + entry("a", "F32", "[4]", "[0,16]") + "}", 8),
       "outside the data buffer of 8 bytes"},
      {"offsets reversed", craft("{" + entry("a", "F32", "[0]", "[8,4]") + "}", 8),
       "outside the data buffer"},
      {"overlap",
       craft(
           "{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}",
           12),
       "overlap"},
      {"hole", craft("{" + a4 + "," + entry("b", "F32", "[1]", "[8,12]") + "}", 12),
       "[4, 8) before tensor 'b' belong to no tensor"},
      {"trailing bytes", craft("{" + a4 + "}", 12), "[4, 12) at the end belong to no tensor"},
      {"duplicate name", craft("{" + a4 + "," + a4 + "}", 4), "names 'a' twice"},
      {"metadata value not a string", craft("{\"__metadata__\":{\"step\":3}," + a4 + "}", 4),
       "value of 'step' is a number, not a string"},
      {"metadata not an object", craft("{\"__metadata__\":[1]," + a4 + "}", 4),
       "not an object of strings"},
  };
}

TEST(Safetensors, MalformedFilesAreCheckpointErrorsNamingTheProblem) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/bad.safetensors";
  for (const auto& m : malformed_files()) {
    write_bytes(path, m.bytes);
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << m.name << ": accepted";
    } catch (const CheckpointError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << m.name << ": " << msg;
      EXPECT_NE(msg.find(m.problem), std::string::npos) << m.name << ": " << msg;
    }
  }
}

TEST(Safetensors, EveryTruncationAndHeaderByteFlipIsSafe) {
  TempDir dir("safetensors");
  const std::string good = dir.path() + "/good.safetensors";
  const std::string bad = dir.path() + "/bad.safetensors";
  write_safetensors(good, {{"a", reference(at::kFloat, {3})}, {"b", reference(at::kLong, {2})}},
                    {{"k", "v"}});
  const std::string bytes = testing::read_text_file(good);
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(bad, bytes.substr(0, n));
    EXPECT_THROW(SafetensorsFile::open(bad), CheckpointError) << "truncated to " << n << " bytes";
  }
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  // A flipped byte may still leave a valid file; it must never crash or read
  // past the end, so every tensor of a file that opens is read.
  for (size_t i = 0; i < 8 + header; ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x24);
    write_bytes(bad, flipped);
    try {
      auto file = SafetensorsFile::open(bad);
      for (const auto& name : file.names()) file.tensor(name).sum();
    } catch (const CheckpointError&) {
    }
  }
}

TEST(Safetensors, WriteRefusesBadInputBeforeWritingAnything) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/w.safetensors";
  const at::Tensor ok = at::ones({2});
  const std::vector<std::pair<const char*, std::vector<std::pair<std::string, at::Tensor>>>> cases =
      {
          {"used twice", {{"a", ok}, {"a", ok}}},
          {"reserved for metadata", {{"__metadata__", ok}}},
          {"name is empty", {{"", ok}}},
          {"undefined", {{"a", at::Tensor()}}},
          {"writes CPU tensors", {{"a", at::empty({2}, at::device(at::kMeta))}}},
          {"to_dense", {{"a", at::ones({2, 2}).to_sparse()}}},
          {"has no safetensors name", {{"a", at::ones({2}, at::kComplexFloat)}}},
          {"not valid UTF-8", {{"bad\xff", ok}}},
      };
  for (const auto& [problem, tensors] : cases) {
    try {
      write_safetensors(path, tensors);
      ADD_FAILURE() << problem << ": accepted";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(problem), std::string::npos) << e.what();
    }
    EXPECT_EQ(count_entries(dir.path()), 0u) << problem << ": left a file behind";
  }
}

TEST(Safetensors, WriteReplacesAnExistingFileWhole) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/r.safetensors";
  const at::Tensor big = reference(at::kDouble, {256, 64});
  const at::Tensor small = reference(at::kShort, {5});
  write_safetensors(path, {{"big", big}});
  auto old_file = SafetensorsFile::open(path);
  write_safetensors(path, {{"small", small}}, {{"v", "2"}});

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names(), std::vector<std::string>{"small"});
  expect_bits(file.tensor("small"), small, "new contents");
  EXPECT_EQ(file.metadata().at("v"), "2");
  const std::string bytes = testing::read_text_file(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(bytes.size(), 8 + header + small.nbytes()) << "bytes of the old file remain";
  EXPECT_EQ(count_entries(dir.path()), 1u) << "a temporary file was left behind";
  // A file replaced by rename leaves an earlier mapping on the old contents.
  expect_bits(old_file.tensor("big"), big, "the old mapping");
}

// Lowers the file-size limit so that writes past `bytes` fail with EFBIG (and
// SIGXFSZ is ignored rather than fatal), restoring both when destroyed.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lowered = old_;
    lowered.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

TEST(Safetensors, AFailedWriteLeavesNoFileAndKeepsTheOldOne) {
  TempDir dir("safetensors");
  const std::string path = dir.path() + "/f.safetensors";
  const at::Tensor large = reference(at::kFloat, {512, 512});  // 1 MiB
  auto fail_writing = [&] {
    FileSizeLimit limit(64 * 1024);
    try {
      write_safetensors(path, {{"large", large}});
      ADD_FAILURE() << "the write past the file-size limit succeeded";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot write safetensors file"), std::string::npos)
          << e.what();
    }
  };
  fail_writing();
  EXPECT_EQ(count_entries(dir.path()), 0u) << "a failed write left a file behind";

  const at::Tensor old = reference(at::kInt, {4});
  write_safetensors(path, {{"old", old}});
  const std::string before = testing::read_text_file(path);
  fail_writing();
  EXPECT_EQ(count_entries(dir.path()), 1u) << "a failed write left a temporary file behind";
  EXPECT_TRUE(testing::read_text_file(path) == before) << "a failed write changed the old file";
}

// --- Interoperability with the safetensors Python library ------------------------------

// A spec the Python side builds tensors from and checks them against: name,
// dtype, shape and the exact values (integers as integers, floats as doubles that
// are exact in their dtype).
nlohmann::json spec_of(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, t] : tensors) {
    const at::ScalarType dtype = t.scalar_type();
    nlohmann::json values = nlohmann::json::array();
    const at::Tensor flat = t.reshape({-1});
    if (dtype == at::kBool) {
      for (int64_t i = 0; i < flat.numel(); ++i) values.push_back(flat[i].item<bool>());
    } else if (at::isIntegralType(dtype, false)) {
      const at::Tensor l = flat.to(at::kLong);
      for (int64_t i = 0; i < l.numel(); ++i) values.push_back(l[i].item<int64_t>());
    } else {
      const at::Tensor d = flat.to(at::kDouble);
      for (int64_t i = 0; i < d.numel(); ++i) values.push_back(d[i].item<double>());
    }
    list.push_back({{"name", name},
                    {"dtype", safetensors_dtype_name(dtype)},
                    {"shape", t.sizes().vec()},
                    {"values", values}});
  }
  return {{"tensors", list}, {"metadata", metadata}};
}

// Runs tests/checkpoint/safetensors_interop.py MODE SPEC FILE with TESSERA_PYTHON.
void run_python(const std::string& mode, const std::string& spec, const std::string& file) {
  const std::string problem = testing::python_import_problem("safetensors.torch");
  ASSERT_TRUE(problem.empty()) << problem;
  auto r = testing::run_command(testing::python_bin() + " " +
                                    testing::source_path("tests/checkpoint/safetensors_interop.py") +
                                    " " + mode + " " + spec + " " + file + " 2>&1",
                                120);
  ASSERT_EQ(r.exit_code, 0) << "safetensors_interop.py " << mode << " failed:\n" << r.output;
}

const std::map<std::string, std::string> kInteropMetadata = {{"format", "pt"},
                                                             {"producer", "tessera test"}};

TEST(SafetensorsInterop, TesseraReadsWhatPythonWrote) {
  TempDir dir("safetensors");
  const std::string spec = dir.path() + "/spec.json";
  const std::string file = dir.path() + "/py.safetensors";
  const auto tensors = every_dtype();
  std::ofstream(spec) << spec_of(tensors, kInteropMetadata).dump();
  run_python("write", spec, file);

  auto f = SafetensorsFile::open(file);
  EXPECT_EQ(f.metadata(), kInteropMetadata);
  EXPECT_EQ(f.names().size(), tensors.size());
  for (const auto& [name, want] : tensors) expect_bits(f.tensor(name), want, name);
}

TEST(SafetensorsInterop, PythonReadsWhatTesseraWrote) {
  TempDir dir("safetensors");
  const std::string spec = dir.path() + "/spec.json";
  const std::string file = dir.path() + "/cpp.safetensors";
  const auto tensors = every_dtype();
  write_safetensors(file, tensors, kInteropMetadata);
  std::ofstream(spec) << spec_of(tensors, kInteropMetadata).dump();
  run_python("check", spec, file);
}

}  // namespace
}  // namespace tessera::checkpoint
