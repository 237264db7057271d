// Every accepted einops conformance row of rearrange, repeat, reduce and einsum, lowered to
// Graph IR, fused and run: the fused graph must give the unfused graph's values on random
// strided and column-major inputs (views fold into the kernels' affine reads, reductions over
// any dims become one kernel, contractions stay BLAS calls).
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/lower_patterns.h"
#include "conformance/tsv.h"
#include <ein/pattern_parser.h>
#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

using testing::Layout;

std::vector<AxisSize> sizes_of(const std::string& kw) {
  std::vector<AxisSize> out;
  if (kw == "-") return out;
  size_t p = 0;
  while (p < kw.size()) {
    size_t q = kw.find(',', p);
    if (q == std::string::npos) q = kw.size();
    const std::string item = kw.substr(p, q - p);
    const size_t eq = item.find('=');
    out.push_back({item.substr(0, eq), std::stoll(item.substr(eq + 1))});
    p = q + 1;
  }
  return out;
}

/// The graph of a row, or nullopt for ops and reductions this test does not cover.
std::optional<Graph> graph_of(const testing::TsvRow& row) {
  std::string op = row["op"];
  ResolveRequest req;
  if (op.ends_with("_list")) {
    req.list_input = true;
    op = op.substr(0, op.size() - 5);
  }
  if (op == "rearrange")
    req.op = PatternOp::rearrange;
  else if (op == "repeat")
    req.op = PatternOp::repeat;
  else if (op == "einsum")
    req.op = PatternOp::einsum;
  else if (op.rfind("reduce[", 0) == 0) {
    const auto r = parse_reduction(op.substr(7, op.size() - 8));
    if (!r || *r == Reduction::var || *r == Reduction::std) return std::nullopt;
    req.op = PatternOp::reduce;
    req.reduction = *r;
  } else {
    return std::nullopt;
  }
  std::vector<TensorType> types;
  for (const auto& s : testing::parse_shapes(row["input_shapes"])) {
    req.shapes.push_back(s);
    types.push_back({s, DType::f32});
  }
  req.sizes = sizes_of(row["kwargs"]);
  try {
    const Recipe recipe = resolve_pattern(parse_pattern(row["pattern"]), req);
    return lower_pattern(recipe, types, {}, 0, row["pattern"]);
  } catch (const std::exception&) {
    return std::nullopt;  // rows ein rejects on purpose (einops_differences.tsv)
  }
}

TEST(FuseConformance, EveryEinopsRowFusedEqualsUnfused) {
  int run = 0;
  uint64_t seed = 5;
  for (const testing::TsvRow& row :
       testing::read_tsv(testing::conformance_file("einops_cases.tsv"))) {
    if (row["expected"] == "ERROR") continue;
    const std::optional<Graph> g = graph_of(row);
    if (!g) continue;
    const Graph fused = fuse(*g);
    for (Layout layout : {Layout::strided, Layout::column_major}) {
      std::vector<Tensor> xs;
      for (const GraphNode& n : g->nodes)
        if (n.op == GraphOp::input)
          xs.push_back(testing::random_tensor(n.shape, n.dtype, ++seed, layout));
      const std::string context =
          fmt::format("line {}: {} '{}' {} ({})\n{}", row.line, row["op"], row["pattern"],
                      row["input_shapes"], testing::layout_name(layout), fusion_report(*g, fused));
      try {
        const std::vector<Tensor> want = execute(*g, xs), got = execute(fused, xs);
        ASSERT_EQ(got.size(), want.size()) << context;
        // Saturates: the product of every input's size overflows int64 on the big rows.
        int64_t terms = 1;
        for (const Tensor& x : xs)
          terms = x.numel() > std::numeric_limits<int64_t>::max() / terms
                      ? std::numeric_limits<int64_t>::max()
                      : terms * std::max<int64_t>(x.numel(), 1);
        for (size_t i = 0; i < got.size(); ++i)
          testing::expect_close(got[i], testing::to_array(want[i]),
                                testing::tolerance_for(DType::f32, terms), context);
      } catch (const std::exception& e) {
        // The unfused graph's own errors (max over nothing) are not the fusion's business.
        if (std::string(e.what()).find("zero elements") == std::string::npos)
          ADD_FAILURE() << context << ": threw " << e.what();
      }
    }
    ++run;
  }
  EXPECT_GE(run, 150);  // 163 rows of these ops when written
}

}  // namespace
}  // namespace ein
