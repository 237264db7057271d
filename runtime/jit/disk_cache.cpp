// File layout (little-endian, 48-byte header then the payload):
//   0  char[8]  magic "EINCPUJ\0"      8  u32 format version   12 u32 header size (48)
//   16 u64 key.high   24 u64 key.low   32 u64 payload size     40 u64 XXH3-64 of the payload
#include "runtime/jit/disk_cache.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

#include <unistd.h>
#include <xxhash.h>

namespace ein::detail {
namespace {

constexpr char kMagic[8] = {'E', 'I', 'N', 'C', 'P', 'U', 'J', '\0'};
constexpr size_t kHeaderSize = 48;

void put(std::string& out, size_t at, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    out[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get(std::string_view in, size_t at, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i)
    value |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return value;
}

void hash_field(XXH3_state_t* state, std::string_view field) {
  const uint64_t size = field.size();
  XXH3_128bits_update(state, &size, sizeof size);
  XXH3_128bits_update(state, field.data(), field.size());
}

}  // namespace

std::string JitCacheKey::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(high >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(low >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

JitCacheKey jit_cache_key(std::string_view source, std::string_view symbol, std::string_view target,
                          std::string_view llvm_version) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  hash_field(state, source);
  hash_field(state, symbol);
  hash_field(state, target);
  hash_field(state, llvm_version);
  const uint32_t version = kJitCacheFormatVersion;
  XXH3_128bits_update(state, &version, sizeof version);
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return {hash.high64, hash.low64};
}

std::filesystem::path jit_cache_file(const std::filesystem::path& dir, const JitCacheKey& key) {
  return dir / (key.hex() + ".o");
}

JitCacheRead read_jit_cache(const std::filesystem::path& dir, const JitCacheKey& key) {
  JitCacheRead result;
  std::ifstream in(jit_cache_file(dir, key), std::ios::binary);
  if (!in) return result;
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  result.status = JitCacheRead::Status::kRejected;
  if (file.size() < kHeaderSize) {
    result.reason = "shorter than the header";
  } else if (std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    result.reason = "bad magic";
  } else if (get(file, 8, 4) != kJitCacheFormatVersion || get(file, 12, 4) != kHeaderSize) {
    result.reason = "other format version";
  } else if (get(file, 16, 8) != key.high || get(file, 24, 8) != key.low) {
    result.reason = "other key";
  } else if (get(file, 32, 8) != file.size() - kHeaderSize) {
    result.reason = "payload size differs from the header";
  } else if (XXH3_64bits(file.data() + kHeaderSize, file.size() - kHeaderSize) !=
             get(file, 40, 8)) {
    result.reason = "payload hash differs from the header";
  } else {
    result.status = JitCacheRead::Status::kLoaded;
    result.payload = file.substr(kHeaderSize);
  }
  return result;
}

std::optional<std::string> write_jit_cache(const std::filesystem::path& dir, const JitCacheKey& key,
                                           std::string_view payload) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "cannot create " + dir.string() + ": " + ec.message();

  std::string header(kHeaderSize, '\0');
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put(header, 8, kJitCacheFormatVersion, 4);
  put(header, 12, kHeaderSize, 4);
  put(header, 16, key.high, 8);
  put(header, 24, key.low, 8);
  put(header, 32, payload.size(), 8);
  put(header, 40, XXH3_64bits(payload.data(), payload.size()), 8);

  const auto target = jit_cache_file(dir, key);
  auto temporary = target;
  temporary += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.close();
    if (!out) {
      std::filesystem::remove(temporary, ec);
      return "cannot write " + temporary.string();
    }
  }
  std::filesystem::rename(temporary, target, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    return "cannot rename " + temporary.string() + " to " + target.string() + ": " + ec.message();
  }
  return std::nullopt;
}

}  // namespace ein::detail
