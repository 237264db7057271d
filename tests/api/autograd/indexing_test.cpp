// gather (embedding lookup) and scatter_add: values, gradients against finite differences,
// repeated indices, layouts, and out-of-range errors.
#include <gtest/gtest.h>

#include <ein/ops.h>

#include "compiler/autodiff/autodiff.h"
#include "api/autograd/gradcheck.h"

namespace ein::testing {
namespace {

TEST(Indexing, GatherPicksRows) {
  const Tensor table = arange(0, 12, 1, DType::f32).view({4, 3});
  const Tensor idx = from_data<int64_t>({3, 0, 3, -1}, {2, 2});
  const Tensor out = gather(table, idx);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(out.to_vector<double>(),
            (std::vector<double>{9, 10, 11, 0, 1, 2, 9, 10, 11, 9, 10, 11}));
  // A transposed table and i32 indices.
  const Tensor t =
      arange(0, 6, 1, DType::f64).view({2, 3}).transpose(0, 1);  // rows (0 3) (1 4) (2 5)
  EXPECT_EQ(gather(t, from_data<int32_t>({2, 1}, {2})).to_vector<double>(),
            (std::vector<double>{2, 5, 1, 4}));
}

TEST(Indexing, ScatterAddSumsRepeatedRows) {
  const Tensor v = ones({3, 2}, DType::f32);
  const Tensor out = scatter_add(v, from_data<int64_t>({1, 1, 3}, {3}), 4);
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{0, 0, 2, 2, 0, 0, 1, 1}));
}

TEST(Indexing, Gradients) {
  const Tensor idx = from_data<int64_t>({2, 0, 2, 1, 2, 4}, {2, 3});
  gradcheck("gather", [&](const std::vector<Tensor>& in) { return gather(in[0], idx); },
            {randn({5, 3}, DType::f64, cpu(), 1)});
  gradcheck("scatter_add",
            [&](const std::vector<Tensor>& in) { return scatter_add(in[0], idx, 6); },
            {randn({2, 3, 4}, DType::f64, cpu(), 2)});
  // The embedding's gradient sums the rows that were looked up repeatedly.
  Tensor table = zeros({3, 2}, DType::f32).requires_grad_();
  reduce(gather(table, from_data<int64_t>({2, 2, 0}, {3})), "n d -> ", "sum").backward();
  EXPECT_EQ(table.grad().to_vector<double>(), (std::vector<double>{1, 1, 0, 0, 2, 2}));
}

TEST(Indexing, GraphOpsAreEachOthersVjp) {
  // gather(table (5 3), idx (4)): the backward graph's gradient is a scatter_add node.
  Graph g;
  g.add({GraphOp::input, {}, {5, 3}, DType::f32, InputAttr{0}, "", nullptr, {}});
  g.add({GraphOp::input, {}, {4}, DType::i64, InputAttr{1}, "", nullptr, {}});
  g.outputs.push_back(g.add({GraphOp::gather, {0, 1}, {4, 3}, DType::f32, {}, "", nullptr, {}}));
  const Backward b = differentiate(g, {true, true});  // the integer indices get no gradient
  ASSERT_EQ(b.wrt, (std::vector<int>{0}));
  const GraphNode& grad = b.graph.nodes[b.graph.outputs[0]];
  EXPECT_EQ(grad.op, GraphOp::scatter_add);
  EXPECT_EQ(grad.shape, (Shape{5, 3}));
}

TEST(Indexing, ClearErrors) {
  const Tensor table = zeros({4, 2});
  try {
    gather(table, from_data<int64_t>({0, 4}, {2}));
    FAIL() << "an out-of-range index must throw";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("index 4 at flat position 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(gather(table, zeros({2})), RuntimeError);  // float indices
  EXPECT_THROW(scatter_add(ones({3, 2}), from_data<int64_t>({0, 1}, {2}), 4), RuntimeError);
  EXPECT_EQ(gather(table, from_data<int64_t>({}, {0})).shape(), (Shape{0, 2}));
}

}  // namespace
}  // namespace ein::testing
