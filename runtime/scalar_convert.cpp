// Bit-level encoding and decoding of f16, bf16 and the OCP fp8 formats. One generic encoder
// parameterised by (exponent bits, mantissa bits, has-infinity) serves all four, so there
// is one rounding routine to get right and test exhaustively.
#include <ein/scalar_convert.h>

#include <bit>
#include <cmath>

namespace ein {
namespace {

struct Format {
  int exp_bits;
  int man_bits;
  bool finite_only;  // E4M3FN: no inf; the all-ones pattern is NaN
};

constexpr Format kF16{5, 10, false};
constexpr Format kBF16{8, 7, false};
constexpr Format kE4M3{4, 3, true};
constexpr Format kE5M2{5, 2, false};

// float -> format, round to nearest even. Steps:
//  1. NaN -> canonical NaN, inf -> inf (NaN when the format has none), 0 -> 0.
//  2. Write |x| = m * 2^(e-23) with m the 24-bit significand (float subnormals: e = -126).
//  3. Shift m right so its LSB weighs the target's LSB (more for target subnormals), round
//     the dropped bits to nearest even.
//  4. Add the biased exponent (a mantissa carry bumps it naturally); too big -> overflow.
uint32_t encode(float x, Format f) {
  const int M = f.man_bits;
  const int E = f.exp_bits;
  const int bias = (1 << (E - 1)) - 1;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 31) << (E + M);
  const uint32_t abs = bits & 0x7fffffffu;
  const uint32_t inf = ((1u << E) - 1) << M;
  const uint32_t nan = f.finite_only ? (1u << (E + M)) - 1 : inf | (1u << (M - 1));
  const uint32_t max_finite = f.finite_only ? nan - 1 : inf - 1;
  const uint32_t overflow = f.finite_only ? nan : inf;
  if (abs > 0x7f800000u) return sign | nan;
  if (abs == 0x7f800000u) return sign | overflow;
  if (abs == 0) return sign;
  int e = static_cast<int>(abs >> 23) - 127;
  uint32_t m = abs & 0x7fffffu;
  if ((abs >> 23) == 0)
    e = -126;
  else
    m |= 0x800000u;
  const int emin = 1 - bias;
  const int shift = 23 - M + (e < emin ? emin - e : 0);
  if (shift >= 25) return sign;  // m < 2^24, so |x| < half the smallest subnormal
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  const uint32_t result = e < emin ? q : (static_cast<uint32_t>(e + bias) << M) + q - (1u << M);
  if (result > max_finite) return sign | overflow;
  return sign | result;
}

float decode(uint32_t v, Format f) {
  const int M = f.man_bits;
  const int E = f.exp_bits;
  const int bias = (1 << (E - 1)) - 1;
  const bool negative = ((v >> (E + M)) & 1u) != 0;
  const uint32_t exp = (v >> M) & ((1u << E) - 1);
  const uint32_t man = v & ((1u << M) - 1);
  float r;
  if (f.finite_only && exp == (1u << E) - 1 && man == (1u << M) - 1)
    r = std::numeric_limits<float>::quiet_NaN();
  else if (!f.finite_only && exp == (1u << E) - 1)
    r = man != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else if (exp == 0)
    r = std::ldexp(static_cast<float>(man), 1 - bias - M);
  else
    r = std::bit_cast<float>((static_cast<uint32_t>(static_cast<int>(exp) - bias + 127) << 23) |
                             (man << (23 - M)));
  return negative ? -r : r;
}

// double -> float rounding toward zero with a sticky last bit ("round to odd"): rounding this
// again to a format with p <= 22 significand bits equals rounding the double directly.
float to_float_round_to_odd(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

}  // namespace

float to_float(Half x) {
  return decode(x.bits, kF16);
}
float to_float(BFloat16 x) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}
float to_float(Float8E4M3 x) {
  return decode(x.bits, kE4M3);
}
float to_float(Float8E5M2 x) {
  return decode(x.bits, kE5M2);
}

template <>
Half round_to<Half>(float x) {
  return Half{static_cast<uint16_t>(encode(x, kF16))};
}
template <>
BFloat16 round_to<BFloat16>(float x) {
  return BFloat16{static_cast<uint16_t>(encode(x, kBF16))};
}
template <>
Float8E4M3 round_to<Float8E4M3>(float x) {
  return Float8E4M3{static_cast<uint8_t>(encode(x, kE4M3))};
}
template <>
Float8E5M2 round_to<Float8E5M2>(float x) {
  return Float8E5M2{static_cast<uint8_t>(encode(x, kE5M2))};
}
template <>
Half round_to<Half>(double x) {
  return round_to<Half>(to_float_round_to_odd(x));
}
template <>
BFloat16 round_to<BFloat16>(double x) {
  return round_to<BFloat16>(to_float_round_to_odd(x));
}
template <>
Float8E4M3 round_to<Float8E4M3>(double x) {
  return round_to<Float8E4M3>(to_float_round_to_odd(x));
}
template <>
Float8E5M2 round_to<Float8E5M2>(double x) {
  return round_to<Float8E5M2>(to_float_round_to_odd(x));
}

namespace {

template <class T>
double load_typed(const void* p) {
  return convert<double>(*static_cast<const T*>(p));
}

template <class T>
void store_typed(void* p, double value) {
  *static_cast<T*>(p) = convert<T>(value);
}

}  // namespace

double load_as_double(const void* p, DType dtype) {
  switch (dtype) {
    case DType::f64:
      return load_typed<double>(p);
    case DType::f32:
      return load_typed<float>(p);
    case DType::f16:
      return load_typed<Half>(p);
    case DType::bf16:
      return load_typed<BFloat16>(p);
    case DType::f8e4m3:
      return load_typed<Float8E4M3>(p);
    case DType::f8e5m2:
      return load_typed<Float8E5M2>(p);
    case DType::i64:
      return load_typed<int64_t>(p);
    case DType::i32:
      return load_typed<int32_t>(p);
    case DType::i8:
      return load_typed<int8_t>(p);
    case DType::u8:
      return load_typed<uint8_t>(p);
    case DType::boolean:
      return load_typed<bool>(p);
  }
  return 0.0;
}

void store_from_double(void* p, DType dtype, double value) {
  switch (dtype) {
    case DType::f64:
      return store_typed<double>(p, value);
    case DType::f32:
      return store_typed<float>(p, value);
    case DType::f16:
      return store_typed<Half>(p, value);
    case DType::bf16:
      return store_typed<BFloat16>(p, value);
    case DType::f8e4m3:
      return store_typed<Float8E4M3>(p, value);
    case DType::f8e5m2:
      return store_typed<Float8E5M2>(p, value);
    case DType::i64:
      return store_typed<int64_t>(p, value);
    case DType::i32:
      return store_typed<int32_t>(p, value);
    case DType::i8:
      return store_typed<int8_t>(p, value);
    case DType::u8:
      return store_typed<uint8_t>(p, value);
    case DType::boolean:
      return store_typed<bool>(p, value);
  }
}

}  // namespace ein
