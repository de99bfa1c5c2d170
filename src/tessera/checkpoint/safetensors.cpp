#include "tessera/checkpoint/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"
#include "tessera/core/file_io.h"

namespace tessera::checkpoint {

// Tensor bytes are copied between memory and the file as they are, and the format
// is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

using Json = nlohmann::json;

namespace {

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kDamaged =
    "the file is damaged or was not written as a safetensors file; "
    "export or download it again";

struct DtypeName {
  at::ScalarType dtype;
  const char* name;
};

const std::vector<DtypeName>& dtype_table() {
  static const std::vector<DtypeName> kTable = {{at::kDouble, "F64"},
                                                {at::kFloat, "F32"},
                                                {at::kHalf, "F16"},
                                                {at::kBFloat16, "BF16"},
                                                {at::kLong, "I64"},
                                                {at::kInt, "I32"},
                                                {at::kShort, "I16"},
                                                {at::kChar, "I8"},
                                                {at::kByte, "U8"},
                                                {at::kBool, "BOOL"},
                                                {at::kFloat8_e4m3fn, "F8_E4M3"},
                                                {at::kFloat8_e5m2, "F8_E5M2"}};
  return kTable;
}

std::string supported_names() {
  std::string s;
  for (const auto& d : dtype_table()) s += (s.empty() ? "" : " ") + std::string(d.name);
  return s;
}

const char* find_name(at::ScalarType dtype) {
  for (const auto& d : dtype_table()) {
    if (d.dtype == dtype) return d.name;
  }
  return nullptr;
}

std::optional<at::ScalarType> find_dtype(const std::string& name) {
  for (const auto& d : dtype_table()) {
    if (name == d.name) return d.dtype;
  }
  return std::nullopt;
}

// Throws CheckpointError "safetensors file PATH: <parts>" when cond is false.
template <typename... Parts>
void check_file(bool cond, const std::string& path, const Parts&... parts) {
  if (C10_UNLIKELY(!cond)) TS_THROW(CheckpointError, "safetensors file ", path, ": ", parts...);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string range_string(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

struct Header {
  Json json;
  std::vector<std::string> keys;  // top-level keys in the order of the file
};

// Parses the N header bytes. The parser's callback records the top-level keys in
// file order (an ordered JSON object would cost a linear search per key), and
// refuses a key given twice: JSON parsers keep one of them silently, and the
// other tensor's bytes would become a hole.
Header parse_header(const char* begin, uint64_t size, const std::string& path) {
  Header h;
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (seen.insert(key).second) {
        h.keys.push_back(key);
      } else if (duplicate.empty()) {
        duplicate = key;
      }
    }
    return true;
  };
  try {
    h.json = Json::parse(begin, begin + size, on_event);
  } catch (const Json::parse_error& e) {
    TS_THROW(CheckpointError, "safetensors file ", path, ": its header (", size,
             " bytes after the length) is not valid JSON (", e.what(), "); ", kDamaged);
  }
  check_file(h.json.is_object(), path, "its header is JSON but not an object of tensors; ",
             kDamaged);
  check_file(duplicate.empty(), path, "its header names '", duplicate, "' twice; ", kDamaged);
  return h;
}

std::map<std::string, std::string> parse_metadata(const Json& j, const std::string& path) {
  std::map<std::string, std::string> out;
  if (j.is_null()) return out;
  check_file(j.is_object(), path, kMetadataKey, " is a ", j.type_name(),
             ", not an object of strings; ", kDamaged);
  for (const auto& [key, value] : j.items()) {
    check_file(value.is_string(), path, kMetadataKey, " value of '", key, "' is a ",
               value.type_name(), ", not a string (safetensors metadata maps strings to ",
               "strings: store other values as strings, e.g. JSON text)");
    out[key] = value.get<std::string>();
  }
  return out;
}

// The number of bytes `shape` of `dtype` spans, refusing shapes whose element
// count or contiguous strides (a product of max(d, 1), which ATen computes even
// for an empty tensor) overflow int64.
std::optional<uint64_t> shape_bytes(const std::vector<int64_t>& shape, at::ScalarType dtype) {
  int64_t numel = 1;
  int64_t span = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span)) return std::nullopt;
    numel *= d;  // |numel| <= span: cannot overflow once span did not
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, int64_t(c10::elementSize(dtype)), &nbytes)) return std::nullopt;
  return static_cast<uint64_t>(nbytes);
}

