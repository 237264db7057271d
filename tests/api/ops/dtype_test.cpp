// The ops on every dtype: rearrange, repeat, pack and unpack move elements, so on every dtype
// (f64 ... f8e5m2, i64, i32, i8, u8, bool) the result must be bit-identical to the input
// elements the reference interpreter says each output element comes from; einsum in f16,
// bf16 and f64 against the reference; and the dtype of each reduction's result.
//
// Bit-exactness is checked with an index map: the reference op is run on an array holding each
// input element's flat index, which tells for every output element which input element (and
// which input, for pack) it copies; the expected bytes are those of that element. Inputs are
// random bit patterns (NaN payloads, infinities, subnormals and -0 included for floats; 0/1
// for bool), so any conversion on the way would show.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include "api/ops/ops_test_support.h"

namespace ein::testing {
namespace {

using reference::Array;

constexpr int64_t kInputStride = int64_t{1} << 24;  // index-map code: input * this + element

/// A tensor of random bit patterns (0/1 for bool) of `dtype` in `layout`.
Tensor random_bits(const Shape& shape, DType dtype, uint64_t seed, Layout layout) {
  Tensor x = empty(shape, dtype);
  std::mt19937_64 rng(seed);
  auto* p = static_cast<uint8_t*>(x.data_ptr());
  for (int64_t i = 0; i < x.nbytes(); ++i)
    p[i] = dtype == DType::boolean ? static_cast<uint8_t>(rng() & 1) : static_cast<uint8_t>(rng());
  return with_layout(x, layout);
}

/// An array of `shape` whose elements are input * kInputStride + flat index.
Array index_array(const Shape& shape, int64_t input = 0) {
  Array a = Array::filled(shape, 0);
  for (size_t i = 0; i < a.data.size(); ++i)
    a.data[i] = static_cast<double>(input * kInputStride + static_cast<int64_t>(i));
  return a;
}

/// Asserts that `got`'s bytes are the input elements `map` names, element by element.
void expect_gathered(const Tensor& got, const Array& map, const std::vector<Tensor>& inputs,
                     const std::string& context) {
  ASSERT_EQ(got.shape(), map.shape) << context;
  ASSERT_EQ(got.dtype(), inputs.at(0).dtype()) << context;
  std::vector<std::vector<uint8_t>> in_bytes;
  for (const Tensor& x : inputs)
    in_bytes.push_back(raw_bytes(x));
  const std::vector<uint8_t> out = raw_bytes(got);
  const size_t es = static_cast<size_t>(got.element_size());
  int bad = 0;
  std::string report;
  for (size_t i = 0; i < map.data.size(); ++i) {
    const auto code = static_cast<int64_t>(map.data[i]);
    const auto& src = in_bytes.at(static_cast<size_t>(code / kInputStride));
    const size_t at = static_cast<size_t>(code % kInputStride) * es;
    if (std::memcmp(out.data() + i * es, src.data() + at, es) != 0 && ++bad <= 5) {
      std::string g, w;
      for (size_t b = es; b-- > 0;) {
        g += fmt::format("{:02x}", out[i * es + b]);
        w += fmt::format("{:02x}", src[at + b]);
      }
      report += fmt::format("\n  [{}] got 0x{} expected 0x{}", i, g, w);
    }
  }
  EXPECT_EQ(bad, 0) << context << ": " << bad << " of " << map.data.size()
                    << " elements differ bitwise" << report;
}

TEST(Dtypes, RearrangeRepeatAreBitExactOnEveryDtype) {
  struct Case {
    const char* op;
    const char* pattern;
    Shape shape;
    Sizes sizes;
  };
  const Case cases[] = {
      {"rearrange", "a b c -> c (a b)", {3, 5, 7}, {}},  // a copy
      {"rearrange", "a b c -> b a c", {4, 3, 17}, {}},   // a view
      {"rearrange", "a (b c) -> (c a) b", {6, 10}, {{"c", 2}}},
      {"repeat", "a b -> a r b", {5, 9}, {{"r", 3}}},    // a stride-0 view
      {"repeat", "a b -> (a r) b", {4, 7}, {{"r", 2}}},  // a copy
      {"repeat", "a b -> b (r a)", {3, 19}, {{"r", 2}}},
  };
  uint64_t seed = 8000;
  for (DType dtype : kAllDTypes)
    for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
      for (const Case& c : cases) {
        const Tensor x = random_bits(c.shape, dtype, ++seed, layout);
        const std::string context =
            fmt::format("{} '{}' on {} {} ({})", c.op, c.pattern, dtype_name(dtype),
                        shape_str(c.shape), layout_name(layout));
        try {
          const bool rearr = std::string(c.op) == "rearrange";
          const Tensor got =
              rearr ? rearrange(x, c.pattern, c.sizes) : repeat(x, c.pattern, c.sizes);
          const Array map = rearr ? reference::rearrange(index_array(c.shape), c.pattern, c.sizes)
                                  : reference::repeat(index_array(c.shape), c.pattern, c.sizes);
          expect_gathered(got, map, {x}, context);
        } catch (const std::exception& e) {
          ADD_FAILURE() << context << ": threw " << e.what();
        }
      }
}

TEST(Dtypes, RearrangeOfAListIsBitExactOnEveryDtype) {
  uint64_t seed = 8500;
  for (DType dtype : kAllDTypes) {
    const std::vector<Tensor> xs{random_bits({3, 4}, dtype, ++seed, Layout::strided),
                                 random_bits({3, 4}, dtype, ++seed, Layout::column_major)};
    const std::string context = fmt::format("rearrange list on {}", dtype_name(dtype));
    try {
      const Tensor got = rearrange(xs, "n a b -> a (n b)");
      // The stacked input's flat index n*12 + i is element i of input n.
      Array stacked = index_array({2, 3, 4});
      for (double& v : stacked.data) {
        const auto i = static_cast<int64_t>(v);
        v = static_cast<double>((i / 12) * kInputStride + i % 12);
      }
      expect_gathered(got, reference::rearrange(stacked, "n a b -> a (n b)"), xs, context);
    } catch (const std::exception& e) {
      ADD_FAILURE() << context << ": threw " << e.what();
    }
  }
}

TEST(Dtypes, PackUnpackAreBitExactOnEveryDtype) {
  struct Case {
    const char* pattern;
    std::vector<Shape> shapes;
  };
  const Case cases[] = {
      {"a *", {{3, 4, 2}, {3}, {3, 5}}},
      {"* b", {{2, 3, 6}, {6}}},
      {"a * c", {{2, 5, 3}, {2, 1, 1, 3}}},
  };
  uint64_t seed = 9000;
  for (DType dtype : kAllDTypes)
    for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
      for (const Case& c : cases) {
        std::vector<Tensor> xs;
        std::vector<Array> maps;
        for (size_t i = 0; i < c.shapes.size(); ++i) {
          xs.push_back(random_bits(c.shapes[i], dtype, ++seed, layout));
          maps.push_back(index_array(c.shapes[i], static_cast<int64_t>(i)));
        }
        const std::string context =
            fmt::format("pack '{}' on {} ({})", c.pattern, dtype_name(dtype), layout_name(layout));
        try {
          const auto [packed, ps] = pack(xs, c.pattern);
          const auto [map, want_ps] = reference::pack(maps, c.pattern);
          EXPECT_EQ(ps, want_ps) << context;
          expect_gathered(packed, map, xs, context);
          // Unpack the packed tensor (viewed with the layout's strides) back into views.
          const Tensor source = with_layout(packed, layout);
          const auto parts = unpack(source, ps, c.pattern);
          ASSERT_EQ(parts.size(), xs.size()) << context;
          for (size_t i = 0; i < parts.size(); ++i) {
            EXPECT_TRUE(parts[i].same_storage(source)) << context << ": unpack must return views";
            EXPECT_EQ(raw_bytes(parts[i]), raw_bytes(xs[i])) << context << ": part " << i;
          }
        } catch (const std::exception& e) {
          ADD_FAILURE() << context << ": threw " << e.what();
        }
      }
}

// The special float values survive a copy kernel bit for bit: -0, +-inf, quiet NaN with a
// payload, subnormals, and the largest finite values.
TEST(Dtypes, CopiesKeepSpecialFloatValues) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const double specials[] = {-0.0,
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN(),
                               1e-300,
                               -1e-40,
                               6e-8,
                               65504,
                               -3.3e38,
                               1.0};
    std::vector<double> v(std::begin(specials), std::end(specials));
    v.resize(20, 0.25);
    const Tensor x = tensor_of(v, {4, 5}, dtype, Layout::column_major);
    const Tensor got = rearrange(x, "a b -> (b a)");
    const Array map = reference::rearrange(index_array({4, 5}), "a b -> (b a)");
    expect_gathered(got, map, {x}, fmt::format("specials in {}", dtype_name(dtype)));
  }
}

