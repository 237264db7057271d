// TokenFile over POSIX open/fstat/mmap, and the writers. Tokens are little-endian on disk;
// on a big-endian host each is byte-swapped as it is read or written.
#include <ein/token_file.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include <ein/errors.h>

namespace ein {
namespace {

template <typename T>
T from_little_endian(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    auto u = std::bit_cast<std::make_unsigned_t<T>>(v);
    std::make_unsigned_t<T> r = 0;
    for (size_t i = 0; i < sizeof(T); ++i, u >>= 8)
      r = static_cast<std::make_unsigned_t<T>>((r << 8) | (u & 0xFF));
    return std::bit_cast<T>(r);
  } else {
    return v;
  }
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

[[noreturn]] void throw_out_of_vocab(const std::string& path, int64_t index, int64_t value,
                                     int64_t vocab_size) {
  std::string msg = "token file " + quoted(path) + ": token " + std::to_string(value) +
                    " at index " + std::to_string(index) + " is outside the vocabulary [0, ";
  msg += vocab_size > 0 ? std::to_string(vocab_size) + ")" : "inf): token ids are never negative";
  if (vocab_size > 0) msg += " (a tokenizer with a larger vocabulary, or the wrong dtype?)";
  throw RuntimeError(msg);
}

// Converts and checks count tokens of type T; the first bad one throws with its file index.
template <typename T>
void read_as_int64(const std::string& path, const T* src, int64_t start, int64_t count,
                   int64_t* out, int64_t vocab_size) {
  const int64_t limit = vocab_size > 0 ? vocab_size : std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < count; ++i) {
    const auto v = static_cast<int64_t>(from_little_endian(src[start + i]));
    if (v < 0 || v >= limit) throw_out_of_vocab(path, start + i, v, vocab_size);
    if (out != nullptr) out[i] = v;
  }
}

}  // namespace

int64_t token_size(TokenDType dtype) {
  return dtype == TokenDType::u16 ? 2 : 4;
}

const char* token_dtype_name(TokenDType dtype) {
  return dtype == TokenDType::u16 ? "uint16" : "int32";
}

std::optional<TokenDType> token_dtype_from_path(const std::string& path) {
  if (ends_with(path, ".u16") || ends_with(path, ".uint16")) return TokenDType::u16;
  if (ends_with(path, ".i32") || ends_with(path, ".int32")) return TokenDType::i32;
  return std::nullopt;
}

TokenFile::TokenFile(std::string path, std::optional<TokenDType> dtype) : path_(std::move(path)) {
  if (!dtype) dtype = token_dtype_from_path(path_);
  if (!dtype) {
    throw RuntimeError("cannot tell the token dtype of " + quoted(path_) +
                       " from its extension: name it .u16/.uint16 or .i32/.int32, or give the "
                       "dtype (uint16 or int32) explicitly");
  }
  dtype_ = *dtype;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw RuntimeError("cannot open token file " + quoted(path_) + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw RuntimeError("cannot stat token file " + quoted(path_) + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw RuntimeError("token file " + quoted(path_) + " is not a regular file" +
                       (S_ISDIR(st.st_mode) ? " but a directory" : ""));
  }
  const auto bytes = static_cast<int64_t>(st.st_size);
  if (bytes % token_size(dtype_) != 0) {
    ::close(fd);
    throw RuntimeError("token file " + quoted(path_) + " has " + std::to_string(bytes) +
                       " bytes, not a multiple of " + std::to_string(token_size(dtype_)) + " (" +
                       token_dtype_name(dtype_) +
                       " tokens): a truncated file, or the wrong dtype?");
  }
  if (bytes > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw RuntimeError("cannot map token file " + quoted(path_) + ": " + std::strerror(err));
    }
    data_ = p;
    mapped_bytes_ = bytes;
  }
  ::close(fd);  // the mapping keeps the file alive
  size_ = bytes / token_size(dtype_);
}

