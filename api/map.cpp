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

/// What a call of map() is keyed by once its inputs are checked: the text as given (before
/// `...` is expanded), the dtype asked for (-1: none) and each input's dtype and shape, as
/// bytes in `key`. Everything run_map() derives from the text and the inputs before it runs
/// the graph (the program, the bound sizes, the result dtype, the checks that threw for a bad
/// call) depends on these alone, so a call whose key was seen runs the graph that call built.
void call_key(std::string& key, std::string_view text, std::optional<DType> out,
              const std::vector<Tensor>& inputs) {
  const auto put = [&key](auto value) {
    key.append(reinterpret_cast<const char*>(&value), sizeof value);
  };
  key.clear();
  put(text.size());
  key += text;
  put(out ? static_cast<int>(*out) : -1);
  for (const Tensor& x : inputs) {
    put(static_cast<int>(x.dtype()));
    put(x.shape().size());
    key.append(reinterpret_cast<const char*>(x.shape().data()), x.shape().size() * sizeof(int64_t));
  }
}

/// The graphs of the calls seen (call_key()), at most kMapProgramCapacity of them. One graph
/// per key, not per call, also keeps the autograd tape's cache of backward graphs (keyed by
/// graph) small.
class CallCache {
 public:
  std::shared_ptr<const Graph> find(std::string_view key) const {
    std::shared_lock lock(mutex_);
    const auto it = graphs_.find(key);
    return it == graphs_.end() ? nullptr : it->second;
  }
  std::shared_ptr<const Graph> add(std::string_view key, std::shared_ptr<const Graph> g) {
    std::unique_lock lock(mutex_);
    if (graphs_.size() >= kMapProgramCapacity && !graphs_.contains(key)) graphs_.clear();
    return graphs_.emplace(std::string(key), std::move(g)).first->second;
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Graph>, Hash, std::equal_to<>> graphs_;
};

CallCache& call_cache() {
  static CallCache* cache = new CallCache;  // never destroyed: maps may run at exit
  return *cache;
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

/// Throws unless there is a tensor for each input the expression declares.
void check_count(const MapExpr& e, const std::vector<Tensor>& inputs) {
  if (inputs.size() != e.inputs.size())
    throw UserError(fmt::format("the expression has {} inputs, but {} tensors were given",
                                e.inputs.size(), inputs.size()),
                    e.source, e.arrow);
}

/// The checks of a call that no key stands for: every input defined, all on one device; a
/// call failing them throws what the expression says (its input names, with carets).
void check_inputs(std::string_view text, const std::vector<Tensor>& inputs) {
  bool ok = true;
  for (const Tensor& x : inputs)
    ok = ok && x.defined() && x.device() == inputs.front().device();
  if (ok) return;
  const auto p = map_program(expand_ellipsis(text, inputs));
  const MapExpr& e = p->expr;
  check_count(e, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw UserError(fmt::format("input '{}' is an undefined tensor", e.inputs[i].name),
                      e.source, e.inputs[i].range);
    if (inputs[i].device() != inputs.front().device())
      throw UserError(fmt::format("input '{}' is on {} but '{}' is on {}; inputs must share one "
                                  "device (move them with .to(...))",
                                  e.inputs[i].name, inputs[i].device().str(), e.inputs.front().name,
                                  inputs.front().device().str()),
                      e.source, e.inputs[i].range);
  }
}

/// The graph a call runs, built from the text and the inputs (fp8 already read as f32).
std::shared_ptr<const Graph> build_graph(std::string_view expression_in,
                                         const std::vector<Tensor>& inputs,
                                         std::optional<DType> out_dtype) {
  const std::string expanded = expand_ellipsis(expression_in, inputs);
  const auto p = map_program(expanded);
  const MapExpr& e = p->expr;
  check_count(e, inputs);
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<TensorType> types;
  for (const Tensor& x : inputs) {
    shapes.push_back(x.shape());
    dtypes.push_back(x.dtype());
    types.push_back({x.shape(), x.dtype()});
  }
  const Shape sizes = bind_map_sizes(*p, shapes);
  const DType out = out_dtype ? *out_dtype : result_dtype(*p, dtypes);
  return std::make_shared<const Graph>(
      lower_map(p->body, p->axes, types, sizes, out, p->kernel.origin));
}

Tensor run_map(std::string_view expression, const std::vector<Tensor>& given,
               std::optional<DType> out_dtype) {
  check_inputs(expression, given);
  bool fp8 = false;
  for (const Tensor& x : given)
    fp8 = fp8 || readable(x.dtype()) != x.dtype();
  if (fp8) {  // read as f32: the key and the graph are those of the converted inputs
    std::vector<Tensor> inputs = given;
    for (Tensor& x : inputs)
      if (readable(x.dtype()) != x.dtype()) x = x.to(readable(x.dtype()));
    return run_map(expression, inputs, out_dtype);
  }
  thread_local std::string key;
  call_key(key, expression, out_dtype, given);
  std::shared_ptr<const Graph> g = call_cache().find(key);
  if (!g) g = call_cache().add(key, build_graph(expression, given, out_dtype));
  return run_recorded(g, given).front();
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