/// Asserts |got - want| <= rtol |want| + c * magnitude elementwise, where magnitude is the same
/// einsum on |operands|: the rounding error of a sum of products is bounded by the sum of the
/// products' magnitudes, not by the (possibly cancelled) result.
void expect_einsum_close(const Tensor& got, const Array& want, const Array& magnitude, double rtol,
                         double c, const std::string& context) {
  ASSERT_EQ(got.shape(), want.shape) << context;
  const std::vector<double> g = got.to_vector<double>();
  int bad = 0;
  std::string report;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = rtol * std::abs(want.data[i]) + c * magnitude.data[i] + 1e-300;
    const double err = std::abs(g[i] - want.data[i]);
    worst = std::max(worst, err / bound);
    if (!(err <= bound) && ++bad <= 5)
      report += fmt::format("\n  [{}] got {} expected {} (bound {})", i, g[i], want.data[i], bound);
  }
  EXPECT_EQ(bad, 0) << context << ": " << bad << " of " << g.size()
                    << " elements out of bounds (worst err/bound " << worst << ")" << report;
}

// einsum in f16, bf16 and f64. Bounds: the output is rounded once to the dtype (rtol = its unit
// roundoff), and the sums run in float32 (float64 for f64) with at most one intermediate
// rounded to the dtype in a chain: c = 2 * unit roundoff of the dtype (float64: 64 * 2^-53,
// ample for <= 37-term sums).
TEST(Dtypes, EinsumInHalfBfloatAndDouble) {
  struct Case {
    const char* pattern;
    std::vector<Shape> shapes;
  };
  const Case cases[] = {
      {"i j, j k -> i k", {{17, 33}, {33, 9}}},
      {"b i d, b j d -> b i j", {{3, 5, 16}, {3, 7, 16}}},
      {"i j -> j", {{21, 13}}},
      {"i i -> i", {{11, 11}}},
      {"a b, b c, c d -> a d", {{4, 6}, {6, 5}, {5, 3}}},
      {"b h s d, b h t d -> b h s t", {{2, 3, 4, 8}, {2, 3, 5, 8}}},
  };
  uint64_t seed = 9500;
  for (DType dtype : {DType::f16, DType::bf16, DType::f64}) {
    const double u = dtype == DType::f16    ? std::ldexp(1.0, -11)
                     : dtype == DType::bf16 ? std::ldexp(1.0, -8)
                                            : 64 * std::ldexp(1.0, -53);
    for (size_t k = 0; k < std::size(cases); ++k) {
      const Layout layout = static_cast<Layout>(k % 3);
      std::vector<Tensor> xs;
      std::vector<Array> refs, mags;
      for (const Shape& s : cases[k].shapes) {
        xs.push_back(random_tensor(s, dtype, ++seed, layout));
        refs.push_back(to_array(xs.back()));
        mags.push_back(refs.back());
        for (double& v : mags.back().data)
          v = std::abs(v);
      }
      const std::string context = fmt::format("einsum '{}' in {} ({})", cases[k].pattern,
                                              dtype_name(dtype), layout_name(layout));
      try {
        const Tensor got = einsum(cases[k].pattern, xs);
        EXPECT_EQ(got.dtype(), dtype) << context;
        expect_einsum_close(got, reference::einsum(cases[k].pattern, refs),
                            reference::einsum(cases[k].pattern, mags), u, 2 * u, context);
      } catch (const std::exception& e) {
        ADD_FAILURE() << context << ": threw " << e.what();
      }
    }
  }
}