std::vector<int64_t> parse_shape(const Json& j, const std::string& name, const std::string& path) {
  check_file(j.is_array(), path, "tensor '", name, "' has no \"shape\" array; ", kDamaged);
  std::vector<int64_t> shape;
  for (const auto& d : j) {
    // Only a primitive is printed: dumping a hostile, deeply nested value recurses.
    check_file(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), path, "tensor '",
               name, "' has a shape whose entry ", shape.size(), " is ",
               d.is_primitive() ? d.dump() : std::string(d.type_name()),
               ", not a non-negative integer; ", kDamaged);
    shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return shape;
}

// One tensor's entry, checked on its own: dtype, shape, and a byte range inside
// a data buffer of data_size bytes that matches shape x element size.
SafetensorsInfo parse_entry(const std::string& name, const Json& j, uint64_t data_size,
                            const std::string& path) {
  check_file(j.is_object(), path, "the header entry of tensor '", name, "' is a ", j.type_name(),
             ", not an object with dtype, shape and data_offsets; ", kDamaged);
  SafetensorsInfo e;
  e.name = name;
  auto dtype = j.find("dtype");
  check_file(dtype != j.end() && dtype->is_string(), path, "tensor '", name,
             "' has no \"dtype\" string; ", kDamaged);
  auto found = find_dtype(dtype->get<std::string>());
  check_file(found.has_value(), path, "tensor '", name, "' has unknown dtype '",
             dtype->get<std::string>(), "' (supported: ", supported_names(),
             "); convert the tensor to one of these before saving it");
  e.dtype = *found;
  auto shape = j.find("shape");
  e.shape = parse_shape(shape == j.end() ? Json() : *shape, name, path);
  auto offsets = j.find("data_offsets");
  check_file(offsets != j.end() && offsets->is_array() && offsets->size() == 2 &&
                 (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
             path, "tensor '", name, "' has no \"data_offsets\" pair of non-negative integers; ",
             kDamaged);
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  check_file(e.begin <= e.end && e.end <= data_size, path, "tensor '", name, "' has data_offsets ",
             range_string(e.begin, e.end), " outside the data buffer of ", data_size,
             " bytes (truncated?); ", kDamaged);
  auto nbytes = shape_bytes(e.shape, e.dtype);
  check_file(nbytes.has_value() && *nbytes == e.end - e.begin, path, "tensor '", name,
             "' of shape ", shape_string(e.shape), " and dtype ", dtype->get<std::string>(),
             " needs ", nbytes ? std::to_string(*nbytes) : std::string("more than 2^63"),
             " bytes, but its data_offsets ", range_string(e.begin, e.end), " hold ",
             e.end - e.begin, "; ", kDamaged);
  return e;
}

// The tensors must tile the data buffer: sorted by offset, each begins where the
// previous one ended, and the last ends at the end of the buffer.
void check_coverage(const std::vector<SafetensorsInfo>& infos, uint64_t data_size,
                    const std::string& path) {
  std::vector<const SafetensorsInfo*> sorted;
  for (const auto& e : infos) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::make_pair(a->begin, a->end) < std::make_pair(b->begin, b->end);
  });
  uint64_t covered = 0;
  const SafetensorsInfo* previous = nullptr;
  for (const auto* e : sorted) {
    check_file(e->begin >= covered, path, "tensors '", previous ? previous->name : "", "' ",
               previous ? range_string(previous->begin, previous->end) : "", " and '", e->name,
               "' ", range_string(e->begin, e->end), " overlap in the data buffer; ", kDamaged);
    check_file(e->begin == covered, path, "data bytes ", range_string(covered, e->begin),
               " before tensor '", e->name, "' belong to no tensor (a hole); ", kDamaged);
    covered = e->end;
    previous = e;
  }
  check_file(covered == data_size, path, "data bytes ", range_string(covered, data_size),
             " at the end belong to no tensor (", data_size - covered, " trailing bytes); ",
             kDamaged);
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype) {
  if (const char* name = find_name(dtype)) return name;
  TS_THROW(CheckpointError, "dtype ", dtype, " has no safetensors name (the format has ",
           supported_names(), "); convert the tensor to one of these first");
}

