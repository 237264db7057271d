// The standard functions two ways: ein::nn's hand-written row kernels (exec/fused_ops.h)
// and the fusion pass applied to the unfused graphs of compiler/graph/stdlib_graphs.h. Both follow
// PyTorch's definitions, so they must agree on fresh random inputs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ein/nn.h>

#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/graph/stdlib_graphs.h"
#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

using testing::Layout;

Tensor fused(const Graph& g, const std::vector<Tensor>& inputs) {
  return execute(fuse(g), inputs).front();
}

void expect_agree(const Tensor& got, const Tensor& want, int64_t terms, const std::string& what) {
  // Both in f32, each within f32 rounding of the exact value over `terms` terms.
  testing::expect_close(got, testing::to_array(want), testing::tolerance_for(DType::f32, terms),
                        what);
}

TEST(FuseAgreesWithNn, StandardFunctions) {
  const Shape s{9, 37};
  const Tensor x = testing::random_tensor(s, DType::f32, 1, Layout::strided);
  const Tensor y = testing::random_tensor(s, DType::f32, 2, Layout::contiguous);
  const Tensor w = testing::random_tensor({37}, DType::f32, 3, Layout::contiguous);
  const Tensor b = testing::random_tensor({37}, DType::f32, 4, Layout::contiguous);
  std::vector<int64_t> t;
  for (int64_t i = 0; i < 9; ++i)
    t.push_back((i * 5) % 37);
  const Tensor target = from_data<int64_t>(t, {9});
  expect_agree(fused(softmax_graph(s), {x}), nn::softmax(x), 37, "softmax");
  expect_agree(fused(log_softmax_graph(s), {x}), nn::log_softmax(x), 37, "log_softmax");
  expect_agree(fused(layer_norm_graph(s), {x, w, b}), nn::layer_norm(x, w, b), 37, "layer_norm");
  expect_agree(fused(rms_norm_graph(s), {x, w}), nn::rms_norm(x, w), 37, "rms_norm");
  expect_agree(fused(cross_entropy_graph(s), {x, target}), nn::cross_entropy(x, target), 9 * 37,
               "cross_entropy");
  expect_agree(fused(mse_loss_graph(s), {x, y}), nn::mse_loss(x, y), 9 * 37, "mse_loss");
}

}  // namespace
}  // namespace ein