/// sum, max, min, prod, mean and logsumexp over b of a [4, 6] `dtype` tensor keep the dtype and
/// match the reference within `tol`.
void expect_float_reductions_keep_dtype(DType dtype, Tolerance tol) {
  const Tensor x = random_tensor({4, 6}, dtype, 11, Layout::strided);
  for (const char* name : {"sum", "max", "min", "prod", "mean", "logsumexp"}) {
    const std::string context = fmt::format("{} on {}", name, dtype_name(dtype));
    Tensor got;
    ASSERT_NO_THROW(got = reduce(x, "a b -> a", name)) << context;
    EXPECT_EQ(got.dtype(), dtype) << context << ": got " << dtype_name(got.dtype());
    const Array want = reference::reduce(to_array(x), "a b -> a", *parse_reduction(name));
    expect_close(got, want, tol, context);
  }
}

// The dtype of a reduction's result: float inputs keep their dtype, any/all give bool on every
// dtype; mean/var/std/logsumexp need a float input (a UserError with a caret otherwise).
TEST(Dtypes, ReductionResultDtypes) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16})
    expect_float_reductions_keep_dtype(dtype, tolerance_for(dtype, 6));
  for (DType dtype : kAllDTypes) {
    const Tensor x = random_bits({3, 5}, dtype, 12, Layout::column_major);
    for (const char* name : {"any", "all"}) {
      const std::string context = fmt::format("{} on {}", name, dtype_name(dtype));
      Tensor got;
      ASSERT_NO_THROW(got = reduce(x, "a b -> b", name)) << context;
      EXPECT_EQ(got.dtype(), DType::boolean) << context;
      expect_close(got, reference::reduce(to_array(x), "a b -> b", *parse_reduction(name)), {0, 0},
                   context);
    }
  }
  for (DType dtype : {DType::i64, DType::i32, DType::i8, DType::u8, DType::boolean})
    for (const char* name : {"mean", "logsumexp"}) {
      const Tensor x = zeros({2, 3}, dtype);
      try {
        (void)reduce(x, "a b -> a", name);
        ADD_FAILURE() << name << " on " << dtype_name(dtype) << " did not throw";
      } catch (const UserError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("needs a floating-point tensor"), std::string::npos) << what;
        EXPECT_NE(what.find("pattern:1:"), std::string::npos) << what;
      }
    }
}

