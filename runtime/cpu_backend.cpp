// The CPU device backend: 64-byte aligned host memory from the C allocator and memcpy. It
// never throws on a failed allocation (it returns nullptr; Storage turns that into an
// OutOfMemoryError) and does no accounting (Storage does).
#include <cstdlib>
#include <cstring>

#include "runtime/device.h"

namespace ein::detail {
namespace {

// 64 bytes: a cache line and the widest AVX-512 vector, so kernels may use aligned loads.
constexpr int64_t kAlignment = 64;

class CpuBackend final : public DeviceBackend {
 public:
  std::string name() const override { return "cpu"; }

  void* allocate(Device, int64_t nbytes) override {
    // aligned_alloc wants a multiple of the alignment; the rounding cannot overflow because
    // Storage rejects sizes near INT64_MAX before calling.
    const auto rounded = static_cast<size_t>((nbytes + kAlignment - 1) / kAlignment * kAlignment);
    return std::aligned_alloc(kAlignment, rounded);
  }

  void free(Device, void* ptr, int64_t) override { std::free(ptr); }

  void copy_from_host(Device, void* dst, const void* src, int64_t nbytes) override {
    if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
  }
  void copy_to_host(Device, void* dst, const void* src, int64_t nbytes) override {
    if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
  }
  void copy_on_device(Device, void* dst, const void* src, int64_t nbytes) override {
    if (nbytes > 0) std::memcpy(dst, src, static_cast<size_t>(nbytes));
  }
};

}  // namespace

std::shared_ptr<DeviceBackend> make_cpu_backend() {
  return std::make_shared<CpuBackend>();
}

}  // namespace ein::detail
