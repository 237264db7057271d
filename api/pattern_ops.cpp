// rearrange, reduce, repeat, einsum, pack and unpack on tensors. Each call resolves its pattern
// (cached sema: the same checks and carets as `ein shape`), takes the Graph IR lowered for that
// recipe (cached too: lowering happens once per pattern and input shapes), and executes it.
// Views stay views; execute.h decides copies from the actual strides.
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include <ein/pattern_cache.h>
#include <ein/pattern_parser.h>
#include "api/tape.h"
#include "compiler/graph/graph_builder.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/pipeline.h"
#include "dsl/pattern_messages.h"
#include "exec/execute.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/device_checks.h"

namespace ein {
namespace {

/// A call-time mistake about input `i` (undefined, wrong device, mixed dtypes): a UserError
/// whose caret underlines that input's side of the pattern, like a shape mistake's.
[[noreturn]] void fail_at_input(std::string_view pattern, size_t i, std::string message) {
  const Pattern p = parse_pattern(pattern);
  const size_t side = std::min(i, p.inputs.size() - 1);  // list inputs share one side
  throw UserError(std::move(message), p.source, p.inputs[side].range);
}

void check_inputs(const std::vector<Tensor>& xs, std::string_view op, std::string_view pattern) {
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined())
      fail_at_input(pattern, i, fmt::format("{}: input {} is an undefined tensor", op, i));
    if (xs[i].device() != xs.front().device())
      fail_at_input(pattern, i,
                    fmt::format("{}: input {} is on {} but input 0 is on {}; inputs must share "
                                "one device (move them with .to(...))",
                                op, i, xs[i].device().str(), xs.front().device().str()));
    if (xs[i].dtype() != xs.front().dtype())
      fail_at_input(pattern, i,
                    fmt::format("{}: input {} is {} but input 0 is {}; inputs must share one "
                                "dtype (convert with .to(...))",
                                op, i, dtype_name(xs[i].dtype()), dtype_name(xs.front().dtype())));
  }
}

size_t star_position(std::string_view pattern) {
  const Pattern p = parse_pattern(pattern);
  for (size_t i = 0; i < p.inputs[0].terms.size(); ++i)
    if (!p.inputs[0].terms[i].tokens.empty() &&
        p.inputs[0].terms[i].tokens[0].kind == AxisToken::Kind::star)
      return i;
  return 0;  // sema has already rejected a pattern without '*'
}

/// Graphs by recipe. A recipe already encodes the pattern, shapes, dtype and ddof; holding
/// its shared_ptr keeps the address from being reused while the entry lives.
class GraphCache {
 public:
  std::shared_ptr<const Graph> get(const std::shared_ptr<const Recipe>& recipe,
                                   const std::vector<Tensor>& xs, std::optional<int64_t> ddof,
                                   std::string_view pattern) {
    {
      std::shared_lock lock(mutex_);
      if (auto it = graphs_.find(recipe.get()); it != graphs_.end()) return it->second.second;
    }
    std::vector<TensorType> types;
    for (const Tensor& x : xs)
      types.push_back({x.shape(), x.dtype()});
    const bool starred = recipe->op == PatternOp::pack || recipe->op == PatternOp::unpack;
    auto graph = std::make_shared<const Graph>(
        compile_pattern(*recipe, pattern, types, ddof, starred ? star_position(pattern) : 0));
    std::unique_lock lock(mutex_);
    // Bounded like the recipe cache it follows (entries hold their recipes: no address reuse).
    if (graphs_.size() >= PatternCache::kCapacity && !graphs_.contains(recipe.get())) graphs_.clear();
    return graphs_.try_emplace(recipe.get(), recipe, graph).first->second.second;
  }

 private:
  std::shared_mutex mutex_;
  std::unordered_map<const Recipe*,
                     std::pair<std::shared_ptr<const Recipe>, std::shared_ptr<const Graph>>>
      graphs_;
};

/// Checks the inputs, resolves `pattern` for them (one shape per input), and executes the
/// cached graph; `recipe_out`, when given, receives the recipe (pack reports its ps).
std::vector<Tensor> run(std::string_view pattern, ResolveRequest req, const std::vector<Tensor>& xs,
                        std::shared_ptr<const Recipe>* recipe_out = nullptr) {
  static GraphCache cache;
  const std::string_view op = op_name(req.op);
  if (xs.empty()) throw RuntimeError(fmt::format("{}: no input tensors", op));
  check_inputs(xs, op, pattern);
  for (const Tensor& x : xs)
    req.shapes.push_back(x.shape());
  req.dtype = xs.front().dtype();
  auto recipe = resolve_cached(pattern, req);
  if (recipe_out) *recipe_out = recipe;
  return run_recorded(cache.get(recipe, xs, req.ddof, pattern), xs);
}

ResolveRequest request(PatternOp op, const Sizes& sizes = {}) {
  ResolveRequest req;
  req.op = op;
  req.sizes = sizes;
  return req;
}

}  // namespace

Tensor rearrange(const Tensor& x, std::string_view pattern, const Sizes& sizes) {
  return run(pattern, request(PatternOp::rearrange, sizes), {x}).front();
}

Tensor rearrange(const std::vector<Tensor>& xs, std::string_view pattern, const Sizes& sizes) {
  ResolveRequest req = request(PatternOp::rearrange, sizes);
  req.list_input = true;  // sema checks that the elements share one shape
  return run(pattern, req, xs).front();
}

