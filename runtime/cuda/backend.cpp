// The CUDA DeviceBackend and the memory functions of runtime/cuda/backend.h. One backend
// object serves every device; it lives for the whole process and is never destroyed (as
// PyTorch's allocator), since at exit the driver may already be unloaded.
#include "runtime/cuda/backend.h"

#include <array>
#include <memory>
#include <mutex>
#include <utility>

#include <ein/device.h>

namespace ein {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kOutOfMemory = 2;             // CUDA_ERROR_OUT_OF_MEMORY
constexpr unsigned kHostAllocPortable = 1;  // CU_MEMHOSTALLOC_PORTABLE

CuDevicePtr dptr(const void* p) {
  return static_cast<CuDevicePtr>(reinterpret_cast<uintptr_t>(p));
}

/// cuMemAlloc/cuMemFree of one device under its caching allocator.
class DriverMemory final : public RawAllocator {
 public:
  explicit DriverMemory(int device) : device_(device) {}
  void* allocate(int64_t nbytes) override {
    make_cuda_context_current(device_);
    CuDevicePtr p = 0;
    const int r = cuda_driver().mem_alloc(&p, static_cast<size_t>(nbytes));
    if (r == kOutOfMemory) return nullptr;  // the allocator empties its cache and retries
    check_cuda(r, "cuMemAlloc(" + std::to_string(nbytes) +
                      " bytes on cuda:" + std::to_string(device_) + ")");
    return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }
  void free(void* ptr, int64_t) override {
    make_cuda_context_current(device_);
    // A kernel queued before one of the segment's blocks was freed may still be reading it.
    check_cuda(cuda_driver().ctx_synchronize(), "cuCtxSynchronize");
    check_cuda(cuda_driver().mem_free(dptr(ptr)), "cuMemFree");
  }

 private:
  int device_;
};

struct DeviceMemory {
  explicit DeviceMemory(int device) : raw(device), cache(raw) {}
  DriverMemory raw;
  CachingAllocator cache;
};

class CudaBackend final : public DeviceBackend {
 public:
  std::string name() const override { return "cuda"; }

  void* allocate(Device device, int64_t nbytes) override {
    make_cuda_context_current(device.index);
    return memory(device.index)
        .cache.allocate(nbytes, reinterpret_cast<uintptr_t>(current_stream(device.index)));
  }
  void free(Device device, void* ptr, int64_t) override { memory(device.index).cache.free(ptr); }

  void copy_from_host(Device device, void* dst, const void* src, int64_t nbytes) override {
    make_cuda_context_current(device.index);
    CuStream stream = current_stream(device.index);
    check_cuda(cuda_driver().memcpy_htod_async(dptr(dst), src, static_cast<size_t>(nbytes), stream),
               "cuMemcpyHtoDAsync");
    // `src` is pageable host memory the caller may change once this returns.
    check_cuda(cuda_driver().stream_synchronize(stream), "cuStreamSynchronize");
  }
  void copy_to_host(Device device, void* dst, const void* src, int64_t nbytes) override {
    make_cuda_context_current(device.index);
    CuStream stream = current_stream(device.index);
    check_cuda(cuda_driver().memcpy_dtoh_async(dst, dptr(src), static_cast<size_t>(nbytes), stream),
               "cuMemcpyDtoHAsync");
    check_cuda(cuda_driver().stream_synchronize(stream), "cuStreamSynchronize");
  }
  void copy_on_device(Device device, void* dst, const void* src, int64_t nbytes) override {
    make_cuda_context_current(device.index);
    check_cuda(cuda_driver().memcpy_dtod_async(dptr(dst), dptr(src), static_cast<size_t>(nbytes),
                                               current_stream(device.index)),
               "cuMemcpyDtoDAsync");
  }

  void synchronize(Device device) override { cuda_synchronize(device.index); }

