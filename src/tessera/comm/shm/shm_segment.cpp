#include "tessera/comm/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <random>

#include "tessera/core/check.h"

namespace tessera::comm::shm {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

constexpr uint64_t kPage = 4096;

}  // namespace

SegmentLayout::SegmentLayout(int n, uint64_t slot, uint64_t ring)
    : size(n), slot_bytes(slot), ring_bytes(ring) {
  control_offset = align_up(sizeof(SegmentHeader), 128);
  ring_control_offset = control_offset + sizeof(RankControl) * n;
  slots_offset = align_up(ring_control_offset + sizeof(RingControl) * n * n, kPage);
  rings_offset = slots_offset + slot_bytes * 2 * n;
  total_bytes = align_up(rings_offset + ring_bytes * n * n, kPage);
}

ShmSegment ShmSegment::create(const std::string& name, uint64_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  TS_CHECK_ERRNO(CommError, fd, "cannot create shared-memory segment ", name);
  ShmSegment seg;
  seg.name_ = name;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == -1) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    TS_THROW(CommError, "cannot size shared-memory segment ", name, " to ", bytes,
             " bytes: ", std::strerror(err), " (check free space in /dev/shm)");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    TS_THROW(CommError, "cannot map shared-memory segment ", name, ": ", std::strerror(err));
  }
  seg.base_ = static_cast<uint8_t*>(p);
  seg.bytes_ = bytes;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, uint64_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  TS_CHECK_ERRNO(CommError, fd, "cannot open shared-memory segment ", name,
                 " (did rank 0 of the group exit?)");
  struct stat st {};
  if (fstat(fd, &st) == -1 || static_cast<uint64_t>(st.st_size) < bytes) {
    close(fd);
    TS_THROW(CommError, "shared-memory segment ", name, " is smaller than the ", bytes,
             " bytes this rank expects (ranks built with different Tessera versions?)");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  TS_CHECK_T(CommError, p != MAP_FAILED, "cannot map shared-memory segment ", name, ": ",
             std::strerror(err));
  ShmSegment seg;
  seg.name_ = name;
  seg.base_ = static_cast<uint8_t*>(p);
  seg.bytes_ = bytes;
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : base_(o.base_), bytes_(o.bytes_), name_(std::move(o.name_)) {
  o.base_ = nullptr;
  o.bytes_ = 0;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    name_ = std::move(o.name_);
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

void ShmSegment::unlink() {
  if (!name_.empty()) shm_unlink(name_.c_str());
}

std::string make_segment_name(const std::string& group_name) {
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char hex[17];
  snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(r));
  std::string group;
  for (char c : group_name) {
    if (group.size() >= 64) break;
    group += (isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  }
  return "/" + std::string(kSegmentPrefix) + std::to_string(getpid()) + "-" + hex + "-" + group;
}

int cleanup_stale_segments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  const std::string prefix = kSegmentPrefix;
  while (struct dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH) {
      if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
    }
  }
  closedir(dir);
  return removed;
}

}  // namespace tessera::comm::shm
