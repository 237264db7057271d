// The `.ein` interpreter, evaluation: values, expressions and statements. Calls, with their
// shape checks, module construction and parameter initialisation, are call.cpp's. Tensor
// expressions only evaluate inside a trace, where they append Graph IR nodes (trace_graph.h).
#include "script/interp.h"

#include "compiler/kernel/scalar_math.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <unistd.h>

#include <ein/errors.h>
#include <ein/init.h>
#include <fmt/format.h>

#include "script/support.h"
#include "api/tape.h"
#include "dsl/limits.h"
#include "dsl/script_parser.h"
#include "runtime/cuda/driver.h"

namespace ein::script {

// ---------------------------------------------------------------------------------------
// Values

std::string Interpreter::describe(const Value& v) const {
  switch (v.kind) {
    case Value::Kind::none:
      return "none";
    case Value::Kind::number:
      return format_number(v.num);
    case Value::Kind::string:
      return fmt::format("the string \"{}\"", v.str);
    case Value::Kind::tensor:
      return fmt::format("a tensor {}[{}]", dtype_name(v.t.dtype), fmt::join(v.t.shape, " "));
    case Value::Kind::param:
      return fmt::format("the parameter {} {}[{}]", v.param->name, dtype_name(v.param->dtype),
                         fmt::join(v.param->shape, " "));
    case Value::Kind::list:
      return fmt::format("a list of {}", v.items->size());
    case Value::Kind::tuple:
      return fmt::format("a tuple of {}", v.items->size());
    case Value::Kind::range:
      return fmt::format("the range {}..{}", v.lo, v.hi);
    case Value::Kind::object:
      return fmt::format("a {} {}",
                         v.object->cls->decl->kind == Decl::Kind::module ? "module" : "optimizer",
                         v.object->cls->decl->name);
    case Value::Kind::closure:
      return fmt::format("the function {}", v.closure->qualname);
    case Value::Kind::builtin:
      return fmt::format("the builtin {}", v.str);
    case Value::Kind::klass:
      return fmt::format("the {} {}", v.klass->decl->kind == Decl::Kind::module ? "module" : "optimizer",
                         v.klass->decl->name);
    case Value::Kind::record:
      if (v.record->type.starts_with("finfo(") || v.record->type.starts_with("iinfo("))
        return v.record->type;
      return fmt::format("a {} setting", v.record->type);
  }
  return "?";
}

Trace& Interpreter::trace_or_fail(const CallSite& site, const std::string& what) {
  if (!trace_)
    fail(site, site.range,
         fmt::format("{} computes on tensors, which happens only inside a fn (module bodies and "
                     "settings are evaluated once, when the script loads)",
                     what));
  return *trace_;
}

TensorVal Interpreter::as_tensor(const Value& v, const CallSite& site, SourceRange range) {
  switch (v.kind) {
    case Value::Kind::tensor:
      return v.t;
    case Value::Kind::param:
      return trace_or_fail(site, "reading a parameter").param(v.param);
    case Value::Kind::number: {
      Trace& t = trace_or_fail(site, "this expression");
      return t.constant(full({}, v.num, DType::f32));
    }
    default:
      fail(site, range, fmt::format("expected a tensor here, got {}", describe(v)));
  }
}

double Interpreter::as_number(const Value& v, const CallSite& site, SourceRange range,
                              const std::string& what) {
  if (v.kind != Value::Kind::number)
    fail(site, range, fmt::format("{} must be a number, got {}", what, describe(v)));
  return v.num;
}

int64_t Interpreter::as_int(const Value& v, const CallSite& site, SourceRange range,
                            const std::string& what) {
  const double x = as_number(v, site, range, what);
  if (!is_integral(x)) fail(site, range, fmt::format("{} must be an integer, got {}", what, format_number(x)));
  if (!fits_int64(x))
    fail(site, range, fmt::format("{} must be an integer of magnitude below 2^63, got {}", what,
                                  format_number(x)));
  return static_cast<int64_t>(x);
}

Value Interpreter::elementwise(ScalarOp op, const std::vector<Value>& args, const CallSite& site,
                               SourceRange range, std::optional<DType> out) {
  bool all_numbers = true;
  for (const Value& a : args)
    all_numbers = all_numbers && a.kind == Value::Kind::number;
  if (all_numbers) {
    const double x = args.size() > 0 ? args[0].num : 0, y = args.size() > 1 ? args[1].num : 0,
                 z = args.size() > 2 ? args[2].num : 0;
    const double r = apply_scalar_op(op, x, y, z);
    bool is_int = is_comparison(op);
    if (op == ScalarOp::add || op == ScalarOp::sub || op == ScalarOp::mul || op == ScalarOp::neg ||
        op == ScalarOp::abs || op == ScalarOp::maximum || op == ScalarOp::minimum)
      is_int = std::all_of(args.begin(), args.end(), [](const Value& a) { return a.is_int; });
    if (op == ScalarOp::pow) is_int = args[0].is_int && args[1].is_int && y >= 0;
    return Value::number(r, is_int && is_integral(r));
  }
  Trace& t = trace_or_fail(site, fmt::format("'{}'", scalar_op_spelling(op)));
  std::vector<TensorVal> tensors;
  std::vector<int> slot(args.size(), -1);
  std::optional<DType> dtype;
  bool fractional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == Value::Kind::number) {
      fractional = fractional || !args[i].is_int;
      continue;
    }
    if (args[i].kind != Value::Kind::tensor && args[i].kind != Value::Kind::param)
      fail(site, range, fmt::format("'{}' needs numbers or tensors, got {}", scalar_op_spelling(op),
                                    describe(args[i])));
    slot[i] = static_cast<int>(tensors.size());
    tensors.push_back(as_tensor(args[i], site, range));
    dtype = dtype ? promote(*dtype, tensors.back().dtype) : tensors.back().dtype;
  }
  // An integer power with a whole non-negative exponent stays an integer (torch: i64 ** 2 is i64).
  const bool whole_power = op == ScalarOp::pow && args.size() == 2 &&
                           args[1].kind == Value::Kind::number && args[1].is_int && args[1].num >= 0;
  if (!kFloatDTypes.contains(*dtype) && !whole_power && (fractional || !keeps_integers(op)))
    dtype = DType::f32;
  if (op == ScalarOp::where && slot[0] >= 0 && tensors.size() > 1) {
    // The condition does not decide the result's dtype.
    dtype.reset();
    for (size_t i = 1; i < args.size(); ++i)
      if (slot[i] >= 0) dtype = dtype ? promote(*dtype, tensors[slot[i]].dtype) : tensors[slot[i]].dtype;
    if (!dtype) dtype = DType::f32;
  }
  const DType result = out ? *out : (is_comparison(op) && !kFloatDTypes.contains(*dtype) ? DType::f32 : *dtype);
  try {
    const TensorVal y = t.b.map(
        tensors, result,
        [&](Kernel& k, const std::vector<int>& loads) {
          std::vector<int> operands;
          for (size_t i = 0; i < args.size(); ++i)
            operands.push_back(slot[i] >= 0 ? loads[slot[i]] : k.constant(args[i].num));
          return k.apply(op, operands[0], operands.size() > 1 ? operands[1] : -1,
                         operands.size() > 2 ? operands[2] : -1);
        },
        std::string(scalar_op_spelling(op)));
    return Value::tensor(y);
  } catch (const std::invalid_argument& e) {
    fail(site, range, fmt::format("'{}': {}", scalar_op_spelling(op), e.what()));
  }
}

