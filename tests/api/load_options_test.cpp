// script::LoadOptions::max_loop_iterations: a lower loop budget for untrusted scripts (what the
// `.ein` fuzz target uses). Loops are unrolled while tracing, so a script's work grows with its
// loop counts; under the budget it loads and traces as before, over it the loop is a UserError
// at the loop, whether the loop runs while loading (a comprehension building layers) or
// while tracing (a forward over them).
#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <string>

#include <ein/diagnostic.h>
#include <ein/ops.h>
#include "script/script.h"
#include "support/temp_path.h"

namespace ein {
namespace {

std::string write_script(const std::string& name, const std::string& text) {
  const auto path = testing::temp_path(name);
  std::ofstream(path) << text;
  return path.string();
}

// Loads and checks `path` as `ein check` does with a budget of `budget` iterations; the
// UserError's message, or "" when it loads.
std::string check_with_budget(const std::string& path, int64_t budget) {
  script::LoadOptions options;
  options.allocate = false;
  options.max_loop_iterations = budget;
  try {
    script::Program::load(path, options)->check_all();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Six iterations while loading (the comprehension), then six while tracing `deep`.
constexpr const char* kScript =
    "let n = 6\n"
    "let widths = [4 for _ in 0..n]\n"
    "fn deep(x: f32[4]) -> f32[4] {\n"
    "  y = x\n"
    "  for w in widths { y = y * 2 + x }\n"
    "  return y\n"
    "}\n";

// Without allocating, a parameter has its declared shape only: size() reads that.
TEST(LoadOptions, SizeOfAParameterWithoutAllocating) {
  const auto path = write_script("ein_load_options_size.ein",
                                 "module M() {\n"
                                 "  param w: f32[3 5] = zeros()\n"
                                 "  fn forward(x: f32[5]) -> f32[5] = "
                                 "x * size(w, 0) + size(w, -1)\n"
                                 "}\n"
                                 "train {\n"
                                 "  model = M()\n"
                                 "  fn loss(x: f32[5]) -> f32[] = sum(model(x))\n"
                                 "}\n");
  EXPECT_EQ(check_with_budget(path, 10), "");
  script::LoadOptions options;
  const auto program = script::Program::load(path, options);
  const Tensor loss = program->call("train.loss", {ones({5}, DType::f32)}).at(0);
  EXPECT_EQ(loss.item(), 40.0);  // 5 · (1 · 3 + 5)
}

TEST(LoadOptions, ALoopWithinTheBudgetLoadsAndTraces) {
  const auto path = write_script("ein_load_options_within.ein", kScript);
  EXPECT_EQ(check_with_budget(path, 6), "");
  EXPECT_EQ(check_with_budget(path, 10'000), "");
  EXPECT_EQ(check_with_budget(path, 1'000'000), "");  // counts as limits::kMaxLoopIterations
}

TEST(LoadOptions, ALoopOverTheBudgetIsAUserErrorAtTheLoop) {
  const auto path = write_script("ein_load_options_over.ein", kScript);
  // Five: the comprehension, known to run six times, fails before its first iteration.
  const std::string loading = check_with_budget(path, 5);
  EXPECT_NE(loading.find(":2:"), std::string::npos) << loading;
  EXPECT_NE(loading.find("this loop would run 6 times"), std::string::npos) << loading;
  EXPECT_NE(loading.find("at most 5 iterations in all"), std::string::npos) << loading;
  // Zero: no loop may run at all.
  EXPECT_NE(check_with_budget(path, 0).find("at most 0 iterations"), std::string::npos);
  EXPECT_NE(check_with_budget(path, -3).find("at most 0 iterations"), std::string::npos);
}

// The budget is per trace: the loading's iterations do not count against a function's.
TEST(LoadOptions, TheBudgetIsPerTrace) {
  const auto path = write_script("ein_load_options_trace.ein",
                                 "fn deep(x: f32[4]) -> f32[4] {\n"
                                 "  y = x\n"
                                 "  for i in 0..3 { y = y * 2 + x }\n"
                                 "  for i in 0..3 { y = y - x }\n"
                                 "  return y\n"
                                 "}\n");
  EXPECT_EQ(check_with_budget(path, 6), "");
  const std::string tracing = check_with_budget(path, 5);
  EXPECT_NE(tracing.find(":4:"), std::string::npos) << tracing;
  EXPECT_NE(tracing.find("at most 5 iterations in all (3 already run)"), std::string::npos)
      << tracing;
}

}  // namespace
}  // namespace ein
