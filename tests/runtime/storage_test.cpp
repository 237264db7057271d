// Memory accounting follows tensor lifetimes, failed allocations are OutOfMemoryErrors with
// the bytes requested, and devices print, parse and refuse cuda without a backend.
#include <gtest/gtest.h>

#include <ein/tensor.h>

namespace ein {
namespace {

TEST(Storage, AllocatedRisesAndFallsWithTensorLifetimes) {
  const int64_t base = memory_allocated(cpu());
  reset_peak_memory_stats(cpu());
  EXPECT_EQ(max_memory_allocated(cpu()), base);
  {
    const Tensor a = zeros({32, 32});
    EXPECT_EQ(memory_allocated(cpu()) - base, 32 * 32 * 4);
    {
      const Tensor b = zeros({32, 32}, DType::f64);
      const Tensor view = b.transpose(0, 1);  // views cost nothing
      EXPECT_EQ(memory_allocated(cpu()) - base, 32 * 32 * 4 + 32 * 32 * 8);
    }
    EXPECT_EQ(memory_allocated(cpu()) - base, 32 * 32 * 4);
    EXPECT_EQ(max_memory_allocated(cpu()) - base, 32 * 32 * 4 + 32 * 32 * 8);
    reset_peak_memory_stats(cpu());
    EXPECT_EQ(max_memory_allocated(cpu()) - base, 32 * 32 * 4);
  }
  EXPECT_EQ(memory_allocated(cpu()), base);
}

TEST(Storage, AStorageOutlivesTheTensorThatMadeIt) {
  const int64_t base = memory_allocated(cpu());
  Tensor row;
  {
    const Tensor x = zeros({100});
    row = x.slice(0, 10, 20);
  }
  EXPECT_EQ(memory_allocated(cpu()) - base, 400);
  row = Tensor();
  EXPECT_EQ(memory_allocated(cpu()), base);
}

TEST(Storage, AbsurdSizeIsOutOfMemoryWithTheBytesRequested) {
  const int64_t bytes = int64_t{1} << 60;
  try {
    Storage::allocate(bytes, cpu());
    FAIL() << "allocating 1 EiB must fail";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.bytes_requested(), bytes);
    EXPECT_NE(std::string(e.what()).find("1152921504606846976 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(empty({int64_t{1} << 58}, DType::f32), OutOfMemoryError);
  EXPECT_THROW(empty({int64_t{1} << 40, int64_t{1} << 40}), OutOfMemoryError);  // overflows
  EXPECT_THROW(Storage::allocate(-1, cpu()), OutOfMemoryError);
  const auto zero = Storage::allocate(0, cpu());
  EXPECT_EQ(zero->nbytes(), 0);
}

TEST(Storage, Alignment) {
  const Tensor x = empty({3}, DType::i8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.storage()->data()) % 64, 0u);
}

TEST(Device, NamesAndParsing) {
  EXPECT_EQ(cpu().str(), "cpu");
  EXPECT_EQ(cuda(1).str(), "cuda:1");
  EXPECT_EQ(parse_device("cuda"), cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), cuda(3));
  EXPECT_EQ(parse_device("cpu"), cpu());
  EXPECT_THROW(parse_device("gpu"), RuntimeError);
  EXPECT_THROW(parse_device("cuda:x"), RuntimeError);
}

TEST(Device, CudaWithoutABackendIsARuntimeError) {
  if (has_backend(DeviceKind::cuda)) GTEST_SKIP() << "a CUDA backend is installed";
  try {
    (void)zeros({2}, DType::f32, cuda());
    FAIL() << "allocating on cuda must fail without a backend";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("the CUDA backend is not available"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)zeros({2}).to(cuda()), RuntimeError);
}

}  // namespace
}  // namespace ein
