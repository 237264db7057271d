// Randomness like PyTorch's (include/ein/random.h): consecutive factory calls give fresh
// numbers, manual_seed() and Generator objects make them reproducible, randint's range and
// spread, the initialisers' optional seed, and a `.ein` function run with a seed draws
// exactly what the same C++ calls draw after manual_seed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <ein/errors.h>
#include <ein/init.h>
#include <ein/random.h>
#include <ein/tensor.h>

#include "script/script.h"
#include "support/temp_path.h"

namespace ein {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(Generator, ConsecutiveCallsDifferAndManualSeedRepeatsThem) {
  manual_seed(5);
  const auto a = values(randn({16})), b = values(randn({16})), c = values(rand({16}));
  EXPECT_NE(a, b);
  manual_seed(5);
  EXPECT_EQ(values(randn({16})), a);
  EXPECT_EQ(values(randn({16})), b);
  EXPECT_EQ(values(rand({16})), c);
  // An explicit seed takes no draw and is the seed itself.
  manual_seed(5);
  EXPECT_EQ(values(randn({16}, DType::f32, cpu(), 123)), values(randn({16}, DType::f32, cpu(), 123)));
  EXPECT_EQ(values(randn({16})), a);
  // Draw k of seed s is draw_seed(s, 0, k).
  EXPECT_EQ(values(randn({16}, DType::f32, cpu(), draw_seed(5, 0, 1))), b);
}

TEST(Generator, AGeneratorIsAStreamOfItsOwn) {
  Generator g(42), h(42);
  manual_seed(0);
  const auto first = values(randn({8}, g));
  const auto from_default = values(randn({8}));  // the default stream is not g's
  EXPECT_EQ(values(randn({8}, h)), first);
  EXPECT_NE(from_default, first);
  EXPECT_EQ(g.draws(), 1u);
  // The state (seed, draws) resumes the stream where it was.
  const uint64_t seed = g.initial_seed(), draws = g.draws();
  const auto next = values(randn({8}, g));
  Generator resumed;
  resumed.set_state(seed, draws);
  EXPECT_EQ(values(randn({8}, resumed)), next);
  g.manual_seed(42);
  EXPECT_EQ(values(randn({8}, g)), first);
}

TEST(Generator, RandintCoversItsRangeEvenly) {
  const Tensor t = randint(-3, 7, {20000}, DType::i64, cpu(), 9);
  EXPECT_EQ(t.dtype(), DType::i64);
  std::map<int64_t, int> count;
  for (int64_t v : t.to_vector<int64_t>())
    ++count[v];
  ASSERT_EQ(count.size(), 10u);
  EXPECT_EQ(count.begin()->first, -3);
  EXPECT_EQ(count.rbegin()->first, 6);
  for (const auto& [v, n] : count)  // 2000 expected each; 5 sigma is about ±212
    EXPECT_NEAR(n, 2000, 212) << "value " << v;
  EXPECT_EQ(randint(0, 5, {3, 4}, DType::i32).dtype(), DType::i32);
  EXPECT_EQ(randint(0, 1, {6}).to_vector<int64_t>(), std::vector<int64_t>(6, 0));
  Generator g(1);
  EXPECT_EQ(randint(0, 100, {5}, g).to_vector<int64_t>(),
            randint(0, 100, {5}, DType::i64, cpu(), draw_seed(1, 0, 0)).to_vector<int64_t>());
  EXPECT_THROW(randint(3, 3, {2}), RuntimeError);
  EXPECT_THROW(randint(0, 2, {2}, DType::boolean), RuntimeError);
}

TEST(Generator, InitialisersWithoutASeedDrawFreshNumbers) {
  manual_seed(3);
  const auto a = values(init::normal({8}, 0, 1)), b = values(init::normal({8}, 0, 1));
  EXPECT_NE(a, b);
  manual_seed(3);
  EXPECT_EQ(values(init::normal({8}, 0, 1)), a);
  EXPECT_EQ(values(init::normal({8}, 0, 1, {.seed = 11})), values(init::normal({8}, 0, 1, {.seed = 11})));
}

// A script's first call with seed s (what `ein run --seed s` does) draws randn then rand as
// manual_seed(s) then randn and rand in C++.
TEST(Generator, AScriptAndCppAgreeForTheSameSeed) {
  const auto path = testing::temp_path("ein_generator_agree.ein");
  std::ofstream(path) << "fn pair() -> f32[5] = randn(5) + rand(5)\n";
  script::LoadOptions options;
  options.seed = 17;
  auto program = script::Program::load(path.string(), options);
  const std::vector<Tensor> out = program->call("pair", {});
  manual_seed(17);
  const auto normal = values(randn({5})), uniform = values(rand({5}));
  std::vector<float> sum(5);
  for (size_t i = 0; i < 5; ++i)
    sum[i] = normal[i] + uniform[i];
  EXPECT_EQ(values(out.at(0)), sum);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ein
