// Streams and the per-thread current stream (runtime/cuda/stream.h).
#include "runtime/cuda/stream.h"

#include <utility>
#include <vector>

#include "runtime/device_checks.h"

namespace ein {
namespace {

constexpr unsigned kNonBlocking = 0x1;  // cuda.h's CU_STREAM_NON_BLOCKING

// The current stream per device of this thread; absent entries are the default stream.
std::vector<CuStream>& current_streams() {
  thread_local std::vector<CuStream> streams;
  return streams;
}

}  // namespace

Stream Stream::default_stream(int device) {
  return Stream(device, nullptr, false);
}

Stream Stream::current(int device) {
  return Stream(device, current_stream(device), false);
}

Stream Stream::create(int device) {
  make_cuda_context_current(device);
  CuStream handle = nullptr;
  check_cuda(cuda_driver().stream_create(&handle, kNonBlocking), "cuStreamCreate");
  return Stream(device, handle, true);
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_),
      handle_(std::exchange(other.handle_, nullptr)),
      owned_(std::exchange(other.owned_, false)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Stream old(std::move(*this));
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

Stream::~Stream() {
  // cuStreamDestroy returns at once; work already queued still completes.
  if (owned_ && handle_) cuda_driver().stream_destroy(handle_);
}

void Stream::synchronize() const {
  make_cuda_context_current(device_);
  check_cuda(cuda_driver().stream_synchronize(handle_), "cuStreamSynchronize");
  detail::run_device_checks(cuda(device_));
}

CuStream current_stream(int device) {
  const std::vector<CuStream>& streams = current_streams();
  return device >= 0 && static_cast<size_t>(device) < streams.size() ? streams[device] : nullptr;
}

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(current_stream(stream.device())) {
  std::vector<CuStream>& streams = current_streams();
  if (streams.size() <= static_cast<size_t>(device_)) streams.resize(device_ + 1, nullptr);
  streams[device_] = stream.handle();
}

StreamGuard::~StreamGuard() {
  current_streams()[device_] = previous_;
}

}  // namespace ein
