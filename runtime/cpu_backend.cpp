// The CPU device backend: 64-byte aligned host memory from the C allocator and memcpy; large
// blocks are 2 MiB aligned and asked to be backed by transparent huge pages, and every block
// from 64 KiB up is kept in a cache when freed (like torch's caching allocator), so a loop that
// allocates the same outputs each step (a training step) touches no new pages and makes no
// system calls for them. It
// never throws on a failed allocation (it returns nullptr; Storage turns that into an
// OutOfMemoryError) and does no accounting (Storage does).
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <ein/device.h>

namespace ein::detail {
namespace {

// 64 bytes: a cache line and the widest AVX-512 vector, so kernels may use aligned loads.
constexpr int64_t kAlignment = 64;
// Blocks from 4 MiB up get 2 MiB alignment and MADV_HUGEPAGE, as numpy does: a fresh 32 MiB
// output otherwise takes ~8K page faults on first touch, which costs more than the kernel
// writing it (bench/ein_cpu_timings.cpp measures both).
constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kHugeThreshold = int64_t{4} << 20;
// At most this many bytes of freed blocks are kept for reuse (exact size matches only).
constexpr int64_t kBlockCacheBytes = int64_t{512} << 20;
// Blocks from this size up are cached when freed. Below it glibc's own free lists serve well;
// above it the C allocator maps and unmaps (or trims) memory, and a fresh block costs a page
// fault per 4 KiB: in a byte-level GPT step that was a fifth of the time.
constexpr int64_t kCacheThreshold = int64_t{64} << 10;

/// Freed large blocks by rounded size. Memory accounting (Storage) counts only blocks in use.
class BlockCache {
 public:
  void* take(size_t size) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(size);
    if (it == blocks_.end()) return nullptr;
    void* p = it->second;
    blocks_.erase(it);
    cached_ -= static_cast<int64_t>(size);
    return p;
  }
  bool keep(void* p, size_t size) {
    std::lock_guard lock(mutex_);
    if (cached_ + static_cast<int64_t>(size) > kBlockCacheBytes) return false;
    blocks_.emplace(size, p);
    cached_ += static_cast<int64_t>(size);
    return true;
  }
  ~BlockCache() {
    for (auto& [size, p] : blocks_) std::free(p);
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> blocks_;
  int64_t cached_ = 0;
};

size_t rounded_size(int64_t nbytes, int64_t align) {
  return static_cast<size_t>((nbytes + align - 1) / align * align);
}

class CpuBackend final : public DeviceBackend {
 public:
  std::string name() const override { return "cpu"; }

  void* allocate(Device, int64_t nbytes) override {
    // aligned_alloc wants a multiple of the alignment; the rounding cannot overflow because
    // Storage rejects sizes near INT64_MAX before calling.
    const int64_t align = nbytes >= kHugeThreshold ? kHugePage : kAlignment;
    const size_t rounded = rounded_size(nbytes, align);
    if (nbytes >= kCacheThreshold)
      if (void* p = cache_.take(rounded)) return p;
    void* p = std::aligned_alloc(static_cast<size_t>(align), rounded);
    if (p && align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: may fail
    return p;
  }

  void free(Device, void* ptr, int64_t nbytes) override {
    const int64_t align = nbytes >= kHugeThreshold ? kHugePage : kAlignment;
    if (ptr && nbytes >= kCacheThreshold && cache_.keep(ptr, rounded_size(nbytes, align))) return;
    std::free(ptr);
  }

  void copy_from_host(Device, void* dst, const void* src, int64_t nbytes) override {
    if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
  }
  void copy_to_host(Device, void* dst, const void* src, int64_t nbytes) override {
    if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
  }
  void copy_on_device(Device, void* dst, const void* src, int64_t nbytes) override {
    if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
  }

 private:
  BlockCache cache_;
};

}  // namespace

std::shared_ptr<DeviceBackend> make_cpu_backend() {
  return std::make_shared<CpuBackend>();
}

}  // namespace ein::detail
