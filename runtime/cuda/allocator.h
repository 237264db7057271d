// A caching allocator for device memory, after PyTorch's CUDACachingAllocator: memory is
// taken from the device in segments, split into blocks, and freed blocks are kept and reused
// instead of returned (cuMemAlloc/cuMemFree synchronise the device and cost ~100 µs). It knows
// nothing of CUDA: it sits on a RawAllocator (cuMemAlloc/cuMemFree in cuda_backend.cpp, a fake
// in the tests) and keys blocks by an opaque stream id. Sizes are in bytes.
//
// ## The rules (PyTorch's constants)
//
//   1. A request is rounded up to a multiple of 512 bytes (at least 512).
//   2. Requests up to 1 MiB are small: they come from 2 MiB segments, split down to 512 bytes.
//      Larger requests come from a 20 MiB segment when under 10 MiB, else from a segment of the
//      request rounded up to 2 MiB; a large block is split only when more than 1 MiB remains.
//   3. A request takes the smallest cached block of its pool and stream that fits (best fit,
//      lowest address on ties); only when none fits is a new segment allocated.
//   4. A freed block is merged with free neighbours of its segment and returned to its stream's
//      free list: work queued on that stream before the free finishes before any later use
//      (stream order), so no synchronisation is needed. Other streams never get it; memory a
//      kernel on another stream still reads must be kept alive by the caller.
//   5. When the raw allocator fails, every wholly free segment is released (empty_cache) and
//      the request is tried once more; if that fails too, allocate() returns nullptr.
#pragma once

#include <cstdint>
#include <memory>

namespace ein {

/// The memory under a CachingAllocator: whole segments from the device.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  /// `nbytes` bytes aligned to at least 512, or nullptr when the device has no more.
  virtual void* allocate(int64_t nbytes) = 0;
  /// Returns a segment from allocate().
  virtual void free(void* ptr, int64_t nbytes) = 0;
};

/// The allocator's counters, like torch.cuda.memory_stats(). Block sizes are the rounded ones.
struct CachingAllocatorStats {
  int64_t allocated = 0;        ///< bytes in blocks handed out now (torch: memory_allocated)
  int64_t max_allocated = 0;    ///< the peak of `allocated` since start or reset_peak()
  int64_t reserved = 0;         ///< bytes in segments held from the raw allocator (memory_reserved)
  int64_t max_reserved = 0;     ///< the peak of `reserved` since start or reset_peak()
  int64_t segments = 0;         ///< segments held now
  int64_t raw_allocations = 0;  ///< calls to RawAllocator::allocate that succeeded, ever
  int64_t cache_hits = 0;       ///< requests served from cached blocks, ever
  int64_t retries = 0;          ///< times the cache was emptied to retry a failed raw allocation
};

/// An opaque stream identity (a CUstream's address); 0 is the default stream.
using StreamKey = uintptr_t;

/// The caching allocator of one device (thread-safe).
class CachingAllocator {
 public:
  /// Caches on top of `raw`, which must outlive the allocator.
  explicit CachingAllocator(RawAllocator& raw);
  /// Returns every segment to the raw allocator, including blocks still handed out.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `nbytes` (≥ 0) for work on `stream`, 512-byte aligned when the raw
  /// segments are; nullptr when the raw allocator cannot supply it even after empty_cache().
  void* allocate(int64_t nbytes, StreamKey stream = 0);
  /// Returns a block from allocate() to its stream's free list. Throws std::invalid_argument
  /// for a pointer this allocator did not hand out (a double free).
  void free(void* ptr);
  /// Returns every wholly free segment to the raw allocator (torch.cuda.empty_cache()).
  void empty_cache();
  /// A snapshot of the counters.
  CachingAllocatorStats stats() const;
  /// Sets the peaks to the current values (torch.cuda.reset_peak_memory_stats()).
  void reset_peak();

  /// Rule 1: the block size a request of `nbytes` gets.
  static int64_t round_size(int64_t nbytes);
  /// Rule 2: the segment size a new segment for a block of `rounded` bytes gets.
  static int64_t segment_size(int64_t rounded);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ein
