// The element types C++ lacks (f16, bf16, OCP fp8 E4M3FN and E5M2) and conversions of one
// value between every ein dtype: round-to-nearest-even, subnormals, inf and NaN handled.
// It converts scalars only; strided loops over tensors live in copy.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <ein/dtype.h>

namespace ein {

/// IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits), held as its bit pattern.
struct Half {
  uint16_t bits;  ///< the raw pattern
};
/// bfloat16 (1, 8, 7): the upper half of a float32, held as its bit pattern.
struct BFloat16 {
  uint16_t bits;  ///< the raw pattern
};
/// OCP FP8 E4M3FN (1, 4, 3, bias 7): no infinities, max 448, NaN = 0x7f / 0xff.
struct Float8E4M3 {
  uint8_t bits;  ///< the raw pattern
};
/// OCP FP8 E5M2 (1, 5, 2, bias 15): IEEE-like with inf and NaN, max 57344.
struct Float8E5M2 {
  uint8_t bits;  ///< the raw pattern
};

/// The value of an f16 (exact).
float to_float(Half x);
/// The value of a bf16 (exact).
float to_float(BFloat16 x);
/// The value of an f8e4m3 (exact).
float to_float(Float8E4M3 x);
/// The value of an f8e5m2 (exact).
float to_float(Float8E5M2 x);

/// `x` rounded to the nearest T, ties to even; overflow gives inf (NaN for f8e4m3, which has
/// no inf, as in PyTorch's float8_e4m3fn), NaN stays NaN. T is Half, BFloat16 or a Float8.
template <class T>
T round_to(float x);
/// The same from a double, rounded once (via round-to-odd to float, which is exact for
/// targets with at most 22 significand bits; Boldo & Melquiond 2008).
template <class T>
T round_to(double x);

template <>
Half round_to<Half>(float x);
template <>
BFloat16 round_to<BFloat16>(float x);
template <>
Float8E4M3 round_to<Float8E4M3>(float x);
template <>
Float8E5M2 round_to<Float8E5M2>(float x);
template <>
Half round_to<Half>(double x);
template <>
BFloat16 round_to<BFloat16>(double x);
template <>
Float8E4M3 round_to<Float8E4M3>(double x);
template <>
Float8E5M2 round_to<Float8E5M2>(double x);

/// Maps a C++ element type to its DType; undefined for other types (a compile error).
template <class T>
struct DTypeOf;
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;  ///< f64
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;  ///< f32
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;  ///< f16
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;  ///< bf16
};
template <>
struct DTypeOf<Float8E4M3> {
  static constexpr DType value = DType::f8e4m3;  ///< f8e4m3
};
template <>
struct DTypeOf<Float8E5M2> {
  static constexpr DType value = DType::f8e5m2;  ///< f8e5m2
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;  ///< i64
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;  ///< i32
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::i8;  ///< i8
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;  ///< u8
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::boolean;  ///< bool
};

/// The DType of element type T.
template <class T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

/// A type usable as a tensor element (T in data<T>(), to_vector<T>(), from_data).
template <class T>
concept Element = requires {
  DTypeOf<T>::value;
};

namespace detail {

/// Whether T is one of the four storage-only float formats.
template <class T>
inline constexpr bool kIsNarrowFloat =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Float8E4M3> ||
    std::is_same_v<T, Float8E5M2>;

/// A native type holding `x` exactly: float for the narrow formats, x itself otherwise.
template <class S>
inline auto widen(S x) {
  if constexpr (kIsNarrowFloat<S>)
    return to_float(x);
  else
    return x;
}

/// Float to integer: truncate toward zero, saturate at the type's range, NaN to 0 (what CUDA's
/// conversions do; C++'s static_cast is undefined there).
template <class D, class W>
inline D saturating_trunc(W w) {
  if (std::isnan(w)) return D(0);
  const double t = std::trunc(static_cast<double>(w));
  if (t <= static_cast<double>(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
  if (t >= static_cast<double>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
  return static_cast<D>(t);
}

/// A native value to D: see convert().
template <class D, class W>
inline D narrow(W w) {
  if constexpr (kIsNarrowFloat<D>) {
    if constexpr (std::is_same_v<W, float> || std::is_same_v<W, double>)
      return round_to<D>(w);
    else
      return round_to<D>(static_cast<double>(w));
  } else if constexpr (std::is_same_v<D, bool>) {
    return w != W(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<W>) {
    return saturating_trunc<D>(w);
  } else {
    return static_cast<D>(w);
  }
}

}  // namespace detail

/// One value from S to D, both Element types. Floats round to nearest even; float to integer
/// truncates, saturates and sends NaN to 0; integer to integer wraps (C++20 modular, as in
/// PyTorch); anything to bool is `x != 0`. int64 beyond 2^53 is rounded to double first.
template <class D, class S>
inline D convert(S x) {
  return detail::narrow<D>(detail::widen(x));
}

/// The element at `p` (of type `dtype`) as a double.
double load_as_double(const void* p, DType dtype);
/// Writes `value` converted to `dtype` at `p`.
void store_from_double(void* p, DType dtype, double value);

}  // namespace ein
