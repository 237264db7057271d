// Map expressions and reduce patterns → Graph IR for tools. A map expression's AST becomes the
// map node's scalar DAG as in map_exec.cpp (same functions, same operators).
#include "compiler/expression_graphs.h"

#include <algorithm>

#include <ein/errors.h>
#include <fmt/format.h>

#include "compiler/lower_patterns.h"
#include "dsl/diagnostic.h"
#include "dsl/map_parser.h"
#include "dsl/pattern_parser.h"

namespace ein {
namespace {

struct Function {
  std::string_view name;
  ScalarOp op;
  int arity;
};

// The functions of map expressions (map_exec.cpp's table; scalar_ops.def has their semantics).
constexpr Function kFunctions[] = {
    {"exp", ScalarOp::exp, 1},
    {"log", ScalarOp::log, 1},
    {"sqrt", ScalarOp::sqrt, 1},
    {"rsqrt", ScalarOp::rsqrt, 1},
    {"tanh", ScalarOp::tanh, 1},
    {"erf", ScalarOp::erf, 1},
    {"sin", ScalarOp::sin, 1},
    {"cos", ScalarOp::cos, 1},
    {"abs", ScalarOp::abs, 1},
    {"sigmoid", ScalarOp::sigmoid, 1},
    {"relu", ScalarOp::relu, 1},
    {"gelu", ScalarOp::gelu, 1},
    {"gelu_tanh", ScalarOp::gelu_tanh, 1},
    {"silu", ScalarOp::silu, 1},
    {"square", ScalarOp::square, 1},
    {"reciprocal", ScalarOp::reciprocal, 1},
    {"sign", ScalarOp::sign, 1},
    {"maximum", ScalarOp::maximum, 2},
    {"minimum", ScalarOp::minimum, 2},
    {"pow", ScalarOp::pow, 2},
    {"where", ScalarOp::where, 3},
};

ScalarOp binary_op(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return ScalarOp::add;
    case BinaryOp::sub:
      return ScalarOp::sub;
    case BinaryOp::mul:
      return ScalarOp::mul;
    case BinaryOp::div:
      return ScalarOp::div;
    case BinaryOp::pow:
      return ScalarOp::pow;
    case BinaryOp::lt:
      return ScalarOp::lt;
    case BinaryOp::le:
      return ScalarOp::le;
    case BinaryOp::gt:
      return ScalarOp::gt;
    case BinaryOp::ge:
      return ScalarOp::ge;
    case BinaryOp::eq:
      return ScalarOp::eq;
    case BinaryOp::ne:
      return ScalarOp::ne;
  }
  return ScalarOp::add;
}

int lower(Kernel& k, const MapExpr& m, const Expr& e) {
  if (const auto* n = std::get_if<Number>(&e.node)) return k.constant(n->value);
  if (const auto* n = std::get_if<Name>(&e.node)) {
    for (size_t i = 0; i < m.inputs.size(); ++i)
      if (m.inputs[i].name == n->name) return k.load(static_cast<int>(i));
    throw UserError(fmt::format("unknown input '{}'", n->name), m.source, e.range);
  }
  if (const auto* u = std::get_if<Unary>(&e.node))
    return k.apply(ScalarOp::neg, lower(k, m, *u->operand));
  if (const auto* b = std::get_if<Binary>(&e.node)) {
    const int l = lower(k, m, *b->lhs), r = lower(k, m, *b->rhs);
    return k.apply(binary_op(b->op), l, r);
  }
  const auto& call = std::get<Call>(e.node);
  const Function* f = nullptr;
  for (const Function& candidate : kFunctions)
    if (candidate.name == call.name) f = &candidate;
  if (!f)
    throw UserError(fmt::format("unknown function '{}'", call.name), m.source, call.name_range);
  if (static_cast<int>(call.args.size()) != f->arity)
    throw UserError(
        fmt::format("{}() takes {} argument(s), got {}", f->name, f->arity, call.args.size()),
        m.source, e.range);
  int args[3] = {-1, -1, -1};
  for (size_t i = 0; i < call.args.size(); ++i)
    args[i] = lower(k, m, *call.args[i]);
  return k.apply(f->op, args[0], args[1], args[2]);
}

}  // namespace

Graph map_expression_graph(std::string_view text, const std::vector<Shape>& shapes, DType dtype) {
  const MapExpr m = parse_map(text);
  if (shapes.size() != m.inputs.size())
    throw UserError(fmt::format("the expression has {} inputs, but {} shapes were given",
                                m.inputs.size(), shapes.size()),
                    m.source, m.arrow);
  std::vector<std::string> names;
  for (const MapInput& in : m.inputs)
    for (const MapAxis& a : in.axes)
      if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  Shape sizes(names.size(), 1);
  std::vector<std::vector<int>> axes;
  std::vector<TensorType> types;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const MapInput& in = m.inputs[i];
    if (shapes[i].size() != in.axes.size())
      throw UserError(fmt::format("input '{}' is declared with {} axes, but its shape is ({})",
                                  in.name, in.axes.size(), fmt::join(shapes[i], ", ")),
                      m.source, in.range);
    std::vector<int> dims;
    for (size_t d = 0; d < in.axes.size(); ++d) {
      const auto a = std::find(names.begin(), names.end(), in.axes[d].name) - names.begin();
      dims.push_back(static_cast<int>(a));
      const int64_t n = shapes[i][d];
      if (n == 1) continue;
      if (sizes[a] != 1 && sizes[a] != n)
        throw UserError(fmt::format("axis '{}' has length {} here but {} earlier", in.axes[d].name,
                                    n, sizes[a]),
                        m.source, in.axes[d].range);
      sizes[a] = n;
    }
    axes.push_back(std::move(dims));
    types.push_back({shapes[i], dtype});
  }
  auto body = std::make_shared<Kernel>();
  body->name = "map";
  body->origin = std::string(text);
  body->body = body->result = lower(*body, m, m.body);
  return lower_map(std::move(body), axes, types, sizes, dtype, std::string(text));
}

Graph reduce_pattern_graph(std::string_view pattern, Reduction reduction,
                           std::optional<int64_t> ddof, const Shape& shape, DType dtype,
                           const std::vector<AxisSize>& sizes) {
  ResolveRequest req;
  req.op = PatternOp::reduce;
  req.reduction = reduction;
  req.ddof = ddof;
  req.dtype = dtype;
  req.shapes = {shape};
  req.sizes = sizes;
  const Recipe recipe = resolve_pattern(parse_pattern(pattern), req);
  return lower_pattern(recipe, {{shape, dtype}}, ddof, 0, std::string(pattern));
}

}  // namespace ein
