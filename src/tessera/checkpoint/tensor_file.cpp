#include "tessera/checkpoint/tensor_file.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tessera/checkpoint/crc32c.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'T', 'N', 'S', 'R', '1'};
constexpr uint64_t kAlign = 64;
constexpr uint64_t kMaxIndexBytes = 1ull << 30;

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The dtypes a checkpoint may hold, by their c10 names.
const std::vector<at::ScalarType>& supported_dtypes() {
  static const std::vector<at::ScalarType> kTypes = {
      at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong,
      at::kInt,   at::kShort,  at::kChar, at::kByte,     at::kBool};
  return kTypes;
}

std::optional<at::ScalarType> dtype_from_name(const std::string& name) {
  for (auto t : supported_dtypes()) {
    if (name == c10::toString(t)) return t;
  }
  return std::nullopt;
}

using Fd = core::FdGuard;

// The entry's dtype, after checking that its shape, dtype and byte count agree and
// that its bytes lie inside a file of file_size bytes. Overflow-safe: a shape
// whose element count or any stride overflows int64 is refused here, before
// at::empty could see it.
at::ScalarType checked_dtype(const TensorEntry& e, uint64_t file_size, const std::string& source) {
  auto dtype = dtype_from_name(e.dtype);
  TS_CHECK_T(CheckpointError, dtype.has_value(), "checkpoint file ", source, ": tensor '", e.name,
             "' has unknown dtype '", e.dtype, "'");
  // span: the product of max(d, 1), the largest contiguous stride at::empty
  // computes; it bounds the element count too.
  int64_t numel = 1;
  int64_t span = 1;
  bool overflow = false;
  for (int64_t d : e.shape) {
    TS_CHECK_T(CheckpointError, d >= 0, "checkpoint file ", source, ": tensor '", e.name,
               "' has a negative dimension");
    overflow = overflow || __builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span);
    numel *= overflow ? 1 : d;
  }
  int64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, int64_t(c10::elementSize(*dtype)), &nbytes);
  TS_CHECK_T(CheckpointError, !overflow && static_cast<uint64_t>(nbytes) == e.nbytes,
             "checkpoint file ", source, ": tensor '", e.name,
             "' byte count does not match its shape and dtype");
  TS_CHECK_T(CheckpointError, e.offset <= file_size && e.nbytes <= file_size - e.offset,
             "checkpoint file ", source, ": tensor '", e.name,
             "' lies outside the file (truncated?)");
  return *dtype;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& contents, bool do_fsync) {
  core::replace_file_atomically<CheckpointError>(
      path, "checkpoint file", do_fsync,
      [&](const auto& write) { write(contents.data(), contents.size()); });
}

WrittenFile write_tensor_file(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              bool do_fsync) {
  return write_tensor_file(path, tensors, {}, do_fsync);
}