// BUG (exec/tensor_kernels.cpp, reduce_dims): a reduction of an f8e4m3/f8e5m2 tensor returns
// an f32 tensor, although the Graph IR node says the result is the input's f8 dtype
// (lower_patterns.cpp: out = dtype) and reduce_dims itself means to round back to f8
// (`is_fp8(out_dtype) ? out.to(out_dtype) : out`). The cause: out_dtype is computed as
// `is_float(x_in.dtype()) ? x_in.dtype() : DType::f32`, and is_float() is false for the f8
// formats, so out_dtype is f32 and the f8 branches never run. The values are right (better
// than f8). Expected: the f8 dtype, the exact result rounded once to it: within half an ulp
// (2^-4 relative for e4m3's 3 mantissa bits, 2^-3 for e5m2's 2) or half the smallest subnormal
// (2^-10 for e4m3, 2^-17 for e5m2).
TEST(Dtypes, ReductionOfFloat8KeepsFloat8) {
  expect_float_reductions_keep_dtype(DType::f8e4m3, {0.0625, std::ldexp(1.0, -10)});
  expect_float_reductions_keep_dtype(DType::f8e5m2, {0.125, std::ldexp(1.0, -17)});
}

// sum/max/min/prod on integer tensors: either computed exactly, or refused with a RuntimeError
// that says what to do instead (never a crash or a silently wrong value).
TEST(Dtypes, IntegerReductionsMatchTheReference) {
  for (DType dtype : {DType::i64, DType::i32, DType::i8, DType::u8})
    for (const char* name : {"sum", "max", "min", "prod"}) {
      const Tensor x = from_data<double>({1, 2, 3, 4, 5, 6}, {2, 3}).to(dtype);
      const Tensor got = reduce(x, "a b -> a", name);
      const bool widened = std::string(name) == "sum" || std::string(name) == "prod";
      EXPECT_EQ(got.dtype(), widened ? DType::i64 : dtype) << name << " on " << dtype_name(dtype);
      expect_close(got, reference::reduce(to_array(x), "a b -> a", *parse_reduction(name)),
                   {0, 0}, fmt::format("{} on {}", name, dtype_name(dtype)));
    }
}

}  // namespace
}  // namespace ein::testing

