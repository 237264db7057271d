// FLOPs of eager training code as the FlopCounter sees it run: the lecture's two-layer model
// (lecture-code-notebook.txt, gradients_flops) and op_backward_only_needed_grads, through
// requires_grad/backward. A scope around backward() counts exactly what the tape ran.
#include <gtest/gtest.h>

#include <cstdlib>

#include <ein/flop_counter.h>
#include <ein/ops.h>

#include "conformance/tsv.h"
#include <ein/autograd.h>

namespace ein {
namespace {

int64_t tsv_value(const std::string& name) {
  for (const auto& row : testing::read_tsv(testing::conformance_file("accounting_cases.tsv")))
    if (row["case"] == name) return std::strtoll(row["expected value"].c_str(), nullptr, 10);
  ADD_FAILURE() << "no row " << name;
  return -1;
}

// The notebook's CPU sizes.
constexpr int64_t B = 1024, D = 256, K = 64;

TEST(EagerFlops, LectureTwoLayerForwardAndBackward) {
  const Tensor x = ones({B, D});
  Tensor w1 = randn({D, D}, DType::f32, cpu(), 1).requires_grad_();
  Tensor w2 = randn({D, K}, DType::f32, cpu(), 2).requires_grad_();
  FlopCounter forward;
  const Tensor h1 = einsum("b d, d e -> b e", x, w1);
  const Tensor h2 = einsum("b e, e k -> b k", h1, w2);
  const Tensor loss = reduce(map("h[b k] -> h ** 2", {h2}), "b k -> ", "mean");
  // num_forward_flops = (2 * B * D * D) + (2 * B * D * K)
  EXPECT_EQ(forward.totals().matmul_flops, 2 * B * D * D + 2 * B * D * K);
  FlopCounter backward;
  loss.backward();
  // w2.grad and h1.grad: 2·B·D·K each; w1.grad: 2·B·D·D. x needs no gradient, so the
  // lecture's second 2·B·D·D (x.grad) is never computed.
  EXPECT_EQ(backward.totals().matmul_flops, 2 * B * D * K + 2 * B * D * K + 2 * B * D * D);
  EXPECT_GE(backward.totals().kernels, 3);  // at least the three GEMMs
  // The tape flags leaves that require grad (w1, w2) as weights: their gradients are
  // weight-gradient work, h1.grad is input-gradient work.
  EXPECT_EQ(backward.phase(CostPhase::weight_grad).matmul_flops, 2 * B * D * K + 2 * B * D * D);
  EXPECT_EQ(backward.phase(CostPhase::input_grad).matmul_flops, 2 * B * D * K);
  EXPECT_EQ(backward.phase(CostPhase::forward).flops, 0);
}

TEST(EagerFlops, LectureWithXGradIsSixTokensTimesParams) {
  Tensor x = ones({B, D}).requires_grad_();
  Tensor w1 = randn({D, D}, DType::f32, cpu(), 1).requires_grad_();
  Tensor w2 = randn({D, K}, DType::f32, cpu(), 2).requires_grad_();
  FlopCounter step;
  const Tensor h2 = einsum("b e, e k -> b k", einsum("b d, d e -> b e", x, w1), w2);
  reduce(map("h[b k] -> h ** 2", {h2}), "b k -> ", "mean").backward();
  EXPECT_EQ(step.totals().matmul_flops, 6 * B * (D * D + D * K));  // 6 × tokens × params
}

// op_backward_only_needed_grads: a[4,5] requires grad; a@W (W no grad); expand to [7,4,6];
// bmm with [7,6,7] (no grad); sum().backward(): 240 + 240 + 2352 + 2352.
TEST(EagerFlops, AccountingRowOnlyNeededGrads) {
  Tensor a = randn({4, 5}, DType::f32, cpu(), 1).requires_grad_();
  const Tensor w = randn({5, 6}, DType::f32, cpu(), 2), c = randn({7, 6, 7}, DType::f32, cpu(), 3);
  FlopCounter counter;
  const Tensor e = repeat(einsum("i j, j k -> i k", a, w), "i k -> n i k", {{"n", 7}});
  reduce(einsum("n i k, n k j -> n i j", e, c), "n i j -> ", "sum").backward();
  EXPECT_EQ(counter.totals().matmul_flops, tsv_value("op_backward_only_needed_grads"));
}

}  // namespace
}  // namespace ein
