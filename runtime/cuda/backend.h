// The CUDA device backend: device memory through the caching allocator (one per device, on
// cuMemAlloc/cuMemFree), copies through the driver, pinned host memory and asynchronous
// copies on a stream. It installs itself into the device registry (device.h) the first time a
// cuda device is used and a driver with a device exists. Kernel launches are cuda_launch.h's,
// GEMMs cublaslt.h's; nothing here is called by graph execution yet (docs/cuda.md).
//
// Copies through the DeviceBackend interface are queued on the calling thread's current
// stream (cuda_stream.h); those to the host wait for it, so they return with the data there.
#pragma once

#include <cstdint>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/stream.h"

namespace ein {

/// The caching allocator's counters for cuda:`device` (torch.cuda.memory_stats()); zeros
/// before the device's first allocation. DeviceError without a driver.
CachingAllocatorStats cuda_memory_stats(int device);
/// Returns cuda:`device`'s wholly free cached segments to the driver (after synchronising).
void cuda_empty_cache(int device);
/// Sets the allocator's peaks for cuda:`device` to the current values.
void cuda_reset_peak_memory_stats(int device);
/// Waits for all work on cuda:`device` (cuCtxSynchronize).
void cuda_synchronize(int device);

/// Page-locked host memory (cuMemHostAlloc, portable across devices): what asynchronous
/// host↔device copies need to overlap with compute. Movable, freed with the object.
class PinnedBuffer {
 public:
  /// `nbytes` of pinned memory; DeviceError without a driver or when it cannot be had.
  explicit PinnedBuffer(int64_t nbytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return data_; }        ///< the host address
  int64_t nbytes() const { return nbytes_; }  ///< size in bytes

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
};

/// Queues a copy of `nbytes` from host `src` to device `dst` on `stream` (cuMemcpyHtoDAsync)
/// and returns. Asynchronous only when `src` is pinned; the source must stay unchanged until
/// the stream has reached the copy.
void copy_to_device_async(void* dst, const void* src, int64_t nbytes, const Stream& stream);
/// Queues a copy of `nbytes` from device `src` to host `dst` on `stream` (cuMemcpyDtoHAsync);
/// the data is there once the stream is synchronised.
void copy_to_host_async(void* dst, const void* src, int64_t nbytes, const Stream& stream);

}  // namespace ein