Tensor repeat(const Tensor& x, std::string_view pattern, const Sizes& sizes) {
  return run(pattern, request(PatternOp::repeat, sizes), {x}).front();
}

Tensor reduce(const Tensor& x, std::string_view pattern, std::string_view reduction,
              const Sizes& sizes, std::optional<int64_t> ddof) {
  const std::optional<Reduction> r = parse_reduction(reduction);
  if (!r || *r == Reduction::none)
    throw UserError(messages::unknown_reduction(reduction),
                    make_source("reduction", std::string(reduction)),
                    {0, static_cast<uint32_t>(reduction.size())});
  ResolveRequest req = request(PatternOp::reduce, sizes);
  req.reduction = *r;
  req.ddof = ddof;
  return run(pattern, req, {x}).front();
}

Tensor einsum(std::string_view pattern, const std::vector<Tensor>& operands) {
  return run(pattern, request(PatternOp::einsum), operands).front();
}

std::pair<Tensor, std::vector<Shape>> pack(const std::vector<Tensor>& xs,
                                           std::string_view pattern) {
  std::shared_ptr<const Recipe> recipe;
  Tensor packed = run(pattern, request(PatternOp::pack), xs, &recipe).front();
  return {packed, recipe->packed_shapes};
}

std::vector<Tensor> unpack(const Tensor& x, const std::vector<Shape>& packed_shapes,
                           std::string_view pattern) {
  ResolveRequest req = request(PatternOp::unpack);
  req.packed = packed_shapes;
  return run(pattern, req, {x});
}

Tensor cast(const Tensor& x, DType dtype) {
  if (!x.defined()) throw RuntimeError("cast: the input is undefined");
  if (x.dtype() == dtype) return x;
  // One graph per (shape, from, to): the tape caches its backward (a cast back) by graph.
  static std::mutex mutex;
  static std::map<std::tuple<Shape, DType, DType>, std::shared_ptr<const Graph>> graphs;
  std::shared_ptr<const Graph> g;
  {
    std::lock_guard lock(mutex);
    auto& slot = graphs[{x.shape(), x.dtype(), dtype}];
    if (!slot) {
      GraphBuilder b(fmt::format("cast {} -> {}", dtype_name(x.dtype()), dtype_name(dtype)));
      b.output(b.cast(b.input(x.shape(), x.dtype()), dtype));
      slot = std::make_shared<const Graph>(b.take());
    }
    g = slot;
  }
  return run_recorded(g, {x}).front();
}

namespace {

/// triu (upper) or tril of the last two dims: one map whose body compares the output's column
/// and row indices; one graph per (shape, dtype, diagonal, side).
Tensor triangle(const Tensor& x, int64_t diagonal, bool upper) {
  const char* name = upper ? "triu" : "tril";
  if (!x.defined()) throw RuntimeError(fmt::format("{}: the input is undefined", name));
  if (x.dim() < 2)
    throw RuntimeError(fmt::format("{}: needs a tensor with at least 2 dims, got shape {}", name,
                                   shape_str(x.shape())));
  if (std::max(x.size(-1), x.size(-2)) > kExactF32Indices &&
      (x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16))
    throw RuntimeError(fmt::format(
        "{}: a {} tensor of shape {} has a dim over 2^24 = {}: its indices are compared in f32, "
        "which is exact only up to 2^24; convert with .to(DType::f64)",
        name, dtype_name(x.dtype()), shape_str(x.shape()), kExactF32Indices));
  static std::mutex mutex;
  static std::map<std::tuple<Shape, DType, int64_t, bool>, std::shared_ptr<const Graph>> graphs;
  std::shared_ptr<const Graph> g;
  {
    std::lock_guard lock(mutex);
    auto& slot = graphs[{x.shape(), x.dtype(), diagonal, upper}];
    if (!slot) {
      GraphBuilder b(name);
      const int rank = static_cast<int>(x.dim()), rows = rank - 2, cols = rank - 1;
      std::vector<int> axes(static_cast<size_t>(rank));
      std::iota(axes.begin(), axes.end(), 0);
      const int in = b.input(x.shape(), x.dtype());
      b.output(b.map({in}, {axes}, x.shape(), x.dtype(), name,
                     [&](Kernel& k, const std::vector<int>& l) {
                       const int diff = k.apply(ScalarOp::sub, k.index(cols), k.index(rows));
                       const int keep = k.apply(upper ? ScalarOp::ge : ScalarOp::le, diff,
                                                k.constant(static_cast<double>(diagonal)));
                       return k.apply(ScalarOp::where, keep, l[0], k.constant(0));
                     }));
      slot = std::make_shared<const Graph>(b.take());
    }
    g = slot;
  }
  return run_recorded(g, {x}).front();
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle(x, diagonal, true);
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle(x, diagonal, false);
}

void synchronize() {
  // Only a CUDA backend that was used has queued work (launches are asynchronous there); it
  // waits for each device (a test's fake device, without a driver, is cuda:0 alone).
  if (has_backend(DeviceKind::cuda)) {
    const int devices = cuda_is_available() ? cuda_driver_info().device_count : 1;
    for (int d = 0; d < devices; ++d)
      backend_for(cuda(d)).synchronize(cuda(d));
  }
  detail::run_device_checks();  // what kernels found wrong in their inputs (a fake's too)
}

}  // namespace ein
