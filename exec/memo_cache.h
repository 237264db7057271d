// A thread-safe memo from byte-string keys to built values, shared by the CPU and CUDA
// executors (a kernel built once per code key): lookups take a shared lock; a miss builds
// outside any lock (two threads may both build; the first to insert wins and both get it).
#pragma once

#include <xxhash.h>

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ein {

template <class Value>
class MemoCache {
 public:
  /// At most `capacity` values kept (0: no bound): the insert that finds the memo full empties
  /// it first, for keys that need not recur (exact layouts, which vary with the shapes a
  /// program meets). A value a caller holds outlives its entry.
  explicit MemoCache(size_t capacity = 0) : capacity_(capacity) {}

  /// The value for `key`, made by `build()` (returning a shared_ptr<const Value>) on a miss.
  template <class Build>
  std::shared_ptr<const Value> get(const std::string& key, Build&& build) {
    const uint64_t hash = XXH3_64bits(key.data(), key.size());
    {
      std::shared_lock lock(mutex_);
      if (auto it = entries_.find(hash); it != entries_.end())
        for (const auto& [k, v] : it->second)
          if (k == key) return v;
    }
    std::shared_ptr<const Value> made = build();
    std::unique_lock lock(mutex_);
    if (auto it = entries_.find(hash); it != entries_.end())
      for (const auto& [k, v] : it->second)
        if (k == key) return v;
    if (capacity_ > 0 && size_ >= capacity_) {
      entries_.clear();
      size_ = 0;
    }
    entries_[hash].emplace_back(key, made);
    ++size_;
    return made;
  }

 private:
  size_t capacity_ = 0, size_ = 0;
  std::shared_mutex mutex_;
  std::unordered_map<uint64_t, std::vector<std::pair<std::string, std::shared_ptr<const Value>>>>
      entries_;
};

}  // namespace ein
