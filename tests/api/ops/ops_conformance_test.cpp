// Every einops conformance row that succeeds is run on values: ein's rearrange/reduce/repeat/
// einsum/pack/unpack against the float64 reference interpreter, in f32 and f64, on contiguous,
// strided and column-major inputs. Rows einops rejects are covered by the shape tests.
#include <gtest/gtest.h>

#include <set>

#include <ein/ops.h>

#include "exec/cpu_executor.h"

#include "conformance/tsv.h"
#include "api/ops/ops_test_support.h"

namespace ein::testing {
namespace {

Sizes parse_sizes(const std::string& kw) {
  Sizes out;
  if (kw == "-" || kw.rfind("ps=", 0) == 0) return out;
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

struct Counts {
  int run = 0, skipped_ops = 0;
};

/// Runs one row in `dtype` and `layout`; returns false when the op is not one ein computes
/// here (EinMix layers' values are tests/api/einmix_test.cpp's: they need parameters).
bool run_row(const TsvRow& row, DType dtype, Layout layout, uint64_t seed) {
  std::string op = row["op"];
  if (op == "einmix" || op == "einmix_init" || op.starts_with("parse_")) return false;
  const std::string pattern = row["pattern"];
  const auto shapes = parse_shapes(row["input_shapes"]);
  const Sizes sizes = parse_sizes(row["kwargs"]);
  const std::string context = fmt::format("line {}: {} '{}' {} {} in {} (layout {})", row.line, op,
                                          pattern, row["input_shapes"], row["kwargs"],
                                          dtype_name(dtype), static_cast<int>(layout));
  std::vector<Tensor> xs;
  std::vector<reference::Array> refs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    xs.push_back(random_tensor(shapes[i], dtype, seed + i, layout));
    refs.push_back(to_array(xs.back()));
  }
  const bool list = op.ends_with("_list");
  if (list) op = op.substr(0, op.size() - 5);
  try {
    if (op == "rearrange") {
      const Tensor got = list ? rearrange(xs, pattern, sizes) : rearrange(xs[0], pattern, sizes);
      const auto want = list ? reference::rearrange(refs, pattern, sizes)
                             : reference::rearrange(refs[0], pattern, sizes);
      expect_close(got, want, {0, 0}, context);  // a copy or a view: exact
    } else if (op == "repeat") {
      if (list) return false;
      expect_close(repeat(xs[0], pattern, sizes), reference::repeat(refs[0], pattern, sizes),
                   {0, 0}, context);
    } else if (op.rfind("reduce[", 0) == 0) {
      const std::string name = op.substr(7, op.size() - 8);
      const auto r = parse_reduction(name);
      if (!r || list) return false;  // median, callables: not einops reductions ein has
      const Tensor got = reduce(xs[0], pattern, name, sizes);
      const auto want = reference::reduce(refs[0], pattern, *r, sizes);
      int64_t terms = 1;
      for (int64_t s : shapes[0]) terms *= std::max<int64_t>(s, 1);
      expect_close(got, want, tolerance_for(dtype, terms), context);
    } else if (op == "einsum") {
      const Tensor got = einsum(pattern, xs);
      const auto want = reference::einsum(pattern, refs);
      int64_t terms = 1;
      for (const auto& s : shapes)
        for (int64_t d : s) terms *= std::max<int64_t>(d, 1);
      expect_close(got, want, tolerance_for(dtype, terms), context);
    } else if (op == "pack") {
      const auto [got, ps] = pack(xs, pattern);
      const auto [want, want_ps] = reference::pack(refs, pattern);
      EXPECT_EQ(ps, want_ps) << context;
      expect_close(got, want, {0, 0}, context);
    } else if (op == "unpack") {
      const auto ps = parse_ps(row["kwargs"].substr(3));
      const auto got = unpack(xs[0], ps, pattern);
      const auto want = reference::unpack(refs[0], ps, pattern);
      EXPECT_EQ(got.size(), want.size()) << context;
      for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
        EXPECT_TRUE(got[i].same_storage(xs[0])) << context << ": unpack must return views";
        expect_close(got[i], want[i], {0, 0}, context);
      }
    } else {
      return false;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": threw " << e.what();
  }
  return true;
}

/// Rows where ein deliberately differs from einops (tests/conformance/einops_differences.tsv),
/// keyed by op, pattern, input shapes and kwargs; the shape runners check those rows.
std::set<std::string> differing_rows() {
  std::set<std::string> keys;
  for (const TsvRow& r : read_tsv(std::string(EIN_TESTS_DIR) + "/conformance/einops_differences.tsv"))
    keys.insert(r["op"] + "|" + r["pattern"] + "|" + r["input_shapes"] + "|" + r["kwargs"]);
  return keys;
}

TEST(OpsConformance, EveryAcceptedEinopsRowOnValues) {
  Counts counts;
  const std::set<std::string> differing = differing_rows();
  std::vector<TsvRow> rows = read_tsv(conformance_file("einops_cases.tsv"));
  const auto held_back = read_tsv(std::string(EIN_TESTS_DIR) + "/cli/held_back_cases.tsv");
  rows.insert(rows.end(), held_back.begin(), held_back.end());
  uint64_t seed = 1;
  for (const TsvRow& row : rows) {
    if (row["expected"] == "ERROR") continue;
    if (differing.count(row["op"] + "|" + row["pattern"] + "|" + row["input_shapes"] + "|" +
                        row["kwargs"]))
      continue;
    bool ran = false;
    // Every layout in f32; f64 contiguous (dtype handling is dtype_test.cpp's subject). The
    // float64 oracle dominates the run time, so more variants cost much and find little.
    for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
      ran = run_row(row, DType::f32, layout, seed += 7) || ran;
    ran = run_row(row, DType::f64, Layout::contiguous, seed += 7) || ran;
    ran ? ++counts.run : ++counts.skipped_ops;
  }
  const ExecutorStats stats = executor_stats();
  std::printf("executor: %lld kernel launches, %lld kernels built\n",
              static_cast<long long>(stats.launches), static_cast<long long>(stats.kernels_built));
  std::printf(
      "ops conformance: %d rows run on values (f32 in 3 layouts, f64), %d rows of ops ein "
      "does not compute here (parse_shape, parse_expression, median; einmix: einmix_test)\n",
      counts.run, counts.skipped_ops);
  EXPECT_GE(counts.run, 300);
}

}  // namespace
}  // namespace ein::testing
