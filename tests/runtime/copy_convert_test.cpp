// to(dtype) for every pair of dtypes on contiguous, transposed, broadcast (stride 0) and
// zero-size inputs. Sources are built from bit patterns written out here by hand and results
// are compared as raw bytes, so no library conversion is used to make the expectations.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include <tbb/global_control.h>

#include <ein/scalar_convert.h>
#include <ein/tensor.h>

namespace ein {
namespace {

// Values exact in every dtype (e5m2 has 2 mantissa bits: 6 = 1.5 * 4 is fine).
constexpr int kValues[] = {0, 1, 2, 3, 4, 6};

// The patterns of kValues in the narrow formats (sign | exponent | mantissa, by hand).
constexpr uint64_t kF16[] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4600};
constexpr uint64_t kBF16[] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40c0};
constexpr uint64_t kE4M3[] = {0x00, 0x38, 0x40, 0x44, 0x48, 0x4c};
constexpr uint64_t kE5M2[] = {0x00, 0x3c, 0x40, 0x42, 0x44, 0x46};

// The bit pattern of small integer v in `dtype` (bool: v != 0), from the format definitions.
uint64_t pattern(DType dtype, int v) {
  const int index = v == 6 ? 5 : v;  // position in kValues
  switch (dtype) {
    case DType::f64: {
      const double d = v;
      uint64_t b;
      std::memcpy(&b, &d, 8);
      return b;
    }
    case DType::f32: {
      const float f = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    }
    case DType::f16:
      return kF16[index];
    case DType::bf16:
      return kBF16[index];
    case DType::f8e4m3:
      return kE4M3[index];
    case DType::f8e5m2:
      return kE5M2[index];
    case DType::boolean:
      return v != 0 ? 1 : 0;
    default:
      return static_cast<uint64_t>(v);  // integers, little-endian
  }
}

// A contiguous tensor of `dtype` whose element i holds kValues[i % 6] (bool: != 0), written
// as raw bytes.
Tensor source(DType dtype, const Shape& sizes) {
  Tensor t = empty(sizes, dtype);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  const int64_t esize = t.element_size();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t b = pattern(dtype, kValues[i % 6]);
    std::memcpy(p + i * esize, &b, static_cast<size_t>(esize));
  }
  return t;
}

// The raw bytes of every element in row-major order, any strides.
std::vector<uint64_t> raw(const Tensor& t) {
  std::vector<uint64_t> out;
  const auto* base = static_cast<const unsigned char*>(t.data_ptr());
  std::vector<int64_t> index(static_cast<size_t>(t.dim()), 0);
  for (int64_t k = 0; k < t.numel(); ++k) {
    int64_t e = 0;
    for (int64_t d = 0; d < t.dim(); ++d)
      e += index[static_cast<size_t>(d)] * t.stride(d);
    uint64_t b = 0;
    std::memcpy(&b, base + e * t.element_size(), static_cast<size_t>(t.element_size()));
    out.push_back(b);
    for (int64_t d = t.dim(); d-- > 0;)
      if (++index[static_cast<size_t>(d)] < t.size(d))
        break;
      else
        index[static_cast<size_t>(d)] = 0;
  }
  return out;
}

// Logical values (as kValues entries) of the source views below, in row-major order.
std::vector<int> logical(const std::vector<int64_t>& flat_indices, DType src) {
  std::vector<int> out;
  for (int64_t i : flat_indices) {
    const int v = kValues[i % 6];
    out.push_back(src == DType::boolean ? (v != 0) : v);
  }
  return out;
}