uint64_t Interpreter::next_param_seed() { return mix(options_.seed, param_counter_++); }

void Interpreter::count_iteration(SourceRange range, int64_t planned) {
  const int64_t limit =
      std::clamp<int64_t>(options_.max_loop_iterations, 0, limits::kMaxLoopIterations);
  if (planned > limit - loop_iterations_)
    fail(range, fmt::format("this loop would run {} times, but loops are unrolled while "
                            "tracing and may run at most {} iterations in all{}",
                            planned, limit,
                            loop_iterations_ > 0
                                ? fmt::format(" ({} already run)", loop_iterations_)
                                : std::string()));
  if (++loop_iterations_ > limit)
    fail(range, fmt::format("loops ran more than {} iterations in all (nested loops and loops in "
                            "called functions count together; loops are unrolled while tracing)",
                            limit));
}

namespace {

// Bytes as a reader takes them in: "3.6 PiB", "1.9 GiB", "512 B".
std::string format_bytes(int64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024 && u < 6) {
    x /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", x, units[u]);
}

// The memory of `device` in bytes (0 when unknown): the host's RAM for the CPU, the GPU's
// for CUDA.
int64_t device_memory_bytes(Device device) {
  if (device.kind == DeviceKind::cuda) {
    try {
      return cuda_device_properties(device.index).total_memory;
    } catch (const std::exception&) {
      return 0;  // no driver: the allocation reports it
    }
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<int64_t>(pages) * page;
}

}  // namespace

void Interpreter::check_tensor_size(const Shape& shape, DType dtype, SourceRange range,
                                    const std::string& what) {
  for (int64_t s : shape)
    if (s == 0) return;
  const std::string shape_text = fmt::format("{} [{}]", dtype_name(dtype), fmt::join(shape, ", "));
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n))
      fail(range, fmt::format("{} is {}: more elements than a 64-bit count holds (2^63 - 1)", what,
                              shape_text));
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(element_size(dtype)), &bytes))
    fail(range, fmt::format("{} is {}: {} elements, more bytes than a 64-bit count holds "
                            "(2^63 - 1)",
                            what, shape_text, n));
  if (!options_.allocate) return;
  const int64_t memory = device_memory_bytes(options_.device);
  if (memory > 0 && bytes > memory)
    fail(range, fmt::format("{} is {}: {} bytes ({}), more than the {} of memory on {}", what,
                            shape_text, bytes, format_bytes(bytes), format_bytes(memory),
                            options_.device.str()));
}

