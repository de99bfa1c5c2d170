// Monitors (runtime/monitor/): TFRecord framing and its masked CRC-32C against a
// bitwise reference, TensorBoard event files read back by an independent reader
// (tfevents_reader.h) that checks every CRC, DeepSpeed-style CSV files byte for
// byte, the "tensorboard"/"csv_monitor" config sections, and rank-0-only writing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/tfevents_reader.h"
#include "tessera/core/error.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/monitor/csv_monitor.h"
#include "tessera/runtime/monitor/monitor_fanout.h"
#include "tessera/runtime/monitor/tensorboard_monitor.h"
#include "tessera/runtime/monitor/tfrecord.h"
#include "testing/files.h"

namespace tessera::runtime {
namespace {

namespace fs = std::filesystem;
using testing::read_text_file;
using testing::TempDir;

TEST(TfRecord, MaskedCrcMatchesTheReference) {
  const std::string check = "123456789";
  EXPECT_EQ(testing::reference_crc32c(check.data(), check.size()),
            0xe3069283u);  // CRC-32C check value
  for (const std::string& s : {std::string(), check, std::string(1000, 'x')}) {
    EXPECT_EQ(masked_crc32c(s.data(), s.size()),
              testing::reference_masked_crc32c(s.data(), s.size()));
  }
}

TEST(TfRecord, FrameIsLengthCrcPayloadCrc) {
  const std::string payload = "hello";
  const std::string f = tfrecord_frame(payload);
  ASSERT_EQ(f.size(), payload.size() + 16);
  EXPECT_EQ(f.substr(0, 8), std::string("\x05\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(f.substr(12, 5), payload);
  uint32_t len_crc, data_crc;
  std::memcpy(&len_crc, f.data() + 8, 4);
  std::memcpy(&data_crc, f.data() + 17, 4);
  EXPECT_EQ(len_crc, testing::reference_masked_crc32c(f.data(), 8));
  EXPECT_EQ(data_crc, testing::reference_masked_crc32c(payload.data(), payload.size()));
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TensorBoardMonitor, EventFileReadsBackWithEveryCrcChecked) {
  TempDir tmp("tb");
  const fs::path dir = fs::path(tmp.path()) / "logs" / "job";
  std::string path;
  {
    TensorBoardMonitor tb(dir.string());
    path = tb.path();
    tb.write_events({{"Train/Samples/train_loss", 5.25, 8}, {"Train/Samples/lr", 1e-3, 8}});
    tb.write_events({{"Train/Samples/train_loss", 4.0625, 16}});
    tb.flush();
    // Flushed data is readable while the monitor is still open.
    EXPECT_EQ(testing::read_tfevents(path).records, 4);
    tb.write_events({{"Memory/Samples/peak_rss_bytes", 123456789.0, 16}});
  }
  const auto files = files_in(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u) << files[0];
  const testing::TfEventFile f = testing::read_tfevents(path);
  EXPECT_EQ(f.records, 5);
  EXPECT_EQ(f.file_version, "brain.Event:2");
  ASSERT_EQ(f.scalars.size(), 4u);
  EXPECT_EQ(f.scalars[0].tag, "Train/Samples/train_loss");
  EXPECT_EQ(f.scalars[0].step, 8);
  EXPECT_EQ(f.scalars[0].value, 5.25f);
  EXPECT_EQ(f.scalars[1].tag, "Train/Samples/lr");
  EXPECT_EQ(f.scalars[1].value, 1e-3f);
  EXPECT_EQ(f.scalars[2].step, 16);
  EXPECT_EQ(f.scalars[2].value, 4.0625f);
  EXPECT_EQ(f.scalars[3].value, 123456789.0f);
  EXPECT_GT(f.scalars[0].wall_time, 1.6e9);  // seconds since the epoch
}

TEST(TensorBoardMonitor, ReaderRejectsAFlippedBit) {
  TempDir tmp("tb_crc");
  std::string path;
  {
    TensorBoardMonitor tb(tmp.path());
    path = tb.path();
    tb.write_events({{"a", 1.0, 1}});
  }
  std::string bytes = read_text_file(path);
  bytes[bytes.size() - 6] ^= 0x01;  // inside the last payload
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_THROW(testing::read_tfevents(path), std::runtime_error);
}

TEST(TensorBoardMonitor, UnwritableDirectoryIsAClearError) {
  try {
    TensorBoardMonitor tb("/proc/tessera_no_such_dir/job");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensorboard.output_path"), std::string::npos) << e.what();
  }
}

TEST(CsvMonitor, FormatsValuesLikePythonStr) {
  EXPECT_EQ(CsvMonitor::format_value(2.0), "2.0");
  EXPECT_EQ(CsvMonitor::format_value(0.001), "0.001");
  EXPECT_EQ(CsvMonitor::format_value(1e-5), "1e-05");
  EXPECT_EQ(CsvMonitor::format_value(0.0001), "0.0001");
  EXPECT_EQ(CsvMonitor::format_value(5.541224956512451), "5.541224956512451");
  EXPECT_EQ(CsvMonitor::format_value(-123.5), "-123.5");
  EXPECT_EQ(CsvMonitor::format_value(1e16), "1e+16");
  EXPECT_EQ(CsvMonitor::format_value(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(CsvMonitor::format_value(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(CsvMonitor::format_value(1.5e300), "1.5e+300");
  EXPECT_EQ(CsvMonitor::format_value(std::nan("")), "nan");
  EXPECT_EQ(CsvMonitor::format_value(-INFINITY), "-inf");
  // The text reads back as the same double.
  for (double v : {0.1, 1.0 / 3, 2.5e-7, 98765.4321}) {
    EXPECT_EQ(std::stod(CsvMonitor::format_value(v)), v);
  }
}

TEST(CsvMonitor, OneFilePerTagAsDeepSpeedWritesThem) {
  TempDir tmp("csv");
  const fs::path dir = fs::path(tmp.path()) / "job";
  {
    CsvMonitor csv(dir.string());
    csv.write_events({{"Train/Samples/train_loss", 5.5, 8}, {"Train/Samples/lr", 0.001, 8}});
    csv.write_events({{"Train/Samples/train_loss", 4.25, 16}, {"my metric, v2", 1.0, 16}});
    csv.flush();
    EXPECT_EQ(read_text_file((dir / "Train_Samples_train_loss.csv").string()),
              "step,train_loss\r\n8,5.5\r\n16,4.25\r\n");
  }
  EXPECT_EQ(read_text_file((dir / "Train_Samples_lr.csv").string()), "step,lr\r\n8,0.001\r\n");
  // A header holding the delimiter is quoted (RFC 4180); ' ' becomes '_' in the name.
  EXPECT_EQ(read_text_file((dir / "my_metric,_v2.csv").string()),
            "step,\"my metric, v2\"\r\n16,1.0\r\n");
  EXPECT_EQ(files_in(dir).size(), 3u);
  // A resumed run appends rows, not a second header.
  {
    CsvMonitor csv(dir.string());
    csv.write_events({{"Train/Samples/train_loss", 3.0, 24}});
  }
  EXPECT_EQ(read_text_file((dir / "Train_Samples_train_loss.csv").string()),
            "step,train_loss\r\n8,5.5\r\n16,4.25\r\n24,3.0\r\n");
  CsvMonitor csv(dir.string());
  EXPECT_THROW(csv.write_events({{"", 1.0, 1}}), Error);
}

std::string config_error(const std::string& text) {
  try {
    Config::from_string(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MonitorConfig, ParsesDeepSpeedSections) {
  const Config none = Config::from_string("{}");
  EXPECT_FALSE(none.monitor.enabled());
  const Config c = Config::from_string(R"({
    "tensorboard": {"enabled": true, "output_path": "/tmp/logs", "job_name": "gpt"},
    "csv_monitor": {"enabled": true}})");
  EXPECT_TRUE(c.monitor.enabled());
  EXPECT_TRUE(c.monitor.tensorboard.enabled);
  EXPECT_EQ(c.monitor.tensorboard.log_dir("/out"), "/tmp/logs/gpt");
  EXPECT_TRUE(c.monitor.csv_monitor.enabled);
  EXPECT_EQ(c.monitor.csv_monitor.log_dir("/out"), "/out/tessera");  // empty output_path
  EXPECT_EQ(c.monitor.csv_monitor.log_dir(""), "./tessera");

  EXPECT_NE(config_error(R"({"tensorboard": {"enable": true}})")
                .find("unknown config key 'tensorboard.enable'; did you mean 'enabled'"),
            std::string::npos)
      << config_error(R"({"tensorboard": {"enable": true}})");
  EXPECT_NE(config_error(R"({"csv_monitor": {"enabled": "yes"}})").find("csv_monitor.enabled"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"tensorboard": {"job_name": ""}})")
                .find("tensorboard.job_name' must not be empty"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"tensorbord": {}})").find("did you mean 'tensorboard'"),
            std::string::npos);
}

TEST(MonitorFanout, OnlyRankZeroWritesToEveryMonitor) {
  TempDir tmp("fanout");
  MonitorConfig cfg;
  cfg.tensorboard.enabled = cfg.csv_monitor.enabled = true;
  cfg.tensorboard.job_name = "tb";
  cfg.csv_monitor.job_name = "csv";
  auto other = make_monitor(cfg, 1, tmp.path());
  EXPECT_TRUE(other->empty());
  other->write_events({{"x", 1.0, 1}});
  EXPECT_TRUE(files_in(tmp.path()).empty());

  auto m = make_monitor(cfg, 0, tmp.path());
  EXPECT_FALSE(m->empty());
  m->write_events({{"Train/Samples/train_loss", 2.5, 4}});
  m->flush();
  const auto tb = files_in(fs::path(tmp.path()) / "tb");
  ASSERT_EQ(tb.size(), 1u);
  const auto f = testing::read_tfevents(tb[0].string());
  ASSERT_EQ(f.scalars.size(), 1u);
  EXPECT_EQ(f.scalars[0].value, 2.5f);
  EXPECT_EQ(
      read_text_file((fs::path(tmp.path()) / "csv" / "Train_Samples_train_loss.csv").string()),
      "step,train_loss\r\n4,2.5\r\n");
}

}  // namespace
}  // namespace tessera::runtime
