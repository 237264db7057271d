// safetensors reading and writing. Loading reads with pread() into fresh tensors rather than
// mmap(): a file truncated by another process while mapped would kill us with SIGBUS, while a
// short pread() is an error we can report. Every offset is checked against the file size
// before it is used, so a corrupt header cannot make us read or allocate out of bounds. Each
// tensor's bytes carry an XXH3-64 checksum in the metadata: the header is written with
// placeholders, the data hashed as it is written, and the header rewritten in place (the
// checksums have a fixed width, so its length does not change).
#include <ein/checkpoint.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "runtime/atomic_file.h"

namespace ein {

// The format is little-endian; a big-endian port would byte-swap in read/write below.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

/// safetensors' own limit (MAX_HEADER_SIZE in safetensors/src/tensor.rs): larger sizes come
/// from corrupt files, and refusing them early avoids a huge allocation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// The key of the string-to-string metadata object.
constexpr const char* kMetadataKey = "__metadata__";

/// ein's dtypes and their safetensors names.
constexpr std::array<std::pair<DType, std::string_view>, kDTypeCount> kDTypeNames = {{
    {DType::f64, "F64"},
    {DType::f32, "F32"},
    {DType::f16, "F16"},
    {DType::bf16, "BF16"},
    {DType::f8e4m3, "F8_E4M3"},
    {DType::f8e5m2, "F8_E5M2"},
    {DType::i64, "I64"},
    {DType::i32, "I32"},
    {DType::i8, "I8"},
    {DType::u8, "U8"},
    {DType::boolean, "BOOL"},
}};

/// safetensors dtypes ein has no counterpart for (so the message can say "not supported"
/// rather than "unknown").
constexpr std::array<std::string_view, 9> kUnsupportedNames = {
    "I16", "U16", "U32", "U64", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64"};

/// One tensor's header entry; begin/end are byte offsets into the data after the header.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

/// A parsed and fully checked header.
struct Header {
  std::vector<Entry> entries;  ///< sorted by begin: the file's order
  std::map<std::string, std::string> metadata;  ///< less the checksums
  std::map<std::string, uint64_t> checksums;    ///< tensor name -> XXH3-64 of its bytes
  uint64_t data_start = 0;                      ///< 8 + header size
};

/// "invalid safetensors file '<path>': <problem>".
[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw RuntimeError("invalid safetensors file '" + path + "': " + problem);
}

/// "a directory", "a FIFO (named pipe)", ... for a file that is not a regular file.
std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

/// A checksum as the metadata holds it: 16 lowercase hex digits.
std::string hex64(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4)
    s[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return s;
}

/// An open file descriptor, closed on scope exit.
class ReadFile {
 public:
  /// Opens `path` for reading; RuntimeError naming it when it cannot or when it is not a
  /// regular file. O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever.
  explicit ReadFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) {
      const int err = errno;
      throw RuntimeError("cannot open safetensors file '" + path + "': " + std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && !S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail(path, "it is not a regular file but " + file_kind(st.st_mode));
    }
  }
  ~ReadFile() { ::close(fd_); }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  /// The file's size in bytes now.
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path_, std::string("fstat failed: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path_, "not a regular file");
    return static_cast<uint64_t>(st.st_size);
  }

  /// Reads exactly `size` bytes at `offset`; the caller has checked the range against size(),
  /// so a short read means the file shrank meanwhile.
  void read_at(void* out, uint64_t size, uint64_t offset) const {
    auto* p = static_cast<char*>(out);
    while (size > 0) {
      const ssize_t n = ::pread(fd_, p, size, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(path_, std::string("read failed: ") + std::strerror(errno));
      if (n == 0) fail(path_, "the file shrank while being read");
      p += n;
      size -= static_cast<uint64_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
};

/// "[2, 3]" for a JSON value, cut short when long (the message quotes the file's text).
std::string quote(const nlohmann::json& value) {
  std::string s = value.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

/// The entry for tensor `name` from its JSON object; checks the keys' types and that the byte
/// range has the size the dtype and shape ask for (it is placed in the file later).
Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& info) {
  const std::string what = "tensor '" + name + "'";
  if (!info.is_object()) fail(path, what + ": expected an object, got " + quote(info));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) fail(path, what + " has no \"" + key + "\"");
  Entry e{name, DType::f32, {}, 0, 0};

  const nlohmann::json& dtype = info["dtype"];
  if (!dtype.is_string()) fail(path, what + ": dtype must be a string, got " + quote(dtype));
  const auto& dtype_name = dtype.get_ref<const std::string&>();
  const std::optional<DType> d = dtype_from_safetensors_name(dtype_name);
  if (!d) {
    const bool known = std::find(kUnsupportedNames.begin(), kUnsupportedNames.end(), dtype_name) !=
                       kUnsupportedNames.end();
    fail(path, what + " has dtype \"" + dtype_name + "\", " +
                   (known ? "which ein does not support" : "which is not a safetensors dtype"));
  }
  e.dtype = *d;

  const nlohmann::json& shape = info["shape"];
  if (!shape.is_array()) fail(path, what + ": shape must be an array, got " + quote(shape));
  const auto es = static_cast<uint64_t>(element_size(e.dtype));
  // numel * element size must fit in int64 (Tensor's sizes) and in memory; 2^62 is plenty.
  constexpr uint64_t kMaxBytes = uint64_t{1} << 62;
  uint64_t bytes = es;
  for (const nlohmann::json& s : shape) {
    if (!s.is_number_unsigned())
      fail(path, what + ": shape entries must be integers >= 0, got " + quote(shape));
    const auto n = s.get<uint64_t>();
    // Each size on its own too: after a 0 the product stays 0, and a size of 2^63 or more
    // would wrap negative as a Tensor size.
    if (n > kMaxBytes || (n != 0 && bytes > kMaxBytes / n))
      fail(path, what + ": shape " + quote(shape) + " is too large");
    bytes *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }

  const nlohmann::json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(path,
         what + ": data_offsets must be [begin, end] with integers >= 0, got " + quote(offsets));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin || e.end - e.begin != bytes)
    fail(path, what + " (" + std::string(safetensors_dtype_name(e.dtype)) + ", shape " +
                   shape_str(e.shape) + ") needs " + std::to_string(bytes) +
                   " bytes, but data_offsets " + quote(offsets) + " span " +
                   (e.end < e.begin ? "a negative range" : std::to_string(e.end - e.begin)));
  return e;
}

/// Reads and checks the header: every entry well-formed, and the byte ranges tile the data
/// exactly (no overlap, no gap, nothing past the end, nothing after the last tensor).
Header read_header(const std::string& path, const ReadFile& file) {
  const uint64_t file_size = file.size();
  if (file_size < 8)
    fail(path, "the file has " + std::to_string(file_size) +
                   " bytes, fewer than the 8 of the header size (truncated?)");
  unsigned char size_bytes[8];
  file.read_at(size_bytes, 8, 0);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | size_bytes[i];
  if (n > file_size - 8)
    fail(path, "the header size " + std::to_string(n) + " exceeds the " +
                   std::to_string(file_size - 8) +
                   " bytes after it (truncated or not safetensors)");
  if (n > kMaxHeaderBytes)
    fail(path, "the header size " + std::to_string(n) + " exceeds safetensors' limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  std::string text(n, '\0');
  file.read_at(text.data(), n, 8);
  if (text.empty() || text[0] != '{') fail(path, "the header does not start with '{'");

  // The callback rejects a repeated top-level key: JSON parsers keep only one of them, and a
  // silently dropped tensor is worse than an error.
  std::set<std::string> keys;
  std::string duplicate;
  const auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& v) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
        !keys.insert(v.get<std::string>()).second && duplicate.empty())
      duplicate = v.get<std::string>();
    return true;
  };
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    std::string msg = e.what();
    // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
    if (const size_t p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    fail(path, "the header is not valid JSON: " + msg);
  }
  if (!duplicate.empty()) fail(path, "the header names '" + duplicate + "' twice");
  if (!json.is_object()) fail(path, "the header is not a JSON object");

