// Every reduction of ein::reduce against the float64 reference interpreter: sum, mean, max,
// min, prod, any, all, logsumexp, var and std (ddof 0 and 1), over random shapes of rank 1-4
// (sizes 1-37, so 1 and non-multiples of 16 occur), reducing leading, trailing, middle and all
// axes, in f32, f64, f16 and bf16, on contiguous, strided and column-major inputs; plus the
// special inputs (prod near 1, any/all with zeros and on bool, logsumexp with -inf rows) and
// reductions over zero elements.
//
// Tolerances: the reference reads the very values stored in the input dtype (to_array of the
// input), so the only errors are ein's arithmetic (float32 for f32/f16/bf16 inputs, float64 for
// f64) over `count` terms and the final rounding to the output dtype; tolerance_for(dtype,
// count) covers both (sqrt(count) growth of the accumulation error, plus the output rounding
// of 2^-11 for f16 and 2^-8 for bf16). max, min, any and all select or test elements, so they
// must match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include "api/ops/ops_test_support.h"

namespace ein::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct ReductionKind {
  const char* name;
  std::optional<int64_t> ddof;
};

const ReductionKind kReductions[] = {
    {"sum", {}}, {"mean", {}},      {"max", {}}, {"min", {}}, {"prod", {}}, {"any", {}},
    {"all", {}}, {"logsumexp", {}}, {"var", 0},  {"var", 1},  {"std", 0},   {"std", 1},
};

/// One reduction pattern and the rank of its input (sizes are drawn per run).
struct PatternCase {
  const char* pattern;
  int rank;
  const char* what;  ///< which axes are reduced
};

const PatternCase kPatterns[] = {
    {"a -> ", 1, "all"},
    {"a b -> b", 2, "leading"},
    {"a b -> a", 2, "trailing"},
    {"a b -> ", 2, "all"},
    {"a b c -> b c", 3, "leading"},
    {"a b c -> a c", 3, "middle"},
    {"a b c -> a b", 3, "trailing"},
    {"a b c -> ", 3, "all"},
    {"a b c d -> a d", 4, "middle two"},
    {"a b c d -> b c", 4, "leading and trailing"},
    {"a b c d -> d a", 4, "middle two, output permuted"},
    {"a b c d -> ", 4, "all"},
};

/// A random shape of `rank`: sizes 1..37 (one forced to 1 now and then), at most 6000 elements (the
/// reference interpreter's gathers dominate the run time).
Shape random_shape(int rank, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> size(1, 37);
  for (;;) {
    Shape s;
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) {
      s.push_back(size(rng));
      n *= s.back();
    }
    if (rank > 1 && rng() % 4 == 0) s[rng() % static_cast<uint64_t>(rank)] = 1;
    if (n <= 6000) return s;
  }
}

/// The values a reduction is tested on: normal, except prod (near 1, so long products neither
/// overflow nor vanish) and any/all (a quarter exact zeros, so both answers occur).
std::vector<double> values_for(const std::string& reduction, int64_t n, uint64_t seed) {
  std::vector<double> v = normal_values(n, seed);
  if (reduction == "prod")
    for (double& x : v)
      x = 1 + 0.01 * x;
  if (reduction == "any" || reduction == "all")
    for (double& x : v)
      if (std::abs(x) < 0.32) x = 0;
  return v;
}

