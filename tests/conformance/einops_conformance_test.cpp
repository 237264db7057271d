// Table-driven conformance with einops: every row of einops_cases.tsv is resolved through
// the C++ API and must give einops' shape, or fail where einops fails. Rows where ein
// differs on purpose are listed, with reasons, in einops_differences.tsv; nothing is
// skipped silently: the summary counts every row by outcome.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

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

// The rows' kwargs, `key=value` split at commas (no value holds one).
std::vector<std::pair<std::string, std::string>> keywords(const std::string& kw) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t p = 0; p < kw.size();) {
    const size_t q = std::min(kw.find(',', p), kw.size());
    const std::string item = kw.substr(p, q - p);
    const size_t eq = item.find('=');
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    p = q + 1;
  }
  return out;
}

// An einmix row's weight or bias axes: quoted with spaces ('c_in c_out'), or bare; the einmix
// (not _init) rows join the names with '_' (c_in_c_out), split here at the sizes' names.
std::string einmix_axes(std::string value, const std::vector<AxisSize>& sizes) {
  if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'')
    return value.substr(1, value.size() - 2);
  if (value.find(' ') != std::string::npos) return value;
  std::string out;
  while (!value.empty()) {
    size_t longest = 0;
    for (const AxisSize& s : sizes)
      if (s.name.size() > longest && value.starts_with(s.name) &&
          (value.size() == s.name.size() || value[s.name.size()] == '_'))
        longest = s.name.size();
    if (longest == 0) return out + (out.empty() ? "" : " ") + value;  // not a size: as written
    out += (out.empty() ? "" : " ") + value.substr(0, longest);
    value.erase(0, std::min(longest + 1, value.size()));
  }
  return out;
}

// A shape in Python's tuple notation, as einops' rows print it: (12, 13), (16,), ().
std::string python_tuple(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

// ein's einsum in einops' EinMix notation: each axis a letter, assigned in sorted name order;
// '...' stays ("b c_in, c_in c_out -> b c_out" is "ab,bc->ac").
std::string einops_letters(const std::string& einsum) {
  std::vector<std::string> sides;
  std::string rest = einsum;
  const size_t arrow = rest.find(" -> ");
  const std::string output = rest.substr(arrow + 4);
  rest = rest.substr(0, arrow);
  const size_t comma = rest.find(',');
  sides = {rest.substr(0, comma), rest.substr(comma + 1), output};
  std::vector<std::string> names;
  const auto split = [](const std::string& side) {
    std::vector<std::string> out;
    std::istringstream in(side);
    for (std::string name; in >> name;)
      out.push_back(name);
    return out;
  };
  for (const std::string& side : sides)
    for (const std::string& name : split(side))
      if (name != "...") names.push_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::string> lettered;
  for (const std::string& side : sides) {
    std::string out;
    for (const std::string& name : split(side))
      out += name == "..."
                 ? "..."
                 : std::string(
                       1, static_cast<char>(
                              'a' + (std::find(names.begin(), names.end(), name) - names.begin())));
    lettered.push_back(out);
  }
  return fmt::format("{},{}->{}", lettered[0], lettered[1], lettered[2]);
}

// An einmix (output shape) or einmix_init (the layer's plan, in einops' notation) row.
std::string run_einmix_row(const TsvRow& row) {
  EinMixRequest req;
  req.pattern = row["pattern"];
  std::string weight, bias = "None";
  for (const auto& [key, value] : keywords(row["kwargs"])) {
    if (key == "weight_shape")
      weight = value;
    else if (key == "bias_shape")
      bias = value;
    else
      req.sizes.push_back({key, std::stoll(value)});
  }
  req.weight = einmix_axes(weight, req.sizes);
  if (bias != "None") req.bias = einmix_axes(bias, req.sizes);
  if (row["op"] == "einmix") req.input = parse_shapes(row["input_shapes"]).at(0);
  try {
    const EinMixPlan plan = resolve_einmix(req);
    if (plan.output) return format_shape(*plan.output);
    const auto quoted = [](const std::optional<std::string>& s) {
      return s ? "'" + *s + "'" : std::string("None");
    };
    return fmt::format("einsum={} weight={} bias={} pre={} post={}", einops_letters(plan.einsum),
                       python_tuple(plan.weight_shape),
                       plan.bias_shape ? python_tuple(*plan.bias_shape) : "None", quoted(plan.pre),
                       quoted(plan.post));
  } catch (const UserError& e) {
    EXPECT_TRUE(std::string(e.what()).find("error: ") != std::string::npos) << e.what();
    return "ERROR";
  }
}

// Resolves one row; returns ein's result text or "ERROR".
std::string run_row(const TsvRow& row, const std::string& extra_args) {
  std::string op = row["op"];
  if (op == "einmix" || op == "einmix_init") return run_einmix_row(row);
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
  int same = 0, extension = 0, input = 0, deferred = 0, failed = 0, einmix = 0;
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
      einmix += op.starts_with("einmix");
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
      "{} deferred, {} failed; {} of them EinMix layers\n",
      rows.size(), same, extension, input, deferred, failed, einmix);
  EXPECT_EQ(failed, 0);
  EXPECT_GT(same, 500);  // the tables hold ~565 rows; a reader bug must not pass quietly
  EXPECT_EQ(einmix, 18);  // every EinMix row of einops_cases.tsv, none deferred
}

}  // namespace
}  // namespace ein