WrittenFile write_tensor_file(const std::string& path,
                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                              const std::vector<TensorPiece>& pieces, bool do_fsync) {
  WrittenFile out;
  std::vector<at::Tensor> cpu;
  std::vector<uint32_t> crcs;  // each tensor's checksum, read once for the file's too
  std::set<std::string> names;
  // A file may hold several pieces of one tensor (a tensor-parallel slice of
  // [q; k; v] is three ranges), each at its own offset.
  auto add = [&](const std::string& name, const at::Tensor& t, const std::string& key) {
    TS_CHECK(names.insert(key).second, "checkpoint tensor name '", name,
             "' is used twice in one file (at the same offset); names must be unique");
    TS_CHECK_T(CheckpointError, t.defined(), "checkpoint tensor '", name, "' is undefined");
    TS_CHECK_T(CheckpointError, dtype_from_name(c10::toString(t.scalar_type())).has_value(),
               "checkpoint tensor '", name, "' has dtype ", t.scalar_type(),
               " which checkpoints do not support");
    // A tensor whose storage is smaller than its shape (a released ZeRO stage-3
    // parameter) has no values to save: refuse it rather than read past the end.
    TS_CHECK_T(CheckpointError,
               t.numel() == 0 || !t.has_storage() ||
                   t.storage().nbytes() >= static_cast<size_t>((t.storage_offset() + 1) *
                                                               t.element_size()),
               "checkpoint tensor '", name, "' holds no memory (a parameter whose storage was ",
               "released); save the shards that hold its values instead");
    cpu.push_back(t.detach().to(at::kCPU).contiguous());
    TensorEntry e;
    e.name = name;
    e.dtype = c10::toString(t.scalar_type());
    e.shape = t.sizes().vec();
    e.nbytes = static_cast<uint64_t>(cpu.back().numel()) * cpu.back().element_size();
    crcs.push_back(crc32c(cpu.back().data_ptr(), e.nbytes));
    e.crc32c = crc32c_hex(crcs.back());
    out.tensors.push_back(e);
  };
  for (const auto& [name, t] : tensors) add(name, t, name);
  for (const auto& p : pieces) {
    TS_CHECK_T(CheckpointError, p.data.defined(), "checkpoint tensor '", p.name, "' is undefined");
    int64_t full = 1;
    for (int64_t d : p.full_shape) full *= d;
    TS_CHECK(p.flat_offset >= 0 && p.flat_offset + p.data.numel() <= full, "piece of '", p.name,
             "' at ", p.flat_offset, " with ", p.data.numel(), " elements lies outside its ",
             "full shape of ", full, " elements");
    add(p.name, p.data.reshape({-1}), p.name + "@" + std::to_string(p.flat_offset));
    auto& e = out.tensors.back();
    e.is_piece = true;
    e.full_shape = p.full_shape;
    e.flat_offset = p.flat_offset;
  }
  // The index holds offsets, which depend on the index's own length: lay out with
  // a generous reserved index size, then serialize once with final offsets.
  auto index_json = [&]() {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : out.tensors) {
      nlohmann::json j{{"name", e.name},
                       {"dtype", e.dtype},
                       {"shape", e.shape},
                       {"offset", e.offset},
                       {"nbytes", e.nbytes},
                       {"crc32c", e.crc32c}};
      if (e.is_piece) {
        j["full_shape"] = e.full_shape;
        j["flat_offset"] = e.flat_offset;
      }
      arr.push_back(std::move(j));
    }
    return nlohmann::json{{"tensors", arr}}.dump();
  };
  for (auto& e : out.tensors) e.offset = UINT64_MAX;  // widest number: upper bound on size
  const uint64_t index_len = index_json().size();
  uint64_t offset = align_up(16 + index_len);
  for (auto& e : out.tensors) {
    e.offset = offset;
    offset = align_up(offset + e.nbytes);
  }
  std::string index = index_json();
  index.resize(index_len, ' ');  // pad to the reserved length (JSON allows trailing spaces)
  uint32_t crc = 0;
  core::replace_file_atomically<CheckpointError>(
      path, "checkpoint file", do_fsync, [&](const auto& write) {
        std::string head(kMagic, 8);
        uint64_t len = index_len;
        head.append(reinterpret_cast<const char*>(&len), 8);
        head += index;
        head.resize(align_up(head.size()), '\0');
        write(head.data(), head.size());
        crc = crc32c_extend(crc, head.data(), head.size());
        uint64_t pos = head.size();
        for (size_t i = 0; i < cpu.size(); ++i) {
          const auto& e = out.tensors[i];
          if (pos < e.offset) {
            std::string pad(e.offset - pos, '\0');
            write(pad.data(), pad.size());
            crc = crc32c_extend(crc, pad.data(), pad.size());
            pos = e.offset;
          }
          write(cpu[i].data_ptr(), e.nbytes);
          crc = crc32c_combine(crc, crcs[i], e.nbytes);
          pos += e.nbytes;
        }
        out.size = pos;
      });
  out.crc = crc;
  return out;
}