/// Runs `reduction` on `x` with ein and with the reference and compares them (including the
/// result dtype). When the reference rejects the call (ddof too large), ein must reject too.
void check_reduce(const Tensor& x, const std::string& pattern, const ReductionKind& r,
                  const Sizes& sizes, const std::string& context) {
  const auto red = parse_reduction(r.name);
  ASSERT_TRUE(red.has_value()) << r.name;
  reference::Array want;
  try {
    want = reference::reduce(to_array(x), pattern, *red, sizes, r.ddof);
  } catch (const UserError&) {
    EXPECT_THROW(reduce(x, pattern, r.name, sizes, r.ddof), UserError) << context;
    return;
  }
  Tensor got;
  try {
    got = reduce(x, pattern, r.name, sizes, r.ddof);
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": threw " << e.what();
    return;
  }
  const bool boolean = std::string(r.name) == "any" || std::string(r.name) == "all";
  EXPECT_EQ(got.dtype(), boolean ? DType::boolean : x.dtype()) << context;
  const int64_t count = want.numel() == 0 ? 0 : x.numel() / want.numel();
  const bool exact = boolean || std::string(r.name) == "max" || std::string(r.name) == "min";
  expect_close(got, want, exact ? Tolerance{0, 0} : tolerance_for(x.dtype(), count), context);
}

std::string describe(const std::string& pattern, const Tensor& x, const ReductionKind& r,
                     Layout layout) {
  return fmt::format("reduce '{}' {} ddof={} on {} {} ({})", pattern, r.name,
                     r.ddof ? std::to_string(*r.ddof) : "-", dtype_name(x.dtype()),
                     shape_str(x.shape()), layout_name(layout));
}

// Every reduction x every pattern in f32 and f64, and x five patterns (leading, trailing,
// middle, all, leading+trailing) in f16 and bf16; the layout rotates with the pattern and the
// dtype so each (dtype, layout) and each (pattern, layout) pair occurs while the number of
// distinct kernels (one per op, dtype, stride pattern and constant 1/n) stays small: each costs
// ~50 ms to build on a cold JIT cache.
TEST(Reduce, EveryReductionEveryAxisKindEveryFloatDtype) {
  std::mt19937_64 rng(7001);
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
  uint64_t seed = 100;
  for (size_t t = 0; t < std::size(dtypes); ++t)
    for (size_t p = 0; p < std::size(kPatterns); ++p) {
      const bool half = dtypes[t] == DType::f16 || dtypes[t] == DType::bf16;
      if (half && p != 1 && p != 2 && p != 5 && p != 7 && p != 9) continue;
      const Layout layout = static_cast<Layout>((p + t) % 3);
      const Shape shape = random_shape(kPatterns[p].rank, rng);
      for (const ReductionKind& r : kReductions) {
        const Tensor x =
            tensor_of(values_for(r.name, checked_numel(shape), ++seed), shape, dtypes[t], layout);
        check_reduce(x, kPatterns[p].pattern, r, {},
                     describe(kPatterns[p].pattern, x, r, layout) + " [" + kPatterns[p].what + "]");
      }
    }
}

// Composed axes on the left and keyword sizes: the reduction sees the split axes.
TEST(Reduce, ComposedAxesWithSizes) {
  uint64_t seed = 900;
  for (DType dtype : {DType::f32, DType::f64})
    for (Layout layout : {Layout::contiguous, Layout::column_major})
      for (const ReductionKind& r : kReductions) {
        const Shape shape{3 * 7, 5};  // (a b) c with b = 7
        const Tensor x = tensor_of(values_for(r.name, 105, ++seed), shape, dtype, layout);
        const std::string pattern = "(a b) c -> c a";
        check_reduce(x, pattern, r, {{"b", 7}}, describe(pattern, x, r, layout));
      }
}

// Sizes that straddle the vector width: 15, 16, 17, 31, 32, 33 and 1 along the reduced axis.
TEST(Reduce, LengthsAroundTheVectorWidth) {
  uint64_t seed = 1200;
  for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 37})
    for (const char* name : {"sum", "max", "logsumexp"}) {
      const ReductionKind r{name, {}};
      const Shape shape{3, n};
      const Tensor x = tensor_of(values_for(name, 3 * n, ++seed), shape, DType::f32);
      check_reduce(x, "a b -> a", r, {}, describe("a b -> a", x, r, Layout::contiguous));
    }
}

