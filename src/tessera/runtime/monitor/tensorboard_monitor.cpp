#include "tessera/runtime/monitor/tensorboard_monitor.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tensorboard_event.pb.h"  // generated at build time from tensorboard_event.proto
#include "tessera/core/check.h"
#include "tessera/runtime/monitor/monitor_file.h"
#include "tessera/runtime/monitor/tfrecord.h"

namespace tessera::runtime {
namespace {

// What TensorBoard's reader expects as the first record of a file.
constexpr const char* kFileVersion = "brain.Event:2";

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>: the time sorts the
// files of one directory; pid and a per-process counter keep two writers apart.
std::string event_file_name() {
  static std::atomic<int> counter{0};
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  char name[400];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%s.%d.%d",
                static_cast<long long>(wall_time()), host, static_cast<int>(getpid()),
                counter.fetch_add(1));
  return name;
}

std::string serialize(const tensorboard::Event& event) {
  std::string bytes;
  TS_INTERNAL_ASSERT(event.SerializeToString(&bytes));
  return bytes;
}

}  // namespace

TensorBoardMonitor::TensorBoardMonitor(const std::string& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  TS_CHECK(!ec, "cannot create the tensorboard directory '", log_dir, "': ", ec.message(),
           "; set tensorboard.output_path to a writable directory");
  file_ =
      std::make_unique<MonitorFile>((std::filesystem::path(log_dir) / event_file_name()).string());
  tensorboard::Event version;
  version.set_wall_time(wall_time());
  version.set_file_version(kFileVersion);
  file_->write(tfrecord_frame(serialize(version)));
  // A reader polling the directory sees a valid file from the start.
  file_->flush();
}

TensorBoardMonitor::~TensorBoardMonitor() = default;

void TensorBoardMonitor::write_events(const std::vector<MonitorEvent>& events) {
  const double now = wall_time();
  for (const MonitorEvent& e : events) {
    tensorboard::Event event;
    event.set_wall_time(now);
    event.set_step(e.step);
    tensorboard::Summary::Value* value = event.mutable_summary()->add_value();
    value->set_tag(e.tag);
    value->set_simple_value(static_cast<float>(e.value));
    file_->write(tfrecord_frame(serialize(event)));
  }
}

void TensorBoardMonitor::flush() { file_->flush(); }

const std::string& TensorBoardMonitor::path() const { return file_->path(); }

}  // namespace tessera::runtime
