// Factory functions: empty, zeros, ones, full, arange, rand, randn. Random tensors are filled
// on the CPU from the counter-based generator in random.h, element i from (seed, i), so the
// values do not depend on how the loop is split across threads.
#include <cmath>
#include <limits>

#include "runtime/parallel.h"
#include "runtime/random.h"
#include <ein/tensor.h>

namespace ein {
namespace {

// Elements per parallel task when generating (a Philox block costs ~tens of ns).
constexpr int64_t kGenerateGrain = int64_t{1} << 14;

// Fills a fresh contiguous CPU tensor with value_at(i) converted to its dtype, then moves
// it to `device`.
template <class F>
Tensor generate(Shape sizes, DType dtype, Device device, const F& value_at) {
  Tensor host = empty(std::move(sizes), dtype, cpu());
  auto* base = static_cast<char*>(host.data_ptr());
  const int64_t esize = host.element_size();
  parallel_for(0, host.numel(), kGenerateGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      store_from_double(base + i * esize, dtype, value_at(i));
  });
  return host.to(device);
}

// The dtype's significand bits (ein/dtype.h), or a RuntimeError naming `op` for a dtype that
// is not floating point.
int significand_bits(DType dtype, const char* op) {
  if (const int bits = ein::significand_bits(dtype); bits > 0) return bits;
  throw RuntimeError(std::string(op) + ": needs a floating-point dtype, got " +
                     std::string(dtype_name(dtype)));
}

}  // namespace

Tensor empty(Shape sizes, DType dtype, Device device) {
  const int64_t n = checked_numel(sizes);
  const auto esize = static_cast<int64_t>(element_size(dtype));
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, esize, &bytes))
    throw OutOfMemoryError(device.str(), std::numeric_limits<int64_t>::max(),
                           memory_allocated(device));
  Shape strides = contiguous_strides(sizes);
  return Tensor(Storage::allocate(bytes, device), dtype, std::move(sizes), std::move(strides), 0);
}

Tensor full(Shape sizes, double value, DType dtype, Device device) {
  Tensor t = empty(std::move(sizes), dtype, device);
  t.fill_(value);
  return t;
}

Tensor zeros(Shape sizes, DType dtype, Device device) {
  return full(std::move(sizes), 0.0, dtype, device);
}

Tensor ones(Shape sizes, DType dtype, Device device) {
  return full(std::move(sizes), 1.0, dtype, device);
}

Tensor arange(int64_t end, DType dtype) {
  if (end < 0) throw RuntimeError("arange: end must be >= 0, got " + std::to_string(end));
  return generate({end}, dtype, cpu(), [](int64_t i) { return static_cast<double>(i); });
}

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw RuntimeError("arange: start, end and step must be finite and step nonzero, got (" +
                       std::to_string(start) + ", " + std::to_string(end) + ", " +
                       std::to_string(step) + ")");
  const double count = std::ceil((end - start) / step);
  const auto n = count > 0 ? static_cast<int64_t>(count) : int64_t{0};
  return generate({n}, dtype, cpu(),
                  [=](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor rand(Shape sizes, DType dtype, Device device, std::optional<uint64_t> seed) {
  const int bits = significand_bits(dtype, "rand");
  const uint64_t s = seed ? *seed : default_generator().next_seed();
  return generate(std::move(sizes), dtype, device,
                  [=](int64_t i) { return uniform_at(s, static_cast<uint64_t>(i), bits); });
}

Tensor randn(Shape sizes, DType dtype, Device device, std::optional<uint64_t> seed) {
  significand_bits(dtype, "randn");
  const uint64_t s = seed ? *seed : default_generator().next_seed();
  return generate(std::move(sizes), dtype, device,
                  [=](int64_t i) { return normal_at(s, static_cast<uint64_t>(i)); });
}

Tensor rand(Shape sizes, Generator& generator, DType dtype, Device device) {
  return rand(std::move(sizes), dtype, device, generator.next_seed());
}

Tensor randn(Shape sizes, Generator& generator, DType dtype, Device device) {
  return randn(std::move(sizes), dtype, device, generator.next_seed());
}

Tensor randint(int64_t low, int64_t high, Shape sizes, DType dtype, Device device,
               std::optional<uint64_t> seed) {
  if (!(low < high))
    throw RuntimeError("randint: low (" + std::to_string(low) + ") must be below high (" +
                       std::to_string(high) + ")");
  if (dtype == DType::boolean) throw RuntimeError("randint: bool is no integer dtype");
  const uint64_t s = seed ? *seed : default_generator().next_seed();
  const auto span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  // An integer in [0, span) from 64 random bits (a bias of at most span / 2^64 per value);
  // values pass through a double, so they are exact below 2^53 in magnitude.
  return generate(std::move(sizes), dtype, device, [=](int64_t i) {
    const uint64_t k = mul_high(bits_at(s, static_cast<uint64_t>(i)), span);
    return static_cast<double>(low + static_cast<int64_t>(k));
  });
}

Tensor randint(int64_t low, int64_t high, Shape sizes, Generator& generator, DType dtype,
               Device device) {
  return randint(low, high, std::move(sizes), dtype, device, generator.next_seed());
}

}  // namespace ein