// ---------------------------------------------------------------------------------------
// Expressions

Value Interpreter::deref(const Value& v, SourceRange) { return v; }

Value Interpreter::eval(const Expr& e, const EnvPtr& env) {
  // Nodes a traced expression makes are tagged with it (the innermost one wins).
  if (trace_ && (e.kind == ExprKind::call || e.kind == ExprKind::binary ||
                 e.kind == ExprKind::unary || e.kind == ExprKind::index)) {
    Trace& t = *trace_;
    t.wheres.push_back({cur_, e.range, scope_});
    const int old = t.b.set_tag(static_cast<int>(t.wheres.size()) - 1);
    try {
      Value v = eval_untagged(e, env);
      // Refused here, before anything runs, with a caret under the expression that asked.
      if (v.kind == Value::Kind::tensor)
        check_tensor_size(v.t.shape, v.t.dtype, e.range, "this tensor");
      t.b.set_tag(old);
      return v;
    } catch (...) {
      t.b.set_tag(old);
      throw;
    }
  }
  return eval_untagged(e, env);
}

Value Interpreter::eval_untagged(const Expr& e, const EnvPtr& env) {
  const CallSite here{cur_, e.range};
  switch (e.kind) {
    case ExprKind::number:
      return Value::number(e.value, e.is_integer);
    case ExprKind::string:
      return Value::string(e.text);
    case ExprKind::name: {
      Value* v = env->find(e.text);
      if (!v) fail(e.range, fmt::format("unknown name '{}'", e.text));
      return *v;
    }
    case ExprKind::list: {
      std::vector<Value> items;
      for (const ExprPtr& i : e.items)
        items.push_back(eval(*i, env));
      return Value::list(std::move(items));
    }
    case ExprKind::tuple: {
      std::vector<Value> items;
      for (const ExprPtr& i : e.items)
        items.push_back(eval(*i, env));
      return Value::list(std::move(items), Value::Kind::tuple);
    }
    case ExprKind::range: {
      Value r;
      r.kind = Value::Kind::range;
      r.lo = as_int(eval(*e.items[0], env), here, e.items[0]->range, "a range bound");
      r.hi = as_int(eval(*e.items[1], env), here, e.items[1]->range, "a range bound");
      if (r.lo < -(int64_t{1} << 62) || r.hi > (int64_t{1} << 62))
        fail(e.range, fmt::format("a range's bounds must lie within +-2^62, got {}..{}", r.lo, r.hi));
      return r;
    }
    case ExprKind::comprehension: {
      const Value it = eval(*e.items[1], env);
      std::vector<Value> out;
      auto scope = Env::child(env);
      auto each = [&](const Value& x) {
        scope->vars[e.text] = x;
        out.push_back(eval(*e.items[0], scope));
      };
      if (it.kind == Value::Kind::range) {
        for (int64_t i = it.lo; i < it.hi; ++i) {
          count_iteration(e.items[1]->range, it.hi - i);
          each(Value::number(static_cast<double>(i), true));
        }
      } else if (it.kind == Value::Kind::list || it.kind == Value::Kind::tuple) {
        for (const Value& x : *it.items) {
          count_iteration(e.items[1]->range);
          each(x);
        }
      } else {
        fail(e.items[1]->range, fmt::format("cannot iterate over {}", describe(it)));
      }
      return Value::list(std::move(out));
    }
    case ExprKind::unary: {
      Value x = eval(*e.items[0], env);
      if (e.text == "+") return x;
      return elementwise(ScalarOp::neg, {x}, here, e.range);
    }
    case ExprKind::binary:
      return eval_binary(e, env);
    case ExprKind::call:
      return eval_call(e, env);
    case ExprKind::index:
      return eval_index(e, env);
    case ExprKind::attribute:
      return eval_attribute(e, env);
  }
  fail(e.range, "unsupported expression");
}

