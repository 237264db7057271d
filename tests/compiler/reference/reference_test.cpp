// The float64 reference interpreter on hand-computed cases: every op, reductions over zero
// elements, var/std ddof, broadcasting and its errors, casts' rounding. Expected values were
// computed by hand or with numpy 2.4 / einops 0.8.2 offline and are written out literally.
#include "compiler/reference/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <ein/errors.h>

#include <ein/diagnostic.h>

namespace ein::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Array random_array(Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  Array x = Array::filled(std::move(shape), 0.0);
  for (double& v : x.data)
    v = dist(rng);
  return x;
}

// Same shape, and every element equal within `tol` (relative to max(1, |want|)); NaN
// matches NaN and infinities match themselves. Reports the first mismatches.
void expect_close(const Array& got, const Array& want, double tol = 1e-12) {
  ASSERT_EQ(got.shape, want.shape);
  ASSERT_EQ(got.data.size(), want.data.size());
  int reported = 0;
  for (size_t i = 0; i < got.data.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    const bool same = (std::isnan(g) && std::isnan(w)) || g == w ||
                      std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w));
    if (!same && reported++ < 5)
      ADD_FAILURE() << "at flat index " << i << ": got " << g << ", expected " << w;
  }
}

TEST(ReferenceArray, ShapeIndexingAndOdometer) {
  const Array x({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(x.numel(), 6);
  EXPECT_EQ(x.at({1, 2}), 5);
  EXPECT_EQ(x.offset({1, 0}), 3);
  EXPECT_THROW(x.at({2, 0}), RuntimeError);
  EXPECT_THROW(x.at({0}), RuntimeError);
  EXPECT_THROW(Array({2, 2}, {1, 2, 3}), RuntimeError);
  EXPECT_EQ(Array({}, {7}).numel(), 1);
  EXPECT_EQ(Array().numel(), 0);
  std::vector<int64_t> index{0, 0};
  std::vector<std::vector<int64_t>> seen{index};
  while (next_index(index, {2, 2}))
    seen.push_back(index);
  EXPECT_EQ(seen, (std::vector<std::vector<int64_t>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
}

TEST(ReferenceRearrange, TransposeSplitMergeAndList) {
  expect_close(rearrange(Array({2, 3}, {1.5, -2, 3, 0.25, 7, -1}), "a b -> b a"),
               Array({3, 2}, {1.5, 0.25, -2, 7, 3, -1}));
  // y = arange(12) * 0.5 - 2 as (6, 2); einops: '(h w) c -> w (c h)', h=2.
  Array y = Array::filled({6, 2}, 0);
  for (size_t i = 0; i < y.data.size(); ++i)
    y.data[i] = 0.5 * static_cast<double>(i) - 2;
  expect_close(rearrange(y, "(h w) c -> w (c h)", {{"h", 2}}),
               Array({3, 4}, {-2.0, 1.0, -1.5, 1.5, -1.0, 2.0, -0.5, 2.5, 0.0, 3.0, 0.5, 3.5}));
  expect_close(rearrange(Array({1, 2}, {4, 5}), "1 w -> w 1"), Array({2, 1}, {4, 5}));
  expect_close(rearrange(std::vector<Array>{Array({2}, {1, 2}), Array({2}, {3, 4})}, "b w -> w b"),
               Array({2, 2}, {1, 3, 2, 4}));
}

TEST(ReferenceRearrange, RandomPermutationMatchesLoops) {
  const Array x = random_array({2, 3, 4}, 11);
  const Array y = rearrange(x, "a b c -> c a b");
  ASSERT_EQ(y.shape, (Shape{4, 2, 3}));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c)
        EXPECT_EQ(y.at({c, a, b}), x.at({a, b, c}));
}

TEST(ReferenceReduce, EveryReductionByHand) {
  const Array x({2, 3}, {1, -2, 3, 4, 0.5, -6});
  const auto rows = [&](Reduction r) { return reduce(x, "a b -> a", r); };
  const auto cols = [&](Reduction r) { return reduce(x, "a b -> b", r); };
  expect_close(rows(Reduction::sum), Array({2}, {2.0, -1.5}));
  expect_close(cols(Reduction::sum), Array({3}, {5.0, -1.5, -3.0}));
  expect_close(rows(Reduction::mean), Array({2}, {0.6666666666666666, -0.5}));
  expect_close(cols(Reduction::mean), Array({3}, {2.5, -0.75, -1.5}));
  expect_close(rows(Reduction::prod), Array({2}, {-6.0, -12.0}));
  expect_close(cols(Reduction::prod), Array({3}, {4.0, -1.0, -18.0}));
  expect_close(rows(Reduction::min), Array({2}, {-2.0, -6.0}));
  expect_close(cols(Reduction::max), Array({3}, {4.0, 0.5, 3.0}));
  expect_close(rows(Reduction::logsumexp), Array({2}, {3.1328452337275756, 4.029794486458149}));
  expect_close(cols(Reduction::logsumexp),
               Array({3}, {4.048587351573742, 0.5788897342925498, 3.000123402189723}));
  expect_close(reduce(x, "a b -> a 1", Reduction::max), Array({2, 1}, {3.0, 4.0}));
  const Array flags({2, 3}, {0, 1, 0, 0, 0, 0});
  expect_close(reduce(flags, "a b -> a", Reduction::any), Array({2}, {1, 0}));
  expect_close(reduce(flags, "a b -> b", Reduction::all), Array({3}, {0, 0, 0}));
  expect_close(reduce(Array({2}, {-0.5, 3}), "a ->", Reduction::all), Array({}, {1}));
}

TEST(ReferenceReduce, VarAndStdWithDdof) {
  const Array x({2, 3}, {1, -2, 3, 4, 0.5, -6});
  expect_close(reduce(x, "a b -> a", Reduction::var, {}, 0),
               Array({2}, {4.222222222222222, 17.166666666666668}));
  expect_close(reduce(x, "a b -> b", Reduction::var, {}, 0), Array({3}, {2.25, 1.5625, 20.25}));
  expect_close(reduce(x, "a b -> a", Reduction::var, {}, 1),
               Array({2}, {6.333333333333334, 25.75}));
  expect_close(reduce(x, "a b -> a", Reduction::std, {}, 1),
               Array({2}, {2.5166114784235836, 5.07444578254611}));
  expect_close(reduce(x, "a b -> b", Reduction::std, {}, 1),
               Array({3}, {2.1213203435596424, 1.7677669529663689, 6.363961030678928}));
  EXPECT_THROW(reduce(x, "a b -> a", Reduction::var), UserError);         // ddof required
  EXPECT_THROW(reduce(x, "a b -> b", Reduction::var, {}, 2), UserError);  // n - ddof = 0
}

TEST(ReferenceReduce, LogsumexpOfInfiniteRows) {
  const Array x({3, 2}, {0, -kInf, -kInf, -kInf, kInf, 1});
  expect_close(reduce(x, "a b -> a", Reduction::logsumexp), Array({3}, {0, -kInf, kInf}));
}

TEST(ReferenceReduce, OverZeroElementsFollowsNumpy) {
  const Array x = Array::filled({2, 0}, 0);
  const auto r = [&](Reduction red) { return reduce(x, "a b -> a", red, {}, 0); };
  expect_close(r(Reduction::sum), Array({2}, {0, 0}));
  expect_close(r(Reduction::prod), Array({2}, {1, 1}));
  expect_close(r(Reduction::mean), Array({2}, {kNaN, kNaN}));
  expect_close(r(Reduction::any), Array({2}, {0, 0}));
  expect_close(r(Reduction::all), Array({2}, {1, 1}));
  expect_close(r(Reduction::logsumexp), Array({2}, {-kInf, -kInf}));
  // min/max have no identity, and var/std divide 0 by 0 - ddof: sema refuses them statically
  // (torch: "cannot reduce over a zero-size dimension"; a NaN with a warning for var).
  EXPECT_THROW(r(Reduction::var), UserError);
  EXPECT_THROW(reduce(x, "a b -> a", Reduction::max), UserError);
  EXPECT_THROW(reduce(x, "a b -> a", Reduction::min), UserError);
  // Reducing a non-empty axis of a zero-size array gives a zero-size result.
  EXPECT_EQ(reduce(Array::filled({0, 3}, 0), "a b -> a", Reduction::max).shape, (Shape{0}));
}

TEST(ReferenceRepeat, TileInterleaveAndNewAxis) {
  const Array x({2}, {1, 2});
  expect_close(repeat(x, "w -> h w", {{"h", 2}}), Array({2, 2}, {1, 2, 1, 2}));
  expect_close(repeat(x, "w -> (w r)", {{"r", 2}}), Array({4}, {1, 1, 2, 2}));
  expect_close(repeat(x, "w -> (r w)", {{"r", 2}}), Array({4}, {1, 2, 1, 2}));
  expect_close(repeat(x, "w -> w 3"), Array({2, 3}, {1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(repeat(x, "w -> w r", {{"r", 0}}).shape, (Shape{2, 0}));
}

TEST(ReferenceEinsum, ByHand) {
  const Array m({2, 2}, {0.5, -1, 2, 3});
  const Array n({2, 3}, {1.5, 2, -1, 0.25, -0.5, 4});
  expect_close(einsum("i k, k j -> i j", {m, n}), Array({2, 3}, {0.5, 1.5, -4.5, 3.75, 2.5, 10.0}));
  expect_close(einsum("i i ->", {m}), Array({}, {3.5}));
  expect_close(einsum("i i -> i", {m}), Array({2}, {0.5, 3}));
  expect_close(einsum("i, j -> i j", {Array({2}, {1, 2}), Array({2}, {3, -1})}),
               Array({2, 2}, {3, -1, 6, -2}));
  // A length-1 axis broadcasts against length n (numpy); '...' dims broadcast too.
  expect_close(einsum("i j, i j -> i j", {n, Array({1, 3}, {2, 0, -1})}),
               Array({2, 3}, {3, 0, 1, 0.5, 0, -4}));
  expect_close(einsum("... j, j -> ...", {n, Array({3}, {1, 1, 2})}), Array({2}, {1.5, 7.75}));
  expect_close(einsum("..., ... -> ...", {Array({2, 1}, {1, 2}), Array({3}, {1, 10, 100})}),
               Array({2, 3}, {1, 10, 100, 2, 20, 200}));
  // ein's extension: a composition split inside einsum, its sizes from another operand.
  expect_close(einsum("(h d), h d -> h", {Array({4}, {1, 2, 3, 4}), Array({2, 2}, {1, 0, 0, 1})}),
               Array({2}, {1, 4}));
}

TEST(ReferenceEinsum, ZeroSizeContractionGivesZeros) {
  expect_close(einsum("i k, k j -> i j", {Array::filled({2, 0}, 0), Array::filled({0, 3}, 0)}),
               Array::filled({2, 3}, 0));
  EXPECT_EQ(einsum("i k, k j -> i j", {Array::filled({0, 2}, 0), random_array({2, 3}, 1)}).shape,
            (Shape{0, 3}));
}

TEST(ReferenceEinsum, RandomBatchedMatmulMatchesLoops) {
  const Array a = random_array({2, 3, 4}, 21), b = random_array({2, 4, 5}, 22);
  const Array c = einsum("b i k, b k j -> b i j", {a, b});
  ASSERT_EQ(c.shape, (Shape{2, 3, 5}));
  for (int64_t bb = 0; bb < 2; ++bb)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double s = 0;
        for (int64_t k = 0; k < 4; ++k)
          s += a.at({bb, i, k}) * b.at({bb, k, j});
        EXPECT_NEAR(c.at({bb, i, j}), s, 1e-13);
      }
  EXPECT_THROW(einsum("i j, j k -> i k", {a, b}), UserError);
}

TEST(ReferencePack, PackAndUnpackByHand) {
  const Array r({2, 1}, {1, 2}), g({2, 2}, {3, 4, 5, 6});
  auto [packed, ps] = pack({r, g}, "h *");
  expect_close(packed, Array({2, 3}, {1, 3, 4, 2, 5, 6}));
  EXPECT_EQ(ps, (std::vector<Shape>{{1}, {2}}));
  const auto parts = unpack(packed, {{1}, {-1}}, "h *");
  ASSERT_EQ(parts.size(), 2u);
  expect_close(parts[0], r);
  expect_close(parts[1], g);
  auto [stacked, ps2] =
      pack({Array({2}, {1, 2}), Array({1, 2}, {7, 8}), Array({2, 2}, {3, 4, 5, 6})}, "* w");
  EXPECT_EQ(ps2, (std::vector<Shape>{{}, {1}, {2}}));
  expect_close(stacked, Array({4, 2}, {1, 2, 7, 8, 3, 4, 5, 6}));
  EXPECT_EQ(stacked.shape, (Shape{4, 2}));
  EXPECT_THROW(pack({Array({2}, {1, 2}), Array({}, {7})}, "* w"), UserError);
}

TEST(ReferencePack, RandomRoundTrip) {
  const std::vector<Array> xs{random_array({2, 3, 5}, 31), random_array({2, 3, 4, 2, 5}, 32),
                              random_array({2, 3, 0, 5}, 33)};
  const auto [packed, ps] = pack(xs, "i j * k");
  EXPECT_EQ(packed.shape, (Shape{2, 3, 9, 5}));
  EXPECT_EQ(packed.at({1, 2, 1, 4}), xs[1].at({1, 2, 0, 0, 4}));
  const auto back = unpack(packed, ps, "i j * k");
  ASSERT_EQ(back.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    expect_close(back[i], xs[i], 0);
}

TEST(ReferenceUnary, EveryOpByHand) {
  const Array x({4}, {-1.5, 0, 0.5, 2});
  const auto u = [&](UnaryOp op) { return unary(op, x); };
  expect_close(u(UnaryOp::neg), Array({4}, {1.5, -0.0, -0.5, -2}));
  expect_close(u(UnaryOp::abs), Array({4}, {1.5, 0, 0.5, 2}));
  expect_close(u(UnaryOp::exp),
               Array({4}, {0.22313016014842982, 1.0, 1.6487212707001282, 7.38905609893065}));
  expect_close(u(UnaryOp::log), Array({4}, {kNaN, -kInf, -0.6931471805599453, 0.6931471805599453}));
  expect_close(u(UnaryOp::sqrt), Array({4}, {kNaN, 0.0, 0.7071067811865476, 1.4142135623730951}));
  expect_close(u(UnaryOp::rsqrt), Array({4}, {kNaN, kInf, 1.414213562373095, 0.7071067811865475}));
  expect_close(u(UnaryOp::tanh),
               Array({4}, {-0.9051482536448665, 0.0, 0.46211715726000974, 0.9640275800758169}));
  expect_close(u(UnaryOp::sigmoid),
               Array({4}, {0.18242552380635635, 0.5, 0.6224593312018546, 0.8807970779778823}));
  expect_close(u(UnaryOp::relu), Array({4}, {0, 0, 0.5, 2}));
  expect_close(u(UnaryOp::gelu),
               Array({4}, {-0.10021080190328713, 0.0, 0.34573123063700656, 1.9544997361036416}));
  expect_close(u(UnaryOp::gelu_tanh),
               Array({4}, {-0.10042842301976707, 0.0, 0.34571400982514394, 1.954597694087775}));
  expect_close(u(UnaryOp::silu),
               Array({4}, {-0.2736382857095345, 0.0, 0.3112296656009273, 1.7615941559557646}));
  expect_close(u(UnaryOp::sin),
               Array({4}, {-0.9974949866040544, 0.0, 0.479425538604203, 0.9092974268256817}));
  expect_close(u(UnaryOp::cos),
               Array({4}, {0.0707372016677029, 1.0, 0.8775825618903728, -0.4161468365471424}));
  expect_close(u(UnaryOp::square), Array({4}, {2.25, 0, 0.25, 4}));
  expect_close(u(UnaryOp::reciprocal), Array({4}, {-0.6666666666666666, kInf, 2.0, 0.5}));
  expect_close(u(UnaryOp::sign), Array({4}, {-1, 0, 1, 1}));
  expect_close(unary(UnaryOp::relu, Array({1}, {kNaN})), Array({1}, {kNaN}));
  expect_close(unary(UnaryOp::sign, Array({1}, {kNaN})), Array({1}, {0}));  // torch.sign
}

TEST(ReferenceBinary, BroadcastByHand) {
  const Array a({2, 1}, {1, -2}), b({3}, {0.5, 2, -3});
  const auto f = [&](BinaryOp op) { return binary(op, a, b); };
  expect_close(f(BinaryOp::add), Array({2, 3}, {1.5, 3.0, -2.0, -1.5, 0.0, -5.0}));
  expect_close(f(BinaryOp::sub), Array({2, 3}, {0.5, -1.0, 4.0, -2.5, -4.0, 1.0}));
  expect_close(f(BinaryOp::mul), Array({2, 3}, {0.5, 2.0, -3.0, -1.0, -4.0, 6.0}));
  expect_close(f(BinaryOp::div),
               Array({2, 3}, {2.0, 0.5, -0.3333333333333333, -4.0, -1.0, 0.6666666666666666}));
  expect_close(f(BinaryOp::pow), Array({2, 3}, {1.0, 1.0, 1.0, kNaN, 4.0, -0.125}));
  expect_close(f(BinaryOp::maximum), Array({2, 3}, {1.0, 2.0, 1.0, 0.5, 2.0, -2.0}));
  expect_close(f(BinaryOp::minimum), Array({2, 3}, {0.5, 1, -3, -2, -2, -3}));
  expect_close(f(BinaryOp::lt), Array({2, 3}, {0, 1, 0, 1, 1, 0}));
  expect_close(f(BinaryOp::ge), Array({2, 3}, {1, 0, 1, 0, 0, 1}));
  const Array c({3}, {1, kNaN, 2}), d({3}, {1, 1, 3});
  expect_close(binary(BinaryOp::eq, c, d), Array({3}, {1, 0, 0}));
  expect_close(binary(BinaryOp::ne, c, d), Array({3}, {0, 1, 1}));
  expect_close(binary(BinaryOp::le, c, d), Array({3}, {1, 0, 1}));
  expect_close(binary(BinaryOp::gt, c, d), Array({3}, {0, 0, 0}));
  expect_close(binary(BinaryOp::maximum, c, d), Array({3}, {1, kNaN, 3}));
  // Rank 0 broadcasts against anything; zero-size dims stay zero-size.
  expect_close(binary(BinaryOp::mul, Array({}, {2}), b), Array({3}, {1, 4, -6}));
  EXPECT_EQ(binary(BinaryOp::add, Array::filled({0, 1}, 0), b).shape, (Shape{0, 3}));
}

TEST(ReferenceBinary, ShapesThatDoNotBroadcastThrow) {
  EXPECT_THROW(binary(BinaryOp::add, Array::filled({2, 3}, 1), Array::filled({4}, 1)),
               RuntimeError);
  EXPECT_THROW(binary(BinaryOp::add, Array::filled({2, 3}, 1), Array::filled({2, 1, 2}, 1)),
               RuntimeError);
  EXPECT_THROW(binary(BinaryOp::add, Array::filled({0}, 1), Array::filled({2}, 1)), RuntimeError);
  EXPECT_THROW(where(Array::filled({2}, 1), Array::filled({3}, 1), Array::filled({1}, 1)),
               RuntimeError);
}

TEST(ReferenceWhere, BroadcastsAllThree) {
  expect_close(where(Array({2, 1}, {1, 0}), Array({3}, {1, 2, 3}), Array({}, {-1})),
               Array({2, 3}, {1, 2, 3, -1, -1, -1}));
}

TEST(ReferenceCast, HalfRoundsToNearestEven) {
  // Expected values: numpy.float16(v) (a direct, correctly rounded double -> half).
  const Array in({21}, {0.3333333333333333,
                        65519.0,
                        65520.0,
                        2049.0,
                        2051.0,
                        2.9802322387695312e-08,
                        4.470348358154297e-08,
                        1e-08,
                        -0.1,
                        100000.0,
                        6.1e-05,
                        -2.086162567138672e-07,
                        -35.233447033367526,
                        -69.83016521509961,
                        30.186894607970743,
                        -85.51274266649145,
                        7.176400861337839,
                        -26.862216617482886,
                        -8.840021504505864e-05,
                        1.4871466378840536e-06,
                        -9.250086831160302e-05});
  const Array want({21}, {0.333251953125,
                          65504.0,
                          kInf,
                          2048.0,
                          2052.0,
                          0.0,
                          5.960464477539063e-08,
                          0.0,
                          -0.0999755859375,
                          kInf,
                          6.097555160522461e-05,
                          -2.384185791015625e-07,
                          -35.21875,
                          -69.8125,
                          30.1875,
                          -85.5,
                          7.17578125,
                          -26.859375,
                          -8.83936882019043e-05,
                          1.4901161193847656e-06,
                          -9.250640869140625e-05});
  expect_close(cast(in, DType::f16), want, 0);
  EXPECT_TRUE(std::signbit(cast(Array({1}, {-1e-9}), DType::f16).data[0]));
}

TEST(ReferenceCast, BFloat16AndFloat8) {
  // bf16 expectations: round-to-nearest-even of the float32 bits to their top 16.
  expect_close(
      cast(Array({9}, {0.3333333432674408, 3.140625, 3.14453125, 1.00390625, 1.01171875, -255.5,
                       3.3895313892515355e+38, 9.99994610111476e-41, 3.0000000054977558e+38}),
           DType::bf16),
      Array({9}, {0.333984375, 3.140625, 3.140625, 1.0, 1.015625, -256.0, 3.3895313892515355e+38,
                  9.183549615799121e-41, 3.00405527047391e+38}),
      0);
  EXPECT_EQ(cast(Array({1}, {3.4e38}), DType::bf16).data[0], kInf);
  // e4m3 (fn): 3 mantissa bits, subnormal step 2^-9, max 448, no inf (overflow -> NaN).
  expect_close(cast(Array({8}, {0.3, 0.001, 0x1p-10, 448, 464, 470, -1000, kInf}), DType::f8e4m3),
               Array({8}, {0.3125, 0x1p-9, 0, 448, 448, kNaN, kNaN, kNaN}), 0);
  // e5m2: 2 mantissa bits, max 57344; 61440 is a tie that rounds to the even 2^16 = inf.
  expect_close(cast(Array({5}, {0.3, 60000, 61440, -kInf, 0x1.8p-17}), DType::f8e5m2),
               Array({5}, {0.3125, 57344, kInf, -kInf, 0x1p-16}), 0);
}

TEST(ReferenceCast, Float32MatchesStaticCast) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-160, 140);
  Array x = Array::filled({2000}, 0);
  for (double& v : x.data)
    v = std::ldexp(mant(rng), expo(rng));
  const Array y = cast(x, DType::f32);
  for (size_t i = 0; i < x.data.size(); ++i)
    ASSERT_EQ(y.data[i], static_cast<double>(static_cast<float>(x.data[i]))) << x.data[i];
}

TEST(ReferenceCast, IntegersTruncateAndBoolIsNonzero) {
  expect_close(cast(Array({4}, {2.7, -2.7, -0.5, 127.9}), DType::i8), Array({4}, {2, -2, 0, 127}));
  expect_close(cast(Array({2}, {255.5, 0.9}), DType::u8), Array({2}, {255, 0}));
  expect_close(cast(Array({2}, {-2147483648.9, 1e15}), DType::i64),
               Array({2}, {-2147483648.0, 1e15}));
  EXPECT_THROW(cast(Array({1}, {256}), DType::u8), RuntimeError);
  EXPECT_THROW(cast(Array({1}, {-1}), DType::u8), RuntimeError);
  EXPECT_THROW(cast(Array({1}, {2147483648.0}), DType::i32), RuntimeError);
  EXPECT_THROW(cast(Array({1}, {kNaN}), DType::i64), RuntimeError);
  expect_close(cast(Array({4}, {0, -0.5, kNaN, 3}), DType::boolean), Array({4}, {0, 1, 1, 1}));
  expect_close(cast(Array({2}, {0.1, kNaN}), DType::f64), Array({2}, {0.1, kNaN}), 0);
}

TEST(ReferenceSoftmax, ByHandAndAlongAnyDim) {
  expect_close(softmax(Array({3}, {1, 2, 3}), 0),
               Array({3}, {0.09003057317038046, 0.24472847105479764, 0.6652409557748218}));
  expect_close(log_softmax(Array({3}, {1, 2, 3}), -1),
               Array({3}, {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804}));
  // Along dim 0 of (2, 2): each column normalised; -inf entries get probability 0.
  expect_close(softmax(Array({2, 2}, {0, -kInf, 0, 5}), 0), Array({2, 2}, {0.5, 0, 0.5, 1}));
  expect_close(softmax(Array({1, 2}, {-kInf, -kInf}), 1), Array({1, 2}, {kNaN, kNaN}));
  EXPECT_THROW(softmax(Array({2}, {1, 2}), 1), RuntimeError);
  EXPECT_EQ(softmax(Array::filled({0, 3}, 0), 1).shape, (Shape{0, 3}));
  const Array x = random_array({3, 4, 5}, 41);
  const Array s = reduce(softmax(x, 1), "a b c -> a c", Reduction::sum);
  expect_close(s, Array::filled({3, 5}, 1.0), 1e-14);
  expect_close(unary(UnaryOp::exp, log_softmax(x, -2)), softmax(x, 1), 1e-14);
}

TEST(ReferenceZeroSize, ShapesFlowThrough) {
  EXPECT_EQ(rearrange(Array::filled({0, 3}, 0), "a b -> b a").shape, (Shape{3, 0}));
  EXPECT_EQ(rearrange(Array::filled({0, 3}, 0), "a b -> (a b)").shape, (Shape{0}));
  EXPECT_EQ(unary(UnaryOp::exp, Array::filled({2, 0}, 0)).shape, (Shape{2, 0}));
  EXPECT_EQ(cast(Array::filled({0}, 0), DType::f16).shape, (Shape{0}));
  expect_close(reduce(Array::filled({3, 0}, 0), "a b -> ", Reduction::sum), Array({}, {0}));
}

TEST(ReferenceErrors, PatternMistakesAreUserErrors) {
  const Array x = random_array({2, 3}, 51);
  EXPECT_THROW(rearrange(x, "a b -> a"), UserError);
  EXPECT_THROW(rearrange(x, "(a b) c -> a b c"), UserError);
  EXPECT_THROW(repeat(x, "a b -> a b c"), UserError);
  EXPECT_THROW(reduce(x, "a b -> a", Reduction::none), UserError);
  EXPECT_THROW(rearrange(std::vector<Array>{x, random_array({3, 2}, 52)}, "n a b -> a b n"),
               UserError);
  EXPECT_THROW(unpack(x, {{2}, {2}}, "a *"), UserError);
}

}  // namespace
}  // namespace ein::reference
