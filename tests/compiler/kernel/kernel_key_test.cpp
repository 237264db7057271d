// kernel_code_key (compiler/kernel/kernel_ir.h): the executors' memo key. Two kernels share a
// key only when they compute the same thing: every node field, buffer dtype and stride class
// is in it, and the exact sizes and strides only in the exact-layout key; parameter values
// (run-time arguments) are not.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace ein {
namespace {

/// out[i j] = x[i j] * 2 + y[j] + i + p over a 4 × 8 domain.
Kernel base_kernel() {
  Kernel k;
  k.name = "key_test";
  k.domain = {4, 8};
  const int x = k.add_buffer(DType::f32, {8, 1}), y = k.add_buffer(DType::f32, {0, 1});
  k.add_output(DType::f32, {8, 1});
  const int scaled = k.apply(ScalarOp::mul, k.load(x), k.constant(2.0));
  const int sum = k.apply(ScalarOp::add, scaled, k.load(y));
  const int plus_i = k.apply(ScalarOp::add, sum, k.index(0));
  k.body = k.result = k.apply(ScalarOp::add, plus_i, k.param(0.5));
  return k;
}

std::string key_of(const Kernel& k, bool exact) {
  std::string key;
  kernel_code_key(k, key, exact);
  return key;
}

TEST(KernelCodeKey, TellsApartWhatTheCodeDependsOn) {
  const Kernel base = base_kernel();
  ASSERT_EQ(key_of(base, false), key_of(base_kernel(), false));
  ASSERT_EQ(key_of(base, true), key_of(base_kernel(), true));
  const auto node = [](Kernel& k, ScalarOp op) -> ScalarNode& {
    for (ScalarNode& n : k.nodes)
      if (n.op == op) return n;
    throw std::logic_error("no such node");
  };
  struct Change {
    const char* what;
    std::function<void(Kernel&)> apply;
  };
  const std::vector<Change> code_changes = {
      {"an op", [&](Kernel& k) { node(k, ScalarOp::mul).op = ScalarOp::sub; }},
      {"an operand",
       [&](Kernel& k) { std::swap(node(k, ScalarOp::mul).a, node(k, ScalarOp::mul).b); }},
      {"a constant", [&](Kernel& k) { node(k, ScalarOp::constant).value = 3.0; }},
      {"the buffer a load reads", [&](Kernel& k) { node(k, ScalarOp::load).buffer = 1; }},
      {"an index's dim", [&](Kernel& k) { node(k, ScalarOp::index).dim = 1; }},
      {"a param's slot", [&](Kernel& k) { node(k, ScalarOp::param).param = 1; }},
      {"a buffer's dtype", [](Kernel& k) { k.buffers[0].dtype = DType::f16; }},
      {"a stride's class",
       [](Kernel& k) {
         k.buffers[0].strides = {16, 2};
       }},
      {"the compute type", [](Kernel& k) { k.compute = DType::f64; }},
  };
  for (const Change& c : code_changes) {
    Kernel changed = base_kernel();
    c.apply(changed);
    EXPECT_NE(key_of(changed, false), key_of(base, false)) << c.what;
    EXPECT_NE(key_of(changed, true), key_of(base, true)) << c.what;
  }
  Kernel zero = base_kernel(), negative_zero = base_kernel();
  node(zero, ScalarOp::constant).value = 0.0;
  node(negative_zero, ScalarOp::constant).value = -0.0;
  EXPECT_NE(key_of(zero, false), key_of(negative_zero, false));  // 1 / x tells them apart

  // The layout: sizes and strides of the same classes share the code, not the exact key.
  const std::vector<Change> layout_changes = {
      {"a size",
       [](Kernel& k) {
         k.domain = {5, 8};
       }},
      {"a stride",
       [](Kernel& k) {
         k.buffers[0].strides = {16, 1};
       }},
  };
  for (const Change& c : layout_changes) {
    Kernel changed = base_kernel();
    c.apply(changed);
    EXPECT_EQ(key_of(changed, false), key_of(base, false)) << c.what;
    EXPECT_NE(key_of(changed, true), key_of(base, true)) << c.what;
  }
  // A parameter's value is a run-time argument.
  Kernel other_value = base_kernel();
  other_value.params[0] = 7.0;
  EXPECT_EQ(key_of(other_value, true), key_of(base, true));
}

}  // namespace
}  // namespace ein
