// The recipe cache. A lookup serialises the request into a reused thread-local byte key
// (no allocation once warm), hashes it with XXH3 and probes under a shared lock; only a
// miss takes the exclusive lock. The full key is compared, so hash collisions are harmless.
#include <ein/pattern_cache.h>

#include <xxhash.h>

#include <mutex>

#include <ein/pattern_parser.h>

namespace ein {
namespace {

template <typename T>
void put(std::string& key, T value) {
  key.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_dims(std::string& key, const std::vector<int64_t>& dims) {
  put(key, static_cast<uint32_t>(dims.size()));
  key.append(reinterpret_cast<const char*>(dims.data()), dims.size() * sizeof(int64_t));
}

// Every field of the request that can change the result is part of the key.
void build_key(std::string& key, std::string_view pattern, const ResolveRequest& r) {
  key.clear();
  put(key, static_cast<uint8_t>(r.op));
  put(key, static_cast<uint8_t>(r.reduction));
  put(key, static_cast<uint8_t>(r.dtype));
  put(key, static_cast<uint8_t>(r.list_input));
  put(key, r.ddof.has_value() ? *r.ddof : INT64_MIN);
  put(key, static_cast<uint32_t>(pattern.size()));
  key.append(pattern);
  put(key, static_cast<uint32_t>(r.shapes.size()));
  for (const Shape& s : r.shapes)
    put_dims(key, s);
  put(key, static_cast<uint32_t>(r.sizes.size()));
  for (const AxisSize& s : r.sizes) {
    put(key, static_cast<uint32_t>(s.name.size()));
    key.append(s.name);
    put(key, s.size);
  }
  put(key, static_cast<uint32_t>(r.packed.size()));
  for (const auto& p : r.packed)
    put_dims(key, p);
}

}  // namespace

size_t PatternCache::Hash::operator()(const std::string& key) const noexcept {
  return static_cast<size_t>(XXH3_64bits(key.data(), key.size()));
}

std::shared_ptr<const Recipe> PatternCache::resolve(std::string_view pattern,
                                                    const ResolveRequest& request) {
  thread_local std::string key;
  build_key(key, pattern, request);
  {
    std::shared_lock lock(mutex_);
    if (auto it = recipes_.find(key); it != recipes_.end()) {
      // Relaxed counting under the shared lock: a racy increment only skews statistics.
      __atomic_fetch_add(&stats_.hits, 1, __ATOMIC_RELAXED);
      return it->second;
    }
  }
  auto recipe = std::make_shared<const Recipe>(resolve_pattern(parse_pattern(pattern), request));
  std::unique_lock lock(mutex_);
  ++stats_.misses;
  if (recipes_.size() >= kCapacity && !recipes_.contains(key)) recipes_.clear();
  return recipes_.try_emplace(key, std::move(recipe)).first->second;
}

size_t PatternCache::size() const {
  std::shared_lock lock(mutex_);
  return recipes_.size();
}

void PatternCache::clear() {
  std::unique_lock lock(mutex_);
  recipes_.clear();
  stats_ = {};
}

PatternCache::Stats PatternCache::stats() const {
  std::shared_lock lock(mutex_);
  return {__atomic_load_n(&stats_.hits, __ATOMIC_RELAXED), stats_.misses};
}

PatternCache& default_pattern_cache() {
  static PatternCache cache;
  return cache;
}

}  // namespace ein
