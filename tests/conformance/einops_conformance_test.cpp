// Table-driven conformance with einops: every row of einops_cases.tsv is resolved through
// the C++ API and must give einops' shape, or fail where einops fails. Rows where ein
// differs on purpose are listed, with reasons, in einops_differences.tsv; nothing is
// skipped silently: the summary counts every row by outcome.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <ein/patterns.h>
#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>
#include "tsv.h"

namespace ein {
namespace {

using testing::parse_ps;
using testing::parse_shapes;
using testing::read_tsv;
using testing::TsvRow;


struct Difference {
  std::string kind, op, pattern, input_shapes, kwargs, ein_expected, extra_args, reason;
  bool used = false;

  // op must match; '*' in the other key columns matches anything.
  bool matches(const TsvRow& row) const {
    const auto field = [&](const std::string& want, const char* column) {
      return want == "*" || want == row[column];
    };
    return op == row["op"] && field(pattern, "pattern") && field(input_shapes, "input_shapes") &&
           field(kwargs, "kwargs");
  }
};

std::vector<Difference> read_differences() {
  std::vector<Difference> out;
  for (const TsvRow& r : read_tsv(std::string(EIN_CONFORMANCE_DIR) + "/../einops_differences.tsv"))
    out.push_back({r["kind"], r["op"], r["pattern"], r["input_shapes"], r["kwargs"],
                   r["ein_expected"], r["extra_args"], r["reason"]});
  return out;
}

// Resolves one row; returns ein's result text or "ERROR".
std::string run_row(const TsvRow& row, const std::string& extra_args) {
  std::string op = row["op"];
  ResolveRequest req;
  if (const size_t b = op.find('['); b != std::string::npos) {
    std::string red = op.substr(b + 1, op.size() - b - 2);
    if (red.rfind("callable ", 0) == 0) red = red.substr(9);  // einops callable → named reduction
    op = op.substr(0, b);
    if (auto r = parse_reduction(red))
      req.reduction = *r;
    else
      return "ERROR";  // unknown reduction: ein rejects it like einops
  }
  if (op.ends_with("_list")) {
    op = op.substr(0, op.size() - 5);
    req.list_input = true;
  }
  req.shapes = parse_shapes(row["input_shapes"]);
  const std::string& kw = row["kwargs"];
  if (kw.rfind("ps=", 0) == 0) {
    req.packed = parse_ps(kw.substr(3));
  } else if (kw != "-") {
    size_t p = 0;
    while (p < kw.size()) {
      size_t q = kw.find(',', p);
      if (q == std::string::npos) q = kw.size();
      const std::string item = kw.substr(p, q - p);
      const size_t eq = item.find('=');
      req.sizes.push_back({item.substr(0, eq), std::stoll(item.substr(eq + 1))});
      p = q + 1;
    }
  }
  if (extra_args == "--dtype i64") req.dtype = DType::i64;
  try {
    const Pattern pattern = parse_pattern(row["pattern"]);
    if (op == "parse_expression") return "OK composition=" + parse_expression(pattern);
    const auto pop = parse_pattern_op(op);
    if (!pop) throw std::runtime_error("unknown op in TSV: " + op);
    req.op = *pop;
    return format_result(resolve_pattern(pattern, req));
  } catch (const UserError& e) {
    // Every error must point somewhere or be an unlocated argument error.
    EXPECT_TRUE(std::string(e.what()).find("error: ") != std::string::npos) << e.what();
    return "ERROR";
  }
}

// Both tables: the public einops_cases.tsv and ein's own einops-generated held-back rows.
TEST(EinopsConformance, EveryRow) {
  auto differences = read_differences();
  std::vector<std::pair<std::string, TsvRow>> rows;
  for (const std::string& path :
       {testing::conformance_file("einops_cases.tsv"),
        std::string(EIN_CONFORMANCE_DIR) + "/../../cli/held_back_cases.tsv"})
    for (TsvRow& row : read_tsv(path))
      rows.emplace_back(path.substr(path.rfind('/') + 1), std::move(row));
  int same = 0, extension = 0, input = 0, deferred = 0, failed = 0;
  for (const auto& [file, row] : rows) {
    const std::string op = row["op"];
    Difference* diff = nullptr;
    for (Difference& d : differences)
      if (!diff && d.matches(row)) diff = &d;
    if (diff) diff->used = true;
    if (diff && diff->kind == "deferred") {
      ++deferred;
      continue;
    }
    const std::string got = run_row(row, diff ? diff->extra_args : "-");
    std::string expected = row["expected"];
    if (diff && (diff->kind == "extension" || diff->kind == "einops_bug")) {
      EXPECT_NE(expected, diff->ein_expected)
          << file << ":" << row.line << ": listed as " << diff->kind << " but einops agrees";
      expected = diff->ein_expected;
    }
    if (got == expected) {
      diff ? (diff->kind == "input" ? ++input : ++extension) : ++same;
    } else {
      ++failed;
      ADD_FAILURE() << file << ":" << row.line << ": " << op << " '" << row["pattern"] << "' "
                    << row["input_shapes"] << " " << row["kwargs"] << "\n  expected: " << expected
                    << "\n  ein:      " << got;
    }
  }
  for (const Difference& d : differences)
    EXPECT_TRUE(d.used) << "difference matches no row: " << d.op << " " << d.pattern;
  std::cout << fmt::format(
      "einops conformance: {} rows: {} as einops, {} extensions or einops bugs, {} with supplied "
      "inputs, "
      "{} deferred (einmix), {} failed\n",
      rows.size(), same, extension, input, deferred, failed);
  EXPECT_EQ(failed, 0);
  EXPECT_GT(same, 500);  // the tables hold ~565 rows; a reader bug must not pass quietly
}

}  // namespace
}  // namespace ein
