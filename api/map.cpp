// ein::map on tensors (include/ein/ops.h): the checked program of compiler/graph/map_program.h,
// its sizes bound by name per call, run as a one-node graph through the tape (so maps are
// differentiable) on the inputs' device.
#include <cmath>
#include <mutex>
#include <optional>
#include <regex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "api/map.h"
#include "api/tape.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/graph/map_program.h"
#include "exec/tensor_kernels.h"
#include <ein/diagnostic.h>

namespace ein {
namespace {

/// The graph of `p` for these input types, built once (the autograd tape caches backward
/// graphs by graph, so one graph per program and types keeps that cache small).
std::shared_ptr<const Graph> graph(const MapProgram& p, const std::vector<TensorType>& types,
                                   const Shape& sizes, DType out) {
  // Keyed by the program's text, not its address: map_program()'s bounded cache may free a
  // program, and a new one at the same address must not find the old graph.
  std::string key = fmt::format("{}|{}|{}", p.kernel.origin, fmt::join(sizes, ","), dtype_name(out));
  for (const TensorType& t : types)
    key += fmt::format("|{}:{}", dtype_name(t.dtype), fmt::join(t.shape, ","));
  static std::shared_mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const Graph>> cache;
  {
    std::shared_lock lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto g =
      std::make_shared<const Graph>(lower_map(p.body, p.axes, types, sizes, out, p.kernel.origin));
  std::unique_lock lock(mutex);
  if (cache.size() >= kMapProgramCapacity && !cache.contains(key)) cache.clear();  // bounded
  return cache.emplace(std::move(key), std::move(g)).first->second;
}

/// Whether the program maps integers to integers: every node is a load, an integral constant
/// or an op closed over the integers (torch keeps i64 + i64 as i64; / and exp give floats).
bool integer_closed(const Kernel& k) {
  for (const ScalarNode& n : k.nodes) {
    if (n.op == ScalarOp::load || keeps_integers(n.op)) continue;
    if (n.op == ScalarOp::constant) {
      if (n.value != std::trunc(n.value) || !std::isfinite(n.value)) return false;
      continue;
    }
    if (n.op == ScalarOp::pow) {  // a whole non-negative constant exponent keeps integers
      const ScalarNode& e = k.nodes[static_cast<size_t>(n.b)];
      if (e.op != ScalarOp::constant || e.value < 0 || e.value != std::trunc(e.value)) return false;
      continue;
    }
    return false;
  }
  return true;
}

/// `text` with each input's `...` replaced by names for the axes it stands for: all the axes
/// of that input the declaration does not name, right-aligned across inputs (so `...` axes
/// broadcast by position, as numpy's). `x[... d], w[d] -> x * w` then maps x of any rank.
std::string expand_ellipsis(std::string_view text, const std::vector<Tensor>& inputs) {
  const size_t arrow = text.find("->"), dots = text.find("...");
  if (dots == std::string_view::npos || arrow == std::string_view::npos || dots > arrow)
    return std::string(text);
  static const std::regex decl(R"(([A-Za-z_][A-Za-z0-9_]*)\s*\[([^\]]*)\])");
  const std::string left(text.substr(0, arrow));
  struct Decl {
    size_t begin, end;  // the axes' span in `left`
    std::vector<std::string> before, after;
    int64_t count = -1;  // axes `...` stands for (-1: no `...`)
  };
  std::vector<Decl> decls;
  int64_t widest = 0;
  size_t k = 0;
  for (auto it = std::sregex_iterator(left.begin(), left.end(), decl); it != std::sregex_iterator(); ++it, ++k) {
    Decl d{static_cast<size_t>(it->position(2)), static_cast<size_t>(it->position(2) + it->length(2)), {}, {}};
    std::istringstream axes(it->str(2));
    bool seen = false;
    int64_t named = 0;
    for (std::string axis; axes >> axis;) {
      if (axis == "...") {
        seen = true;
        continue;
      }
      (seen ? d.after : d.before).push_back(axis);
      ++named;
    }
    if (seen && k < inputs.size() && inputs[k].defined() && inputs[k].dim() >= named) {
      d.count = inputs[k].dim() - named;
      widest = std::max(widest, d.count);
    }
    decls.push_back(std::move(d));
  }
  std::string out = left;
  for (size_t i = decls.size(); i-- > 0;) {  // back to front: spans stay valid
    const Decl& d = decls[i];
    if (d.count < 0) continue;
    std::vector<std::string> axes = d.before;
    for (int64_t j = 0; j < d.count; ++j)
      axes.push_back(fmt::format("_dots{}", widest - d.count + j));
    axes.insert(axes.end(), d.after.begin(), d.after.end());
    out.replace(d.begin, d.end - d.begin, fmt::format("{}", fmt::join(axes, " ")));
  }
  return out + std::string(text.substr(arrow));
}

/// The dtype map() gives program `p` on inputs of `dtypes` (fp8 already read as f32).
DType result_dtype(const MapProgram& p, const std::vector<DType>& dtypes) {
  const DType compute = compute_type(dtypes);
  DType out = dtypes.empty() ? DType::f32 : dtypes.front();
  for (DType t : dtypes)
    if (t != out) out = compute;
  // Integers stay integers where the expression keeps them (i64 + i64 is i64, as in torch);
  // otherwise, and for bool inputs, the result is the compute type.
  const bool integer = out == DType::i64 || out == DType::i32 || out == DType::i8 || out == DType::u8;
  if (!(integer && integer_closed(p.kernel)) && out != DType::f64 && out != DType::f32 &&
      out != DType::f16 && out != DType::bf16)
    out = compute;
  return out;
}

DType readable(DType t) {  // kernels do not read fp8: such inputs are converted to f32 first
  return t == DType::f8e4m3 || t == DType::f8e5m2 ? DType::f32 : t;
}

Tensor run_map(std::string_view expression_in, const std::vector<Tensor>& given,
               std::optional<DType> out_dtype) {
  const std::string expanded = expand_ellipsis(expression_in, given);
  const std::string_view expression = expanded;
  const auto p = map_program(expression);
  std::vector<Tensor> inputs = given;
  for (Tensor& x : inputs)
    if (x.defined() && readable(x.dtype()) != x.dtype()) x = x.to(readable(x.dtype()));
  const MapExpr& e = p->expr;
  if (inputs.size() != e.inputs.size())
    throw UserError(fmt::format("the expression has {} inputs, but {} tensors were given",
                                e.inputs.size(), inputs.size()),
                    e.source, e.arrow);
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined())
      throw UserError(fmt::format("input '{}' is an undefined tensor", e.inputs[i].name),
                      e.source, e.inputs[i].range);
    if (x.device() != inputs.front().device())
      throw UserError(fmt::format("input '{}' is on {} but '{}' is on {}; inputs must share one "
                                  "device (move them with .to(...))",
                                  e.inputs[i].name, x.device().str(), e.inputs.front().name,
                                  inputs.front().device().str()),
                      e.source, e.inputs[i].range);
    shapes.push_back(x.shape());
    dtypes.push_back(x.dtype());
  }
  const Shape sizes = bind_map_sizes(*p, shapes);
  const DType out = out_dtype ? *out_dtype : result_dtype(*p, dtypes);
  std::vector<TensorType> types;
  for (const Tensor& x : inputs)
    types.push_back({x.shape(), x.dtype()});
  return run_recorded(graph(*p, types, sizes, out), inputs).front();
}

}  // namespace

Tensor map(std::string_view expression, const std::vector<Tensor>& inputs) {
  return run_map(expression, inputs, std::nullopt);
}

Tensor map_as(std::string_view expression, const std::vector<Tensor>& inputs, DType out) {
  return run_map(expression, inputs, out);
}

DType map_result_dtype(std::string_view expression, std::vector<DType> dtypes) {
  for (DType& t : dtypes)
    t = readable(t);
  return result_dtype(*map_program(expression), dtypes);
}

}  // namespace ein
