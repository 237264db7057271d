// The recipe cache: hits return the same recipe, every request field is part of the key,
// errors are not cached, and concurrent lookups agree.
#include <ein/pattern_cache.h>

#include <gtest/gtest.h>

#include <ein/ops.h>
#include <fmt/format.h>

#include "compiler/graph/map_program.h"

#include <functional>
#include <thread>

#include "support/resolve.h"

namespace ein {
namespace {

using testing::request;
using Op = PatternOp;

TEST(PatternCache, HitsReturnTheSameRecipe) {
  PatternCache cache;
  const auto req = request(Op::rearrange, {{2, 5, 12}}, {{"h", 3}});
  const auto a = cache.resolve("b s (h d) -> b h s d", req);
  const auto b = cache.resolve("b s (h d) -> b h s d", req);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->output_shape(), (Shape{2, 3, 5, 4}));
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.stats().hits, 0u);
}

TEST(PatternCache, EveryFieldOfTheRequestIsPartOfTheKey) {
  PatternCache cache;
  ResolveRequest base = request(Op::reduce, {{4, 6}}, {{"b", 2}});
  base.reduction = Reduction::sum;
  // The recipe for `base` with one field changed.
  const auto with = [&](const std::function<void(ResolveRequest&)>& change) {
    ResolveRequest r = base;
    change(r);
    return cache.resolve("a (b c) -> a b", r);
  };
  EXPECT_EQ(with([](auto&) {})->output_shape(), (Shape{4, 2}));
  EXPECT_EQ(with([](auto& r) { r.sizes = {{"b", 3}}; })->output_shape(), (Shape{4, 3}));
  EXPECT_EQ(with([](auto& r) { r.sizes = {{"c", 2}}; })->output_shape(), (Shape{4, 3}));
  EXPECT_EQ(with([](auto& r) { r.shapes = {{4, 8}}; })->output_shape(), (Shape{4, 2}));
  EXPECT_EQ(with([](auto& r) { r.reduction = Reduction::max; })->reduction, Reduction::max);
  EXPECT_EQ(cache.size(), 5u);
  // A different dtype may turn a result into an error: it is in the key too.
  EXPECT_NO_THROW(with([](auto& r) { r.reduction = Reduction::mean; }));
  EXPECT_THROW(with([](auto& r) {
                 r.reduction = Reduction::mean;
                 r.dtype = DType::i32;
               }),
               UserError);
}

TEST(PatternCache, ErrorsAreNotCachedAndRethrow) {
  PatternCache cache;
  const auto req = request(Op::rearrange, {{2, 12, 3}}, {{"h", 5}});
  EXPECT_THROW(cache.resolve("b (h w) c -> b h w c", req), UserError);
  EXPECT_THROW(cache.resolve("b (h w) c -> b h w c", req), UserError);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(PatternCache, ConcurrentLookupsAgree) {
  PatternCache cache;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const int64_t h = 1 + (i + t) % 4;
        const auto r =
            cache.resolve("b (h w) -> b h w", request(Op::rearrange, {{3, 12}}, {{"h", h}}));
        if (r->output_shape() != Shape{3, h, 12 / h}) ++wrong;
      }
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.stats().hits + cache.stats().misses, 2000u);
}

// Bounded: patterns made on the fly (here one per size) never grow the cache past its
// capacity, recipes handed out before it emptied stay valid, and lookups stay right after.
TEST(PatternCache, StaysWithinItsCapacity) {
  PatternCache cache;
  const auto first = cache.resolve("b n -> n b", request(Op::rearrange, {{2, 3}}));
  for (int64_t i = 1; i <= static_cast<int64_t>(PatternCache::kCapacity) + 10; ++i)
    cache.resolve("b n -> n b", request(Op::rearrange, {{2, i}}));
  EXPECT_LE(cache.size(), PatternCache::kCapacity);
  EXPECT_GT(cache.size(), 0u);
  EXPECT_EQ(first->output_shape(), (Shape{3, 2}));
  EXPECT_EQ(cache.resolve("b n -> n b", request(Op::rearrange, {{2, 3}}))->output_shape(),
            (Shape{3, 2}));
}

// The map-expression cache is bounded too, and ein::map's graphs (keyed by the text, not the
// program's address) stay right after programs are freed.
TEST(MapProgramCache, StaysWithinItsCapacityAndKeepsGraphsRight) {
  const Tensor x = from_data<float>({1, 2, 3}, {3});
  const std::vector<float> want = map("x[n] -> x * 2 + 1", {x}).to_vector<float>();
  for (size_t i = 0; i < kMapProgramCapacity + 10; ++i)
    map_program(fmt::format("x[n] -> x * {} + 1", i + 3));
  EXPECT_LE(map_program_cache_size(), kMapProgramCapacity);
  EXPECT_EQ(map("x[n] -> x * 2 + 1", {x}).to_vector<float>(), want);
  EXPECT_EQ(map("x[n] -> x * 7 + 1", {x}).to_vector<float>(), (std::vector<float>{8, 15, 22}));
}

}  // namespace
}  // namespace ein