// any and all on bool tensors, mostly-true so that both answers occur for all.
TEST(Reduce, AnyAllOnBool) {
  std::mt19937_64 rng(31);
  uint64_t seed = 1300;
  for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
    for (const char* pattern : {"a b -> a", "a b -> b", "a b -> "})
      for (const char* name : {"any", "all"}) {
        const Shape shape = random_shape(2, rng);
        std::vector<double> v = normal_values(checked_numel(shape), ++seed);
        // any: mostly false (a true every ~6 elements); all: mostly true.
        for (double& x : v)
          x = std::string(name) == "any" ? (x > 1.0) : (x > -2.0);
        const Tensor x = tensor_of(v, shape, DType::boolean, layout);
        ASSERT_EQ(x.dtype(), DType::boolean);
        check_reduce(x, pattern, {name, {}}, {}, describe(pattern, x, {name, {}}, layout));
      }
}

// logsumexp: a row of all -inf gives -inf (not NaN), a row with some -inf ignores them, a row
// with +inf gives +inf; the rest is ordinary.
TEST(Reduce, LogsumexpWithInfiniteRows) {
  uint64_t seed = 1400;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major}) {
      const Shape shape{6, 19};
      std::vector<double> v = normal_values(6 * 19, ++seed);
      for (int j = 0; j < 19; ++j) {
        v[1 * 19 + j] = -kInf;                  // row 1: all -inf
        if (j % 3 == 0) v[2 * 19 + j] = -kInf;  // row 2: some -inf
        if (j == 5) v[4 * 19 + j] = kInf;       // row 4: one +inf
      }
      const Tensor x = tensor_of(v, shape, dtype, layout);
      const ReductionKind r{"logsumexp", {}};
      check_reduce(x, "a b -> a", r, {}, describe("a b -> a", x, r, layout));
      const Tensor got = reduce(x, "a b -> a", "logsumexp");
      EXPECT_EQ(got.at({1}), -kInf) << dtype_name(dtype);
      EXPECT_EQ(got.at({4}), kInf) << dtype_name(dtype);
      // And the columns: every column has one -inf (row 1), which must not matter.
      check_reduce(x, "a b -> b", r, {}, describe("a b -> b", x, r, layout));
    }
}

// Reductions over zero elements follow torch: sum 0, prod 1, mean NaN, any false, all true,
// logsumexp -inf; max/min are refused with a caret on the empty axis, and var/std (any ddof,
// 0 included: 0/0) as a division by zero, as docs/patterns.md says.
TEST(Reduce, OverZeroElements) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Want {
    const char* name;
    double value;
  };
  const Want wants[] = {{"sum", 0}, {"prod", 1}, {"mean", nan},
                        {"any", 0}, {"all", 1}, {"logsumexp", -kInf}};
  struct Empty {
    Shape shape;
    const char* pattern;
    Shape out;
  };
  const Empty empties[] = {{{0}, "a -> ", {}},
                           {{3, 0}, "a b -> a", {3}},
                           {{0, 4}, "a b -> b", {4}},
                           {{2, 0, 5}, "a b c -> c a", {5, 2}}};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (const Empty& e : empties) {
      const Tensor x = empty(e.shape, dtype);
      for (const Want& w : wants) {
        const std::string context = fmt::format("{} over '{}' {} {}", w.name, e.pattern,
                                                shape_str(e.shape), dtype_name(dtype));
        Tensor got;
        ASSERT_NO_THROW(got = reduce(x, e.pattern, w.name)) << context;
        EXPECT_EQ(got.shape(), e.out) << context;
        const auto want = reference::reduce(to_array(x), e.pattern, *parse_reduction(w.name), {});
        expect_close(got, want, {0, 0}, context);
        for (double g : got.to_vector<double>()) {
          if (std::isnan(w.value))
            EXPECT_TRUE(std::isnan(g)) << context << ": got " << g;
          else
            EXPECT_EQ(g, w.value) << context;
        }
      }
      for (const char* name : {"max", "min"}) {
        try {
          (void)reduce(x, e.pattern, name);
          ADD_FAILURE() << name << " over zero elements " << shape_str(e.shape) << " did not throw";
        } catch (const UserError& err) {
          const std::string what = err.what();
          EXPECT_NE(what.find("pattern:1:"), std::string::npos) << what;
          EXPECT_NE(what.find(std::string(name) + " over zero elements has no identity"),
                    std::string::npos)
              << what;
          EXPECT_NE(what.find('^'), std::string::npos) << what;
        } catch (const std::exception& err) {
          ADD_FAILURE() << name << " over zero elements threw a non-UserError: " << err.what();
        }
      }
      // var/std over zero elements divide by 0 - ddof: refused where numpy warns.
      for (const char* name : {"var", "std"})
        for (int64_t ddof : {0, 1}) {
          try {
            (void)reduce(x, e.pattern, name, {}, ddof);
            ADD_FAILURE() << name << " ddof " << ddof << " over zero elements did not throw";
          } catch (const UserError& err) {
            const std::string what = err.what();
            EXPECT_NE(what.find(fmt::format("{} with ddof={} over 0 elements divides by zero", name,
                                            ddof)),
                      std::string::npos)
                << what;
            EXPECT_NE(what.find('^'), std::string::npos) << what;
          }
        }
    }
}

