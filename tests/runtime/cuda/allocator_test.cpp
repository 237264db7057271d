// The caching allocator's rules (runtime/cuda/allocator.h) on a fake raw allocator of host
// memory with a capacity: rounding and segment sizes, splitting, reuse, merging of freed
// neighbours (fragmentation), per-stream free lists, statistics and peaks, empty_cache, the
// retry after an out-of-memory, and a random workload checked for overlapping blocks. No GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/cuda/allocator.h"

namespace ein {
namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

/// Host memory in segments, with a capacity so that the device can run out.
class FakeDevice final : public RawAllocator {
 public:
  explicit FakeDevice(int64_t capacity = int64_t{1} << 40) : capacity_(capacity) {}
  ~FakeDevice() override {
    for (auto& [p, n] : live_)
      std::free(p);
  }
  void* allocate(int64_t nbytes) override {
    ++allocate_calls;
    if (in_use_ + nbytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(512, static_cast<size_t>(nbytes));
    live_[p] = nbytes;
    in_use_ += nbytes;
    return p;
  }
  void free(void* ptr, int64_t nbytes) override {
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end()) << "freeing a segment that was not allocated";
    EXPECT_EQ(it->second, nbytes) << "a segment freed with another size";
    in_use_ -= nbytes;
    std::free(ptr);
    live_.erase(it);
    ++free_calls;
  }
  int64_t in_use() const { return in_use_; }
  size_t segments() const { return live_.size(); }
  int allocate_calls = 0, free_calls = 0;

 private:
  int64_t capacity_;
  int64_t in_use_ = 0;
  std::map<void*, int64_t> live_;
};

char* at(void* p, int64_t offset) {
  return static_cast<char*>(p) + offset;
}

TEST(CachingAllocator, RoundsTo512BytesAndSizesSegmentsLikePyTorch) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512);
  EXPECT_EQ(CachingAllocator::round_size(1), 512);
  EXPECT_EQ(CachingAllocator::round_size(512), 512);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024);
  EXPECT_EQ(CachingAllocator::round_size(3 * MiB + 1), 3 * MiB + 512);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);  // small pool
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB + 512), 20 * MiB);  // large, < 10 MiB
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);  // ≥ 10 MiB: 2 MiB multiple
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB), 12 * MiB);
}

TEST(CachingAllocator, SmallRequestsAreSplitFromOne2MiBSegment) {
  FakeDevice device;
  CachingAllocator alloc(device);
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(3000);
  void* c = alloc.allocate(1);
  EXPECT_EQ(device.allocate_calls, 1);
  EXPECT_EQ(b, at(a, 1024));  // a's 1000 bytes rounded to 1024; b follows in the segment
  EXPECT_EQ(c, at(b, 3072));
  const CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 1024 + 3072 + 512);
  EXPECT_EQ(s.reserved, 2 * MiB);
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 512, 0u);
}

TEST(CachingAllocator, AFreedBlockIsReusedWithoutAskingTheDevice) {
  FakeDevice device;
  CachingAllocator alloc(device);
  void* a = alloc.allocate(4096);
  alloc.free(a);
  EXPECT_EQ(alloc.stats().allocated, 0);
  EXPECT_EQ(alloc.stats().reserved, 2 * MiB);  // kept, not returned
  void* b = alloc.allocate(4000);
  EXPECT_EQ(b, a);
  EXPECT_EQ(device.allocate_calls, 1);
  EXPECT_EQ(alloc.stats().cache_hits, 1);
  EXPECT_EQ(device.free_calls, 0);
}

