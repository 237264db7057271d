// The `.ein` interpreter, calls: binding arguments to parameters, checking typed signatures
// (f32[*batch in]) against the values with one dim memo per call, closures, module
// construction with parameter initialisation. Expressions and statements are eval.cpp's.
#include "script/interp.h"

#include <algorithm>
#include <cmath>

#include <ein/errors.h>
#include <ein/init.h>
#include <fmt/format.h>

#include "api/tape.h"
#include "dsl/limits.h"
#include "script/support.h"

namespace ein::script {

// ---------------------------------------------------------------------------------------
// Calls

Value Interpreter::call(const Value& callee, std::vector<CallArg> args, const CallSite& site) {
  switch (callee.kind) {
    case Value::Kind::builtin: {
      const auto& table = builtin_table();
      return table.at(callee.str)(*this, args, site);
    }
    case Value::Kind::closure:
      return call_closure(*callee.closure, std::move(args), site);
    case Value::Kind::klass:
      return construct(callee.klass, std::move(args), site);
    case Value::Kind::object: {
      if (const Object& obj = *callee.object; obj.native_forward) {
        const std::string saved_scope = scope_;
        scope_ = obj.path.empty() ? obj.cls->decl->name : obj.path;
        try {
          Value result = obj.native_forward(*this, args, site);
          scope_ = saved_scope;
          return result;
        } catch (...) {
          scope_ = saved_scope;
          throw;
        }
      }
      auto it = callee.object->env->vars.find("forward");
      if (it == callee.object->env->vars.end() || it->second.kind != Value::Kind::closure)
        fail(site, site.range, fmt::format("{} has no fn forward to call", describe(callee)));
      return call_closure(*it->second.closure, std::move(args), site);
    }
    default:
      fail(site, site.range, fmt::format("{} is not callable", describe(callee)));
  }
}

void Interpreter::bind_params(const std::vector<Param>& params, std::vector<CallArg>& args,
                              const EnvPtr& scope, const EnvPtr& defaults_env, const Unit* unit,
                              const CallSite& site, const std::string& what) {
  std::vector<bool> bound(params.size(), false);
  size_t positional = 0;
  for (CallArg& a : args) {
    size_t k = params.size();
    if (a.name.empty()) {
      k = positional++;
      if (k >= params.size())
        fail(site, a.range, fmt::format("{} takes {} argument{}, got more", what, params.size(),
                                        params.size() == 1 ? "" : "s"));
    } else {
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].name == a.name) k = i;
      if (k == params.size()) {
        std::vector<std::string> names;
        for (const Param& p : params)
          names.push_back(p.name);
        fail(site, a.range, fmt::format("{} has no parameter '{}' (it has: {})", what, a.name,
                                        fmt::join(names, ", ")));
      }
      if (bound[k]) fail(site, a.range, fmt::format("{}: '{}' given twice", what, a.name));
    }
    bound[k] = true;
    scope->vars[params[k].name] = a.value;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    if (!params[i].default_value)
      fail(site, site.range, fmt::format("{} needs an argument for '{}'", what, params[i].name));
    const Unit* saved = cur_;
    cur_ = unit;
    scope->vars[params[i].name] = eval(*params[i].default_value, defaults_env);
    cur_ = saved;
  }
}

void Interpreter::check_type(const ShapeSpec& spec, const Value& v, DimMemo& memo,
                             const EnvPtr& scope, const CallSite& site, SourceRange arg_range,
                             const std::string& label, const std::string& fn) {
  Shape shape;
  DType dtype = DType::f32;
  if (v.kind == Value::Kind::tensor) {
    shape = v.t.shape;
    dtype = v.t.dtype;
  } else if (v.kind == Value::Kind::param) {
    shape = v.param->shape;
    dtype = v.param->dtype;
  } else if (v.kind == Value::Kind::number && spec.dims.empty()) {
    return;
  } else {
    fail(site, arg_range, fmt::format("{} of {} is declared {} but got {}", label, fn,
                                      spec.source->slice(spec.range), describe(v)));
  }
  // Mixed precision: an f32 annotation also accepts the compute dtype (bf16 activations).
  if (compute_ != DType::f32 && dtype == compute_ && accepted_dtypes(spec).contains(DType::f32))
    dtype = DType::f32;
  // Dims named like a number in scope (a module's `in`, a script's `dim D`) must equal it.
  for (const std::string& name : spec_names(spec)) {
    if (memo.single(name)) continue;
    if (Value* x = scope->find(name);
        x && x->kind == Value::Kind::number && is_integral(x->num) && fits_int64(x->num))
      memo.bind_single(name, static_cast<int64_t>(x->num));
  }
  try {
    check_shape(spec, dtype, shape, memo);
  } catch (const UserError& err) {
    UserError out(fmt::format("{} of {} does not match its declaration: {}", label, fn,
                              err.message()),
                  site.unit ? site.unit->script.source : nullptr, arg_range);
    out.note_at(fmt::format("declared here as {}", spec.source->slice(spec.range)), err.source(),
                err.range());
    for (const DiagnosticNote& n : err.notes())
      if (n.source)
        out.note_at(n.text, n.source, n.range);
      else
        out.note(n.text);
    throw out;
  }
}