Value Interpreter::eval_binary(const Expr& e, const EnvPtr& env) {
  const CallSite here{cur_, e.range};
  Value a = eval(*e.items[0], env);
  Value b = eval(*e.items[1], env);
  const std::string& op = e.text;
  if (op == "..") {
    Value r;
    r.kind = Value::Kind::range;
    r.lo = as_int(a, here, e.items[0]->range, "a range bound");
    r.hi = as_int(b, here, e.items[1]->range, "a range bound");
    // hi - lo must not overflow where loops count their iterations.
    if (r.lo < -(int64_t{1} << 62) || r.hi > (int64_t{1} << 62))
      fail(e.range, fmt::format("a range's bounds must lie within +-2^62, got {}..{}", r.lo, r.hi));
    return r;
  }
  if (a.kind == Value::Kind::number && b.kind == Value::Kind::number) {
    if (op == "//" || op == "%") {
      if (b.num == 0) fail(e.range, "division by zero");
      const double q = std::floor(a.num / b.num);
      return Value::number(op == "//" ? q : a.num - q * b.num, a.is_int && b.is_int);
    }
    if (op == "/" && b.num == 0) fail(e.range, "division by zero");
  }
  if (op == "+" && a.kind == b.kind && (a.kind == Value::Kind::string || a.kind == Value::Kind::list)) {
    const size_t n = a.kind == Value::Kind::string ? a.str.size() + b.str.size()
                                                   : a.items->size() + b.items->size();
    if (n > static_cast<size_t>(limits::kMaxListLength))
      fail(e.range, fmt::format("'+' would make a {} of {} {}, more than the {} a script may build",
                                a.kind == Value::Kind::string ? "string" : "list", n,
                                a.kind == Value::Kind::string ? "characters" : "items",
                                limits::kMaxListLength));
    if (a.kind == Value::Kind::string) return Value::string(a.str + b.str);
    std::vector<Value> items = *a.items;
    items.insert(items.end(), b.items->begin(), b.items->end());
    return Value::list(std::move(items));
  }
  if (op == "@") {
    Trace& t = trace_or_fail(here, "'@'");
    std::vector<TensorVal> operands{as_tensor(a, here, e.items[0]->range),
                                    as_tensor(b, here, e.items[1]->range)};
    autocast_contraction(operands);
    const TensorVal &x = operands[0], &y = operands[1];
    const int64_t ka = x.shape.empty() ? -1 : x.shape.back();
    const int64_t kb = y.shape.empty() ? -1 : y.shape.size() == 1 ? y.shape[0] : y.shape[y.shape.size() - 2];
    if (x.shape.empty() || y.shape.empty() || ka != kb)
      fail(e.range, fmt::format("'@' needs the last dim of the left operand to match the {} of the "
                                "right one: ({}) @ ({})",
                                y.shape.size() == 1 ? "only dim" : "second-to-last dim",
                                fmt::join(x.shape, ", "), fmt::join(y.shape, ", ")));
    if (x.dtype != y.dtype)
      fail(e.range, fmt::format("'@' operands must share a dtype: {} @ {}", dtype_name(x.dtype),
                                dtype_name(y.dtype)));
    try {
      return Value::tensor(t.b.matmul(x, y));
    } catch (const std::invalid_argument& err) {
      fail(e.range, err.what());
    }
  }
  const auto sop = binary_op(op);
  if (!sop) fail(e.range, fmt::format("'{}' is not defined for {} and {}", op, describe(a), describe(b)));
  if ((a.kind != Value::Kind::number && a.kind != Value::Kind::tensor && a.kind != Value::Kind::param) ||
      (b.kind != Value::Kind::number && b.kind != Value::Kind::tensor && b.kind != Value::Kind::param)) {
    if ((op == "==" || op == "!=") && a.kind == Value::Kind::string && b.kind == Value::Kind::string)
      return Value::number((a.str == b.str) == (op == "=="), true);
    fail(e.range, fmt::format("'{}' is not defined for {} and {}", op, describe(a), describe(b)));
  }
  return elementwise(*sop, {a, b}, here, e.range);
}

