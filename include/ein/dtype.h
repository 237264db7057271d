// Element types of ein tensors and the dtype categories that shape specs accept. The header
// depends on the standard library only, so the runtime can use it as well as the compiler.
// It names dtypes; it does not convert values between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ein {

/// An element type. Short names ("f32", "bool") come from dtype_name().
enum class DType : uint8_t { f64, f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i8, u8, boolean };

/// Number of DType enumerators.
inline constexpr int kDTypeCount = 11;

/// Every dtype, in enum order.
inline constexpr DType kAllDTypes[kDTypeCount] = {
    DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2,
    DType::i64, DType::i32, DType::i8,  DType::u8,   DType::boolean};

/// The short name: "f64", "f32", ..., "u8", "bool".
std::string_view dtype_name(DType dtype);

/// f64, f32, f16 or bf16: the floats that kernels compute in and tensors hold as numbers.
/// The fp8 dtypes (is_fp8) are storage formats, converted on the way in and out.
constexpr bool is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}
/// f8e4m3 or f8e5m2.
constexpr bool is_fp8(DType t) {
  return t == DType::f8e4m3 || t == DType::f8e5m2;
}
/// i64, i32, i8 or u8 (not bool).
constexpr bool is_integer(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i8 || t == DType::u8;
}

/// Size of one element in bytes.
size_t element_size(DType dtype);

/// Significand bits of a floating dtype, the implicit one included (f64 53, f32 24, f16 11,
/// bf16 8, f8e4m3 4, f8e5m2 3): how many random bits a uniform sample may carry and still
/// round below 1. 0 for integer and bool dtypes.
int significand_bits(DType dtype);

/// Parses a short name ("f32", "bool") or a numpy-style one ("float32", "int64", "bool_").
std::optional<DType> parse_dtype_name(std::string_view name);

/// A floating dtype's limits, as torch.finfo gives them.
struct FloatInfo {
  int bits = 0;                    ///< storage bits
  double eps = 0;                  ///< the gap between 1 and the next larger value
  double max = 0;                  ///< the largest finite value
  double min = 0;                  ///< the most negative finite value (-max)
  double tiny = 0;                 ///< the smallest positive normal value (torch's smallest_normal)
  double smallest_subnormal = 0;   ///< the smallest positive value
  double resolution = 0;           ///< 10^-(decimal digits the dtype holds)
};
/// finfo(DType::f32).eps == 2^-23. std::invalid_argument for an integer or bool dtype.
FloatInfo finfo(DType dtype);

/// An integer dtype's range, as torch.iinfo gives it.
struct IntInfo {
  int bits = 0;
  int64_t min = 0;
  int64_t max = 0;
};
/// iinfo(DType::i8) == {8, -128, 127}; u8 and bool too. std::invalid_argument for floats.
IntInfo iinfo(DType dtype);

/// A set of dtypes (a bitset over DType): what one shape spec's dtype part accepts.
class DTypeSet {
 public:
  /// The empty set.
  constexpr DTypeSet() = default;
  /// The set of the listed dtypes.
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes)
      bits_ |= bit(d);
  }
  /// Every dtype (jaxtyping's Shaped).
  static constexpr DTypeSet all() { return DTypeSet((1u << kDTypeCount) - 1); }

  /// Whether `dtype` is in the set.
  constexpr bool contains(DType dtype) const { return (bits_ & bit(dtype)) != 0; }
  /// Whether the set has no dtype.
  constexpr bool empty() const { return bits_ == 0; }
  /// The union.
  constexpr DTypeSet operator|(DTypeSet other) const { return DTypeSet(bits_ | other.bits_); }
  /// The set difference.
  constexpr DTypeSet operator-(DTypeSet other) const { return DTypeSet(bits_ & ~other.bits_); }
  /// Equal when they hold the same dtypes.
  constexpr bool operator==(const DTypeSet&) const = default;

 private:
  /// The set with these bits.
  constexpr explicit DTypeSet(uint32_t bits) : bits_(bits) {}
  /// The bit of one dtype.
  static constexpr uint32_t bit(DType d) { return 1u << static_cast<unsigned>(d); }

  /// Bit i set = the dtype with enum value i is in the set.
  uint32_t bits_ = 0;
};

/// Floating-point dtypes, including bf16 and the f8 formats (jaxtyping's Float, Inexact).
inline constexpr DTypeSet kFloatDTypes{DType::f64,  DType::f32,    DType::f16,
                                       DType::bf16, DType::f8e4m3, DType::f8e5m2};
/// Signed integer dtypes (jaxtyping's Int).
inline constexpr DTypeSet kIntDTypes{DType::i64, DType::i32, DType::i8};
/// Unsigned integer dtypes (jaxtyping's UInt).
inline constexpr DTypeSet kUIntDTypes{DType::u8};
/// Every dtype but bool (jaxtyping's Num and Real: ein has no complex dtypes).
inline constexpr DTypeSet kNumDTypes = DTypeSet::all() - DTypeSet{DType::boolean};

/// A named dtype category usable before `[` in a shape spec.
struct DTypeCategory {
  std::string_view name;  ///< "Float", "Int32", "f32", ...
  DTypeSet dtypes;        ///< what it accepts
};

/// Every category name a shape spec accepts: jaxtyping's (Float, Int, UInt, Integer, Num,
/// Real, Inexact, Bool, Shaped, Float32, ...) and ein's short names (f32 = exactly f32).
std::span<const DTypeCategory> dtype_categories();

/// The category called `name`, if there is one.
std::optional<DTypeSet> dtype_category(std::string_view name);

/// The dtypes of a set as short names in enum order, e.g. "f64, f32"; "nothing" when empty.
std::string describe(DTypeSet dtypes);

}  // namespace ein