TEST(CachingAllocator, FreedNeighboursMergeSoFragmentsServeALargerRequest) {
  FakeDevice device;
  CachingAllocator alloc(device);
  // Four 512 KiB blocks fill one 2 MiB segment exactly.
  void* blocks[4];
  for (void*& p : blocks)
    p = alloc.allocate(512 * KiB);
  EXPECT_EQ(device.allocate_calls, 1);
  alloc.free(blocks[0]);
  alloc.free(blocks[2]);
  // 1 MiB free in the segment, but in two separate 512 KiB holes: no fit, a new segment.
  void* big = alloc.allocate(1 * MiB);
  EXPECT_EQ(device.allocate_calls, 2);
  EXPECT_NE(big, blocks[0]);
  alloc.free(big);
  // Freeing the block between the holes merges them into one 1.5 MiB block at blocks[0].
  alloc.free(blocks[1]);
  void* again = alloc.allocate(1 * MiB);
  EXPECT_EQ(device.allocate_calls, 2);
  // Best fit: the freed 2 MiB segment of `big` and the merged 1.5 MiB block both fit; the
  // smaller one is taken.
  EXPECT_EQ(again, blocks[0]);
  alloc.free(again);
  alloc.free(blocks[3]);
  // Everything free: both segments are whole again and empty_cache returns both.
  alloc.empty_cache();
  EXPECT_EQ(device.segments(), 0u);
  EXPECT_EQ(alloc.stats().reserved, 0);
}

TEST(CachingAllocator, LargeRequestsShareA20MiBSegmentAndSplitOnlyAboveOneMiBLeft) {
  FakeDevice device;
  CachingAllocator alloc(device);
  void* a = alloc.allocate(3 * MiB);
  void* b = alloc.allocate(9 * MiB);  // 8 MiB of the segment stay free
  EXPECT_EQ(device.allocate_calls, 1);
  EXPECT_EQ(alloc.stats().reserved, 20 * MiB);
  EXPECT_EQ(b, at(a, 3 * MiB));
  // ≥ 10 MiB and no cached block that fits: a segment of its own, rounded to 2 MiB.
  void* c = alloc.allocate(11 * MiB + 1);
  EXPECT_EQ(device.allocate_calls, 2);
  EXPECT_EQ(alloc.stats().reserved, 32 * MiB);
  alloc.free(c);
  // 11.5 MiB from the free 12 MiB block leaves 0.5 MiB: not split, the whole block is used.
  const int64_t before = alloc.stats().allocated;
  void* d = alloc.allocate(11 * MiB + 512 * KiB);
  EXPECT_EQ(d, c);
  EXPECT_EQ(alloc.stats().allocated - before, 12 * MiB);
  // A small request never comes from the large pool, even with free large blocks around.
  alloc.free(a);
  void* small = alloc.allocate(100);
  EXPECT_EQ(device.allocate_calls, 3);
  EXPECT_NE(small, a);
}

TEST(CachingAllocator, EachStreamHasItsOwnFreeList) {
  FakeDevice device;
  CachingAllocator alloc(device);
  void* a = alloc.allocate(4096, /*stream=*/1);
  alloc.free(a);
  void* b = alloc.allocate(4096, /*stream=*/2);  // stream 1's free block is not handed out
  EXPECT_EQ(device.allocate_calls, 2);
  EXPECT_NE(b, a);
  void* c = alloc.allocate(4096, /*stream=*/1);  // but it is reused on stream 1
  EXPECT_EQ(c, a);
  EXPECT_EQ(device.allocate_calls, 2);
}

TEST(CachingAllocator, StatisticsTrackAllocatedReservedAndPeaks) {
  FakeDevice device;
  CachingAllocator alloc(device);
  void* a = alloc.allocate(100 * KiB);
  void* b = alloc.allocate(3 * MiB);
  CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated, 100 * KiB + 3 * MiB);
  EXPECT_EQ(s.reserved, 2 * MiB + 20 * MiB);
  EXPECT_EQ(s.segments, 2);
  alloc.free(b);
  s = alloc.stats();
  EXPECT_EQ(s.allocated, 100 * KiB);
  EXPECT_EQ(s.max_allocated, 100 * KiB + 3 * MiB);  // the peak stays
  EXPECT_EQ(s.reserved, 22 * MiB);                  // freeing keeps the segment
  alloc.reset_peak();
  s = alloc.stats();
  EXPECT_EQ(s.max_allocated, 100 * KiB);
  EXPECT_EQ(s.max_reserved, 22 * MiB);
  alloc.empty_cache();  // the free 20 MiB segment goes; the one holding `a` stays
  s = alloc.stats();
  EXPECT_EQ(s.reserved, 2 * MiB);
  EXPECT_EQ(s.max_reserved, 22 * MiB);
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(device.in_use(), 2 * MiB);
  alloc.free(a);
  EXPECT_EQ(alloc.stats().allocated, 0);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  FakeDevice device(20 * MiB);
  CachingAllocator alloc(device);
  alloc.free(alloc.allocate(3 * MiB));  // a free, cached 20 MiB segment fills the device
  void* p = alloc.allocate(100);        // needs a 2 MiB segment: fails, cache emptied, retried
  ASSERT_NE(p, nullptr);
  CachingAllocatorStats s = alloc.stats();
  EXPECT_EQ(s.retries, 1);
  EXPECT_EQ(s.reserved, 2 * MiB);
  EXPECT_EQ(device.free_calls, 1);
  // Beyond the device even with an empty cache: nullptr, and nothing counted.
  EXPECT_EQ(alloc.allocate(30 * MiB), nullptr);
  s = alloc.stats();
  EXPECT_EQ(s.retries, 2);
  EXPECT_EQ(s.allocated, 512);
  EXPECT_EQ(s.reserved, 2 * MiB);
}

