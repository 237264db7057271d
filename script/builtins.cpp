// The builtins of `.ein` scripts (docs/language.md, "Builtins"): elementwise math, reductions,
// the einops ops, matmul helpers, masks, constructors and casts; the builtins that make records
// (initialisers, data, schedules) are in builtin_records.cpp. Tensor builtins append Graph IR through the active
// trace; on numbers the math builtins compute directly.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/patterns.h>
#include <fmt/format.h>

#include "script/builtin_args.h"
#include "script/interp.h"

namespace ein::script {
namespace {


/// Sizes given as separate arguments or as one list/tuple: zeros(B, D), zeros(x.shape).
Shape sizes_of(Interpreter& in, std::vector<CallArg>& args, const CallSite& site,
               const std::string& fn, std::vector<CallArg>* rest = nullptr) {
  Shape shape;
  for (CallArg& a : args) {
    if (!a.name.empty()) {
      if (rest) rest->push_back(a);
      continue;
    }
    if (a.value.kind == Value::Kind::tuple || a.value.kind == Value::Kind::list) {
      for (const Value& v : *a.value.items)
        shape.push_back(in.as_int(v, site, a.range, fn + "'s size"));
    } else {
      shape.push_back(in.as_int(a.value, site, a.range, fn + "'s size"));
    }
  }
  for (int64_t s : shape)
    if (s < 0) in.fail(site, site.range, fmt::format("{}: negative size {}", fn, s));
  return shape;
}


int normalize_dim(Args& a, size_t slot, int64_t d, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (d < -r || d >= r)
    a.fail(slot, fmt::format("dim {} is out of range for a tensor with {} dims", d, rank));
  return static_cast<int>(d < 0 ? d + r : d);
}

/// Dims from `dim` (an int, a list of ints, or absent: all).
std::vector<int> dims_arg(Args& a, size_t slot, size_t rank) {
  std::vector<int> dims;
  if (!a.has(slot) || a.value(slot).kind == Value::Kind::none) {
    for (size_t d = 0; d < rank; ++d)
      dims.push_back(static_cast<int>(d));
    return dims;
  }
  const Value& v = a.value(slot);
  if (v.kind == Value::Kind::list || v.kind == Value::Kind::tuple) {
    for (const Value& x : *v.items) {
      if (x.kind != Value::Kind::number) a.fail(slot, "dims must be integers");
      dims.push_back(normalize_dim(a, slot, static_cast<int64_t>(x.num), rank));
    }
  } else {
    dims.push_back(normalize_dim(a, slot, a.integer(slot), rank));
  }
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end()) a.fail(slot, "a dim is repeated");
  return dims;
}

/// A string argument as written: its text and where its literal is.
struct Literal {
  std::string text;
  SourceRange range;
};

/// Throws `e`, an error with a caret in a pattern string, moved into the script when that
/// string is one of `literals` written as a plain literal there (the caret then lands in the
/// .ein file), else as it is. The notes follow; `call`, when given, is noted as the call that
/// met the error.
[[noreturn]] void rethrow_in_script(const UserError& e, const CallSite& site,
                                    const std::vector<Literal>& literals,
                                    const CallSite* call = nullptr) {
  for (const Literal& l : literals) {
    const std::string_view written = site.unit->script.source->slice(l.range);
    if (!e.source() || e.source()->text() != l.text || written.size() != l.text.size() + 2 ||
        written.substr(1, l.text.size()) != l.text)
      continue;
    const SourceRange r{l.range.begin + 1 + e.range().begin, l.range.begin + 1 + e.range().end};
    UserError moved(e.message(), site.unit->script.source, r);
    for (const DiagnosticNote& n : e.notes())
      moved.note(n.text);
    if (call && call->unit) moved.note_at("in this call", call->unit->script.source, call->range);
    throw moved;
  }
  if (!call || !call->unit) throw e;
  UserError noted = e;
  noted.note_at("in this call", call->unit->script.source, call->range);
  throw noted;
}

/// The einops ops: the pattern's own UserError (caret in the pattern) is moved into the
/// script when the string literal is plain, so the caret lands in the .ein file.
Value pattern_op(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, PatternOp op,
                 const std::string& fn) {
  std::vector<TensorVal> xs;
  std::string pattern;
  SourceRange pattern_range = site.range;
  std::vector<AxisSize> sizes;
  Reduction reduction = Reduction::none;
  std::optional<int64_t> ddof;
  int strings = 0;
  for (CallArg& a : args) {
    if (!a.name.empty()) {
      if (a.name == "ddof") {
        ddof = in.as_int(a.value, site, a.range, "ddof");
        continue;
      }
      sizes.push_back({a.name, in.as_int(a.value, site, a.range, fmt::format("axis size {}", a.name))});
      continue;
    }
    if (a.value.kind == Value::Kind::string) {
      if (strings == 0) {
        pattern = a.value.str;
        pattern_range = a.range;
      } else if (op == PatternOp::reduce && strings == 1) {
        const auto r = parse_reduction(a.value.str);
        if (!r || *r == Reduction::none)
          in.fail(site, a.range, fmt::format("unknown reduction '{}'; expected one of min, max, sum, "
                                             "mean, prod, logsumexp, var, std",
                                             a.value.str));
        reduction = *r;
      } else {
        in.fail(site, a.range, fmt::format("{}() takes one pattern string", fn));
      }
      ++strings;
      continue;
    }
    if (a.value.kind == Value::Kind::list && op == PatternOp::rearrange) {
      for (const Value& v : *a.value.items)
        xs.push_back(in.as_tensor(v, site, a.range));
      continue;
    }
    xs.push_back(in.as_tensor(a.value, site, a.range));
  }
  if (pattern.empty()) in.fail(site, site.range, fmt::format("{}() needs a pattern string", fn));
  if (xs.empty()) in.fail(site, site.range, fmt::format("{}() needs a tensor", fn));
  if (op == PatternOp::reduce && reduction == Reduction::none)
    in.fail(site, site.range, "reduce() needs a reduction: reduce(x, \"b s d -> b s\", \"mean\")");
  if (op != PatternOp::einsum && xs.size() > 1 && op != PatternOp::rearrange)
    in.fail(site, site.range, fmt::format("{}() takes one tensor", fn));
  if (op == PatternOp::einsum) in.autocast_contraction(xs);
  for (const TensorVal& x : xs)
    if (x.dtype != xs.front().dtype)
      in.fail(site, site.range, fmt::format("{}(): operands must share a dtype ({} and {})", fn,
                                            dtype_name(xs.front().dtype), dtype_name(x.dtype)));
  Trace& t = in.trace_or_fail(site, fn + "()");
  try {
    if (op == PatternOp::rearrange && xs.size() > 1) {
      // A list input: stack along a new first axis, as einops does.
      std::vector<TensorVal> parts;
      Shape one = xs.front().shape;
      one.insert(one.begin(), 1);
      for (const TensorVal& x : xs) {
        if (x.shape != xs.front().shape)
          in.fail(site, site.range, "rearrange of a list needs tensors of one shape");
        parts.push_back(t.b.reshape(x, one));
      }
      xs = {t.b.concat(parts, 0)};
    }
    return Value::tensor(t.b.pattern(op, pattern, xs, sizes, reduction, ddof));
  } catch (const UserError& e) {
    rethrow_in_script(e, site, {{pattern, pattern_range}});
  }
}

/// `EinMix(pattern, weight_shape = "...", bias_shape = "...", name = size, ...)`: einops'
/// layer as a module object (its parameters `weight` and `bias`), planned by resolve_einmix
/// (compiler/sema/einmix_sema.cpp) when it is made; calling it traces the plan's steps. Its
/// errors, and those of an input that does not fit the pattern, point into the call's strings.
Value einmix(Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
  EinMixRequest req;
  std::vector<Literal> literals;
  bool has_pattern = false, has_weight = false;
  for (CallArg& a : args) {
    const auto text = [&](const char* what) {
      if (a.value.kind != Value::Kind::string)
        in.fail(site, a.range, fmt::format("EinMix(): {} must be a string", what));
      literals.push_back({a.value.str, a.range});
      return a.value.str;
    };
    if (a.name.empty()) {
      if (has_pattern) in.fail(site, a.range, "EinMix() takes one pattern; the rest by keyword");
      req.pattern = text("the pattern");
      has_pattern = true;
    } else if (a.name == "weight_shape") {
      req.weight = text("weight_shape");
      has_weight = true;
    } else if (a.name == "bias_shape") {
      req.bias = text("bias_shape");
    } else {
      req.sizes.push_back(
          {a.name, in.as_int(a.value, site, a.range, fmt::format("axis size {}", a.name))});
    }
  }
  if (!has_pattern || !has_weight)
    in.fail(site, site.range,
            "EinMix() needs a pattern and weight_shape: EinMix(\"b t c -> b t d\", "
            "weight_shape = \"c d\", bias_shape = \"d\", c = 64, d = 128)");
  EinMixPlan plan;
  try {
    plan = resolve_einmix(req);
  } catch (const UserError& e) {
    rethrow_in_script(e, site, literals);
  }
  static const auto cls = [] {
    auto decl = std::make_shared<Decl>();
    decl->kind = Decl::Kind::module;
    decl->name = "EinMix";
    auto c = std::make_shared<ClassDef>();
    c->decl = decl.get();
    return std::make_pair(decl, std::shared_ptr<const ClassDef>(c));
  }();
  auto obj = std::make_shared<Object>();
  obj->cls = cls.second;
  obj->env = std::make_shared<Env>();
  const Value weight = in.uniform_parameter("weight", plan.weight_shape, -plan.weight_bound,
                                            plan.weight_bound, site.range);
  obj->env->vars["weight"] = weight;
  obj->order.push_back("weight");
  Value bias;
  if (plan.bias_shape) {
    bias = in.uniform_parameter("bias", *plan.bias_shape, -plan.bias_bound, plan.bias_bound,
                                site.range);
    obj->env->vars["bias"] = bias;
    obj->order.push_back("bias");
  }
  const CallSite made = site;
  obj->native_forward = [req, plan, literals, made, weight, bias](
                            Interpreter& interp, std::vector<CallArg>& xs, const CallSite& call) {
    if (xs.size() != 1 || !xs[0].name.empty())
      interp.fail(call, call.range, "an EinMix layer takes one tensor");
    TensorVal x = interp.as_tensor(xs[0].value, call, xs[0].range);
    EinMixRequest fits = req;
    fits.input = x.shape;
    try {
      (void)resolve_einmix(fits);
    } catch (const UserError& e) {
      rethrow_in_script(e, made, literals, &call);
    }
    const TensorVal w = interp.as_tensor(weight, call, call.range);
    if (x.dtype != w.dtype)
      interp.fail(call, xs[0].range,
                  fmt::format("an EinMix layer's input is {} here, its weight {}",
                              dtype_name(x.dtype), dtype_name(w.dtype)));
    Trace& t = interp.trace_or_fail(call, "EinMix");
    if (plan.pre) x = t.b.pattern(PatternOp::rearrange, *plan.pre, {x}, plan.pre_sizes);
    Value y = Value::tensor(t.b.pattern(PatternOp::einsum, plan.einsum, {x, w}));
    if (bias.kind != Value::Kind::none)
      y = interp.elementwise(ScalarOp::add, {y, bias}, call, call.range);
    if (plan.post) y = Value::tensor(t.b.pattern(PatternOp::rearrange, *plan.post, {y.t}));
    return y;
  };
  Value v;
  v.kind = Value::Kind::object;
  v.object = obj;
  return v;
}

Value reduction(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, Reduction r,
                const std::string& fn) {
  // max(2, 3) on numbers is Python's max.
  if ((r == Reduction::max || r == Reduction::min) && !args.empty() &&
      std::all_of(args.begin(), args.end(), [](const CallArg& a) {
        return a.name.empty() && a.value.kind == Value::Kind::number;
      })) {
    double m = args[0].value.num;
    bool is_int = true;
    for (const CallArg& a : args) {
      m = r == Reduction::max ? std::max(m, a.value.num) : std::min(m, a.value.num);
      is_int = is_int && a.value.is_int;
    }
    return Value::number(m, is_int);
  }
  Args a(in, args, site, fn, {"x", "dim", "keepdim", "ddof"});
  const TensorVal x = a.tensor(0);
  const std::vector<int> dims = dims_arg(a, 1, x.shape.size());
  const bool keep = a.has(2) && a.number(2) != 0;
  std::optional<int64_t> ddof;
  if (r == Reduction::var || r == Reduction::std) ddof = a.integer(3, 1);
  if ((r == Reduction::mean || r == Reduction::var || r == Reduction::std ||
       r == Reduction::logsumexp) && !kFloatDTypes.contains(x.dtype))
    a.fail(0, fmt::format("{}() needs a floating tensor, got {}", fn, dtype_name(x.dtype)));
  // torch raises here too; the kernel would return its identity, ±inf, without a word.
  if (r == Reduction::max || r == Reduction::min)
    for (int d : dims)
      if (x.shape[static_cast<size_t>(d)] == 0)
        a.fail(a.has(1) ? 1 : 0,
               fmt::format("{}() over dim {} of size 0 has no value (the tensor is {}[{}]); "
                           "sum() of it is 0 and logsumexp() -inf",
                           fn, d, dtype_name(x.dtype), fmt::join(x.shape, " ")));
  return Value::tensor(a.trace().b.reduce(x, r, dims, keep, ddof));
}

Value unary(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, ScalarOp op,
            const std::string& fn) {
  Args a(in, args, site, fn, {"x"});
  return in.elementwise(op, {a.value(0)}, site, a.range(0));
}

/// A mask of the last two dims by their indices: keep where (col − row) compares to k.
Value triangle(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, bool upper,
               const std::string& fn) {
  Args a(in, args, site, fn, {"x", "diagonal"});
  const TensorVal x = a.tensor(0);
  const int64_t k = a.integer(1, 0);
  if (x.shape.size() < 2) a.fail(0, fmt::format("{}() needs a tensor with at least 2 dims", fn));
  if (std::max(x.shape.end()[-1], x.shape.end()[-2]) > kExactF32Indices &&
      (x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16))
    a.fail(0, fmt::format("{}() of a {} tensor with a dim over 2^24 = {} ({}): its indices are "
                          "compared in f32, which is exact only up to 2^24; use f64(x)",
                          fn, dtype_name(x.dtype), kExactF32Indices, fmt::join(x.shape, " x ")));
  const int rows = static_cast<int>(x.shape.size()) - 2, cols = rows + 1;
  return Value::tensor(a.trace().b.map_shaped(
      {x}, x.shape, x.dtype,
      [&](Kernel& kr, const std::vector<int>& l) {
        const int diff = kr.apply(ScalarOp::sub, kr.index(cols), kr.index(rows));
        const int keep = kr.apply(upper ? ScalarOp::ge : ScalarOp::le, diff,
                                  kr.constant(static_cast<double>(k)));
        return kr.apply(ScalarOp::where, keep, l[0], kr.constant(0));
      },
      fn));
}

Value constant_tensor(Interpreter& in, std::vector<CallArg>& args, const CallSite& site,
                      double value, const std::string& fn) {
  std::vector<CallArg> rest;
  const Shape shape = sizes_of(in, args, site, fn, &rest);
  DType dtype = DType::f32;
  for (const CallArg& r : rest) {
    if (r.name == "value" && fn == "full") value = in.as_number(r.value, site, r.range, "full's value");
    else if (r.name == "dtype" && r.value.kind == Value::Kind::string && parse_dtype_name(r.value.str))
      dtype = *parse_dtype_name(r.value.str);
    else in.fail(site, r.range, fmt::format("{}() has no parameter '{}'", fn, r.name));
  }
  Trace& t = in.trace_or_fail(site, fn + "()");
  // One element, broadcast (a stride-0 view): ones(T, T) costs 4 bytes, not 4·T² per call.
  return Value::tensor(t.b.broadcast_to(t.constant(full({}, value, dtype)), shape));
}

bool integer_dtype(DType d) {
  return d != DType::boolean && !kFloatDTypes.contains(d);
}

/// A random input of the trace (randn, rand, randint, dropout's mask): drawn afresh at each
/// call of the traced function, from the run's seed and the number of this draw.
TensorVal random_input(Trace& t, Feed f) {
  f.draw = t.draws++;
  const TensorVal v = t.b.input(f.shape, f.dtype);
  t.feeds.push_back(std::move(f));
  return v;
}

/// The `dtype = "..."` of a random factory (its only named parameter), checked for its kind.
DType random_dtype(Interpreter& in, const std::vector<CallArg>& named, const CallSite& site,
                   const std::string& fn, DType fallback) {
  DType dtype = fallback;
  for (const CallArg& r : named) {
    if (r.name != "dtype") in.fail(site, r.range, fmt::format("{}() has no parameter '{}'", fn, r.name));
    const auto d = r.value.kind == Value::Kind::string ? parse_dtype_name(r.value.str) : std::nullopt;
    if (!d || *d == DType::boolean || integer_dtype(*d) != integer_dtype(fallback))
      in.fail(site, r.range, fmt::format("{}()'s dtype must name {} dtype", fn,
                                         integer_dtype(fallback) ? "an integer" : "a floating"));
    dtype = *d;
  }
  return dtype;
}

Value random_tensor(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, bool normal) {
  const std::string fn = normal ? "randn" : "rand";
  std::vector<CallArg> named;
  const Shape shape = sizes_of(in, args, site, fn, &named);
  const DType dtype = random_dtype(in, named, site, fn, DType::f32);
  Trace& t = in.trace_or_fail(site, fn + "()");
  Feed f;
  f.kind = normal ? Feed::Kind::normal : Feed::Kind::uniform;
  f.shape = shape;
  f.dtype = dtype;
  return Value::tensor(random_input(t, std::move(f)));
}

/// randint(low, high, sizes..., dtype = "i64"): integers uniform in [low, high), fresh per call
/// of the traced function: ein::randint with the seed of that draw (as randn is ein::randn's).
Value randint_tensor(Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
  if (args.size() < 2 || !args[0].name.empty() || !args[1].name.empty())
    in.fail(site, site.range, "randint(low, high, sizes...) takes low and high first");
  const int64_t low = in.as_int(args[0].value, site, args[0].range, "randint's low");
  const int64_t high = in.as_int(args[1].value, site, args[1].range, "randint's high");
  if (!(low < high))
    in.fail(site, args[1].range, fmt::format("randint(): low ({}) must be below high ({})", low, high));
  std::vector<CallArg> sizes(args.begin() + 2, args.end()), named;
  const Shape shape = sizes_of(in, sizes, site, "randint", &named);
  const DType dtype = random_dtype(in, named, site, "randint", DType::i64);
  Trace& t = in.trace_or_fail(site, "randint()");
  Feed f;
  f.kind = Feed::Kind::randint;
  f.shape = shape;
  f.dtype = dtype;
  f.low = low;
  f.high = high;
  return Value::tensor(random_input(t, std::move(f)));
}

Value cast_to(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, DType dtype,
              const std::string& fn) {
  Args a(in, args, site, fn, {"x"});
  if (a.value(0).kind == Value::Kind::number) return a.value(0);
  return Value::tensor(a.trace().b.cast(a.tensor(0), dtype));
}

std::map<std::string, BuiltinFn> make_table() {
  std::map<std::string, BuiltinFn> tab;
  const std::pair<const char*, ScalarOp> unaries[] = {
      {"exp", ScalarOp::exp},         {"log", ScalarOp::log},
      {"sqrt", ScalarOp::sqrt},       {"rsqrt", ScalarOp::rsqrt},
      {"tanh", ScalarOp::tanh},       {"sigmoid", ScalarOp::sigmoid},
      {"relu", ScalarOp::relu},       {"gelu", ScalarOp::gelu},
      {"gelu_tanh", ScalarOp::gelu_tanh}, {"silu", ScalarOp::silu},
      {"abs", ScalarOp::abs},         {"sin", ScalarOp::sin},
      {"cos", ScalarOp::cos},         {"erf", ScalarOp::erf},
      {"square", ScalarOp::square},   {"sign", ScalarOp::sign},
      {"reciprocal", ScalarOp::reciprocal},
      {"floor", ScalarOp::floor},     {"ceil", ScalarOp::ceil},
      {"round", ScalarOp::round},     {"trunc", ScalarOp::trunc}};
  for (const auto& [name, op] : unaries) {
    const std::string n = name;
    const ScalarOp o = op;
    tab[n] = [n, o](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
      return unary(in, args, site, o, n);
    };
  }
  const std::pair<const char*, ScalarOp> binaries[] = {
      {"maximum", ScalarOp::maximum}, {"minimum", ScalarOp::minimum}, {"pow", ScalarOp::pow}};
  for (const auto& [name, op] : binaries) {
    const std::string n = name;
    const ScalarOp o = op;
    tab[n] = [n, o](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
      Args a(in, args, site, n, {"a", "b"});
      return in.elementwise(o, {a.value(0), a.value(1)}, site, site.range);
    };
  }
  tab["where"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "where", {"condition", "x", "y"});
    return in.elementwise(ScalarOp::where, {a.value(0), a.value(1), a.value(2)}, site, site.range);
  };
  const std::pair<const char*, Reduction> reductions[] = {
      {"sum", Reduction::sum},   {"mean", Reduction::mean}, {"max", Reduction::max},
      {"min", Reduction::min},   {"prod", Reduction::prod}, {"logsumexp", Reduction::logsumexp},
      {"var", Reduction::var},   {"std", Reduction::std}};
  for (const auto& [name, r] : reductions) {
    const std::string n = name;
    const Reduction red = r;
    tab[n] = [n, red](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
      return reduction(in, args, site, red, n);
    };
  }
  tab["EinMix"] = einmix;
  tab["rearrange"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return pattern_op(in, args, site, PatternOp::rearrange, "rearrange");
  };
  tab["reduce"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return pattern_op(in, args, site, PatternOp::reduce, "reduce");
  };
  tab["repeat"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return pattern_op(in, args, site, PatternOp::repeat, "repeat");
  };
  tab["einsum"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return pattern_op(in, args, site, PatternOp::einsum, "einsum");
  };
  tab["matmul"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "matmul", {"a", "b"});
    const TensorVal x = a.tensor(0), y = a.tensor(1);
    try {
      return Value::tensor(a.trace().b.matmul(x, y));
    } catch (const std::exception& e) {
      a.fail(0, e.what());
    }
  };
  tab["triu"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return triangle(in, args, site, true, "triu");
  };
  tab["tril"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return triangle(in, args, site, false, "tril");
  };
  tab["arange"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "arange", {"n", "dtype"});
    const int64_t n = a.integer(0);
    if (n < 0) a.fail(0, "arange() needs n >= 0");
    const std::string dt = a.string(1, std::string("f32"));
    const auto dtype = parse_dtype_name(dt);
    if (!dtype) a.fail(1, fmt::format("unknown dtype '{}'", dt));
    return Value::tensor(a.trace().arange(n, *dtype));
  };
  // transpose(x, dim0, dim1): torch.transpose, a view (negative dims count from the end).
  tab["transpose"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "transpose", {"x", "dim0", "dim1"});
    const TensorVal x = a.tensor(0);
    const auto n = static_cast<int64_t>(x.shape.size());
    int64_t d[2];
    for (size_t k = 0; k < 2; ++k) {
      const int64_t v = a.integer(k + 1, n >= 2 ? (k == 0 ? n - 2 : n - 1) : 0);
      d[k] = v < 0 ? v + n : v;
      if (d[k] < 0 || d[k] >= n)
        a.fail(k + 1, fmt::format("transpose(): dim {} is out of range for a tensor of {} dims", v, n));
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::swap(order[static_cast<size_t>(d[0])], order[static_cast<size_t>(d[1])]);
    return Value::tensor(a.trace().b.permute(x, order));
  };
  // tensor([[1, 2], [3, 4]], dtype = "f32"): a literal (nested lists of numbers, rectangular).
  tab["tensor"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "tensor", {"data", "dtype"});
    std::vector<double> flat;
    Shape shape;
    bool integral = true;
    std::function<void(const Value&, size_t)> walk = [&](const Value& v, size_t depth) {
      if (v.kind == Value::Kind::number) {
        if (depth != shape.size() && !(depth == 0 && shape.empty()))
          a.fail(0, "tensor(): the nested lists are not rectangular");
        flat.push_back(v.num);
        integral = integral && v.is_int;
        return;
      }
      if (v.kind != Value::Kind::list && v.kind != Value::Kind::tuple)
        a.fail(0, "tensor() takes numbers in nested lists, e.g. tensor([[1, 2], [3, 4]])");
      const auto n = static_cast<int64_t>(v.items->size());
      if (depth == shape.size()) {
        if (!flat.empty()) a.fail(0, "tensor(): the nested lists are not rectangular");
        shape.push_back(n);
      } else if (shape[depth] != n) {
        a.fail(0, "tensor(): the nested lists are not rectangular");
      }
      for (const Value& item : *v.items)
        walk(item, depth + 1);
    };
    walk(a.value(0), 0);
    const std::string dt = a.string(1, std::string(integral ? "i64" : "f32"));
    const auto dtype = parse_dtype_name(dt);
    if (!dtype) a.fail(1, fmt::format("unknown dtype '{}'", dt));
    return Value::tensor(a.trace().constant(from_data(flat, shape).to(*dtype)));
  };
  tab["zeros"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    if (args.empty()) return record("zeros");
    return constant_tensor(in, args, site, 0, "zeros");
  };
  tab["ones"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    if (args.empty()) return record("ones");
    return constant_tensor(in, args, site, 1, "ones");
  };
  tab["full"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return constant_tensor(in, args, site, 0, "full");
  };
  tab["randn"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return random_tensor(in, args, site, true);
  };
  tab["rand"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return random_tensor(in, args, site, false);
  };
  tab["randint"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    return randint_tensor(in, args, site);
  };
  // finfo("bf16"), iinfo("i8"): a dtype's limits as torch.finfo / torch.iinfo give them, read
  // as members: finfo("f16").max, .eps, .tiny (smallest normal), .smallest_subnormal, .bits,
  // .resolution, .min; iinfo("i8").min, .max, .bits.
  tab["finfo"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "finfo", {"dtype"});
    const std::string name = a.string(0);
    const auto d = parse_dtype_name(name);
    if (!d || integer_dtype(*d) || *d == DType::boolean)
      a.fail(0, fmt::format("finfo(): '{}' is not a floating dtype (iinfo() takes integers)", name));
    const FloatInfo f = finfo(*d);
    Value v = record("finfo(" + std::string(dtype_name(*d)) + ")");
    v.record->numbers = {{"bits", f.bits}, {"eps", f.eps}, {"max", f.max}, {"min", f.min},
                         {"tiny", f.tiny}, {"smallest_normal", f.tiny},
                         {"smallest_subnormal", f.smallest_subnormal},
                         {"resolution", f.resolution}};
    return v;
  };
  tab["iinfo"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "iinfo", {"dtype"});
    const std::string name = a.string(0);
    const auto d = parse_dtype_name(name);
    if (!d || !integer_dtype(*d))
      a.fail(0, fmt::format("iinfo(): '{}' is not an integer dtype (finfo() takes floats)", name));
    const IntInfo i = iinfo(*d);
    Value v = record("iinfo(" + std::string(dtype_name(*d)) + ")");
    v.record->numbers = {{"bits", i.bits}, {"min", static_cast<double>(i.min)},
                         {"max", static_cast<double>(i.max)}};
    return v;
  };
  tab["dropout"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "dropout", {"x", "p"});
    const double p = a.number(1, 0.1);
    if (p < 0 || p >= 1) a.fail(1, "dropout's p must be in [0, 1)");
    Trace& t = a.trace();
    const TensorVal x = a.tensor(0);
    if (!t.training || p == 0) return Value::tensor(x);
    Feed f;
    f.kind = Feed::Kind::uniform;
    f.shape = x.shape;
    f.dtype = x.dtype;
    const TensorVal r = random_input(t, std::move(f));
    return Value::tensor(t.b.map({x, r}, x.dtype,
                                 [p](Kernel& k, const std::vector<int>& l) {
                                   const int keep = k.apply(ScalarOp::ge, l[1], k.constant(p));
                                   const int scaled = k.apply(ScalarOp::mul, l[0], k.constant(1 / (1 - p)));
                                   return k.apply(ScalarOp::where, keep, scaled, k.constant(0));
                                 },
                                 "dropout"));
  };
  tab["pick"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    // x[..., idx]: the entry of the last dim that idx names, per row (cross-entropy's target).
    Args a(in, args, site, "pick", {"x", "index"});
    const TensorVal x = a.tensor(0), idx = a.tensor(1);
    if (x.shape.empty() || Shape(x.shape.begin(), x.shape.end() - 1) != idx.shape)
      a.fail(1, fmt::format("pick(x, index) needs index shaped like x without its last dim: x is "
                            "({}), index is ({})",
                            fmt::join(x.shape, ", "), fmt::join(idx.shape, ", ")));
    if (kFloatDTypes.contains(idx.dtype)) a.fail(1, "pick() needs integer indices");
    if (x.shape.back() > kExactF32Indices && x.dtype != DType::f64 && x.dtype != DType::i64)
      a.fail(0, fmt::format("pick() over {} classes: a {} x compares class indices in f32, exact "
                            "only up to 2^24 = {}; pick from f64(x)",
                            x.shape.back(), dtype_name(x.dtype), kExactF32Indices));
    Trace& t = a.trace();
    Shape col = idx.shape;
    col.push_back(1);
    const int last = static_cast<int>(x.shape.size()) - 1;
    const TensorVal masked = t.b.map_shaped(
        {x, t.b.reshape(idx, col)}, x.shape, x.dtype,
        [last](Kernel& k, const std::vector<int>& l) {
          const int hit = k.apply(ScalarOp::eq, k.index(last), l[1]);
          return k.apply(ScalarOp::where, hit, l[0], k.constant(0));
        },
        "pick");
    return Value::tensor(t.b.reduce(masked, Reduction::sum, {last}, false));
  };
  tab["cat"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "cat", {"tensors", "dim"});
    const Value& list = a.value(0);
    if (list.kind != Value::Kind::list && list.kind != Value::Kind::tuple)
      a.fail(0, "cat() takes a list of tensors");
    std::vector<TensorVal> xs;
    for (const Value& v : *list.items)
      xs.push_back(in.as_tensor(v, site, a.range(0)));
    if (xs.empty()) a.fail(0, "cat() of an empty list");
    const int dim = normalize_dim(a, 1, a.integer(1, -1), xs.front().shape.size());
    for (const TensorVal& x : xs) {
      Shape s = x.shape, f = xs.front().shape;
      if (s.size() != f.size() || x.dtype != xs.front().dtype) a.fail(0, "cat() needs tensors of one rank and dtype");
      s[dim] = f[dim] = 0;
      if (s != f) a.fail(0, "cat() needs tensors that match except along dim");
    }
    return Value::tensor(a.trace().b.concat(xs, dim));
  };
  tab["size"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "size", {"x", "dim"});
    const Value& v = a.value(0);
    const Shape s = v.kind == Value::Kind::param ? v.param->shape : a.tensor(0).shape;
    const int d = normalize_dim(a, 1, a.integer(1), s.size());
    return Value::number(static_cast<double>(s[d]), true);
  };
  tab["len"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "len", {"x"});
    const Value& v = a.value(0);
    if (v.kind == Value::Kind::list || v.kind == Value::Kind::tuple)
      return Value::number(static_cast<double>(v.items->size()), true);
    if (v.kind == Value::Kind::range) return Value::number(static_cast<double>(std::max<int64_t>(0, v.hi - v.lo)), true);
    a.fail(0, "len() takes a list, tuple or range");
  };
  const std::pair<const char*, DType> casts[] = {{"f32", DType::f32}, {"f64", DType::f64},
                                                 {"bf16", DType::bf16}, {"f16", DType::f16},
                                                 {"i64", DType::i64}, {"i32", DType::i32},
                                                 {"i8", DType::i8},   {"u8", DType::u8}};
  for (const auto& [name, dtype] : casts) {
    const std::string n = name;
    const DType d = dtype;
    tab[n] = [n, d](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
      return cast_to(in, args, site, d, n);
    };
  }
  add_record_builtins(tab);
  return tab;
}

}  // namespace

const std::map<std::string, BuiltinFn>& builtin_table() {
  static const std::map<std::string, BuiltinFn> table = make_table();
  return table;
}

}  // namespace ein::script
