// CUDA streams: a Stream wraps a CUstream of one device, and each thread has a current stream
// per device (the legacy default stream unless a StreamGuard sets another) on which the
// runtime queues copies and from whose free list the caching allocator serves that thread.
// Like torch.cuda.Stream and torch.cuda.stream(); events and cross-stream waits do not exist yet.
#pragma once

#include <cstdint>

#include "runtime/cuda/driver.h"

namespace ein {

/// A stream of device `device()`: owning (create(), destroyed with the object) or the device's
/// default stream (the legacy NULL stream, which is never destroyed). Movable, not copyable.
class Stream {
 public:
  /// The legacy default stream of cuda:`device` (handle nullptr); needs no driver until used.
  static Stream default_stream(int device);
  /// A new stream on cuda:`device` that does not synchronise with the default stream
  /// (CU_STREAM_NON_BLOCKING). DeviceError without a driver.
  static Stream create(int device);
  /// The calling thread's current stream of cuda:`device`, not owned (a view, never destroyed
  /// by this object).
  static Stream current(int device);

  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  int device() const { return device_; }       ///< the CUDA device index
  CuStream handle() const { return handle_; }  ///< the CUstream (nullptr: default stream)
  /// The identity the caching allocator keys free lists by.
  uintptr_t key() const { return reinterpret_cast<uintptr_t>(handle_); }
  /// Waits until all work queued on the stream has finished (cuStreamSynchronize).
  void synchronize() const;

 private:
  Stream(int device, CuStream handle, bool owned)
      : device_(device), handle_(handle), owned_(owned) {}
  int device_;
  CuStream handle_;
  bool owned_;
};

/// The calling thread's current stream on cuda:`device` (the default stream unless a
/// StreamGuard is active). The stream object must outlive its use as current.
CuStream current_stream(int device);

/// Makes `stream` the calling thread's current stream of its device for the guard's scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  CuStream previous_;
};

}  // namespace ein
