// The caching allocator (runtime/cuda/allocator.h). Blocks of one segment form a doubly linked
// list in address order; free blocks sit in one of two ordered sets (small and large pools)
// keyed by (stream, size, address), so a best-fit search is one lower_bound.
#include "runtime/cuda/allocator.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ein {
namespace {

// PyTorch's c10/cuda/CUDACachingAllocator.cpp constants.
constexpr int64_t kMinBlockSize = 512;              // rule 1: the rounding unit
constexpr int64_t kSmallSize = int64_t{1} << 20;    // largest small request; large split slack
constexpr int64_t kSmallBuffer = int64_t{2} << 20;  // small pool segment
// The segment for large requests under kMinLargeAlloc.
constexpr int64_t kLargeBuffer = int64_t{20} << 20;
constexpr int64_t kMinLargeAlloc = int64_t{10} << 20;
constexpr int64_t kRoundLarge = int64_t{2} << 20;  // larger segments are multiples of this

struct Block {
  char* ptr = nullptr;
  int64_t size = 0;
  StreamKey stream = 0;
  bool small = false;      // which pool it returns to
  bool allocated = false;  // handed out
  Block* prev = nullptr;   // neighbours in the segment (address order)
  Block* next = nullptr;
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    return std::make_tuple(a->stream, a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
           std::make_tuple(b->stream, b->size, reinterpret_cast<uintptr_t>(b->ptr));
  }
};

using Pool = std::set<Block*, BlockLess>;

}  // namespace

struct CachingAllocator::Impl {
  explicit Impl(RawAllocator& r) : raw(r) {}

  RawAllocator& raw;
  mutable std::mutex mutex;
  Pool small_pool, large_pool;
  std::unordered_map<void*, Block*> handed_out;
  CachingAllocatorStats stats;

  Pool& pool_of(const Block* b) { return b->small ? small_pool : large_pool; }

  // Rule 3: the smallest free block of the pool and stream that holds `size`.
  Block* take_cached(Pool& pool, int64_t size, StreamKey stream) {
    Block key;
    key.size = size;
    key.stream = stream;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  Block* new_segment(int64_t size, bool small, StreamKey stream) {
    const int64_t bytes = segment_size(size);
    void* p = raw.allocate(bytes);
    if (!p) {  // rule 5
      release_free_segments();
      ++stats.retries;
      p = raw.allocate(bytes);
      if (!p) return nullptr;
    }
    ++stats.raw_allocations;
    ++stats.segments;
    stats.reserved += bytes;
    stats.max_reserved = std::max(stats.max_reserved, stats.reserved);
    return new Block{static_cast<char*>(p), bytes, stream, small};
  }

  // Rule 2's split: the tail beyond `size` becomes a free block of the same segment.
  void split(Block* b, int64_t size) {
    const int64_t remaining = b->size - size;
    if (b->small ? remaining < kMinBlockSize : remaining <= kSmallSize) return;
    Block* rest = new Block{b->ptr + size, remaining, b->stream, b->small};
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_of(rest).insert(rest);
  }

  // Rule 4: merge with free neighbours, then back to the pool.
  void release(Block* b) {
    b->allocated = false;
    if (Block* prev = b->prev; prev && !prev->allocated) {
      pool_of(prev).erase(prev);
      b->ptr = prev->ptr;
      b->size += prev->size;
      b->prev = prev->prev;
      if (b->prev) b->prev->next = b;
      delete prev;
    }
    if (Block* next = b->next; next && !next->allocated) {
      pool_of(next).erase(next);
      b->size += next->size;
      b->next = next->next;
      if (b->next) b->next->prev = b;
      delete next;
    }
    pool_of(b).insert(b);
  }

  void release_free_segments() {
    for (Pool* pool : {&small_pool, &large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next) {  // part of a segment that is still partly in use
          ++it;
          continue;
        }
        it = pool->erase(it);
        raw.free(b->ptr, b->size);
        stats.reserved -= b->size;
        --stats.segments;
        delete b;
      }
    }
  }
};

CachingAllocator::CachingAllocator(RawAllocator& raw) : impl_(std::make_unique<Impl>(raw)) {}

CachingAllocator::~CachingAllocator() {
  std::vector<Block*> blocks(impl_->small_pool.begin(), impl_->small_pool.end());
  blocks.insert(blocks.end(), impl_->large_pool.begin(), impl_->large_pool.end());
  for (auto& [ptr, b] : impl_->handed_out)
    blocks.push_back(b);
  for (Block* b : blocks) {
    if (b->prev) continue;  // segments are freed from their first block
    int64_t bytes = 0;
    for (Block* part = b; part; part = part->next)
      bytes += part->size;
    impl_->raw.free(b->ptr, bytes);
  }
  for (Block* b : blocks)
    delete b;
}

int64_t CachingAllocator::round_size(int64_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

int64_t CachingAllocator::segment_size(int64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void* CachingAllocator::allocate(int64_t nbytes, StreamKey stream) {
  if (nbytes < 0) throw std::invalid_argument("CachingAllocator::allocate: negative size");
  const int64_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  std::lock_guard lock(impl_->mutex);
  Block* b = impl_->take_cached(small ? impl_->small_pool : impl_->large_pool, size, stream);
  if (b) {
    ++impl_->stats.cache_hits;
  } else {
    b = impl_->new_segment(size, small, stream);
    if (!b) return nullptr;
  }
  impl_->split(b, size);
  b->allocated = true;
  impl_->handed_out.emplace(b->ptr, b);
  CachingAllocatorStats& s = impl_->stats;
  s.allocated += b->size;
  s.max_allocated = std::max(s.max_allocated, s.allocated);
  return b->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->handed_out.find(ptr);
  if (it == impl_->handed_out.end())
    throw std::invalid_argument("CachingAllocator::free: a pointer it did not hand out");
  Block* b = it->second;
  impl_->handed_out.erase(it);
  impl_->stats.allocated -= b->size;
  impl_->release(b);
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(impl_->mutex);
  impl_->release_free_segments();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(impl_->mutex);
  impl_->stats.max_allocated = impl_->stats.allocated;
  impl_->stats.max_reserved = impl_->stats.reserved;
}

}  // namespace ein
