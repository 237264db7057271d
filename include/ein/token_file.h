// A token file: raw little-endian uint16 or int32 token ids with no header, the format of
// the lecture's `np.memmap(path, dtype=np.int32)` and of nanoGPT's uint16 .bin files. It is
// mapped read-only with mmap, so a file larger than memory costs only the pages a batch
// touches. Batching lives in token_data.h; this file only opens, reads and writes tokens.
//
// A mapped file that another process truncates would kill the reader with SIGBUS. Reads are
// therefore guarded: a SIGBUS handler (installed once, chaining to any previous one for
// faults outside a guarded read) siglongjmps back into the faulting thread's read, which
// throws a RuntimeError saying the file shrank. This is race-free, unlike re-checking the
// size with fstat before each read (the file can shrink between the check and the access),
// and keeps mmap's point, unlike copying the file into memory (files larger than memory).
//
//   ein::write_byte_tokens("corpus.u16", text);         // each byte a token, vocab 256
//   ein::TokenFile f("corpus.u16");                      // dtype from the extension
//   int64_t first = f.token(0);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ein {

/// The element type of a token file on disk (ein's DType has no uint16, hence its own enum).
enum class TokenDType { u16, i32 };

/// Bytes per token: 2 or 4.
int64_t token_size(TokenDType dtype);
/// "uint16" or "int32", as numpy spells them.
const char* token_dtype_name(TokenDType dtype);
/// The dtype an extension names: .u16/.uint16 → u16, .i32/.int32 → i32; nullopt otherwise
/// (.bin is deliberately not guessed: nanoGPT writes uint16 there, the lecture int32).
std::optional<TokenDType> token_dtype_from_path(const std::string& path);

/// The vocabulary of byte-level tokenization: every byte value is one token.
inline constexpr int64_t kByteVocabSize = 256;

/// A read-only memory map of a token file. Move-only; unmaps on destruction. Reads are
/// const and safe from any number of threads. Every error is a RuntimeError naming the file,
/// including a file truncated while mapped (see above).
class TokenFile {
 public:
  /// Maps `path`. The dtype is `dtype` when given, else the extension's
  /// (token_dtype_from_path); a RuntimeError when the file is missing or unreadable, is not
  /// a regular file (a FIFO is refused without blocking on it), has a size that is not a multiple of the token size, or has no dtype.
  explicit TokenFile(std::string path, std::optional<TokenDType> dtype = std::nullopt);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  /// The path it was opened with.
  const std::string& path() const { return path_; }
  /// The on-disk element type.
  TokenDType dtype() const { return dtype_; }
  /// Number of tokens (file bytes / token_size).
  int64_t size() const { return size_; }
  /// Token `index` (0 <= index < size(); a RuntimeError otherwise), unchecked against a vocab.
  int64_t token(int64_t index) const;
  /// Copies tokens [start, start + count) into `out` as int64. Each must lie in
  /// [0, vocab_size) (or be >= 0 when vocab_size == 0); the first that does not gives a
  /// RuntimeError with its index and value. The range must lie inside the file.
  void read(int64_t start, int64_t count, int64_t* out, int64_t vocab_size = 0) const;
  /// Scans tokens [begin, end) (end -1: to the end) as read() would; throws at the first
  /// one out of range.
  void check_tokens(int64_t vocab_size, int64_t begin = 0, int64_t end = -1) const;

 private:
  /// Throws unless [start, start + count) lies inside the file.
  void check_range(int64_t start, int64_t count, const char* op) const;
  /// Unmaps (if mapped) and leaves the object empty.
  void release();

  std::string path_;
  TokenDType dtype_ = TokenDType::i32;
  int64_t size_ = 0;            ///< in tokens
  const void* data_ = nullptr;  ///< the mapping; null for an empty file
  int64_t mapped_bytes_ = 0;
};

/// Writes `tokens` to `path` as raw little-endian `dtype` (atomically: a temporary file in
/// the same directory, then rename). A RuntimeError when a token does not fit the dtype
/// (u16: [0, 65535], i32: [0, 2^31 - 1]) or the file cannot be written.
void write_tokens(const std::string& path, std::span<const int64_t> tokens, TokenDType dtype);
/// Byte-level tokenization of `bytes` (token = the unsigned byte value, vocab 256) written
/// with write_tokens; dtype defaults to the extension's, else uint16.
void write_byte_tokens(const std::string& path, std::string_view bytes,
                       std::optional<TokenDType> dtype = std::nullopt);
/// The bytes that byte-level tokens stand for (a generated sample as text); a RuntimeError
/// for a token outside [0, 256).
std::string bytes_from_tokens(std::span<const int64_t> tokens);

}  // namespace ein