  // Tensor::pin_memory and non-blocking copies: portable page-locked memory, and the copies
  // queued on the current stream without waiting.
  void* allocate_pinned(int64_t nbytes) override {
    make_cuda_context_current(0);  // any context: portable memory is pinned for all of them
    void* data = nullptr;
    if (cuda_driver().mem_host_alloc(&data, static_cast<size_t>(nbytes), kHostAllocPortable) != 0)
      return nullptr;  // Storage reports it as out of memory
    return data;
  }
  void free_pinned(void* ptr, int64_t) override { cuda_driver().mem_free_host(ptr); }
  void copy_from_host_async(Device device, void* dst, const void* src, int64_t nbytes) override {
    make_cuda_context_current(device.index);
    check_cuda(cuda_driver().memcpy_htod_async(dptr(dst), src, static_cast<size_t>(nbytes),
                                               current_stream(device.index)),
               "cuMemcpyHtoDAsync");
  }
  void copy_to_host_async(Device device, void* dst, const void* src, int64_t nbytes) override {
    make_cuda_context_current(device.index);
    check_cuda(cuda_driver().memcpy_dtoh_async(dst, dptr(src), static_cast<size_t>(nbytes),
                                               current_stream(device.index)),
               "cuMemcpyDtoHAsync");
  }

  /// The allocator of cuda:`index`, made on first use (DeviceError for a device that does not
  /// exist).
  DeviceMemory& memory(int index) {
    (void)cuda_device_properties(index);  // checks the index against the driver's count
    std::lock_guard lock(mutex_);
    if (!memory_[index]) memory_[index] = std::make_unique<DeviceMemory>(index);
    return *memory_[index];
  }

 private:
  std::mutex mutex_;
  std::array<std::unique_ptr<DeviceMemory>, kMaxDevices> memory_;
};

CudaBackend& backend() {
  cuda_driver();  // DeviceError with the reason when there is no driver
  static CudaBackend* instance = new CudaBackend;  // never destroyed, see the file comment
  return *instance;
}

}  // namespace

namespace detail {

std::shared_ptr<DeviceBackend> make_cuda_backend() {
  return std::shared_ptr<DeviceBackend>(&backend(), [](DeviceBackend*) {});
}

}  // namespace detail

CachingAllocatorStats cuda_memory_stats(int device) {
  return backend().memory(device).cache.stats();
}

void cuda_empty_cache(int device) {
  backend().memory(device).cache.empty_cache();
}

void cuda_reset_peak_memory_stats(int device) {
  backend().memory(device).cache.reset_peak();
}

void cuda_synchronize(int device) {
  make_cuda_context_current(device);
  check_cuda(cuda_driver().ctx_synchronize(), "cuCtxSynchronize");
}

PinnedBuffer::PinnedBuffer(int64_t nbytes) : nbytes_(nbytes) {
  if (nbytes <= 0) return;
  make_cuda_context_current(0);  // any context: portable memory is pinned for all of them
  check_cuda(cuda_driver().mem_host_alloc(&data_, static_cast<size_t>(nbytes), kHostAllocPortable),
             "cuMemHostAlloc(" + std::to_string(nbytes) + " bytes)");
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), nbytes_(std::exchange(other.nbytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    PinnedBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    nbytes_ = std::exchange(other.nbytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cuda_driver().mem_free_host(data_);
}

void copy_to_device_async(void* dst, const void* src, int64_t nbytes, const Stream& stream) {
  if (nbytes <= 0) return;
  make_cuda_context_current(stream.device());
  check_cuda(
      cuda_driver().memcpy_htod_async(dptr(dst), src, static_cast<size_t>(nbytes), stream.handle()),
      "cuMemcpyHtoDAsync");
}

void copy_to_host_async(void* dst, const void* src, int64_t nbytes, const Stream& stream) {
  if (nbytes <= 0) return;
  make_cuda_context_current(stream.device());
  check_cuda(
      cuda_driver().memcpy_dtoh_async(dst, dptr(src), static_cast<size_t>(nbytes), stream.handle()),
      "cuMemcpyDtoHAsync");
}

}  // namespace ein