namespace ein::testing {
namespace {

// torch.finfo and torch.iinfo's numbers.
TEST(Dtypes, FinfoAndIinfoAreTorchs) {
  EXPECT_EQ(finfo(DType::f32).eps, 1.1920928955078125e-07);
  EXPECT_EQ(finfo(DType::f32).max, 3.4028234663852886e+38);
  EXPECT_EQ(finfo(DType::f32).tiny, 1.1754943508222875e-38);
  EXPECT_EQ(finfo(DType::f32).min, -finfo(DType::f32).max);
  EXPECT_EQ(finfo(DType::f64).eps, 2.220446049250313e-16);
  EXPECT_EQ(finfo(DType::f16).max, 65504.0);
  EXPECT_EQ(finfo(DType::f16).eps, 0.0009765625);
  EXPECT_EQ(finfo(DType::bf16).eps, 0.0078125);
  EXPECT_EQ(finfo(DType::bf16).max, 3.3895313892515355e+38);
  EXPECT_EQ(finfo(DType::f8e4m3).max, 448.0);
  EXPECT_EQ(finfo(DType::f8e5m2).max, 57344.0);
  EXPECT_EQ(finfo(DType::f32).smallest_subnormal, 1.401298464324817e-45);
  // Each max survives the round trip through its dtype; eps is the step above 1.
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2}) {
    const FloatInfo f = finfo(d);
    EXPECT_EQ(full({}, f.max, d).item(), f.max) << dtype_name(d);
    EXPECT_EQ(full({}, 1 + f.eps, d).item(), 1 + f.eps) << dtype_name(d);
    EXPECT_EQ(full({}, 1 + f.eps / 4, d).item(), 1.0) << dtype_name(d);
  }
  EXPECT_EQ(iinfo(DType::i8).min, -128);
  EXPECT_EQ(iinfo(DType::i8).max, 127);
  EXPECT_EQ(iinfo(DType::u8).max, 255);
  EXPECT_EQ(iinfo(DType::i64).min, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(iinfo(DType::i32).bits, 32);
  EXPECT_THROW(finfo(DType::i32), std::invalid_argument);
  EXPECT_THROW(iinfo(DType::f32), std::invalid_argument);
}

// triu/tril against the definition on a batch of matrices (NaN and inf kept where kept, zero
// where masked), each diagonal offset; the gradient is the same mask.
TEST(Dtypes, TriuAndTrilMaskTheLastTwoDims) {
  std::vector<double> v(2 * 3 * 4);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = i == 5 ? NAN : i == 6 ? INFINITY : static_cast<double>(i) - 7.5;
  const Tensor x = from_data(v, {2, 3, 4});
  for (int64_t k : {-2, -1, 0, 1, 3}) {
    for (bool upper : {true, false}) {
      const std::vector<double> got = (upper ? triu(x, k) : tril(x, k)).to_vector<double>();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t c = 0; c < 4; ++c) {
            const size_t i = static_cast<size_t>((b * 3 + r) * 4 + c);
            const bool keep = upper ? c - r >= k : c - r <= k;
            if (keep && std::isnan(v[i])) EXPECT_TRUE(std::isnan(got[i]));
            else EXPECT_EQ(got[i], keep ? v[i] : 0.0) << "k " << k << " upper " << upper << " at " << i;
          }
    }
  }
  Tensor w = from_data<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}).requires_grad_();
  reduce(triu(w, 1), "r c ->", "sum").backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 1, 1, 0, 0, 1, 0, 0, 0}));
  EXPECT_THROW(triu(from_data<float>({1, 2}, {2})), RuntimeError);
  // Columns past 2^24 have no exact f32 index: refused in f32 (a broadcast view, nothing
  // allocated), not masked at the wrong column.
  const Tensor wide = full({}, 1.0).expand({2, (int64_t{1} << 24) + 1});
  try {
    (void)tril(wide);
    ADD_FAILURE() << "tril of a dim over 2^24 in f32";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("has a dim over 2^24 = 16777216"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ein::testing

namespace ein::testing {
namespace {

// Integer einsum is exact (int64 on the host): a batched matmul against plain loops with
// values past 2^53, a diagonal, an outer product, and i32 keeping its dtype.
TEST(Dtypes, IntegerEinsumIsExact) {
  const int64_t big = (int64_t{1} << 40) + 3;
  std::vector<int64_t> av(2 * 3 * 4), bv(2 * 4 * 5);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<int64_t>(i) * (i % 3 == 0 ? big : -7);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<int64_t>(i % 5) - 2 + (i == 7 ? 1 << 20 : 0);
  const Tensor a = from_data(av, {2, 3, 4}), b = from_data(bv, {2, 4, 5});
  const Tensor c = einsum("n i j, n j k -> n i k", a, b);
  ASSERT_EQ(c.dtype(), DType::i64);
  const std::vector<int64_t> got = c.to_vector<int64_t>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t k = 0; k < 5; ++k) {
        uint64_t want = 0;  // wrap-around like the kernel and torch
        for (int64_t j = 0; j < 4; ++j)
          want += static_cast<uint64_t>(av[static_cast<size_t>((n * 3 + i) * 4 + j)]) *
                  static_cast<uint64_t>(bv[static_cast<size_t>((n * 4 + j) * 5 + k)]);
        EXPECT_EQ(got[static_cast<size_t>((n * 3 + i) * 5 + k)], static_cast<int64_t>(want));
      }
  const Tensor sq = from_data<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  EXPECT_EQ(einsum("i i -> i", sq).to_vector<int64_t>(), (std::vector<int64_t>{1, 5, 9}));
  const Tensor u = from_data<int32_t>({2, -3}, {2}), v = from_data<int32_t>({5, 7, 11}, {3});
  const Tensor outer = einsum("i, j -> i j", u, v);
  EXPECT_EQ(outer.dtype(), DType::i32);
  EXPECT_EQ(outer.to_vector<int32_t>(), (std::vector<int32_t>{10, 14, 22, -15, -21, -33}));
}

}  // namespace
}  // namespace ein::testing