  Header h;
  h.data_start = 8 + n;
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      if (value.is_null()) continue;
      if (!value.is_object()) fail(path, "__metadata__ must be an object, got " + quote(value));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          fail(path, "__metadata__ values must be strings, but '" + mk + "' is " + quote(mv));
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(path, key, value));
  }
  // Checksums out of the metadata: each must be 16 hex digits and name a tensor of the file.
  const std::string prefix = kChecksumKeyPrefix;
  for (auto it = h.metadata.begin(); it != h.metadata.end();) {
    if (!it->first.starts_with(prefix)) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(prefix.size());
    const std::string& hex = it->second;
    if (hex.size() != 16 || !std::all_of(hex.begin(), hex.end(), [](char c) {
          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        }))
      fail(path, "the checksum of tensor '" + name + "' is \"" + hex +
                     "\", not 16 lowercase hex digits");
    if (std::none_of(h.entries.begin(), h.entries.end(),
                     [&](const Entry& e) { return e.name == name; }))
      fail(path, "the metadata has a checksum for tensor '" + name + "', which the file lacks");
    h.checksums[name] = std::stoull(hex, nullptr, 16);
    it = h.metadata.erase(it);
  }

  // Order by begin (then end, so a zero-size tensor at a boundary sorts before its neighbour)
  // and walk: each range must start where the previous one ended.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_size = file_size - h.data_start;
  uint64_t cursor = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : h.entries) {
    const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.end > data_size)
      fail(path, "tensor '" + e.name + "' has data_offsets " + range +
                     ", past the end of the data (" + std::to_string(data_size) +
                     " bytes): the file is truncated or the header is wrong");
    if (e.begin < cursor)
      fail(path, "tensor '" + e.name + "' (data_offsets " + range + ") overlaps tensor '" +
                     previous->name + "', which ends at " + std::to_string(cursor));
    if (e.begin > cursor)
      fail(path, "bytes [" + std::to_string(cursor) + ", " + std::to_string(e.begin) +
                     ") of the data belong to no tensor (before tensor '" + e.name + "')");
    cursor = e.end;
    previous = &e;
  }
  if (cursor != data_size)
    fail(path, std::to_string(data_size - cursor) + " bytes of trailing data after the last " +
                   "tensor (the data is " + std::to_string(data_size) + " bytes, tensors end at " +
                   std::to_string(cursor) + ")");
  return h;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& [d, name] : kDTypeNames)
    if (d == dtype) return name;
  return "?";  // unreachable: kDTypeNames covers every DType
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& [d, n] : kDTypeNames)
    if (n == name) return d;
  return std::nullopt;
}

