// Checks of a kernel's input that the kernel makes on the device and the host reads when it
// next waits for that device anyway: a gather's token ids, say, checked where they are
// instead of read back first (a copy to the host waits for everything queued before it, so a
// GPU training step would stall twice mid-way just to check its embedding's ids).
//
// A check is a word of device memory holding ~0 until the kernel stores the first bad flat
// position into it (atomicMin). The host reads every pending word the next time it waits for
// the device: a tensor copied to the host (Tensor::to), ein::synchronize(), a stream's
// synchronize(). The first failed check, in launch order, throws its error there, with the
// message the host-side check would have given (a RuntimeError, or what the DeviceCheckScope
// it was made in throws: the graph executor points at the script's expression); the words are
// then reset and the checks dropped, so one error is reported once. Until that read, what the bad
// element produced is unspecified (the kernels write zeros and skip it), as with PyTorch's
// device-side asserts — but the error names the op, the position and the value instead of aborting
// the context.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <ein/device.h>

namespace ein::detail {

/// The message of a failed check, given the first bad flat position the kernel stored.
using DeviceCheckMessage = std::function<std::string(int64_t position)>;

/// Throws a failed check's error, given its message.
using DeviceCheckReport = std::function<void(const std::string& message)>;

/// While it lives, checks deferred on this thread are reported through `report` when they
/// fail (a RuntimeError should it return): what the code that launched the kernel would have
/// made of the error had the check been made at once.
class DeviceCheckScope {
 public:
  explicit DeviceCheckScope(DeviceCheckReport report);
  ~DeviceCheckScope();
  DeviceCheckScope(const DeviceCheckScope&) = delete;
  DeviceCheckScope& operator=(const DeviceCheckScope&) = delete;

 private:
  DeviceCheckReport previous_;
};

/// A fresh check word on `device` (a device address the kernel atomicMin's into), pending until
/// the host next waits for `device`. After 1024 pending checks the oldest are read first (one
/// wait), so the words never run out.
void* defer_device_check(Device device, DeviceCheckMessage message);

/// Reads the checks pending on `device` (the caller has just waited for it) and throws the
/// first failed one's error; nothing pending: returns at once, nothing is copied.
void run_device_checks(Device device);

/// run_device_checks() of every device with checks pending.
void run_device_checks();

/// How many checks wait on `device` (tests).
int64_t pending_device_checks(Device device);

/// Sets how many check words each device keeps (1024), for devices that have none yet; returns
/// the previous number. For tests of the words running out.
int64_t set_device_check_words(int64_t words);

}  // namespace ein::detail