Value Interpreter::eval_attribute(const Expr& e, const EnvPtr& env) {
  Value obj = eval(*e.items[0], env);
  if (obj.kind == Value::Kind::object) {
    auto it = obj.object->env->vars.find(e.text);
    if (it == obj.object->env->vars.end())
      fail(e.range, fmt::format("{} has no member '{}'{}", describe(obj), e.text,
                                obj.object->order.empty()
                                    ? std::string()
                                    : fmt::format(" (members: {})", fmt::join(obj.object->order, ", "))));
    return it->second;
  }
  if ((obj.kind == Value::Kind::tensor || obj.kind == Value::Kind::param) && e.text == "shape") {
    const Shape s = obj.kind == Value::Kind::tensor ? obj.t.shape : obj.param->shape;
    std::vector<Value> dims;
    for (int64_t d : s)
      dims.push_back(Value::number(static_cast<double>(d), true));
    return Value::list(std::move(dims), Value::Kind::tuple);
  }
  if (obj.kind == Value::Kind::record) {  // finfo("bf16").eps, iinfo("i8").max
    auto it = obj.record->numbers.find(e.text);
    if (it == obj.record->numbers.end()) {
      std::vector<std::string> names;
      for (const auto& [name, value] : obj.record->numbers) names.push_back(name);
      fail(e.range, fmt::format("{} has no member '{}' (members: {})", describe(obj), e.text,
                                fmt::join(names, ", ")));
    }
    const double v = it->second;
    return Value::number(v, v == std::floor(v) && std::abs(v) < 0x1p53);
  }
  if (obj.kind == Value::Kind::tensor || obj.kind == Value::Kind::param) {
    // The sizes PyTorch's memory accounting reads: x.ndim, x.numel, x.itemsize (bytes per
    // element), x.nbytes (numel · itemsize; a view counts its own elements, as torch's does).
    const Shape s = obj.kind == Value::Kind::tensor ? obj.t.shape : obj.param->shape;
    const DType dt = obj.kind == Value::Kind::tensor ? obj.t.dtype : obj.param->dtype;
    const auto numel = static_cast<double>(checked_numel(s));
    const auto itemsize = static_cast<double>(element_size(dt));
    if (e.text == "ndim") return Value::number(static_cast<double>(s.size()), true);
    if (e.text == "numel") return Value::number(numel, true);
    if (e.text == "itemsize") return Value::number(itemsize, true);
    if (e.text == "nbytes") return Value::number(numel * itemsize, true);
  }
  // x.T reverses every dim (numpy's and torch's .T; a 0-d or 1-d tensor stays as it is);
  // x.mT swaps the last two (torch's .mT: a batch of matrices transposed). Both are views.
  if ((obj.kind == Value::Kind::tensor || obj.kind == Value::Kind::param) &&
      (e.text == "T" || e.text == "mT")) {
    const CallSite here{cur_, e.range};
    Trace& t = trace_or_fail(here, "." + e.text);
    const TensorVal x = as_tensor(obj, here, e.items[0]->range);
    const size_t n = x.shape.size();
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    if (e.text == "T") {
      std::reverse(order.begin(), order.end());
    } else {
      if (n < 2)
        fail(e.range, fmt::format(".mT transposes the last two dims of a tensor of at least 2 "
                                  "dims; this one has {}", n));
      std::swap(order[n - 2], order[n - 1]);
    }
    return Value::tensor(t.b.permute(x, order));
  }
  fail(e.range, fmt::format("{} has no member '{}'{}", describe(obj), e.text,
                            obj.kind == Value::Kind::tensor || obj.kind == Value::Kind::param
                                ? " (a tensor has shape, ndim, numel, itemsize, nbytes, T and mT)"
                                : ""));
}