const Tensor* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& Checkpoint::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string names;
  for (const auto& [n, t] : tensors)
    names += (names.empty() ? "" : ", ") + n;
  throw RuntimeError("the checkpoint has no tensor '" + name +
                     "'; it has: " + (names.empty() ? "none" : names));
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // 1. The header from names, dtypes and shapes alone, so bad input fails before any I/O;
  //    checksums are placeholders of their final width until the data is written.
  const std::string prefix = kChecksumKeyPrefix;
  std::map<std::string, std::string> full_metadata = metadata;
  for (const auto& [key, value] : metadata)
    if (key.starts_with(prefix))
      throw RuntimeError("cannot save '" + path + "': metadata key '" + key +
                         "' is reserved (keys starting with '" + prefix +
                         "' hold the tensors' checksums)");
  for (const auto& [name, t] : tensors)
    full_metadata[prefix + name] = hex64(0);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!full_metadata.empty()) header[kMetadataKey] = full_metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const std::string bad = "cannot save '" + path + "': tensor name '" + name + "' ";
    if (name.empty()) throw RuntimeError("cannot save '" + path + "': a tensor name is empty");
    if (name == kMetadataKey) throw RuntimeError(bad + "is reserved for the metadata");
    if (!names.insert(name).second) throw RuntimeError(bad + "appears twice");
    if (!t.defined()) throw RuntimeError(bad + "is an undefined tensor");
    const auto bytes = static_cast<uint64_t>(t.nbytes());
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const auto dump = [&] {
    std::string text;
    try {
      text = header.dump();
    } catch (const nlohmann::json::exception&) {
      throw RuntimeError("cannot save '" + path +
                         "': a tensor name or metadata string is not UTF-8");
    }
    // Padding to 8 keeps the data 8-byte aligned, as the Rust writer does.
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  };
  const std::string text = dump();

  // 2. The bytes, one tensor at a time (a contiguous CPU copy only where needed).
  AtomicFile file(path);
  uint64_t n = text.size();
  unsigned char size_bytes[8];
  for (unsigned char& b : size_bytes) {
    b = static_cast<unsigned char>(n & 0xff);
    n >>= 8;
  }
  file.write(size_bytes, 8);
  file.write(text);
  for (const auto& [name, t] : tensors) {
    // detach(): saving copies values and must not trip autograd's no-silent-copy check.
    const Tensor host = t.detach().to(cpu()).contiguous();
    const auto bytes = static_cast<size_t>(host.nbytes());
    if (bytes > 0) file.write(host.data_ptr(), bytes);
    header[kMetadataKey][prefix + name] = hex64(XXH3_64bits(host.data_ptr(), bytes));
  }
  // 3. The header again with the checksums: same length, so it overwrites the placeholder.
  const std::string final_text = dump();
  if (final_text.size() != text.size())
    throw RuntimeError("cannot save '" + path + "': internal error: the header changed length");
  file.write_at(8, final_text.data(), final_text.size());
  file.commit();
}