Value Interpreter::call_closure(const Closure& c, std::vector<CallArg> args, const CallSite& site) {
  if (++depth_ > limits::kMaxCallDepth) {
    depth_ = 0;
    fail(site, site.range, fmt::format("calls nest deeper than {} (recursion in {}?)",
                                       limits::kMaxCallDepth, c.qualname));
  }
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } guard{depth_};
  const Decl& d = *c.decl;
  auto scope = Env::child(c.env);
  bind_params(d.params, args, scope, c.env, c.unit, site, fmt::format("fn {}", c.qualname));
  DimMemo memo;
  for (size_t i = 0; i < d.params.size(); ++i) {
    if (!d.params[i].type) continue;
    SourceRange at = site.range;
    for (size_t k = 0; k < args.size(); ++k)
      if ((args[k].name.empty() && k == i) || args[k].name == d.params[i].name) at = args[k].range;
    check_type(*d.params[i].type, scope->vars[d.params[i].name], memo, c.env, site, at,
               fmt::format("argument '{}'", d.params[i].name), c.qualname);
  }
  // Sizes the annotations bound are numbers in the body: `fn f(x: f32[B T D])` can use T.
  for (const Param& p : d.params)
    if (p.type)
      for (const std::string& name : spec_names(*p.type))
        if (auto s = memo.single(name); s && !scope->find(name))
          scope->vars[name] = Value::number(static_cast<double>(*s), true);
  const Unit* saved = cur_;
  cur_ = c.unit;
  const std::string saved_scope = scope_;
  if (c.owner) scope_ = c.owner->path.empty() ? c.owner->cls->decl->name : c.owner->path;
  Value result;
  try {
    exec(d.body, scope, result);
  } catch (...) {
    scope_ = saved_scope;
    throw;
  }
  scope_ = saved_scope;
  cur_ = saved;
  last_scope_ = scope;
  if (d.type) {
    const CallSite decl_site{c.unit, d.type->range};
    try {
      check_type(*d.type, result, memo, c.env, decl_site, d.type->range, "the return value",
                 c.qualname);
    } catch (UserError& err) {
      if (site.unit) err.note_at("in this call", site.unit->script.source, site.range);
      throw;
    }
  }
  return result;
}

Value Interpreter::construct(const std::shared_ptr<const ClassDef>& cls, std::vector<CallArg> args,
                             const CallSite& site) {
  const Decl& d = *cls->decl;
  if (++depth_ > limits::kMaxCallDepth) {
    depth_ = 0;
    fail(site, site.range,
         fmt::format("{} constructions nest deeper than {} (does {} construct itself, directly or "
                     "through another module?)",
                     d.kind == Decl::Kind::module ? "module" : "optimizer", limits::kMaxCallDepth,
                     d.name));
  }
  struct Depth {
    int& d;
    ~Depth() { --d; }
  } guard{depth_};
  auto obj = std::make_shared<Object>();
  obj->cls = cls;
  obj->env = Env::child(cls->env);
  cycles_.scopes.push_back(obj->env);
  bind_params(d.params, args, obj->env, obj->env, cls->unit, site,
              fmt::format("{} {}", d.kind == Decl::Kind::module ? "module" : "optimizer", d.name));
  const Unit* saved = cur_;
  cur_ = cls->unit;
  for (const Decl& c : d.children) {
    switch (c.kind) {
      case Decl::Kind::param: {
        DimMemo memo;
        for (const std::string& name : spec_names(*c.type))
          if (Value* x = obj->env->find(name)) {
            if (x->kind != Value::Kind::number || !is_integral(x->num) || x->num < 0 ||
                !fits_int64(x->num))
              fail(c.type->range, fmt::format("the size '{}' of parameter '{}' is {}, not a size",
                                              name, c.name, describe(*x)));
            if (!memo.single(name)) memo.bind_single(name, static_cast<int64_t>(x->num));
          }
        const Shape shape = resolve_shape(*c.type, memo);
        check_tensor_size(shape, spec_dtype(*c.type), c.type->range,
                          fmt::format("parameter '{}'", c.name));
        Value init;
        if (c.value) init = eval(*c.value, obj->env);
        auto slot = std::make_shared<ParamSlot>();
        slot->name = c.name;
        slot->decl = &c;
        slot->shape = shape;
        slot->dtype = spec_dtype(*c.type);
        if (options_.allocate)
          slot->tensor = init_param(c, shape, init, obj->env);
        else
          check_initialiser(c, init);
        Value v;
        v.kind = Value::Kind::param;
        v.param = slot;
        obj->env->vars[c.name] = v;
        obj->order.push_back(c.name);
        break;
      }
      case Decl::Kind::member:
        obj->env->vars[c.name] = eval(*c.value, obj->env);
        obj->order.push_back(c.name);
        break;
      case Decl::Kind::function: {
        auto cl = std::make_shared<Closure>();
        cl->decl = &c;
        cl->env = obj->env;
        cl->unit = cls->unit;
        cl->qualname = d.name + "." + c.name;
        cl->owner = obj.get();
        Value v;
        v.kind = Value::Kind::closure;
        v.closure = cl;
        obj->env->vars[c.name] = v;
        break;
      }
      case Decl::Kind::state:
        break;  // per parameter, made by the optimizer step
      default:
        fail(c.name_range, "not allowed here");
    }
  }
  cur_ = saved;
  Value v;
  v.kind = Value::Kind::object;
  v.object = obj;
  return v;
}

