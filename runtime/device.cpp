// Device names and the registry of device backends. The CPU backend is always installed; the
// CUDA backend is installed the first time a cuda device is used, if the driver loads and
// sees a device; otherwise using cuda fails with a RuntimeError carrying the driver's reason.
#include <ein/device.h>

#include <array>
#include <charconv>
#include <mutex>

#include <ein/errors.h>

namespace ein {

std::string Device::str() const {
  if (kind == DeviceKind::cpu) return "cpu";
  return "cuda:" + std::to_string(index);
}

Device cpu() {
  return Device{DeviceKind::cpu, 0};
}

Device cuda(int index) {
  if (index < 0) throw RuntimeError("cuda device index must be >= 0, got " + std::to_string(index));
  return Device{DeviceKind::cuda, index};
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty())
      return cuda(index);
  }
  throw RuntimeError("unknown device \"" + std::string(text) +
                     "\": expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

namespace {

struct Registry {
  std::mutex mutex;
  std::array<std::shared_ptr<DeviceBackend>, 2> backends{detail::make_cpu_backend(), nullptr};
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

DeviceBackend& backend_for(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto& backend = r.backends[static_cast<size_t>(device.kind)];
  if (!backend) {
    try {
      backend = detail::make_cuda_backend();
    } catch (const DeviceError& e) {
      throw RuntimeError("the CUDA backend is not available in this build/session (device " +
                         device.str() + "): " + e.what() +
                         ". Use ein::cpu(), or run on a machine with an NVIDIA driver and GPU");
    }
  }
  return *backend;
}

void register_backend(DeviceKind kind, std::shared_ptr<DeviceBackend> backend) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.backends[static_cast<size_t>(kind)] = std::move(backend);
}

bool has_backend(DeviceKind kind) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.backends[static_cast<size_t>(kind)] != nullptr;
}

void* DeviceBackend::allocate_pinned(int64_t) {
  throw DeviceError("the " + name() + " backend has no page-locked host memory");
}

void DeviceBackend::free_pinned(void*, int64_t) {}

}  // namespace ein