Checkpoint load_safetensors(const std::string& path) {
  return load_safetensors(path, [](const std::string&) { return true; });
}

Checkpoint load_safetensors(const std::string& path,
                            const std::function<bool(const std::string&)>& wanted) {
  const ReadFile file(path);
  Header h = read_header(path, file);
  Checkpoint c;
  c.path = path;
  c.metadata = std::move(h.metadata);
  c.checksummed = h.checksums.size() == h.entries.size();
  c.tensors.reserve(h.entries.size());
  for (Entry& e : h.entries) {
    if (!wanted(e.name)) continue;
    Tensor t = empty(e.shape, e.dtype, cpu());
    const uint64_t bytes = e.end - e.begin;
    if (bytes > 0) file.read_at(t.data_ptr(), bytes, h.data_start + e.begin);
    if (const auto it = h.checksums.find(e.name); it != h.checksums.end()) {
      const uint64_t got = XXH3_64bits(t.data_ptr(), static_cast<size_t>(bytes));
      if (got != it->second)
        fail(path, "tensor '" + e.name + "' (" + std::string(safetensors_dtype_name(e.dtype)) +
                       ", shape " + shape_str(e.shape) + ", data_offsets [" +
                       std::to_string(e.begin) + ", " + std::to_string(e.end) +
                       "]) does not match its checksum: its bytes hash to xxh3_64 " + hex64(got) +
                       ", the header says " + hex64(it->second) +
                       " (the file was corrupted after it was written)");
    }
    if (e.dtype == DType::boolean) {
      // Any byte but 0 and 1 would be undefined behaviour once read as a C++ bool.
      const auto* p = static_cast<const unsigned char*>(t.data_ptr());
      for (uint64_t i = 0; i < bytes; ++i)
        if (p[i] > 1)
          fail(path, "BOOL tensor '" + e.name + "' holds byte " + std::to_string(p[i]) +
                         " at element " + std::to_string(i) + " (must be 0 or 1)");
    }
    c.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return c;
}

std::string layout_signature(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<TensorLayout> layouts;
  layouts.reserve(tensors.size());
  for (const auto& [name, t] : tensors)
    layouts.push_back({name, t.dtype(), t.shape()});
  return layout_signature(layouts);
}

std::string layout_signature(const std::vector<TensorLayout>& layouts) {
  std::vector<std::string> lines;
  lines.reserve(layouts.size());
  for (const TensorLayout& t : layouts)
    lines.push_back(t.name + "\t" + std::string(safetensors_dtype_name(t.dtype)) + "\t" +
                    shape_str(t.shape) + "\n");
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const std::string& line : lines)
    text += line;
  return hex64(XXH3_64bits(text.data(), text.size()));
}

void check_fits(const Checkpoint& checkpoint,
                const std::vector<std::pair<std::string, Tensor>>& targets) {
  // Every problem, so one message shows how the checkpoint and the model differ.
  std::string problems;
  for (const auto& [name, target] : targets) {
    const Tensor* source = checkpoint.find(name);
    if (source == nullptr) {
      problems += "\n  '" + name + "' is missing from the checkpoint";
    } else if (source->dtype() != target.dtype() || source->shape() != target.shape()) {
      problems += "\n  '" + name + "' is " + std::string(dtype_name(source->dtype())) + " " +
                  shape_str(source->shape()) + " in the checkpoint but " +
                  std::string(dtype_name(target.dtype())) + " " + shape_str(target.shape()) +
                  " here";
    }
  }
  if (!problems.empty())
    throw RuntimeError("checkpoint '" + checkpoint.path + "' does not fit:" + problems);
}

void copy_into(const Checkpoint& checkpoint,
               const std::vector<std::pair<std::string, Tensor>>& targets) {
  check_fits(checkpoint, targets);
  // detach() because restoring values is not an op autograd should record.
  for (const auto& [name, target] : targets)
    target.detach().copy_(*checkpoint.find(name));
}

std::map<std::string, std::string> check_safetensors(const std::string& path) {
  const ReadFile file(path);
  return read_header(path, file).metadata;
}

std::vector<TensorLayout> safetensors_layout(const std::string& path) {
  const ReadFile file(path);
  std::vector<TensorLayout> out;
  for (Entry& e : read_header(path, file).entries)
    out.push_back({std::move(e.name), e.dtype, std::move(e.shape)});
  return out;
}

}  // namespace ein
