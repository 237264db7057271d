// Storage: a refcounted block of bytes on one device, and per-device memory accounting
// (allocated now, peak since the last reset), like torch.cuda.memory_allocated. Storage knows
// nothing of dtypes, shapes or strides; Tensor puts those on top.
#pragma once

#include <cstdint>
#include <memory>

#include <ein/device.h>

namespace ein {

/// A block of device memory, 64-byte aligned, freed when the last shared_ptr goes away.
/// Sizes are in bytes. Held through std::shared_ptr so views share it.
class Storage {
 public:
  /// Allocates `nbytes` on `device`; OutOfMemoryError when the bytes cannot be had or the
  /// size is negative, RuntimeError when the device has no backend. Zero bytes is valid.
  static std::shared_ptr<Storage> allocate(int64_t nbytes, Device device);
  /// Allocates `nbytes` of page-locked host memory through the backend of `for_kind` (cuda),
  /// which copies to and from it asynchronously. Its device is cpu() (counted there); a
  /// DeviceError without a driver, OutOfMemoryError when the bytes cannot be had.
  static std::shared_ptr<Storage> allocate_pinned(int64_t nbytes, DeviceKind for_kind);

  /// Frees the bytes and subtracts them from the device's accounting.
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// Start of the bytes (nullptr when nbytes() == 0); a host address only on the CPU.
  void* data() const { return data_; }
  /// Size in bytes.
  int64_t nbytes() const { return nbytes_; }
  /// Where the bytes live.
  Device device() const { return device_; }
  /// Whether they are page-locked host memory (allocate_pinned).
  bool pinned() const { return pinned_; }

  /// ZeRO 3 (runtime/dist/gradient_sync.h): gives the bytes back to the device while the
  /// Storage, and so every tensor viewing it, lives on: a parameter another rank holds. Its
  /// tensors then refuse data_ptr() and device_ptr() with a RuntimeError, and graph execution
  /// fetches their values from the owner. No effect on pinned or empty storage.
  void release();
  /// Allocates the bytes again (their values undefined) after release(); no effect otherwise.
  void refill();
  /// Whether release() gave the bytes back (and refill() did not take them again).
  bool released() const { return released_; }

 private:
  /// Takes ownership of bytes that allocate() already counted.
  Storage(void* data, int64_t nbytes, Device device, DeviceBackend* backend, bool pinned = false);

  void* data_;
  int64_t nbytes_;
  Device device_;
  DeviceBackend* backend_;  ///< lives as long as the registry (backends are never removed)
  bool pinned_ = false;     ///< host memory from backend_->allocate_pinned
  bool released_ = false;   ///< release()d: data_ is null and nothing is counted
};

/// Bytes currently held by Storage objects on `device`.
int64_t memory_allocated(Device device);
/// The largest memory_allocated(device) since start or the last reset_peak_memory_stats.
int64_t max_memory_allocated(Device device);
/// Sets the peak to the current allocation.
void reset_peak_memory_stats(Device device);

}  // namespace ein
