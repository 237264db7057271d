// TokenFile over POSIX open/fstat/mmap, and the writers. Tokens are little-endian on disk;
// on a big-endian host each is byte-swapped as it is read or written. Every access to the
// mapping runs under a SIGBUS guard (token_file.h says why): a fault inside it siglongjmps
// back to the read, which throws; a fault anywhere else goes to the previous handler.
#include <ein/token_file.h>

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
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

/// One read of the mapping: its inputs, and the first token out of the vocabulary (index -1
/// when none). It does not throw, so nothing needs unwinding when a fault jumps out of it.
struct ReadJob {
  const void* data;
  TokenDType dtype;
  int64_t start, count;
  int64_t* out;
  int64_t vocab_size;
  int64_t bad_index = -1;
  int64_t bad_value = 0;
};

// Converts and checks job.count tokens of type T; stops at the first bad one.
template <typename T>
void read_as_int64(ReadJob& job) {
  const T* src = static_cast<const T*>(job.data);
  const int64_t limit = job.vocab_size > 0 ? job.vocab_size : std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < job.count; ++i) {
    const auto v = static_cast<int64_t>(from_little_endian(src[job.start + i]));
    if (v < 0 || v >= limit) {
      job.bad_index = job.start + i;
      job.bad_value = v;
      return;
    }
    if (job.out != nullptr) job.out[i] = v;
  }
}

void run_read_job(ReadJob& job) {
  if (job.dtype == TokenDType::u16) {
    read_as_int64<uint16_t>(job);
  } else {
    read_as_int64<int32_t>(job);
  }
}

// The SIGBUS guard. t_guard is the jump buffer of the read this thread is in (null outside
// one); the handler only jumps for a thread inside a read, so other faults keep their meaning.
// The thread-local is touched by the thread before any fault, so the handler's access to it
// allocates nothing.
thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* env = t_guard) {
    t_guard = nullptr;
    siglongjmp(*env, 1);
  }
  // Not ours: what would have happened without us.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
  } else {
    // Default action: restore it and re-raise; the signal is delivered once we return (a
    // faulting access would also simply fault again).
    ::signal(SIGBUS, SIG_DFL);
    ::raise(SIGBUS);
  }
}

void install_sigbus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

/// Runs `job` with a SIGBUS from the mapping turned into a `false` return. sigsetjmp saves
/// the signal mask (second argument 1), so the jump also unblocks SIGBUS again. Nothing with
/// a destructor lives in this frame or in run_read_job's, so the jump skips no cleanup.
bool run_guarded(ReadJob& job) {
  sigjmp_buf env;
  if (sigsetjmp(env, 1) != 0) return false;
  t_guard = &env;
  run_read_job(job);
  t_guard = nullptr;
  return true;
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
  install_sigbus_guard();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
    throw RuntimeError("token file " + quoted(path_) + " is not a regular file but " +
                       (S_ISDIR(st.st_mode)    ? "a directory"
                        : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                        : S_ISCHR(st.st_mode)  ? "a character device"
                                               : "a device or socket"));
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

namespace {

/// The error of a read that faulted: the file is shorter than when it was mapped.
[[noreturn]] void throw_shrunk(const std::string& path, int64_t mapped_bytes, int64_t start,
                               int64_t count) {
  struct stat st {};
  const std::string now = ::stat(path.c_str(), &st) == 0
                              ? std::to_string(st.st_size) + " bytes now"
                              : std::string("it is gone now (") + std::strerror(errno) + ")";
  throw RuntimeError("token file " + quoted(path) + " shrank while mapped: it had " +
                     std::to_string(mapped_bytes) + " bytes when opened, " + now +
                     ", so tokens [" + std::to_string(start) + ", " +
                     std::to_string(start + count) +
                     ") cannot be read (was it rewritten in place? write a new file and rename "
                     "it over the old one instead)");
}

}  // namespace

int64_t TokenFile::token(int64_t index) const {
  check_range(index, 1, "token");
  int64_t v = 0;
  ReadJob job{data_, dtype_, index, 1, &v, 0};
  if (!run_guarded(job)) throw_shrunk(path_, mapped_bytes_, index, 1);
  // A negative int32 is returned as it is: token() does not check against a vocabulary.
  if (job.bad_index >= 0) v = job.bad_value;
  return v;
}

void TokenFile::read(int64_t start, int64_t count, int64_t* out, int64_t vocab_size) const {
  check_range(start, count, "read");
  if (count == 0) return;
  ReadJob job{data_, dtype_, start, count, out, vocab_size};
  if (!run_guarded(job)) throw_shrunk(path_, mapped_bytes_, start, count);
  if (job.bad_index >= 0) throw_out_of_vocab(path_, job.bad_index, job.bad_value, vocab_size);
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
