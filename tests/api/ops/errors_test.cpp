// Call-time mistakes on the ops: each is an exception with a useful message, never an abort.
// Pattern and map mistakes are ein::UserError rendered as a diagnostic: "pattern:1:COL: error:"
// (or "map:1:COL:"), the source line, and a caret line under the offending text; mistakes about
// tensors (dtype, device, undefined) are UserErrors too, underlining the input's side of the
// pattern; other API misuse is ein::RuntimeError naming the rule; an allocation that
// cannot be had is ein::OutOfMemoryError carrying the bytes requested.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include "api/ops/ops_test_support.h"

namespace ein::testing {
namespace {

Tensor f32(const Shape& shape, uint64_t seed = 1) {
  return random_tensor(shape, DType::f32, seed, Layout::contiguous);
}

/// The caret line of a rendered diagnostic: a line of spaces, then '^' and '~'s.
bool has_caret_line(const std::string& what) {
  size_t start = 0;
  while (start < what.size()) {
    size_t end = what.find('\n', start);
    if (end == std::string::npos) end = what.size();
    const std::string line = what.substr(start, end - start);
    const size_t caret = line.find('^');
    if (caret != std::string::npos && line.find_first_not_of(' ') == caret &&
        line.find_first_not_of("~", caret + 1) == std::string::npos)
      return true;
    start = end + 1;
  }
  return false;
}

/// Expects `call` to throw a UserError whose rendering starts at `where` ("pattern:1:" or
/// "map:1:"), has a caret line, and contains every string of `contains`. Returns the text.
std::string expect_user_error(const std::function<void()>& call, const std::string& where,
                              const std::vector<std::string>& contains,
                              const std::string& context) {
  try {
    call();
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(where, 0), 0u)
        << context << ": diagnostic does not start with '" << where << "':\n"
        << what;
    EXPECT_TRUE(has_caret_line(what)) << context << ": no caret line:\n" << what;
    for (const std::string& s : contains)
      EXPECT_NE(what.find(s), std::string::npos) << context << ": no '" << s << "' in:\n" << what;
    return what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": expected UserError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << context << ": expected UserError, nothing was thrown";
  return {};
}

/// Expects `call` to throw an ein::RuntimeError containing every string of `contains`.
void expect_runtime_error(const std::function<void()>& call,
                          const std::vector<std::string>& contains, const std::string& context) {
  try {
    call();
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    for (const std::string& s : contains)
      EXPECT_NE(what.find(s), std::string::npos) << context << ": no '" << s << "' in: " << what;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": expected RuntimeError, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << context << ": expected RuntimeError, nothing was thrown";
}

TEST(OpErrors, PatternMistakesAtCallTimeHaveACaret) {
  const Tensor x = f32({2, 10});
  expect_user_error([&] { (void)rearrange(x, "a b c -> c b a"); }, "pattern:1:", {"error:"},
                    "rearrange: 3 axes for a rank-2 tensor");
  expect_user_error(
      [&] {
        (void)rearrange(x, "a (b c) -> a b c", {{"b", 3}});
      },
      "pattern:1:", {"10"}, "rearrange: 3 does not divide 10");
  expect_user_error(
      [&] {
        (void)rearrange(x, "a b -> b a", {{"a", 3}});
      },
      "pattern:1:", {"3", "2"}, "rearrange: sizes kwarg a=3 against a dim of 2");
  expect_user_error(
      [&] {
        (void)rearrange(x, "a b -> b a", {{"z", 3}});
      },
      "pattern:1:", {"z"}, "rearrange: sizes kwarg for an axis not in the pattern");
  expect_user_error([&] { (void)reduce(x, "a b c -> a", "sum"); }, "pattern:1:", {},
                    "reduce: wrong rank");
  expect_user_error([&] { (void)reduce(x, "a b -> a", "var"); },
                    "pattern:1:", {"needs an explicit ddof"}, "reduce: var without ddof");
  expect_user_error([&] { (void)reduce(x, "a b -> b", "std", {}, 2); }, "pattern:1:", {"ddof=2"},
                    "reduce: ddof as large as the count");
  expect_user_error([&] { (void)repeat(x, "a b -> a b r"); }, "pattern:1:", {"r"},
                    "repeat: new axis without a size");
  expect_user_error([&] { (void)einsum("a b, b c -> a c", {x}); }, "pattern:1:", {},
                    "einsum: 2 operands in the pattern, 1 given");
  expect_user_error(
      [&] {
        (void)einsum("a b -> a", {x, x});
      },
      "pattern:1:", {}, "einsum: 1 operand in the pattern, 2 given");
  expect_user_error(
      [&] {
        (void)einsum("a b, b c -> a c", {x, f32({7, 3})});
      },
      "pattern:1:", {"10", "7"}, "einsum: b is 10 and 7");
  expect_user_error(
      [&] {
        (void)pack({x, f32({3})}, "a *");
      },
      "pattern:1:", {}, "pack: a is 2 and 3");
  expect_user_error(
      [&] {
        (void)unpack(x, {{3}, {4}}, "a *");
      },
      "pattern:1:", {}, "unpack: 3 + 4 != 10");
  // A bad pattern given to compile() fails at once, not at the first call.
  expect_user_error([] { (void)compile("a b -> (a"); }, "pattern:1:", {}, "compile: syntax");
  // A compiled op checks its shapes per call.
  const Op split = compile("b (h d) -> b h d", {{"h", 3}});
  expect_user_error([&] { (void)split(x); }, "pattern:1:", {"10"}, "compiled op: 3 into 10");
}

TEST(OpErrors, MapMistakesHaveACaret) {
  const Tensor x = f32({2, 3}), y = f32({3}), z = f32({4});
  expect_user_error([&] { (void)map("x[a b], y[b] -> x + y", {x}); },
                    "map:1:", {"2 inputs", "1 tensors"}, "map: too few tensors");
  expect_user_error(
      [&] {
        (void)map("x[a b] -> x", {x, y});
      },
      "map:1:", {"1 inputs", "2"}, "map: too many tensors");
  expect_user_error(
      [&] {
        (void)map("x[a b], y[b] -> x + y", {y, y});
      },
      "map:1:", {"'x'", "2 axes", "[3]"}, "map: wrong rank");
  const std::string what = expect_user_error(
      [&] {
        (void)map("x[a b], y[b] -> x * y", {x, z});
      },
      "map:1:", {"axis 'b' has length 4 here but 3 earlier"}, "map: conflicting sizes");
  // The note points back at where b was bound to 3 (x's b, column 5).
  EXPECT_NE(what.find("note"), std::string::npos) << what;
  EXPECT_NE(what.find("'b' bound to 3 here"), std::string::npos) << what;
  EXPECT_NE(what.find("map:1:5:"), std::string::npos) << what;
  expect_user_error([&] { (void)map("x[a] -> foo(x)", {y}); },
                    "map:1:", {"unknown function 'foo'", "tanh"}, "map: unknown function");
  expect_user_error([&] { (void)map("x[a] -> tanh(x, x)", {y}); },
                    "map:1:", {"tanh() takes 1 argument, got 2"}, "map: wrong arity");
  expect_user_error([&] { (void)map("x[a] -> x + w", {y}); }, "map:1:", {"unknown input 'w'"},
                    "map: unknown input");
  expect_user_error([&] { (void)map("x[a] -> x ^ 2", {y}); }, "map:1:", {"**"},
                    "map: ^ is not a power");
  expect_user_error(
      [&] {
        (void)map("x[a], y[a] -> x < y < x", {y, y});
      },
      "map:1:", {"do not chain"}, "map: chained comparison");
  // The same program run again after an error still works (the cache holds no broken state).
  EXPECT_NO_THROW((void)map("x[a b], y[b] -> x * y", {x, y}));
}

TEST(OpErrors, DtypeMistakesAreClear) {
  const Tensor i = on_test_device(from_data<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}));
  expect_user_error([&] { (void)reduce(i, "a b -> a", "mean"); },
                    "pattern:1:", {"mean needs a floating-point tensor", "i32"}, "mean on i32");
  expect_user_error([&] { (void)reduce(i, "a b -> a", "std", {}, 0); },
                    "pattern:1:", {"std needs a floating-point tensor"}, "std on i32");
  expect_user_error(
      [&] {
        (void)reduce(f32({2, 3}), "a b -> a", "median");
      },
      "reduction:1:1:", {"unknown reduction 'median'", "logsumexp"}, "unknown reduction");
  expect_user_error(
      [&] {
        (void)pack({f32({2, 3}), i}, "a *");
      },
      "pattern:1:", {"one dtype", "f32", "i32"}, "pack with mixed dtypes");
  expect_user_error(
      [&] {
        (void)rearrange({f32({2, 3}), i}, "n a b -> a n b");
      },
      "pattern:1:", {"f32", "i32"}, "a list with mixed dtypes");
  expect_user_error(
      [&] {
        (void)einsum("a b, b c -> a c", f32({2, 3}), f32({3, 4}).to(DType::f64));
      },
      "pattern:1:", {"input 1 is f64", "input 0 is f32"}, "einsum with mixed dtypes");
  // A list of different shapes cannot be stacked: sema says so, with a caret on the pattern.
  expect_user_error(
      [&] {
        (void)rearrange({f32({2, 3}), f32({3, 2})}, "n a b -> a n b");
      },
      "pattern:1:", {"(2,3)", "(3,2)"}, "a list with mixed shapes");
}

TEST(OpErrors, UndefinedTensorsAreRejected) {
  const Tensor undefined;
  expect_user_error([&] { (void)rearrange(undefined, "a -> a"); }, "pattern:1:", {"undefined"},
                    "rearrange");
  expect_user_error([&] { (void)reduce(undefined, "a -> ", "sum"); }, "pattern:1:", {"undefined"},
                    "reduce");
  expect_user_error(
      [&] {
        (void)repeat(undefined, "a -> a r", {{"r", 2}});
      },
      "pattern:1:", {"undefined"}, "repeat");
  expect_user_error([&] { (void)pack({undefined}, "*"); }, "pattern:1:", {"undefined"}, "pack");
  EXPECT_ANY_THROW((void)einsum("a, a -> ", {undefined, undefined}));
  expect_user_error([&] { (void)map("x[a] -> x", {undefined}); }, "map:1:", {"undefined"},
                    "map of an undefined tensor");
}


TEST(OpErrors, DeviceMistakesAreClear) {
  const bool had_cuda = has_backend(DeviceKind::cuda);
  if (!had_cuda) {
    // Without a backend, making a CUDA tensor at all is the clear error.
    expect_runtime_error(
        [] {
          (void)empty({2, 3}, DType::f32, cuda());
        },
        {"CUDA backend is not available", "ein::cpu()"}, "empty on cuda");
    // Host memory posing as a GPU (the CPU's backend), so tensors report a CUDA device.
    static const auto fake = detail::make_cpu_backend();  // outlives its tensors
    register_backend(DeviceKind::cuda, fake);
  }
  {
    const Tensor g = f32({2, 3}).to(cuda());
    ASSERT_EQ(g.device().kind, DeviceKind::cuda);
    const Tensor c = f32({2, 3}).to(cpu());
    // Ops run where their inputs are (tests/exec/device_execution_test.cpp); inputs on two
    // devices are refused, at the input that differs, with the fix.
    expect_user_error([&] { (void)einsum("a b, b c -> a c", {c, g.transpose(0, 1)}); },
                      "pattern:1:", {"cuda:0", "cpu", "one device"}, "einsum across devices");
    expect_user_error([&] { (void)rearrange({c, g}, "n a b -> n b a"); }, "pattern:1:",
                      {"input 1 is on cuda:0", "one device"}, "a list across devices");
    expect_user_error([&] { (void)map("x[a b], y[a b] -> x + y", {c, g}); }, "map:1:",
                      {"'y' is on cuda:0", "one device"}, "map across devices");
  }
  if (!had_cuda) register_backend(DeviceKind::cuda, nullptr);
}

TEST(OpErrors, AbsurdAllocationsThrowOutOfMemory) {
  // 2^40 * 2^30 elements: the byte count overflows int64 and is reported saturated.
  try {
    (void)empty({int64_t{1} << 40, int64_t{1} << 30});
    ADD_FAILURE() << "an allocation of 2^72 bytes succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.bytes_requested(), std::numeric_limits<int64_t>::max());
    EXPECT_NE(std::string(e.what()).find(std::to_string(e.bytes_requested()) + " bytes"),
              std::string::npos)
        << e.what();
  }
  // 2^48 f32 elements = 2^50 bytes (1 PiB): representable, and beyond any address space.
  const int64_t bytes = int64_t{1} << 50;
  try {
    (void)empty({int64_t{1} << 24, int64_t{1} << 24}, DType::f32);
    ADD_FAILURE() << "an allocation of 1 PiB succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.bytes_requested(), bytes);
    EXPECT_NE(std::string(e.what()).find(std::to_string(bytes) + " bytes"), std::string::npos)
        << e.what();
  }
  // An op whose result cannot be allocated: the same error, from inside the op.
  try {
    (void)repeat(f32({4}), "a -> (a r)", {{"r", int64_t{1} << 48}});
    ADD_FAILURE() << "a repeat to 2^50 elements succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ein::testing
