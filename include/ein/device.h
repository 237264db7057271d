// Devices (cpu, cuda:N) and the small backend interface through which the runtime allocates,
// frees and copies device memory. This file names devices and routes memory operations; it
// does not launch kernels, and it holds no CUDA code (cuda_backend.cpp installs the CUDA
// backend the first time a cuda device is used, when a driver and a device exist).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ein {

/// The kind of a device.
enum class DeviceKind : uint8_t { cpu, cuda };

/// A device: a kind and an index (always 0 for the CPU).
struct Device {
  DeviceKind kind = DeviceKind::cpu;  ///< cpu or cuda
  int index = 0;                      ///< which GPU; 0 for the CPU

  /// Same kind and index.
  bool operator==(const Device&) const = default;
  /// "cpu", "cuda:0", ...
  std::string str() const;
};

/// The host CPU.
Device cpu();
/// The GPU with this index.
Device cuda(int index = 0);
/// Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; a RuntimeError for anything else.
Device parse_device(std::string_view text);

/// Memory operations of one device kind (ggml-style backend interface). Methods receive the
/// device so one backend object serves every index of its kind. Sizes are in bytes.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// A short name for messages, e.g. "cpu".
  virtual std::string name() const = 0;
  /// At least `nbytes` bytes, 64-byte aligned; nullptr when the memory cannot be had.
  virtual void* allocate(Device device, int64_t nbytes) = 0;
  /// Returns memory from allocate() (`nbytes` is what was asked for).
  virtual void free(Device device, void* ptr, int64_t nbytes) = 0;
  /// Copies `nbytes` from host memory to memory of `device`.
  virtual void copy_from_host(Device device, void* dst, const void* src, int64_t nbytes) = 0;
  /// Copies `nbytes` from memory of `device` to host memory.
  virtual void copy_to_host(Device device, void* dst, const void* src, int64_t nbytes) = 0;
  /// Copies `nbytes` between two buffers of `device`.
  virtual void copy_on_device(Device device, void* dst, const void* src, int64_t nbytes) = 0;
  /// Waits until the work queued on `device`, on every stream, is done. The default: a kind
  /// whose operations are synchronous has nothing to wait for.
  virtual void synchronize(Device device) { (void)device; }

  /// Page-locked host memory that this kind's asynchronous copies read and write without a
  /// staging copy (cuMemHostAlloc; torch's pin_memory). nullptr when it cannot be had; the
  /// default (a kind without such memory) throws DeviceError.
  virtual void* allocate_pinned(int64_t nbytes);
  /// Returns memory from allocate_pinned().
  virtual void free_pinned(void* ptr, int64_t nbytes);
  /// Queues a copy from (pinned) host memory to `device` on the calling thread's current
  /// stream and returns (torch's non_blocking=True): the host bytes must stay unchanged until
  /// the stream reaches the copy. The default copies synchronously.
  virtual void copy_from_host_async(Device device, void* dst, const void* src, int64_t nbytes) {
    copy_from_host(device, dst, src, nbytes);
  }
  /// Queues a copy from `device` to (pinned) host memory; the bytes are there once the stream
  /// is synchronised. The default copies synchronously.
  virtual void copy_to_host_async(Device device, void* dst, const void* src, int64_t nbytes) {
    copy_to_host(device, dst, src, nbytes);
  }
};

/// The backend serving `device`; for cuda, the CUDA backend is installed on first use when a
/// driver with a device exists. A RuntimeError saying why when its kind has none.
DeviceBackend& backend_for(Device device);

/// Installs (or, with nullptr, removes) the backend for a device kind; tests install fakes.
void register_backend(DeviceKind kind, std::shared_ptr<DeviceBackend> backend);

/// Whether a backend for `kind` is installed now (the CUDA one only after its first use).
bool has_backend(DeviceKind kind);

namespace detail {
/// The CPU backend (cpu_backend.cpp).
std::shared_ptr<DeviceBackend> make_cpu_backend();
/// The CUDA backend (cuda_backend.cpp); a DeviceError with the driver's reason when there is
/// no driver or no device.
std::shared_ptr<DeviceBackend> make_cuda_backend();
}  // namespace detail

}  // namespace ein
