// What the fusion tests on hand-built graphs share (pattern_fuse_test.cpp, fold_stores_test.cpp):
// a graph and its fused form run on the same random inputs.
#pragma once

#include <cstdint>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "api/ops/ops_test_support.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "exec/execute.h"

namespace ein::testing {

/// Executes `g` and fuse(g) on the same random inputs (in `layout`); expects equal outputs, up
/// to f32 rounding over at most `terms` terms per output.
inline void expect_fused_same(const Graph& g, Layout layout, uint64_t seed, int64_t terms = 64) {
  const Graph fused = fuse(g);
  std::vector<Tensor> xs;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) xs.push_back(random_tensor(n.shape, n.dtype, ++seed, layout));
  const std::vector<Tensor> want = execute(g, xs), got = execute(fused, xs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_close(got[i], to_array(want[i]), tolerance_for(DType::f32, terms),
                 fmt::format("output {} ({})\n{}", i, layout_name(layout), fusion_report(g, fused)));
}

}  // namespace ein::testing
