// Which results are views: a rearrange that only permutes or splits axes, a repeat that only
// adds a new axis (stride 0), and `b s (h d) -> b h s d` share the input's storage and launch
// no kernel (kernel_launches() unchanged); a merge that the strides do not allow is one
// copy kernel into a new contiguous tensor. Values are checked against the reference too.
#include <gtest/gtest.h>

#include <string>

#include <ein/ops.h>
#include <fmt/format.h>

#include "exec/cpu_executor.h"
#include "api/ops/ops_test_support.h"

namespace ein::testing {
namespace {

/// Applies `op` and reports whether it launched kernels; checks values exactly.
struct Outcome {
  Tensor result;
  int64_t launches;
};

Outcome run_rearrange(const Tensor& x, const std::string& pattern, const Sizes& sizes = {}) {
  const int64_t before = kernel_launches();
  Tensor y = rearrange(x, pattern, sizes);
  const int64_t launched = kernel_launches() - before;
  expect_close(y, reference::rearrange(to_array(x), pattern, sizes), {0, 0}, pattern);
  return {y, launched};
}

Outcome run_repeat(const Tensor& x, const std::string& pattern, const Sizes& sizes = {}) {
  const int64_t before = kernel_launches();
  Tensor y = repeat(x, pattern, sizes);
  const int64_t launched = kernel_launches() - before;
  expect_close(y, reference::repeat(to_array(x), pattern, sizes), {0, 0}, pattern);
  return {y, launched};
}

TEST(Views, PermutesAndSplitsAreViews) {
  const Tensor x = random_tensor({2, 3, 4, 5}, DType::f32, 1, Layout::contiguous);
  for (const char* pattern : {"a b c d -> d c b a", "a b c d -> b a c d", "a b c d -> a b c d",
                              "a b c (d1 d2) -> d2 a b c d1"}) {
    const Sizes sizes =
        std::string(pattern).find("d1") != std::string::npos ? Sizes{{"d1", 5}} : Sizes{};
    const Outcome o = run_rearrange(x, pattern, sizes);
    EXPECT_TRUE(o.result.same_storage(x)) << pattern;
    EXPECT_EQ(o.launches, 0) << pattern;
  }
  // Views of views: a permuted (non-contiguous) input permuted again stays a view.
  const Tensor t = x.permute({3, 1, 0, 2});
  const Outcome o = run_rearrange(t, "a b c d -> c a d b");
  EXPECT_TRUE(o.result.same_storage(x));
  EXPECT_EQ(o.launches, 0);
}

TEST(Views, SplitHeadsIsAView) {
  // b s (h d) -> b h s d: the classic attention head split is a split plus a permute.
  for (Layout layout : {Layout::contiguous, Layout::strided}) {
    const Tensor x = random_tensor({2, 7, 24}, DType::f32, 2, layout);
    const Outcome o = run_rearrange(x, "b s (h d) -> b h s d", {{"h", 4}});
    EXPECT_TRUE(o.result.same_storage(x));
    EXPECT_EQ(o.launches, 0);
    EXPECT_EQ(o.result.shape(), (Shape{2, 4, 7, 6}));
    EXPECT_EQ(o.result.stride(1), 6 * x.stride(2));  // h steps over d
    EXPECT_EQ(o.result.stride(3), x.stride(2));
  }
}

TEST(Views, MergeOfAdjacentContiguousAxesIsAView) {
  const Tensor x = random_tensor({3, 4, 5}, DType::f64, 3, Layout::contiguous);
  const Outcome o = run_rearrange(x, "a b c -> (a b) c");
  EXPECT_TRUE(o.result.same_storage(x));
  EXPECT_EQ(o.launches, 0);
}

TEST(Views, RepeatOfANewAxisIsAStrideZeroView) {
  const Tensor x = random_tensor({3, 5}, DType::f32, 4, Layout::column_major);
  const Outcome o = run_repeat(x, "a b -> a r b", {{"r", 4}});
  EXPECT_TRUE(o.result.same_storage(x));
  EXPECT_EQ(o.launches, 0);
  EXPECT_EQ(o.result.shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(o.result.stride(1), 0);
  // A new leading axis too.
  const Outcome lead = run_repeat(x, "a b -> r a b", {{"r", 2}});
  EXPECT_TRUE(lead.result.same_storage(x));
  EXPECT_EQ(lead.launches, 0);
  EXPECT_EQ(lead.result.stride(0), 0);
}

TEST(Views, MergesThatNeedACopyAreOneKernelIntoAContiguousTensor) {
  const Tensor x = random_tensor({2, 3, 4, 5}, DType::f32, 5, Layout::contiguous);
  for (const char* pattern :
       {"b h s d -> b s (h d)", "a b c d -> (d a) b c", "a b c d -> (a b c d)"}) {
    const Tensor input =
        std::string(pattern) == "a b c d -> (a b c d)" ? x.permute({0, 2, 1, 3}) : x;
    const Outcome o = run_rearrange(input, pattern);
    EXPECT_FALSE(o.result.same_storage(x)) << pattern;
    EXPECT_TRUE(o.result.is_contiguous()) << pattern;
    EXPECT_EQ(o.launches, 1) << pattern;
  }
  // repeat that tiles an existing axis ((a r): r inside a merge) must copy.
  const Outcome tiled = run_repeat(random_tensor({3, 5}, DType::f32, 6, Layout::contiguous),
                                   "a b -> (a r) b", {{"r", 2}});
  EXPECT_TRUE(tiled.result.is_contiguous());
  EXPECT_EQ(tiled.launches, 1);
}

TEST(Views, ViewsAliasTheInput) {
  // A view shares memory: writing through the input shows in the result.
  const Tensor x = random_tensor({4, 6}, DType::f32, 7, Layout::contiguous);
  const Tensor y = rearrange(x, "a (b c) -> c a b", {{"b", 2}});
  ASSERT_TRUE(y.same_storage(x));
  x.fill_(2.5);
  for (double v : y.to_vector<double>())
    EXPECT_EQ(v, 2.5);
  // unpack returns views into the packed tensor.
  const auto [packed, ps] = pack({x, x.select(1, 0).contiguous()}, "a *");
  const auto parts = unpack(packed, ps, "a *");
  for (const Tensor& p : parts)
    EXPECT_TRUE(p.same_storage(packed));
}

}  // namespace
}  // namespace ein::testing