void check_pair(DType from, DType into) {
  SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(into)));
  const Tensor base = source(from, {2, 3});  // flat 0..5
  struct Case {
    const char* name;
    Tensor input;
    std::vector<int64_t> flat;  // which flat source element each output element reads
  };
  const Case cases[] = {
      {"contiguous", base, {0, 1, 2, 3, 4, 5}},
      {"transposed", base.transpose(0, 1), {0, 3, 1, 4, 2, 5}},
      {"broadcast", base.select(0, 1).unsqueeze(0).expand({2, 3}), {3, 4, 5, 3, 4, 5}},
      {"strided", base.slice(1, 0, 3, 2), {0, 2, 3, 5}},
      {"zero-size", base.slice(0, 1, 1), {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor out = c.input.to(into);
    ASSERT_EQ(out.shape(), c.input.shape());
    ASSERT_EQ(out.dtype(), into);
    std::vector<uint64_t> expected;
    for (int v : logical(c.flat, from))
      expected.push_back(pattern(into, v));
    EXPECT_EQ(raw(out), expected);
    if (from == into) {
      EXPECT_TRUE(out.same_storage(c.input));  // to() returns self
    }
  }
}

TEST(CopyConvert, EveryDTypePairOnEveryLayout) {
  for (DType from : kAllDTypes)
    for (DType into : kAllDTypes)
      check_pair(from, into);
}

TEST(CopyConvert, FractionsRoundToNearestEvenThroughTensors) {
  const Tensor x = from_data<double>({1.0 / 3.0, -2.5, 1e-8, 70000.0}, {4});
  EXPECT_EQ(x.to(DType::f16).to_vector<double>(),
            (std::vector<double>{0.333251953125, -2.5, 0.0, INFINITY}));
  EXPECT_EQ(x.to(DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{0, -2, 0, 70000}));
  // e4m3 spacing in [0.25, 0.5) is 2^-5: 1/3 -> 11 * 2^-5; 70000 overflows to NaN (no inf).
  const std::vector<double> f8 = x.to(DType::f8e4m3).to_vector<double>();
  EXPECT_EQ(f8[0], 0.34375);
  EXPECT_EQ(f8[1], -2.5);
  EXPECT_EQ(f8[2], 0.0);
  EXPECT_TRUE(std::isnan(f8[3]));
}

// f32 -> bf16 has an inline fast path (runtime/copy.cpp): bit-identical to the generic encoder
// over a sweep of bit patterns (every 257th one: all exponents, signs and many mantissas), the
// round-to-even halfway points of every exponent, the limits, ±0, ±inf, NaNs and subnormals;
// contiguous and strided. bf16 -> f32 is exact: every one of the 65536 patterns round-trips.
TEST(CopyConvert, Bf16FastPathIsBitIdenticalToTheEncoder) {
  std::vector<float> values;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257)
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0xffffu})
      for (uint32_t sign : {0u, 0x80000000u})
        values.push_back(std::bit_cast<float>(sign | (e << 23) | low));
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 3.4028235e38f, -3.4028235e38f,
                  1.17549435e-38f, 1e-45f, -1e-45f, std::bit_cast<float>(0x7fa00001u)})
    values.push_back(v);
  const int64_t n = static_cast<int64_t>(values.size());
  const Tensor x = from_data<float>(values, {n});
  const Tensor contiguous = x.to(DType::bf16);
  const Tensor strided = x.as_strided({n / 2}, {2}, 0).to(DType::bf16);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t want = round_to<BFloat16>(values[i]).bits;
    ASSERT_EQ(contiguous.data<BFloat16>()[i].bits, want) << "f32 bits " << std::hex
                                                          << std::bit_cast<uint32_t>(values[i]);
    if (i % 2 == 0 && i / 2 < n / 2) {
      ASSERT_EQ(strided.data<BFloat16>()[i / 2].bits, want) << i;
    }
  }
  Tensor all = empty({65536}, DType::bf16);
  for (uint32_t b = 0; b < 65536; ++b)
    all.data<BFloat16>()[b].bits = static_cast<uint16_t>(b);
  const Tensor widened = all.to(DType::f32);
  for (uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(std::bit_cast<uint32_t>(widened.data<float>()[b]), b << 16) << b;
}

// A large permuted copy (parallel path) against a serial index computation.
TEST(CopyConvert, LargePermutedCopyMatchesIndexMath) {
  const Tensor x = arange(2 * 1024 * 1024, DType::i32).view({64, 128, 256});
  const Tensor y = x.permute({2, 0, 1}).contiguous();  // (c a b)
  const int32_t* p = y.data<int32_t>();
  int64_t bad = 0;
  for (int64_t c = 0; c < 256; c += 7)
    for (int64_t a = 0; a < 64; ++a)
      for (int64_t b = 0; b < 128; b += 3)
        bad += p[(c * 64 + a) * 128 + b] != (a * 128 + b) * 256 + c;
  EXPECT_EQ(bad, 0);
  // And the same result on one thread.
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  const Tensor z = x.permute({2, 0, 1}).to(DType::f64);
  EXPECT_EQ(z.to_vector<int32_t>(), y.to_vector<int32_t>());
}

// Transposes whose sizes are not multiples of the 32 x 32 tile, with a dtype change.
TEST(CopyConvert, TransposesWithPartialTiles) {
  const Tensor x = arange(3 * 37 * 45, DType::i32).view({3, 37, 45});  // (b i j)
  const Tensor y = x.transpose(1, 2).to(DType::f64);                   // (b j i), contiguous
  ASSERT_TRUE(y.is_contiguous());
  const double* p = y.data<double>();
  int64_t bad = 0;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t j = 0; j < 45; ++j)
      for (int64_t i = 0; i < 37; ++i)
        bad += p[(b * 45 + j) * 37 + i] != static_cast<double>((b * 37 + i) * 45 + j);
  EXPECT_EQ(bad, 0);
}

TEST(CopyConvert, CopyIntoAStridedDestination) {
  Tensor dst = zeros({4, 4}, DType::f16);
  dst.transpose(0, 1).slice(0, 0, 4, 2).copy_(from_data<int64_t>({1, 2, 3, 4}, {4}));
  EXPECT_EQ(dst.to_vector<float>(),
            (std::vector<float>{1, 0, 1, 0, 2, 0, 2, 0, 3, 0, 3, 0, 4, 0, 4, 0}));
}

}  // namespace
}  // namespace ein