Value Interpreter::uniform_parameter(std::string name, const Shape& shape, double a, double b,
                                     SourceRange range) {
  check_tensor_size(shape, DType::f32, range, fmt::format("parameter '{}'", name));
  auto slot = std::make_shared<ParamSlot>();
  slot->name = std::move(name);
  slot->shape = shape;
  init::Options o;
  o.device = options_.device;
  o.seed = next_param_seed();
  o.requires_grad = true;
  if (options_.allocate) slot->tensor = init::uniform(shape, a, b, o);
  Value v;
  v.kind = Value::Kind::param;
  v.param = std::move(slot);
  return v;
}

void Interpreter::check_initialiser(const Decl& d, const Value& init) {
  next_param_seed();  // the same seeds as an allocating load, parameter by parameter
  static const std::vector<std::string> known = {"normal", "trunc_normal", "uniform", "zeros",
                                                 "ones",   "constant"};
  if (init.kind == Value::Kind::none) return;
  if (init.kind != Value::Kind::record ||
      std::find(known.begin(), known.end(), init.record->type) == known.end())
    fail(d.value->range, fmt::format("the initialiser of '{}' must be normal(...), trunc_normal(...), "
                                     "uniform(...), zeros(), ones() or constant(...); got {}",
                                     d.name, describe(init)));
}

Tensor Interpreter::init_param(const Decl& d, const Shape& shape, const Value& init,
                               const EnvPtr&) {
  init::Options o;
  o.dtype = spec_dtype(*d.type);
  o.device = options_.device;
  o.seed = next_param_seed();
  o.requires_grad = true;
  if (init.kind == Value::Kind::none) return init::zeros(shape, o);
  if (init.kind != Value::Kind::record)
    fail(d.value->range, fmt::format("the initialiser of '{}' must be normal(...), trunc_normal(...), "
                                     "uniform(...), zeros(), ones() or constant(...); got {}",
                                     d.name, describe(init)));
  auto& n = init.record->numbers;
  const std::string& type = init.record->type;
  auto get = [&](const char* k, double fallback) { return n.count(k) ? n[k] : fallback; };
  try {
    if (type == "normal") return init::normal(shape, get("mean", 0), get("std", 1), o);
    if (type == "trunc_normal")
      return init::trunc_normal(shape, get("mean", 0), get("std", 1), get("a", -2), get("b", 2), o);
    if (type == "uniform") return init::uniform(shape, get("a", 0), get("b", 1), o);
    if (type == "zeros") return init::zeros(shape, o);
    if (type == "ones") return init::ones(shape, o);
    if (type == "constant") {
      Tensor t = full(shape, get("value", 0), o.dtype, o.device);
      t.requires_grad_();
      return t;
    }
  } catch (const RuntimeError& e) {
    fail(d.value->range, fmt::format("cannot initialise '{}': {}", d.name, e.what()));
  }
  fail(d.value->range, fmt::format("'{}' is not an initialiser", type));
}

}  // namespace ein::script
