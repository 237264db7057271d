// Caching of pattern resolution, like einops' lru_cache on recipes: the pattern text and a
// request already seen give back the same Recipe without parsing or sema. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include <ein/patterns.h>

namespace ein {

/// Pattern text + request → resolved Recipe, memoised. Errors are not cached. Bounded: at
/// kCapacity recipes the next new one empties the cache first (recipes already handed out stay
/// valid: callers hold them), so a program that makes pattern texts on the fly does not grow.
class PatternCache {
 public:
  /// The most recipes kept (einops keeps 256 per function; ein's key includes the shapes).
  static constexpr size_t kCapacity = 16384;

  /// Counters since construction or clear().
  struct Stats {
    uint64_t hits = 0;    ///< lookups answered from the cache
    uint64_t misses = 0;  ///< lookups that parsed and resolved
  };

  /// The recipe for `pattern` and `request`; parses (source name "pattern") and resolves on
  /// a miss. Throws UserError for bad input, exactly as resolve_pattern() does.
  std::shared_ptr<const Recipe> resolve(std::string_view pattern, const ResolveRequest& request);
  /// Number of cached recipes.
  size_t size() const;
  /// Drops every entry and resets the counters.
  void clear();
  /// Hit and miss counts.
  Stats stats() const;

 private:
  struct Hash {
    size_t operator()(const std::string& key) const noexcept;
  };
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Recipe>, Hash> recipes_;
  Stats stats_;
};

/// The process-wide cache behind resolve_cached().
PatternCache& default_pattern_cache();

/// Resolves through the process-wide cache.
inline std::shared_ptr<const Recipe> resolve_cached(std::string_view pattern,
                                                    const ResolveRequest& request) {
  return default_pattern_cache().resolve(pattern, request);
}

}  // namespace ein