TEST(CachingAllocator, AForeignOrDoubleFreeIsRefused) {
  FakeDevice device;
  CachingAllocator alloc(device);
  void* a = alloc.allocate(64);
  alloc.free(a);
  EXPECT_THROW(alloc.free(a), std::invalid_argument);
  int on_stack = 0;
  EXPECT_THROW(alloc.free(&on_stack), std::invalid_argument);
  EXPECT_THROW(alloc.allocate(-1), std::invalid_argument);
}

TEST(CachingAllocator, ARandomWorkloadNeverHandsOutOverlappingBlocks) {
  FakeDevice device;
  std::mt19937_64 rng(7);
  struct Live {
    char* p;
    int64_t n;
    int64_t
        block;  // the size the allocator counts: round_size(n), or more for an unsplit large block
    unsigned char tag;
  };
  {
    CachingAllocator alloc(device);
    std::vector<Live> live;
    int64_t expect_allocated = 0;
    for (int step = 0; step < 3000; ++step) {
      if (!live.empty() && rng() % 2 == 0) {
        const size_t i = rng() % live.size();
        const Live l = live[i];
        // Every byte still holds its tag: no other block was placed over it.
        for (int64_t j = 0; j < l.n; j += 97)
          ASSERT_EQ(static_cast<unsigned char>(l.p[j]), l.tag);
        alloc.free(l.p);
        expect_allocated -= l.block;
        live.erase(live.begin() + static_cast<ptrdiff_t>(i));
      } else {
        // Mostly small sizes, some large ones; three streams.
        const int64_t n = rng() % 8 == 0 ? static_cast<int64_t>(rng() % (12 * MiB))
                                         : static_cast<int64_t>(rng() % (256 * KiB));
        char* p = static_cast<char*>(alloc.allocate(n, rng() % 3));
        ASSERT_NE(p, nullptr);
        const auto tag = static_cast<unsigned char>(step);
        std::memset(p, tag, static_cast<size_t>(n));
        const int64_t block = alloc.stats().allocated - expect_allocated;
        const int64_t rounded = CachingAllocator::round_size(n);
        // Small blocks are split exactly; a large one keeps a tail of at most 1 MiB.
        if (rounded <= MiB) {
          ASSERT_EQ(block, rounded);
        }
        ASSERT_GE(block, rounded);
        ASSERT_LE(block, rounded + MiB);
        live.push_back({p, n, block, tag});
        expect_allocated += block;
      }
      ASSERT_EQ(alloc.stats().allocated, expect_allocated);
      ASSERT_EQ(alloc.stats().reserved, device.in_use());
    }
    EXPECT_GT(alloc.stats().cache_hits, 500);  // the cache did serve most requests
    EXPECT_LT(alloc.stats().raw_allocations, 300);
    for (size_t i = 0; i + 1 < live.size(); i += 2)
      alloc.free(live[i].p);
    // The destructor returns every segment, including those with blocks still handed out.
  }
  EXPECT_EQ(device.segments(), 0u);
  EXPECT_EQ(device.in_use(), 0);
}

}  // namespace
}  // namespace ein
