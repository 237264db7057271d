// Allocation through the device backend, with thread-safe per-device counters. A failed
// allocation is an OutOfMemoryError carrying the bytes asked for; nothing here aborts.
#include <ein/storage.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <new>

#include <ein/errors.h>

namespace ein {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
};

// Enough for any machine ein runs on; devices beyond it share the last slot's counters
// rather than indexing out of bounds.
constexpr int kMaxIndex = 64;

Counters& counters(Device device) {
  static std::array<std::array<Counters, kMaxIndex>, 2> table;
  const int index = std::clamp(device.index, 0, kMaxIndex - 1);
  return table[static_cast<size_t>(device.kind)][static_cast<size_t>(index)];
}

void add_allocation(Device device, int64_t nbytes) {
  Counters& c = counters(device);
  const int64_t now = c.allocated.fetch_add(nbytes) + nbytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

// Sizes this close to INT64_MAX cannot be rounded up to the alignment; no device has them.
constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max() / 2;

}  // namespace

std::shared_ptr<Storage> Storage::allocate(int64_t nbytes, Device device) {
  DeviceBackend& backend = backend_for(device);
  if (nbytes < 0 || nbytes > kMaxBytes)
    throw OutOfMemoryError(device.str(), nbytes, memory_allocated(device));
  void* data = nullptr;
  if (nbytes > 0) {
    data = backend.allocate(device, nbytes);
    if (data == nullptr) throw OutOfMemoryError(device.str(), nbytes, memory_allocated(device));
  }
  add_allocation(device, nbytes);
  try {
    return std::shared_ptr<Storage>(new Storage(data, nbytes, device, &backend));
  } catch (const std::bad_alloc&) {
    counters(device).allocated.fetch_sub(nbytes);
    if (data != nullptr) backend.free(device, data, nbytes);
    throw OutOfMemoryError("cpu", static_cast<int64_t>(sizeof(Storage)), memory_allocated(cpu()));
  }
}

std::shared_ptr<Storage> Storage::allocate_pinned(int64_t nbytes, DeviceKind for_kind) {
  DeviceBackend& backend = backend_for(Device{for_kind, 0});
  if (nbytes < 0 || nbytes > kMaxBytes)
    throw OutOfMemoryError("pinned cpu", nbytes, memory_allocated(cpu()));
  void* data = nullptr;
  if (nbytes > 0) {
    data = backend.allocate_pinned(nbytes);
    if (data == nullptr) throw OutOfMemoryError("pinned cpu", nbytes, memory_allocated(cpu()));
  }
  add_allocation(cpu(), nbytes);
  try {
    return std::shared_ptr<Storage>(new Storage(data, nbytes, cpu(), &backend, true));
  } catch (const std::bad_alloc&) {
    counters(cpu()).allocated.fetch_sub(nbytes);
    if (data != nullptr) backend.free_pinned(data, nbytes);
    throw OutOfMemoryError("cpu", static_cast<int64_t>(sizeof(Storage)), memory_allocated(cpu()));
  }
}

Storage::Storage(void* data, int64_t nbytes, Device device, DeviceBackend* backend, bool pinned)
    : data_(data), nbytes_(nbytes), device_(device), backend_(backend), pinned_(pinned) {}

Storage::~Storage() {
  if (released_) return;  // nothing held, nothing counted
  if (data_ != nullptr) {
    if (pinned_)
      backend_->free_pinned(data_, nbytes_);
    else
      backend_->free(device_, data_, nbytes_);
  }
  counters(device_).allocated.fetch_sub(nbytes_);
}

void Storage::release() {
  if (released_ || pinned_ || data_ == nullptr) return;
  backend_->free(device_, data_, nbytes_);
  counters(device_).allocated.fetch_sub(nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::refill() {
  if (!released_) return;
  void* data = backend_->allocate(device_, nbytes_);
  if (data == nullptr) throw OutOfMemoryError(device_.str(), nbytes_, memory_allocated(device_));
  add_allocation(device_, nbytes_);
  data_ = data;
  released_ = false;
}

int64_t memory_allocated(Device device) {
  return counters(device).allocated.load();
}

int64_t max_memory_allocated(Device device) {
  return counters(device).peak.load();
}

void reset_peak_memory_stats(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.allocated.load());
}

}  // namespace ein