Value Interpreter::eval_index(const Expr& e, const EnvPtr& env) {
  const CallSite here{cur_, e.range};
  Value obj = eval(*e.items[0], env);
  if (obj.kind == Value::Kind::list || obj.kind == Value::Kind::tuple) {
    if (e.indices.size() != 1 || e.indices[0].kind != IndexItem::Kind::single)
      fail(e.range, "a list takes one integer index");
    int64_t i = as_int(eval(*e.indices[0].value, env), here, e.indices[0].range, "a list index");
    const int64_t n = static_cast<int64_t>(obj.items->size());
    if (i < -n || i >= n)
      fail(e.indices[0].range, fmt::format("index {} is out of range for a list of {}", i, n));
    return (*obj.items)[i < 0 ? i + n : i];
  }
  if (obj.kind != Value::Kind::tensor && obj.kind != Value::Kind::param)
    fail(e.items[0]->range, fmt::format("cannot index {}", describe(obj)));
  Trace& t = trace_or_fail(here, "indexing");
  TensorVal x = as_tensor(obj, here, e.items[0]->range);
  // table[indices]: an embedding lookup (gather), when the one index is an integer tensor.
  if (e.indices.size() == 1 && e.indices[0].kind == IndexItem::Kind::single) {
    Value idx = eval(*e.indices[0].value, env);
    if (idx.kind == Value::Kind::tensor || idx.kind == Value::Kind::param) {
      const TensorVal i = as_tensor(idx, here, e.indices[0].range);
      if (kFloatDTypes.contains(i.dtype))
        fail(e.indices[0].range, fmt::format("indexing with a tensor needs integer indices, got {}",
                                             dtype_name(i.dtype)));
      if (x.shape.empty()) fail(e.range, "cannot index a 0-dim tensor");
      const TensorVal rows = t.b.gather(x, i);
      if (cur_) t.b.locate(rows, cur_->script.source, e.range);  // an index out of range: here
      return Value::tensor(rows);
    }
  }
  size_t explicit_dims = 0;
  bool ellipsis = false;
  for (const IndexItem& it : e.indices) {
    if (it.kind == IndexItem::Kind::ellipsis) {
      if (ellipsis) fail(it.range, "only one '...' per index");
      ellipsis = true;
    } else {
      ++explicit_dims;
    }
  }
  if (explicit_dims > x.shape.size())
    fail(e.range, fmt::format("too many indices ({}) for a tensor with {} dims", explicit_dims,
                              x.shape.size()));
  Shape final_shape;
  int dim = 0;
  for (const IndexItem& it : e.indices) {
    if (it.kind == IndexItem::Kind::ellipsis) {
      const size_t skip = x.shape.size() - explicit_dims;
      for (size_t k = 0; k < skip; ++k)
        final_shape.push_back(x.shape[dim++]);
      continue;
    }
    const int64_t n = x.shape[dim];
    auto bound = [&](const ExprPtr& b, int64_t fallback) {
      if (!b) return fallback;
      int64_t v = as_int(eval(*b, env), here, b->range, "an index");
      if (v < 0) v += n;
      return std::clamp<int64_t>(v, 0, n);
    };
    if (it.kind == IndexItem::Kind::single) {
      int64_t i = as_int(eval(*it.value, env), here, it.range, "an index");
      if (i < -n || i >= n)
        fail(it.range, fmt::format("index {} is out of range for a dim of size {}", i, n));
      if (i < 0) i += n;
      x = t.b.slice(x, dim, i, i + 1);
    } else {
      const int64_t start = bound(it.start, 0), stop = std::max(start, bound(it.stop, n));
      int64_t step = 1;
      if (it.step) {  // a positive step only, as torch (numpy's negative steps are refused)
        step = as_int(eval(*it.step, env), here, it.step->range, "a slice step");
        if (step < 1)
          fail(it.step->range,
               fmt::format("a slice step must be positive (got {}), as in torch", step));
      }
      x = t.b.slice(x, dim, start, stop, step);
      final_shape.push_back(x.shape[dim]);
    }
    ++dim;
  }
  for (size_t d = dim; d < x.shape.size(); ++d)
    final_shape.push_back(x.shape[d]);
  return Value::tensor(t.b.reshape(x, final_shape));
}