at::ScalarType safetensors_dtype(const std::string& name) {
  auto found = find_dtype(name);
  TS_CHECK_T(CheckpointError, found.has_value(), "unknown safetensors dtype '", name,
             "' (supported: ", supported_names(), ")");
  return *found;
}

// The whole file, mapped; unmapped when the last SafetensorsFile or tensor that
// refers to it is gone.
struct SafetensorsFile::Mapping {
  void* base = nullptr;
  size_t size = 0;
  Mapping(void* b, size_t s) : base(b), size(s) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(base, size); }
  const char* bytes() const { return static_cast<const char*>(base); }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  core::FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) {
    int err = errno;
    TS_THROW(CheckpointError, "cannot open safetensors file ", path, ": ", std::strerror(err),
             " (check the path and its permissions)");
  }
  struct stat st;
  TS_CHECK_ERRNO(CheckpointError, ::fstat(fd.fd, &st), "cannot stat safetensors file ", path);
  check_file(S_ISREG(st.st_mode), path, "it is not a regular file (a directory?); pass the path ",
             "of a .safetensors file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  check_file(size >= 8, path, "the file is truncated: ", size,
             " bytes, shorter than the 8-byte header length (an interrupted download or ",
             "copy?); fetch it again");
  // Private and writable: a caller's in-place edit of a tensor copies the page
  // instead of faulting, and never reaches the file.
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    TS_THROW(CheckpointError, "cannot mmap safetensors file ", path, " (", size,
             " bytes): ", std::strerror(err));
  }
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::make_shared<const Mapping>(base, static_cast<size_t>(size));
  const auto* p = reinterpret_cast<const unsigned char*>(f.mapping_->bytes());
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | p[i];
  check_file(header_size <= size - 8, path, "the header length says ", header_size,
             " bytes, but only ", size - 8, " follow it: the file is truncated or not a ",
             "safetensors file; fetch or export it again");
  f.data_start_ = 8 + header_size;
  const uint64_t data_size = size - f.data_start_;
  const Header header = parse_header(f.mapping_->bytes() + 8, header_size, path);
  for (const auto& name : header.keys) {
    const Json& value = header.json.at(name);
    if (name == kMetadataKey) {
      f.metadata_ = parse_metadata(value, path);
      continue;
    }
    f.index_.emplace(name, f.infos_.size());
    f.names_.push_back(name);
    f.infos_.push_back(parse_entry(name, value, data_size, path));
  }
  check_coverage(f.infos_, data_size, path);
  return f;
}

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (C10_LIKELY(it != index_.end())) return infos_[it->second];
  std::string some;
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < names_.size() && i < kShown; ++i)
    some += (i ? ", '" : "'") + names_[i] + "'";
  if (names_.size() > kShown) some += " and " + std::to_string(names_.size() - kShown) + " more";
  TS_THROW(CheckpointError, "safetensors file ", path_, " has no tensor '", name, "' (",
           names_.empty() ? std::string("it holds no tensors") : "it has " + some,
           "); check the name against names()");
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  return view(info(name), -1, 0, 0);
}

at::Tensor SafetensorsFile::slice(const std::string& name, int64_t dim, int64_t start,
                                  int64_t length) const {
  const SafetensorsInfo& e = info(name);
  const int64_t rank = static_cast<int64_t>(e.shape.size());
  TS_CHECK_T(CheckpointError,
             dim >= 0 && dim < rank && start >= 0 && length >= 0 && length <= e.shape[dim] - start,
             "cannot take elements [", start, ", ", start + length, ") of dim ", dim,
             " of tensor '", name, "' (shape ", shape_string(e.shape), ") in safetensors file ",
             path_, ": dim must lie in [0, ", rank, ") and the range inside that dim's size");
  return view(e, dim, start, length);
}

