// `ein shape OP PATTERN SHAPE... [name=size ...]`: argument handling and output. All the
// work is sema's (compiler/pattern_sema); this file only turns text into a request.
#include "tools/shape_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include <ein/pattern_cache.h>
#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>
#include "tools/cli_errors.h"
#include "tools/shape_args.h"

namespace ein::cli {
namespace {

constexpr const char* kDescription = R"(Resolve an einops pattern against input shapes, statically.

Prints the result shape on stdout and exits 0, or prints a diagnostic that points at
the failing axis or group on stderr and exits 1.

OP is one of: rearrange reduce repeat einsum pack unpack parse_shape (and
parse_expression, which only parses one side), or einmix: einops' EinMix layer, its weight's
axes given by --weight and its bias' by --bias; without an input shape it prints the
layer's weight and bias shapes, the einsum it runs and the rearranges around it. Shapes are
written (2,3,4), (5,) or (); give several for einsum operands, pack inputs, or a list input
of rearrange/reduce/repeat (stacked first). Axis sizes are written name=size.

Examples:
  ein shape rearrange 'b s (h d) -> b h s d' '(2,5,12)' h=3       # (2,3,5,4)
  ein shape reduce 'b c (h h2) (w w2) -> b c h w' '(10,20,30,40)' h2=2 w2=2 --reduction max
  ein shape reduce 'b t d -> b d' '(2,5,8)' --reduction 'var(ddof=1)'
  ein shape repeat 'h w -> h w c' '(30,40)' c=3                   # (30,40,3)
  ein shape einsum 'b s d, d f -> b s f' '(2,5,12)' '(12,7)'      # (2,5,7)
  ein shape rearrange 'b h w c -> h (b w) c' '(3,4,5)' '(3,4,5)'  # (3,8,5)
  ein shape pack 'i j * k' '(2,3,5)' '(2,3,7,5)'                  # (2,3,8,5) ps=[();(7,)]
  ein shape unpack 'i j * k' '(2,3,8,5)' --ps '[(),(7,)]'
  ein shape parse_shape 'batch _ h w' '(2,3,5,7)'                 # {batch:2,h:5,w:7}
  ein shape rearrange 'b (h w) c -> b h w c' '(2,12,3)' h=5       # error, caret under (h w)
  ein shape einmix 'b t (h c) -> b t (h d)' '(2,5,12)' h=3 c=4 d=8 --weight 'h c d'   # (2,5,24)
  ein shape einmix 'b c_in -> b c_out' c_in=8 c_out=4 --weight 'c_in c_out' --bias c_out
)";

struct ShapeOptions {
  std::string op;
  std::string pattern;
  std::vector<std::string> args;
  std::string reduction;
  std::optional<int64_t> ddof;
  std::string ps;
  std::string dtype = "f32";
  std::optional<std::string> weight, bias;
  bool list = false;
  bool explain = false;
};

ResolveRequest build_request(const ShapeOptions& o, PatternOp op) {
  ResolveRequest req;
  req.op = op;
  for (size_t i = 0; i < o.args.size(); ++i) {
    const std::string label = fmt::format("argument {}", i + 3);
    if (is_axis_size(o.args[i]))
      req.sizes.push_back(parse_axis_size(o.args[i], label));
    else
      req.shapes.push_back(parse_shape_arg(o.args[i], label));
  }
  req.list_input =
      o.list || (req.shapes.size() > 1 && (op == PatternOp::rearrange || op == PatternOp::reduce ||
                                           op == PatternOp::repeat));
  if (!o.reduction.empty()) {
    if (op != PatternOp::reduce) throw UserError("--reduction applies to reduce only");
    const ReductionArg r = parse_reduction_arg(o.reduction);
    req.reduction = r.reduction;
    req.ddof = r.ddof;
  }
  if (o.ddof) {
    if (req.ddof && *req.ddof != *o.ddof)
      throw UserError(
          fmt::format("--ddof {} contradicts the reduction's ddof={}", *o.ddof, *req.ddof));
    if (*o.ddof < 0)
      throw UserError(fmt::format("--ddof {}: ddof is a non-negative integer", *o.ddof));
    req.ddof = o.ddof;
  }
  if (req.ddof && req.reduction != Reduction::var && req.reduction != Reduction::std)
    throw UserError(
        fmt::format("ddof applies to var and std, not to {}", reduction_name(req.reduction)));
  if (!o.ps.empty()) {
    if (op != PatternOp::unpack) throw UserError("--ps applies to unpack only");
    req.packed = parse_shape_list(o.ps, "--ps");
  }
  const auto dtype = parse_dtype_name(o.dtype);
  if (!dtype)
    throw UserError(fmt::format(
        "unknown dtype '{}' (f64 f32 f16 bf16 f8e4m3 f8e5m2 i64 i32 i8 u8 bool)", o.dtype));
  req.dtype = *dtype;
  return req;
}

// `ein shape einmix`: at most one input shape, the sizes, --weight (required) and --bias.
int run_einmix(const ShapeOptions& o) {
  if (!o.weight)
    throw UsageError("einmix needs --weight: the weight's axes, e.g. --weight 'c_in c_out'");
  if (!o.reduction.empty() || o.ddof || !o.ps.empty() || o.list || o.explain)
    throw UserError(
        "einmix takes --weight and --bias, not --reduction, --ddof, --ps, --list or "
        "--explain");
  EinMixRequest req{o.pattern,
                    unprotect(*o.weight),
                    o.bias ? std::optional(unprotect(*o.bias)) : std::nullopt,
                    {},
                    {}};
  for (size_t i = 0; i < o.args.size(); ++i) {
    const std::string label = fmt::format("argument {}", i + 3);
    if (is_axis_size(o.args[i])) {
      req.sizes.push_back(parse_axis_size(o.args[i], label));
      continue;
    }
    if (req.input) throw UserError("einmix takes one input shape");
    req.input = parse_shape_arg(o.args[i], label);
  }
  std::cout << format_einmix(resolve_einmix(req)) << '\n';
  return 0;
}

int run_shape(ShapeOptions o) {
  o.pattern = unprotect(o.pattern);
  for (std::string& a : o.args)
    a = unprotect(a);
  try {
    if (o.op == "einmix") return run_einmix(o);
    if (o.weight || o.bias) throw UserError("--weight and --bias apply to einmix only");
    if (o.op == "parse_expression") {
      if (!o.args.empty()) throw UserError("parse_expression takes only a pattern");
      const std::string composition = parse_expression(parse_pattern(o.pattern));
      std::cout << "OK composition=" << composition << '\n';
      return 0;
    }
    const auto op = parse_pattern_op(o.op);
    if (!op)  // a usage error, like a misspelt subcommand
      throw UsageError(
          fmt::format("unknown op '{}': expected rearrange, reduce, repeat, einsum, pack, unpack, "
                      "parse_shape, parse_expression or einmix",
                      o.op));
    const ResolveRequest req = build_request(o, *op);
    const Recipe recipe = resolve_pattern(parse_pattern(o.pattern), req);
    std::cout << (o.explain ? explain(recipe) : format_result(recipe) + "\n");
    return 0;
  } catch (...) {
    return report_error("shape");
  }
}

}  // namespace

