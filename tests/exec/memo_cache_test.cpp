// exec/memo_cache.h: a value is built once per key; a bounded memo empties itself when an
// insert finds it full, and values callers hold stay valid after that.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "exec/memo_cache.h"

namespace ein {
namespace {

TEST(MemoCache, BuildsOncePerKey) {
  MemoCache<int> memo;
  int built = 0;
  const auto build = [&](int value) {
    return [&built, value] {
      ++built;
      return std::make_shared<const int>(value);
    };
  };
  EXPECT_EQ(*memo.get("a", build(1)), 1);
  EXPECT_EQ(*memo.get("b", build(2)), 2);
  EXPECT_EQ(*memo.get("a", build(3)), 1);  // found: not built again
  EXPECT_EQ(built, 2);
}

TEST(MemoCache, ABoundedMemoEmptiesItselfWhenFull) {
  MemoCache<std::string> memo(3);
  int built = 0;
  const auto get = [&](const std::string& key) {
    return memo.get(key, [&] {
      ++built;
      return std::make_shared<const std::string>("value of " + key);
    });
  };
  const auto held = get("k0");
  (void)get("k1");
  (void)get("k2");
  EXPECT_EQ(built, 3);
  (void)get("k1");  // still there
  EXPECT_EQ(built, 3);
  (void)get("k3");  // full: emptied, then k3 kept
  EXPECT_EQ(built, 4);
  (void)get("k3");
  EXPECT_EQ(built, 4);
  EXPECT_EQ(*get("k1"), "value of k1");  // gone with the rest: built again
  EXPECT_EQ(built, 5);
  EXPECT_EQ(*held, "value of k0");  // what a caller holds outlives its entry
}

}  // namespace
}  // namespace ein