// A zero-size output with a non-empty reduction: every reduction (max included) gives an empty
// result of the right shape and dtype and launches nothing that could read out of bounds.
TEST(Reduce, ZeroSizeOutput) {
  for (DType dtype : {DType::f32, DType::f16})
    for (const ReductionKind& r : kReductions) {
      const Tensor x = empty({0, 5}, dtype);
      Tensor got;
      ASSERT_NO_THROW(got = reduce(x, "a b -> a", r.name, {}, r.ddof)) << r.name;
      EXPECT_EQ(got.shape(), (Shape{0})) << r.name;
      const bool boolean = std::string(r.name) == "any" || std::string(r.name) == "all";
      EXPECT_EQ(got.dtype(), boolean ? DType::boolean : dtype) << r.name;
    }
}

// Integers are reduced exactly (int64 on the host): sum and prod are i64 for every integer
// dtype (torch's rule) and wrap on overflow as torch's do; max and min keep the dtype; mean
// and friends ask for a float dtype.
TEST(Reduce, IntegersReduceExactly) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not a double
  const Tensor x = from_data<int64_t>({big, 1, -3, 4, big, -big}, {2, 3});
  EXPECT_EQ(reduce(x, "a b -> a", "sum").to_vector<int64_t>(), (std::vector<int64_t>{big - 2, 4}));
  EXPECT_EQ(reduce(x, "a b -> b", "max").to_vector<int64_t>(), (std::vector<int64_t>{big, big, -3}));
  EXPECT_EQ(reduce(x, "a b -> b", "min").to_vector<int64_t>(), (std::vector<int64_t>{4, 1, -big}));
  EXPECT_EQ(reduce(x, "a b ->", "sum").dtype(), DType::i64);
  const Tensor small = from_data<int32_t>({2, -3, 4, 5}, {4});
  const Tensor s = reduce(small, "n ->", "sum"), p = reduce(small, "n ->", "prod");
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.item(), 8.0);
  EXPECT_EQ(p.item(), -120.0);
  EXPECT_EQ(reduce(small, "n ->", "max").dtype(), DType::i32);
  const Tensor wrap = from_data<int64_t>({std::numeric_limits<int64_t>::max(), 1}, {2});
  EXPECT_EQ(reduce(wrap, "n ->", "sum").to_vector<int64_t>().front(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(reduce(zeros({0}, DType::i64), "n ->", "sum").item(), 0.0);
  // The pattern's checks refuse what has no integer answer, with a caret.
  EXPECT_THROW(reduce(zeros({0}, DType::i64), "n ->", "max"), UserError);
  try {
    reduce(small, "n ->", "mean");
    ADD_FAILURE() << "mean of i32 did not throw";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a floating-point tensor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ein::testing