namespace {

// The index length of a file whose first `avail` (>= 16 checked here) bytes are
// `head` and whose size is file_size.
uint64_t index_length(const char* head, size_t avail, uint64_t file_size,
                      const std::string& source) {
  TS_CHECK_T(CheckpointError, avail >= 16 && std::memcmp(head, kMagic, 8) == 0,
             "checkpoint file ", source, " is not a Tessera tensor file (bad magic)");
  uint64_t len = 0;
  std::memcpy(&len, head + 8, 8);
  TS_CHECK_T(CheckpointError, len <= kMaxIndexBytes && 16 + len <= file_size, "checkpoint file ",
             source, " has an index length ", len, " beyond its ", file_size,
             " bytes (truncated?)");
  return len;
}

// Parses the index in head[16, 16 + len) of a file of file_size bytes.
std::vector<TensorEntry> parse_index(const char* head, uint64_t len, uint64_t file_size,
                                     const std::string& source) {
  std::vector<TensorEntry> entries;
  const std::string where = "checkpoint file " + source;
  try {
    auto j = nlohmann::json::parse(head + 16, head + 16 + len);
    TS_CHECK_T(CheckpointError, j.is_object() && j.contains("tensors") && j["tensors"].is_array(),
               where, " has a malformed index: no \"tensors\" list");
    for (const auto& t : j["tensors"]) entries.push_back(tensor_entry_from_json(t, where));
  } catch (const nlohmann::json::exception& e) {
    TS_THROW(CheckpointError, where, " has a malformed index: ", e.what());
  }
  for (const auto& e : entries) checked_dtype(e, file_size, source);
  return entries;
}

// pread of exactly n bytes at offset; false if the file ends first.
bool read_at(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    TS_CHECK_ERRNO(CheckpointError, r, "cannot read checkpoint file ", path);
    if (r == 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::vector<TensorEntry> parse_tensor_index(const std::string& bytes, const std::string& source) {
  const uint64_t len = index_length(bytes.data(), bytes.size(), bytes.size(), source);
  return parse_index(bytes.data(), len, bytes.size(), source);
}

std::vector<TensorEntry> read_tensor_index(const std::string& path, uint64_t file_size) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK_ERRNO(CheckpointError, f.fd, "cannot open checkpoint file ", path);
  char head[16];
  const bool whole = read_at(f.fd, head, sizeof(head), 0, path);
  const uint64_t len = index_length(head, whole ? sizeof(head) : 0, file_size, path);
  std::string buf(16 + len, '\0');
  TS_CHECK_T(CheckpointError, read_at(f.fd, buf.data(), buf.size(), 0, path), "checkpoint file ",
             path, " ends inside its index (truncated)");
  return parse_index(buf.data(), len, file_size, path);
}

at::Tensor read_tensor(const std::string& path, const TensorEntry& entry) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK_ERRNO(CheckpointError, f.fd, "cannot open checkpoint file ", path, " to read tensor '",
                 entry.name, "'");
  struct stat st;
  TS_CHECK_ERRNO(CheckpointError, ::fstat(f.fd, &st), "cannot stat ", path);
  const at::ScalarType dtype = checked_dtype(entry, static_cast<uint64_t>(st.st_size), path);
  at::Tensor t = at::empty(entry.shape, at::TensorOptions().dtype(dtype));
  TS_CHECK_T(CheckpointError, read_at(f.fd, t.data_ptr(), entry.nbytes, entry.offset, path),
             "checkpoint file ", path, " ends inside tensor '", entry.name, "' (truncated)");
  if (!entry.crc32c.empty()) {
    const std::string crc = crc32c_hex(crc32c(t.data_ptr(), entry.nbytes));
    TS_CHECK_T(CheckpointError, crc == entry.crc32c, "checkpoint file ", path,
               " is corrupted: tensor '", entry.name, "' has CRC-32C ", crc, " but ",
               entry.crc32c, " was recorded");
  }
  return t;
}

at::Tensor tensor_from_bytes(const std::string& bytes, const TensorEntry& entry,
                             const std::string& source) {
  // Checked before allocating: the entry may not come from parse_tensor_index.
  const at::ScalarType dtype = checked_dtype(entry, bytes.size(), source);
  at::Tensor t = at::empty(entry.shape, at::TensorOptions().dtype(dtype));
  if (entry.nbytes > 0) std::memcpy(t.data_ptr(), bytes.data() + entry.offset, entry.nbytes);
  return t;
}

std::string read_file_bytes(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK_ERRNO(CheckpointError, f.fd, "cannot open checkpoint file ", path);
  struct stat st;
  TS_CHECK_ERRNO(CheckpointError, ::fstat(f.fd, &st), "cannot stat ", path);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(f.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    TS_CHECK_ERRNO(CheckpointError, n, "cannot read checkpoint file ", path);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace tessera::checkpoint
