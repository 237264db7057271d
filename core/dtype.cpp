// Names, sizes and categories of ein's dtypes. The category table follows jaxtyping 0.3.11
// (jaxtyping/_array_types.py) restricted to the dtypes ein has: no complex, no int4/int16.
#include <ein/dtype.h>

#include <array>
#include <limits>
#include <stdexcept>
#include <string>

namespace ein {
namespace {

// One row per dtype, in enum order: short name, numpy-style name, bytes.
struct DTypeInfo {
  std::string_view short_name;
  std::string_view numpy_name;
  size_t bytes;
};

constexpr std::array<DTypeInfo, kDTypeCount> kInfo = {{
    {"f64", "float64", 8},
    {"f32", "float32", 4},
    {"f16", "float16", 2},
    {"bf16", "bfloat16", 2},
    {"f8e4m3", "float8_e4m3fn", 1},
    {"f8e5m2", "float8_e5m2", 1},
    {"i64", "int64", 8},
    {"i32", "int32", 4},
    {"i8", "int8", 1},
    {"u8", "uint8", 1},
    {"bool", "bool_", 1},
}};

constexpr const DTypeInfo& info(DType d) {
  return kInfo[static_cast<size_t>(d)];
}

// jaxtyping's categories first (their spelling), then the precise ones, then ein's short names.
constexpr std::array kCategories = {
    DTypeCategory{"Shaped", DTypeSet::all()},
    DTypeCategory{"Float", kFloatDTypes},
    DTypeCategory{"Inexact", kFloatDTypes},
    DTypeCategory{"Int", kIntDTypes},
    DTypeCategory{"UInt", kUIntDTypes},
    DTypeCategory{"Integer", kIntDTypes | kUIntDTypes},
    DTypeCategory{"Num", kNumDTypes},
    DTypeCategory{"Real", kNumDTypes},
    DTypeCategory{"Bool", DTypeSet{DType::boolean}},
    DTypeCategory{"Float64", DTypeSet{DType::f64}},
    DTypeCategory{"Float32", DTypeSet{DType::f32}},
    DTypeCategory{"Float16", DTypeSet{DType::f16}},
    DTypeCategory{"BFloat16", DTypeSet{DType::bf16}},
    DTypeCategory{"Float8e4m3", DTypeSet{DType::f8e4m3}},
    DTypeCategory{"Float8e5m2", DTypeSet{DType::f8e5m2}},
    DTypeCategory{"Int64", DTypeSet{DType::i64}},
    DTypeCategory{"Int32", DTypeSet{DType::i32}},
    DTypeCategory{"Int8", DTypeSet{DType::i8}},
    DTypeCategory{"UInt8", DTypeSet{DType::u8}},
    DTypeCategory{"f64", DTypeSet{DType::f64}},
    DTypeCategory{"f32", DTypeSet{DType::f32}},
    DTypeCategory{"f16", DTypeSet{DType::f16}},
    DTypeCategory{"bf16", DTypeSet{DType::bf16}},
    DTypeCategory{"f8e4m3", DTypeSet{DType::f8e4m3}},
    DTypeCategory{"f8e5m2", DTypeSet{DType::f8e5m2}},
    DTypeCategory{"i64", DTypeSet{DType::i64}},
    DTypeCategory{"i32", DTypeSet{DType::i32}},
    DTypeCategory{"i8", DTypeSet{DType::i8}},
    DTypeCategory{"u8", DTypeSet{DType::u8}},
    DTypeCategory{"bool", DTypeSet{DType::boolean}},
};

}  // namespace

std::string_view dtype_name(DType dtype) {
  return info(dtype).short_name;
}

size_t element_size(DType dtype) {
  return info(dtype).bytes;
}

int significand_bits(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 53;
    case DType::f32:
      return 24;
    case DType::f16:
      return 11;
    case DType::bf16:
      return 8;
    case DType::f8e4m3:
      return 4;
    case DType::f8e5m2:
      return 3;
    default:
      return 0;
  }
}

std::optional<DType> parse_dtype_name(std::string_view name) {
  for (DType d : kAllDTypes) {
    if (name == info(d).short_name || name == info(d).numpy_name) return d;
  }
  if (name == "float8_e4m3") return DType::f8e4m3;
  if (name == "boolean") return DType::boolean;
  return std::nullopt;
}

std::span<const DTypeCategory> dtype_categories() {
  return kCategories;
}

std::optional<DTypeSet> dtype_category(std::string_view name) {
  for (const DTypeCategory& c : kCategories) {
    if (c.name == name) return c.dtypes;
  }
  return std::nullopt;
}

std::string describe(DTypeSet dtypes) {
  std::string out;
  for (DType d : kAllDTypes) {
    if (!dtypes.contains(d)) continue;
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  return out.empty() ? "nothing" : out;
}

FloatInfo finfo(DType dtype) {
  // {bits, eps, max, tiny, smallest subnormal, resolution}; min is -max.
  const auto info = [](int bits, double eps, double max, double tiny, double sub, double res) {
    return FloatInfo{bits, eps, max, -max, tiny, sub, res};
  };
  switch (dtype) {
    case DType::f64:
      return info(64, 0x1p-52, std::numeric_limits<double>::max(), 0x1p-1022, 0x1p-1074, 1e-15);
    case DType::f32:
      return info(32, 0x1p-23, static_cast<double>(std::numeric_limits<float>::max()), 0x1p-126,
                  0x1p-149, 1e-6);
    case DType::f16:
      return info(16, 0x1p-10, 65504.0, 0x1p-14, 0x1p-24, 1e-3);
    case DType::bf16:
      return info(16, 0x1p-7, 0x1.fep127, 0x1p-126, 0x1p-133, 1e-2);
    case DType::f8e4m3:  // E4M3FN: no infinities
      return info(8, 0x1p-3, 448.0, 0x1p-6, 0x1p-9, 1.0);
    case DType::f8e5m2:
      return info(8, 0x1p-2, 57344.0, 0x1p-14, 0x1p-16, 1.0);
    default:
      throw std::invalid_argument("finfo: " + std::string(dtype_name(dtype)) +
                                  " is not a floating dtype (use iinfo)");
  }
}

IntInfo iinfo(DType dtype) {
  switch (dtype) {
    case DType::i64:
      return {64, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case DType::i32:
      return {32, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DType::i8:
      return {8, -128, 127};
    case DType::u8:
      return {8, 0, 255};
    case DType::boolean:
      return {8, 0, 1};
    default:
      throw std::invalid_argument("iinfo: " + std::string(dtype_name(dtype)) +
                                  " is not an integer dtype (use finfo)");
  }
}

}  // namespace ein