void add_shape_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<ShapeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "shape", "Resolve an einops pattern against shapes (static shape inference)");
  cmd->description(kDescription);
  cmd->add_option("op", opts->op,
                  "rearrange | reduce | repeat | einsum | pack | unpack | parse_shape | einmix")
      ->required();
  cmd->add_option("pattern", opts->pattern, "the einops pattern, e.g. 'b s (h d) -> b h s d'")
      ->required();
  cmd->add_option("args", opts->args, "input shapes like (2,3,4), and axis sizes like h=8");
  cmd->add_option("-r,--reduction", opts->reduction,
                  "reduce: min max sum mean prod any all logsumexp var(ddof=N) std(ddof=N)");
  cmd->add_option("--ddof", opts->ddof,
                  "var/std: the delta degrees of freedom (no default, by design)");
  cmd->add_option("--ps", opts->ps,
                  "unpack: the packed shapes, e.g. '[[2],[1],[2]]' or '[(2,);(1,);(2,)]'");
  cmd->add_option("--dtype", opts->dtype, "element type of the inputs (default f32)");
  cmd->add_option("--weight", opts->weight, "einmix: the weight's axes, e.g. 'h c_in c_out'");
  cmd->add_option("--bias", opts->bias, "einmix: the output axes the bias varies along");
  cmd->add_flag("--list", opts->list,
                "treat the shapes as one list input, stacked first (even a single one)");
  cmd->add_flag("--explain", opts->explain,
                "print the resolved recipe: elementary axes, split, reduce, permute");
  cmd->callback([opts, &exit_code] { exit_code = run_shape(*opts); });
}

}  // namespace ein::cli
