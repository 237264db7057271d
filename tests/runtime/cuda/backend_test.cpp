// The CUDA device backend (runtime/cuda/backend.h, cuda_stream.h): without a driver, every
// way of using a cuda device is a clear error carrying the driver's reason; with a GPU,
// tensors round-trip through device memory, the caching allocator's statistics follow the
// tensors, streams have their own free lists, and pinned memory copies asynchronously.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/cuda/backend.h"
#include <ein/storage.h>
#include <ein/tensor.h>

namespace ein {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_is_available()) GTEST_SKIP() << cuda_driver_info().reason

TEST(CudaBackend, WithoutADriverUsingCudaIsAClearErrorWithTheReason) {
  if (cuda_is_available()) GTEST_SKIP() << "a CUDA driver and device are present";
  if (has_backend(DeviceKind::cuda)) GTEST_SKIP() << "another test installed a CUDA backend";
  try {
    (void)zeros({4}, DType::f32, cuda());
    FAIL() << "allocating on cuda must fail without a driver";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the CUDA backend is not available"), std::string::npos) << what;
    EXPECT_NE(what.find(cuda_driver_info().reason), std::string::npos) << what;
    EXPECT_NE(what.find("ein::cpu()"), std::string::npos) << what;
  }
  EXPECT_FALSE(has_backend(DeviceKind::cuda));
  EXPECT_THROW(Stream::create(0), DeviceError);
  EXPECT_THROW(PinnedBuffer(1024), DeviceError);
  // Tensor::pin_memory needs the driver too, and says so as using cuda does.
  try {
    (void)zeros({4}, DType::f32, cpu()).pin_memory();
    FAIL() << "pin_memory must fail without a driver";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(cuda_driver_info().reason), std::string::npos) << e.what();
  }
  EXPECT_FALSE(zeros({4}, DType::f32, cpu()).is_pinned());
  EXPECT_THROW((void)cuda_memory_stats(0), DeviceError);
  // Naming the default stream needs no driver; nothing is asked of it.
  EXPECT_EQ(Stream::default_stream(0).handle(), nullptr);
  EXPECT_EQ(current_stream(0), nullptr);
}

TEST(CudaBackend, TensorsRoundTripAndTheAllocatorCountsThem) {
  SKIP_WITHOUT_CUDA();
  const Tensor x = randn({257, 33}, DType::f32, cpu(), 11);
  const CachingAllocatorStats before = cuda_memory_stats(0);
  {
    const Tensor g = x.to(cuda());
    EXPECT_TRUE(has_backend(DeviceKind::cuda));
    const CachingAllocatorStats during = cuda_memory_stats(0);
    EXPECT_EQ(during.allocated - before.allocated, CachingAllocator::round_size(x.nbytes()));
    EXPECT_GE(during.reserved, during.allocated);
    const Tensor back = g.to(cpu());
    ASSERT_EQ(std::memcmp(back.data<float>(), x.data<float>(), x.nbytes()), 0);
    // A device-to-device copy (copy_ into a cuda tensor goes through copy_on_device).
    Tensor h = empty({257, 33}, DType::f32, cuda());
    h.copy_(g);
    ASSERT_EQ(std::memcmp(h.to(cpu()).data<float>(), x.data<float>(), x.nbytes()), 0);
  }
  const CachingAllocatorStats after = cuda_memory_stats(0);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.max_allocated, before.allocated + 2 * CachingAllocator::round_size(x.nbytes()));
  // The tensors after the first came from cached blocks (the segment's remainder).
  EXPECT_GT(after.cache_hits, before.cache_hits);
}

TEST(CudaBackend, StreamsKeepTheirOwnFreeBlocks) {
  SKIP_WITHOUT_CUDA();
  const Stream side = Stream::create(0);
  { const Tensor t = empty({1000}, DType::f32, cuda()); }  // a free block of the default stream
  const int64_t segments = cuda_memory_stats(0).raw_allocations;
  {
    StreamGuard guard(side);
    EXPECT_EQ(current_stream(0), side.handle());
    const Tensor t = empty({1000}, DType::f32, cuda());
    // The default stream's free blocks are not handed to another stream: a new segment.
    EXPECT_EQ(cuda_memory_stats(0).raw_allocations, segments + 1);
  }
  EXPECT_EQ(current_stream(0), nullptr);
  const Tensor again = empty({1000}, DType::f32, cuda());
  EXPECT_EQ(cuda_memory_stats(0).raw_allocations, segments + 1);  // served from the cache
}

TEST(CudaBackend, PinnedMemoryCopiesAsynchronouslyOnAStream) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 1 << 20;
  PinnedBuffer host(n * 4), back(n * 4);
  auto* in = static_cast<float*>(host.data());
  for (int64_t i = 0; i < n; ++i)
    in[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const Stream stream = Stream::create(0);
  Tensor device;
  {
    StreamGuard guard(stream);  // allocate from the stream the copies run on
    device = empty({n}, DType::f32, cuda());
  }
  copy_to_device_async(device.storage()->data(), host.data(), n * 4, stream);
  copy_to_host_async(back.data(), device.storage()->data(), n * 4, stream);
  stream.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), host.data(), static_cast<size_t>(n * 4)), 0);
}

TEST(CudaBackend, EmptyCacheReturnsFreeSegments) {
  SKIP_WITHOUT_CUDA();
  { const Tensor big = empty({64 << 20}, DType::u8, cuda()); }  // a 64 MiB segment, then free
  EXPECT_GE(cuda_memory_stats(0).reserved, int64_t{64} << 20);
  cuda_empty_cache(0);
  const CachingAllocatorStats s = cuda_memory_stats(0);
  EXPECT_LT(s.reserved - s.allocated, int64_t{64} << 20);
}

}  // namespace
}  // namespace ein