Value Interpreter::eval_call(const Expr& e, const EnvPtr& env) {
  Value callee = eval(*e.items[0], env);
  std::vector<CallArg> args;
  for (const Arg& a : e.args)
    args.push_back({a.name, eval(*a.value, env), a.value->range});
  return call(callee, std::move(args), CallSite{cur_, e.range});
}

// ---------------------------------------------------------------------------------------
// Statements

bool Interpreter::exec(const std::vector<Stmt>& body, const EnvPtr& env, Value& result) {
  for (const Stmt& s : body) {
    const CallSite here{cur_, s.range};
    switch (s.kind) {
      case Stmt::Kind::assign: {
        Value v = eval(*s.value, env);
        if (s.targets.size() == 1) {
          env->vars[s.targets[0]] = v;
          break;
        }
        if ((v.kind != Value::Kind::tuple && v.kind != Value::Kind::list) ||
            v.items->size() != s.targets.size())
          fail(s.value->range, fmt::format("cannot unpack {} into {} names", describe(v), s.targets.size()));
        for (size_t i = 0; i < s.targets.size(); ++i)
          env->vars[s.targets[i]] = (*v.items)[i];
        break;
      }
      case Stmt::Kind::aug_assign: {
        Value* old = env->find(s.targets[0]);
        if (!old) fail(s.target_ranges[0], fmt::format("unknown name '{}'", s.targets[0]));
        Value rhs = eval(*s.value, env);
        const auto op = binary_op(s.op);
        env->vars[s.targets[0]] = elementwise(*op, {*old, rhs}, here, s.range);
        break;
      }
      case Stmt::Kind::expr:
        eval(*s.value, env);
        break;
      case Stmt::Kind::for_loop: {
        const Value it = eval(*s.value, env);
        if (it.kind == Value::Kind::range) {
          for (int64_t i = it.lo; i < it.hi; ++i) {
            count_iteration(s.value->range, it.hi - i);
            env->vars[s.targets[0]] = Value::number(static_cast<double>(i), true);
            if (exec(s.body, env, result)) return true;
          }
        } else if (it.kind == Value::Kind::list || it.kind == Value::Kind::tuple) {
          const std::vector<Value> items = *it.items;  // the body may rebind the list
          for (const Value& x : items) {
            count_iteration(s.value->range);
            env->vars[s.targets[0]] = x;
            if (exec(s.body, env, result)) return true;
          }
        } else {
          fail(s.value->range, fmt::format("cannot iterate over {}", describe(it)));
        }
        break;
      }
      case Stmt::Kind::return_:
        result = s.value ? eval(*s.value, env) : Value{};
        return true;
    }
  }
  return false;
}

}  // namespace ein::script
