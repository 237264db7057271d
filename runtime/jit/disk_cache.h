// The on-disk store of the CPU JIT: one file per kernel key holding a checked header and the
// object code. It never trusts a file: anything that does not match is reported as rejected.
// It does not compile or load anything (cpu_jit.cpp does).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ein::detail {

/// Version of the cache file format; part of every key, so a new format never reads old files.
inline constexpr uint32_t kJitCacheFormatVersion = 4;  // 4: f32 exp/log/sin/cos call SLEEF

/// XXH3-128 of everything that determines a kernel's object code.
struct JitCacheKey {
  uint64_t high = 0, low = 0;
  bool operator==(const JitCacheKey&) const = default;
  std::string hex() const;  ///< 32 lowercase hex digits
};

/// Hashes (source, symbol, target, LLVM version, format version), each length-prefixed.
JitCacheKey jit_cache_key(std::string_view source, std::string_view symbol, std::string_view target,
                          std::string_view llvm_version);

/// What reading one cache entry found.
struct JitCacheRead {
  enum class Status { kMissing, kLoaded, kRejected } status = Status::kMissing;
  std::string payload;  ///< the object code when kLoaded
  std::string reason;   ///< why an entry was rejected
};

/// The file that holds `key` in `dir`.
std::filesystem::path jit_cache_file(const std::filesystem::path& dir, const JitCacheKey& key);

/// Reads and checks the entry of `key` (magic, version, key, payload size and hash).
JitCacheRead read_jit_cache(const std::filesystem::path& dir, const JitCacheKey& key);

/// Writes the entry of `key` atomically (temporary file + rename); returns an error or nullopt.
std::optional<std::string> write_jit_cache(const std::filesystem::path& dir, const JitCacheKey& key,
                                           std::string_view payload);

}  // namespace ein::detail
