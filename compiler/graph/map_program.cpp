// Map expressions over named axes (`x[b s d], m[b s] -> (x - m)**2`) checked and lowered once:
// the expression is parsed (dsl/map_parser), checked (names, functions and their arities), and
// turned into a Kernel IR scalar DAG. Running one is api/map.cpp's (ein::map): it binds the
// axis sizes by name per call and runs a one-node graph of a map node.
#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "compiler/graph/lower_patterns.h"
#include "compiler/graph/map_program.h"
#include <ein/diagnostic.h>
#include "dsl/map_parser.h"

namespace ein {
namespace {

struct Function {
  std::string_view name;
  ScalarOp op;
  int arity;
};

// The functions a map expression may call (scalar_ops.def has their semantics).
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
    {"floor", ScalarOp::floor, 1},
    {"ceil", ScalarOp::ceil, 1},
    {"round", ScalarOp::round, 1},
    {"trunc", ScalarOp::trunc, 1},
    {"maximum", ScalarOp::maximum, 2},
    {"minimum", ScalarOp::minimum, 2},
    {"pow", ScalarOp::pow, 2},
    {"where", ScalarOp::where, 3},
};

ScalarOp binary_scalar_op(BinaryOp op) {
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

class Lowering {
 public:
  explicit Lowering(MapProgram& p) : p_(p) {}

  int lower(const Expr& e) {
    if (const auto* n = std::get_if<Number>(&e.node)) return p_.kernel.constant(n->value);
    if (const auto* n = std::get_if<Name>(&e.node)) {
      for (size_t i = 0; i < p_.expr.inputs.size(); ++i)
        if (p_.expr.inputs[i].name == n->name) return p_.kernel.load(static_cast<int>(i));
      std::string names;
      for (const auto& in : p_.expr.inputs)
        names += (names.empty() ? "" : ", ") + in.name;
      throw UserError(fmt::format("unknown input '{}'; the inputs are {}", n->name, names),
                      p_.expr.source, e.range);
    }
    if (const auto* u = std::get_if<Unary>(&e.node))
      return p_.kernel.apply(ScalarOp::neg, lower(*u->operand));
    if (const auto* b = std::get_if<Binary>(&e.node)) {
      const int l = lower(*b->lhs), r = lower(*b->rhs);
      return p_.kernel.apply(binary_scalar_op(b->op), l, r);
    }
    const auto& call = std::get<Call>(e.node);
    const Function* f = nullptr;
    for (const Function& candidate : kFunctions)
      if (candidate.name == call.name) f = &candidate;
    if (!f) {
      std::string names;
      for (const Function& candidate : kFunctions)
        names += (names.empty() ? "" : ", ") + std::string(candidate.name);
      throw UserError(
          fmt::format("unknown function '{}'; map expressions can call {}", call.name, names),
          p_.expr.source, call.name_range);
    }
    if (static_cast<int>(call.args.size()) != f->arity)
      throw UserError(fmt::format("{}() takes {} argument{}, got {}", f->name, f->arity,
                                  f->arity == 1 ? "" : "s", call.args.size()),
                      p_.expr.source, e.range);
    int args[3] = {-1, -1, -1};
    for (size_t i = 0; i < call.args.size(); ++i)
      args[i] = lower(*call.args[i]);
    return p_.kernel.apply(f->op, args[0], args[1], args[2]);
  }

 private:
  MapProgram& p_;
};

std::shared_ptr<const MapProgram> build(std::string_view text) {
  auto p = std::make_shared<MapProgram>();
  p->expr = parse_map(text);
  for (const MapInput& in : p->expr.inputs)
    for (const MapAxis& a : in.axes)
      if (std::find(p->out_axes.begin(), p->out_axes.end(), a.name) == p->out_axes.end())
        p->out_axes.push_back(a.name);
  for (const MapInput& in : p->expr.inputs) {
    std::vector<int> dims;
    for (const MapAxis& a : in.axes)
      dims.push_back(static_cast<int>(std::find(p->out_axes.begin(), p->out_axes.end(), a.name) -
                                      p->out_axes.begin()));
    p->axes.push_back(std::move(dims));
  }
  Lowering lowering(*p);
  p->kernel.body = lowering.lower(p->expr.body);
  p->kernel.result = p->kernel.body;
  p->kernel.name = "map";
  p->kernel.origin = std::string(text);
  p->body = std::make_shared<const Kernel>(p->kernel);
  return p;
}

}  // namespace

namespace {

struct ProgramCache {
  std::shared_mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const MapProgram>> programs;
};

ProgramCache& program_cache() {
  static ProgramCache cache;
  return cache;
}

}  // namespace

std::shared_ptr<const MapProgram> map_program(std::string_view text) {
  ProgramCache& c = program_cache();
  {
    std::shared_lock lock(c.mutex);
    if (auto it = c.programs.find(std::string(text)); it != c.programs.end()) return it->second;
  }
  auto p = build(text);
  std::unique_lock lock(c.mutex);
  if (c.programs.size() >= kMapProgramCapacity && !c.programs.contains(std::string(text)))
    c.programs.clear();
  return c.programs.emplace(std::string(text), p).first->second;
}

size_t map_program_cache_size() {
  ProgramCache& c = program_cache();
  std::shared_lock lock(c.mutex);
  return c.programs.size();
}


Shape bind_map_sizes(const MapProgram& p, const std::vector<Shape>& shapes) {
  const MapExpr& e = p.expr;
  if (shapes.size() != e.inputs.size())
    throw UserError(fmt::format("the expression has {} inputs, but {} shapes were given",
                                e.inputs.size(), shapes.size()),
                    e.source, e.arrow);
  // Bind each axis name to a size; 1 broadcasts against anything.
  Shape sizes(p.out_axes.size(), 1);
  std::vector<const MapAxis*> bound_at(p.out_axes.size(), nullptr);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const MapInput& in = e.inputs[i];
    if (shapes[i].size() != in.axes.size())
      throw UserError(fmt::format("input '{}' is declared with {} axes, but its shape is {}",
                                  in.name, in.axes.size(), shape_str(shapes[i])),
                      e.source, in.range);
    for (size_t d = 0; d < in.axes.size(); ++d) {
      const int a = p.axes[i][d];
      const int64_t n = shapes[i][d];
      if (n == 1) continue;
      if (sizes[a] != 1 && sizes[a] != n)
        throw UserError(fmt::format("axis '{}' has length {} here but {} earlier", in.axes[d].name,
                                    n, sizes[a]),
                        e.source, in.axes[d].range)
            .note_at(fmt::format("'{}' bound to {} here", in.axes[d].name, sizes[a]), e.source,
                     bound_at[a]->range);
      sizes[a] = n;
      bound_at[a] = &in.axes[d];
    }
  }
  return sizes;
}

}  // namespace ein