TokenFile::~TokenFile() {
  release();
}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      dtype_(other.dtype_),
      size_(std::exchange(other.size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    dtype_ = other.dtype_;
    size_ = std::exchange(other.size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

void TokenFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<void*>(data_), static_cast<size_t>(mapped_bytes_));
  data_ = nullptr;
  mapped_bytes_ = 0;
  size_ = 0;
}

void TokenFile::check_range(int64_t start, int64_t count, const char* op) const {
  if (start < 0 || count < 0 || start > size_ - count) {
    throw RuntimeError(std::string("TokenFile::") + op + ": tokens [" + std::to_string(start) +
                       ", " + std::to_string(start + count) + ") are outside token file " +
                       quoted(path_) + " of " + std::to_string(size_) + " tokens");
  }
}

int64_t TokenFile::token(int64_t index) const {
  check_range(index, 1, "token");
  int64_t v = 0;
  if (dtype_ == TokenDType::u16) {
    v = from_little_endian(static_cast<const uint16_t*>(data_)[index]);
  } else {
    v = from_little_endian(static_cast<const int32_t*>(data_)[index]);
  }
  return v;
}

void TokenFile::read(int64_t start, int64_t count, int64_t* out, int64_t vocab_size) const {
  check_range(start, count, "read");
  if (count == 0) return;
  if (dtype_ == TokenDType::u16) {
    read_as_int64(path_, static_cast<const uint16_t*>(data_), start, count, out, vocab_size);
  } else {
    read_as_int64(path_, static_cast<const int32_t*>(data_), start, count, out, vocab_size);
  }
}

void TokenFile::check_tokens(int64_t vocab_size, int64_t begin, int64_t end) const {
  if (end < 0) end = size_;
  check_range(begin, end - begin, "check_tokens");
  // uint16 tokens are never negative, so only a vocabulary below 65536 can be broken.
  if (dtype_ == TokenDType::u16 && (vocab_size == 0 || vocab_size > 65535)) return;
  read(begin, end - begin, nullptr, vocab_size);
}

void write_tokens(const std::string& path, std::span<const int64_t> tokens, TokenDType dtype) {
  const int64_t max = dtype == TokenDType::u16 ? 65535 : std::numeric_limits<int32_t>::max();
  std::vector<unsigned char> bytes(tokens.size() * static_cast<size_t>(token_size(dtype)));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t v = tokens[i];
    if (v < 0 || v > max) {
      throw RuntimeError("write_tokens(" + quoted(path) + "): token " + std::to_string(v) +
                         " at index " + std::to_string(i) + " does not fit " +
                         token_dtype_name(dtype) + " token ids [0, " + std::to_string(max) + "]");
    }
    // Little-endian by construction, whatever the host's byte order.
    for (int64_t b = 0; b < token_size(dtype); ++b)
      bytes[i * static_cast<size_t>(token_size(dtype)) + static_cast<size_t>(b)] =
          static_cast<unsigned char>((static_cast<uint64_t>(v) >> (8 * b)) & 0xFF);
  }
  // Write a temporary file, then rename: a reader never sees a half-written token file.
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    throw RuntimeError("cannot write token file " + quoted(path) + ": " + std::strerror(errno));
  }
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw RuntimeError("cannot write token file " + quoted(path) + ": " + std::strerror(err));
  }
}

void write_byte_tokens(const std::string& path, std::string_view bytes,
                       std::optional<TokenDType> dtype) {
  std::vector<int64_t> tokens(bytes.size());
  std::transform(bytes.begin(), bytes.end(), tokens.begin(),
                 [](char c) { return static_cast<int64_t>(static_cast<unsigned char>(c)); });
  write_tokens(path, tokens, dtype.value_or(token_dtype_from_path(path).value_or(TokenDType::u16)));
}

std::string bytes_from_tokens(std::span<const int64_t> tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= kByteVocabSize) {
      throw RuntimeError("bytes_from_tokens: token " + std::to_string(tokens[i]) + " at index " +
                         std::to_string(i) + " is not a byte (byte-level vocabulary [0, 256))");
    }
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

}  // namespace ein
