// The `.ein` interpreter, tracing: a function call traced into one Graph IR (its inputs fed
// from arguments, parameters, constants and random draws), run on tensors, the optimizer's
// update rule traced per parameter shape, and example inputs from annotations.
#include "script/interp.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <ein/errors.h>
#include <ein/init.h>
#include <fmt/format.h>

#include "script/support.h"
#include "api/tape.h"
#include "compiler/fuse/attention.h"
#include "compiler/fuse/cross_entropy.h"
#include "dsl/script_parser.h"

namespace ein::script {

// ---------------------------------------------------------------------------------------
// Trace

TensorVal Trace::param(const std::shared_ptr<ParamSlot>& slot) {
  if (auto it = params.find(slot.get()); it != params.end()) return it->second;
  TensorVal t = b.input(slot->shape, slot->dtype);
  Feed f;
  f.kind = Feed::Kind::param;
  f.slot = slot;
  feeds.push_back(std::move(f));
  // Mixed precision: the f32 master weight is read in the compute dtype (a cast the
  // backward turns back into an f32 gradient).
  if (compute != DType::f32 && t.dtype == DType::f32) t = b.cast(t, compute);
  params.emplace(slot.get(), t);
  return t;
}

void Interpreter::autocast_contraction(std::vector<TensorVal>& operands) {
  if (!trace_ || trace_->compute == DType::f32) return;
  for (TensorVal& x : operands)
    if (x.dtype == DType::f32) x = trace_->b.cast(x, trace_->compute);
}

TensorVal Trace::constant(Tensor t) {
  constexpr int64_t kSmall = 64;  // elements: compared byte for byte
  const bool small = t.numel() <= kSmall && t.device().kind == DeviceKind::cpu;
  if (small) {
    t = t.contiguous();
    for (const auto& [feed, value] : small_constants) {
      const Tensor& c = feeds[feed].constant;
      if (c.dtype() == t.dtype() && c.shape() == t.shape() &&
          (t.nbytes() == 0 ||
           std::memcmp(c.data_ptr(), t.data_ptr(), static_cast<size_t>(t.nbytes())) == 0))
        return value;
    }
  }
  TensorVal v = b.input(t.shape(), t.dtype());
  if (small) small_constants.emplace_back(feeds.size(), v);
  Feed f;
  f.kind = Feed::Kind::constant;
  f.constant = std::move(t);
  feeds.push_back(std::move(f));
  return v;
}

TensorVal Trace::arange(int64_t n, DType dtype) {
  TensorVal v = b.input({n}, dtype);
  Feed f;
  f.kind = Feed::Kind::arange;
  f.shape = {n};
  f.dtype = dtype;
  feeds.push_back(std::move(f));
  return v;
}

Traced Interpreter::trace(const std::shared_ptr<Closure>& fn, const std::vector<TensorType>& args,
                          bool training) {
  Trace tr(fn->qualname);
  tr.training = training;
  tr.compute = compute_;
  loop_iterations_ = 0;  // the loop budget (LoadOptions::max_loop_iterations) is per trace
  std::vector<CallArg> call_args;
  for (size_t i = 0; i < args.size(); ++i) {
    Feed f;
    f.kind = Feed::Kind::arg;
    f.index = static_cast<int>(i);
    tr.feeds.push_back(f);
    const SourceRange r = i < fn->decl->params.size() ? fn->decl->params[i].name_range : fn->decl->name_range;
    if (args[i].shape.size() > 0) {
      const Unit* outer = cur_;
      cur_ = fn->unit;
      check_tensor_size(args[i].shape, args[i].dtype, r,
                        fmt::format("argument {} of {}", i + 1, fn->qualname));
      cur_ = outer;
    }
    TensorVal in = tr.b.input(args[i].shape, args[i].dtype);
    if (compute_ != DType::f32 && in.dtype == DType::f32) in = tr.b.cast(in, compute_);
    call_args.push_back({"", Value::tensor(in), r});
  }
  Trace* saved = trace_;
  trace_ = &tr;
  const Unit* saved_unit = cur_;
  Value result;
  try {
    result = call_closure(*fn, std::move(call_args), CallSite{fn->unit, fn->decl->name_range});
  } catch (...) {
    trace_ = saved;
    cur_ = saved_unit;
    depth_ = 0;
    throw;
  }
  trace_ = saved;
  cur_ = saved_unit;
  std::vector<int> outputs;
  const CallSite site{fn->unit, fn->decl->name_range};
  std::vector<Value> values;
  if (result.kind == Value::Kind::tuple || result.kind == Value::Kind::list)
    values = *result.items;
  else
    values.push_back(result);
  for (const Value& v : values) {
    trace_ = &tr;
    TensorVal t = as_tensor(v, site, fn->decl->name_range);
    if (compute_ != DType::f32 && t.dtype == compute_) t = tr.b.cast(t, DType::f32);
    trace_ = saved;
    outputs.push_back(t.node);
  }
  Traced out;
  Graph graph = tr.b.finish(outputs);
  std::vector<int> tags = tr.b.tags();
  // The pattern-replacing passes (compiler/fuse/attention.h, cross_entropy.h); each node they
  // make keeps the source tag of the node it stands for.
  const auto replace = [&](auto&& fusion) {
    if (fusion.fused == 0) return;
    std::vector<int> remapped;
    for (int old : fusion.source)
      remapped.push_back(old >= 0 && old < static_cast<int>(tags.size()) ? tags[old] : -1);
    graph = std::move(fusion.graph);
    tags = std::move(remapped);
  };
  if (fused_attention()) replace(fuse_attention(graph));
  if (fused_cross_entropy()) replace(fuse_linear_cross_entropy(graph));
  out.graph = std::make_shared<const Graph>(std::move(graph));
  out.feeds = std::move(tr.feeds);
  out.tags = std::move(tags);
  out.wheres = std::move(tr.wheres);
  out.blocks = blocks_of(out);
  return out;
}

bool Interpreter::fused_attention() const {
  static const bool unfused = [] {
    const char* v = std::getenv("EIN_ATTENTION");
    return v != nullptr && std::string(v) == "unfused";
  }();
  return options_.fused_attention && !unfused;
}

bool Interpreter::fused_cross_entropy() const {
  static const bool unfused = [] {
    const char* v = std::getenv("EIN_CROSS_ENTROPY");
    return v != nullptr && std::string(v) == "unfused";
  }();
  return options_.fused_cross_entropy && !unfused;
}

NodeSource node_source(const Traced& t, int node) {
  const int tag = node >= 0 && node < static_cast<int>(t.tags.size()) ? t.tags[node] : -1;
  if (tag < 0) return {};
  const Where& w = t.wheres[tag];
  const Source& source = *w.unit->script.source;
  const LineCol at = source.locate(w.range.begin);
  std::string_view text = source.slice(w.range);
  text = text.substr(0, text.find('\n'));
  return {source.name(), at.line, at.column, std::string(text), w.scope};
}

std::string block_of_scope(const std::string& scope) {
  // A module path is dot-separated names, list items by position ("blocks.3.attn"): the block
  // is the path through its first list item ("blocks.3").
  size_t begin = 0;
  while (begin < scope.size()) {
    size_t end = scope.find('.', begin);
    if (end == std::string::npos) end = scope.size();
    const std::string_view part(scope.data() + begin, end - begin);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return scope.substr(0, end);
    begin = end + 1;
  }
  return {};
}

std::vector<int> blocks_of(const Traced& t) {
  std::map<std::string, int> ids;
  std::vector<int> blocks(t.graph->nodes.size(), -1);
  for (size_t i = 0; i < blocks.size() && i < t.tags.size(); ++i) {
    if (t.tags[i] < 0) continue;
    const std::string block = block_of_scope(t.wheres[t.tags[i]].scope);
    if (!block.empty()) blocks[i] = ids.emplace(block, static_cast<int>(ids.size())).first->second;
  }
  return blocks;
}

std::vector<Tensor> Interpreter::run(const Traced& t, const std::vector<Tensor>& args,
                                     uint64_t stream) {
  return run_recorded(t.graph, t.fused ? *t.fused : *t.graph, feed(t, args, stream), t.blocks,
                      t.charges.get());
}

std::vector<Tensor> Interpreter::feed(const Traced& t, const std::vector<Tensor>& args,
                                      uint64_t stream, const std::set<const ParamSlot*>& unset) {
  std::vector<Tensor> inputs;
  for (const Feed& f : t.feeds) {
    switch (f.kind) {
      case Feed::Kind::arg:
        inputs.push_back(args.at(f.index).to(options_.device));
        break;
      case Feed::Kind::param:
        if (!f.slot->tensor.defined() && !unset.count(f.slot.get())) {
          std::string name = f.slot->name;
          for (const auto& [qualified, slot] : parameter_slots())
            if (slot == f.slot.get()) name = qualified;
          throw UserError(fmt::format(
              "parameter '{}' has no value: the script was loaded without allocating "
              "(ScriptTrainOptions::allocate), and nothing gave it one since (set_parameter(), "
              "load_parameters())",
              name));
        }
        inputs.push_back(f.slot->tensor);
        break;
      case Feed::Kind::constant:
      case Feed::Kind::arange: {
        const auto make = [&] {
          return (f.kind == Feed::Kind::constant ? f.constant : ein::arange(f.shape.at(0), f.dtype))
              .to(options_.device);
        };
        if (options_.device.kind == DeviceKind::cpu) {  // nothing to move; made as it runs
          inputs.push_back(make());
          break;
        }
        if (!f.resident.defined() || f.resident.device() != options_.device) f.resident = make();
        inputs.push_back(f.resident);
        break;
      }
      case Feed::Kind::normal:
        inputs.push_back(
            randn(f.shape, f.dtype, options_.device, draw_seed(options_.seed, stream, f.draw)));
        break;
      case Feed::Kind::uniform:
        inputs.push_back(
            rand(f.shape, f.dtype, options_.device, draw_seed(options_.seed, stream, f.draw)));
        break;
      case Feed::Kind::randint:
        inputs.push_back(randint(f.low, f.high, f.shape, f.dtype, options_.device,
                                 draw_seed(options_.seed, stream, f.draw)));
        break;
    }
  }
  return inputs;
}

Traced Interpreter::trace_update(const Shape& shape, DType dtype, std::vector<std::string>& states) {
  loop_iterations_ = 0;
  if (!optimizer_) throw UserError("the train block has no optimizer (write optimizer = AdamW(lr = 1e-3))");
  const ClassDef& cls = *optimizer_->cls;
  auto it = optimizer_->env->vars.find("update");
  if (it == optimizer_->env->vars.end() || it->second.kind != Value::Kind::closure)
    throw UserError(fmt::format("optimizer {} has no fn update(p, g, t)", cls.decl->name),
                    cls.unit->script.source, cls.decl->name_range);
  Trace tr(cls.decl->name + ".update");
  states.clear();
  auto layer = Env::child(optimizer_->env);
  const TensorVal p = tr.b.input(shape, dtype), g = tr.b.input(shape, dtype);
  for (const Decl& c : cls.decl->children)
    if (c.kind == Decl::Kind::state) {
      states.push_back(c.name);
      layer->vars[c.name] = Value::tensor(tr.b.input(shape, dtype));
    }
  layer->vars["lr"] = Value::tensor(tr.b.input({}, DType::f32));
  const TensorVal t = tr.b.input({}, DType::f32);
  // The gradient as the update reads it: times a run-time factor (clipping, loss-scale
  // unscaling), in the compute type, so that scaling costs no pass of its own.
  const DType compute = dtype == DType::f64 ? DType::f64 : DType::f32;
  const TensorVal factor = tr.b.input({}, compute);
  const TensorVal scaled = tr.b.map({g, factor}, compute,
                                    [](Kernel& k, const std::vector<int>& l) {
                                      return k.apply(ScalarOp::mul, l[0], l[1]);
                                    },
                                    "grad_scale");
  Closure update = *it->second.closure;
  update.env = layer;
  Trace* saved = trace_;
  trace_ = &tr;
  const CallSite site{cls.unit, update.decl->name_range};
  std::vector<int> outputs;
  try {
    Value r = call_closure(update, {{"", Value::tensor(p), site.range}, {"", Value::tensor(scaled), site.range},
                                    {"", Value::tensor(t), site.range}},
                           site);
    if (r.kind == Value::Kind::none)
      fail(site, site.range, fmt::format("{}.update must return the new parameter", cls.decl->name));
    const EnvPtr scope = last_scope_;
    auto out = [&](const Value& v) {
      TensorVal x = as_tensor(v, site, site.range);
      if (x.shape != shape) x = tr.b.broadcast_to(x, shape);
      return tr.b.cast(x, dtype).node;
    };
    outputs.push_back(out(r));
    for (const std::string& s : states) {
      auto found = scope->vars.find(s);
      outputs.push_back(out(found != scope->vars.end() ? found->second : layer->vars[s]));
    }
  } catch (...) {
    trace_ = saved;
    throw;
  }
  trace_ = saved;
  Traced traced;
  traced.graph = std::make_shared<const Graph>(tr.b.finish(outputs));
  return traced;
}

double Interpreter::state_initial(const std::string& name) {
  if (!optimizer_) return 0;
  const ClassDef& cls = *optimizer_->cls;
  for (const Decl& c : cls.decl->children) {
    if (c.kind != Decl::Kind::state || c.name != name || !c.value) continue;
    const Unit* saved = cur_;
    cur_ = cls.unit;
    const Value v = eval(*c.value, optimizer_->env);
    if (v.kind != Value::Kind::number)
      fail(c.value->range, fmt::format("the initial value of state '{}' must be a number (every "
                                       "element starts at it), got {}",
                                       name, describe(v)));
    cur_ = saved;
    return v.num;
  }
  return 0;
}

std::vector<TensorType> Interpreter::example_types(
    const std::shared_ptr<Closure>& fn, int64_t free_size, bool distinct,
    std::vector<std::pair<std::string, int64_t>>* free) {
  std::vector<TensorType> out;
  DimMemo memo;
  std::vector<std::pair<std::string, int64_t>> unbound;  // the dims bound nowhere, in order
  auto free_dim = [&](const std::string& name) {
    unbound.emplace_back(
        name, distinct ? free_size * static_cast<int64_t>(unbound.size() + 1) : free_size);
    return unbound.back().second;
  };
  const Unit* saved = cur_;
  cur_ = fn->unit;
  // A number named in a type is its size: a non-negative integer that fits int64.
  auto check_size_value = [&](const Value* x, const std::string& name, SourceRange at) {
    if (x && x->kind == Value::Kind::number &&
        !(is_integral(x->num) && x->num >= 0 && fits_int64(x->num)))
      fail(at, fmt::format("the size '{}' in an input of {} is {}, not a size (a non-negative "
                           "integer below 2^63)",
                           name, fn->qualname, format_number(x->num)));
  };
  for (const Param& p : fn->decl->params) {
    if (!p.type)
      fail(p.name_range, fmt::format("parameter '{}' of {} has no type annotation, so ein cannot "
                                     "make an example input for it (write e.g. {}: f32[B D])",
                                     p.name, fn->qualname, p.name));
    for (const Dim& d : p.type->dims) {
      if (d.kind == DimKind::named && !memo.single(d.name)) {
        Value* x = fn->env->find(d.name);
        check_size_value(x, d.name, d.range);
        memo.bind_single(d.name, x && x->kind == Value::Kind::number ? static_cast<int64_t>(x->num)
                                                                     : free_dim(d.name));
      }
      if (d.kind == DimKind::named_variadic && !memo.variadic(d.name))
        memo.bind_variadic(d.name, VariadicSizes{{free_dim("*" + d.name)}, false});
      if (d.kind == DimKind::anonymous_variadic)
        fail(p.type->range, "an example input needs named dims; '...' has no size");
    }
    for (const std::string& name : spec_names(*p.type))
      if (!memo.single(name)) {
        Value* x = fn->env->find(name);
        check_size_value(x, name, p.type->range);
        memo.bind_single(name, x && x->kind == Value::Kind::number ? static_cast<int64_t>(x->num)
                                                                   : free_dim(name));
      }
    out.push_back({resolve_shape(*p.type, memo), spec_dtype(*p.type)});
    check_tensor_size(out.back().shape, out.back().dtype, p.type->range,
                      fmt::format("the example input '{}'", p.name));
  }
  cur_ = saved;
  if (free) *free = std::move(unbound);
  return out;
}

}  // namespace ein::script