at::Tensor SafetensorsFile::view(const SafetensorsInfo& e, int64_t dim, int64_t start,
                                 int64_t length) const {
  // The mapping stays alive as long as any tensor over it does.
  std::shared_ptr<const Mapping> keep = mapping_;
  auto release = [keep](void*) {};
  char* p = static_cast<char*>(mapping_->base) + data_start_ + e.begin;
  const auto item = static_cast<uintptr_t>(c10::elementSize(e.dtype));
  if (reinterpret_cast<uintptr_t>(p) % item == 0) {
    at::Tensor t = at::from_blob(p, e.shape, release, at::device(at::kCPU).dtype(e.dtype));
    return dim < 0 ? t : t.narrow(dim, start, length);
  }
  // Unaligned: view the bytes as uint8 (always aligned) with the element as a
  // last dim, copy what is wanted into aligned memory, then reinterpret it.
  std::vector<int64_t> byte_shape = e.shape;
  byte_shape.push_back(static_cast<int64_t>(item));
  at::Tensor bytes = at::from_blob(p, byte_shape, release, at::device(at::kCPU).dtype(at::kByte));
  if (dim >= 0) bytes = bytes.narrow(dim, start, length);
  std::vector<int64_t> shape(bytes.sizes().begin(), bytes.sizes().end() - 1);
  return bytes.clone(at::MemoryFormat::Contiguous).view(e.dtype).reshape(shape);
}

namespace {

// A tensor's bytes as they go into the file: dense, contiguous, on the CPU, with
// no lazy conjugate or negation pending. CheckpointError naming what is wrong.
at::Tensor checked_for_writing(const std::string& name, const at::Tensor& t,
                               const std::string& path) {
  const auto what = [&] { return c10::str("cannot write tensor '", name, "' to ", path, ": "); };
  TS_CHECK_T(CheckpointError, t.defined(), what(), "it is undefined");
  TS_CHECK_T(CheckpointError, t.device().is_cpu(), what(), "it is on ", t.device(),
             " and write_safetensors writes CPU tensors; copy it with .cpu() first");
  TS_CHECK_T(CheckpointError, t.layout() == at::kStrided, what(), "it is ", t.layout(),
             "; convert it with .to_dense() first");
  TS_CHECK_T(CheckpointError, find_name(t.scalar_type()) != nullptr, what(), "its dtype ",
             t.scalar_type(), " has no safetensors name (the format has ", supported_names(),
             "); convert it with .to() first");
  // A tensor whose storage is smaller than its shape (a released ZeRO stage-3
  // parameter) has no values to save: refuse it rather than read past the end.
  TS_CHECK_T(CheckpointError,
             t.numel() == 0 || t.storage().nbytes() >=
                                   static_cast<size_t>((t.storage_offset() + 1) * t.element_size()),
             what(), "it holds no memory (its storage was released); write the tensor that ",
             "holds its values instead");
  return t.detach().resolve_conj().resolve_neg().contiguous();
}

// The header for `tensors` (already checked) in their order, as text: one
// object built key by key keeps the order without an ordered JSON object.
std::string header_text(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& path) {
  std::string text = "{";
  try {
    if (!metadata.empty()) text += Json(kMetadataKey).dump() + ":" + Json(metadata).dump();
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
      const auto nbytes = static_cast<uint64_t>(t.nbytes());
      const Json entry = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                          {"shape", t.sizes().vec()},
                          {"data_offsets", {offset, offset + nbytes}}};
      text += (text.size() > 1 ? "," : "") + Json(name).dump() + ":" + entry.dump();
      offset += nbytes;
    }
  } catch (const Json::type_error& e) {
    TS_THROW(CheckpointError, "cannot write safetensors file ", path,
             ": a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  return text + "}";
}

}  // namespace

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  std::vector<std::pair<std::string, at::Tensor>> data;
  for (const auto& [name, t] : tensors) {
    TS_CHECK_T(CheckpointError, !name.empty() && name != kMetadataKey && names.insert(name).second,
               "cannot write tensor '", name, "' to ", path, ": ",
               name.empty()           ? "its name is empty"
               : name == kMetadataKey ? "that name is reserved for metadata"
                                      : "the name is used twice",
               "; give every tensor its own name");
    data.emplace_back(name, checked_for_writing(name, t, path));
  }
  std::string text = header_text(data, metadata, path);
  // Padding to 8 bytes aligns the data buffer, so every element is aligned when
  // the file is mapped (F64 and I64 need 8).
  text.append((8 - text.size() % 8) % 8, ' ');
  core::replace_file_atomically<CheckpointError>(
      path, "safetensors file", /*do_fsync=*/true, [&](const auto& write) {
        unsigned char length[8];
        for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
        write(length, sizeof(length));
        write(text.data(), text.size());
        for (const auto& [name, t] : data) write(t.data_ptr(), static_cast<size_t>(t.nbytes()));
      });
}

}  // namespace tessera::checkpoint
