// ein::script::Program: loading, tracing with caches, running, and the training hooks.
#include "script/script.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include <ein/errors.h>
#include <fmt/format.h>

#include <ein/autograd.h>
#include "compiler/fuse/fuse.h"
#include "compiler/graph/scalar_prelude.h"
#include "compiler/pipeline.h"
#include "exec/execute.h"
#include "script/interp.h"

namespace ein::script {
namespace {

/// UserError naming the first parameter without a value (the program was loaded without
/// allocating), for what `what` needs them all for.
void require_values(const std::vector<NamedTensor>& params, std::string_view what) {
  for (const NamedTensor& p : params)
    if (!p.tensor.defined())
      throw UserError(fmt::format("{} needs every parameter's value, and '{}' has none: the "
                                  "script was loaded without allocating",
                                  what, p.name));
}

std::string type_key(const std::string& fn, const std::vector<TensorType>& types, bool training) {
  std::string key = fn + (training ? "|train" : "|eval");
  for (const TensorType& t : types)
    key += fmt::format("|{}[{}]", dtype_name(t.dtype), fmt::join(t.shape, ","));
  return key;
}

std::vector<TensorType> types_of(const std::vector<Tensor>& xs) {
  std::vector<TensorType> out;
  for (const Tensor& x : xs)
    out.push_back({x.shape(), x.dtype()});
  return out;
}

}  // namespace

/// The optimizer's update for one parameter dtype and shape: the fused graph, split when it has
/// a scalar prelude (the step's bias corrections), which then runs once a step for every
/// update whose prelude is the same (`prelude_id`).
struct ProgramUpdate {
  std::shared_ptr<const Graph> fused;
  std::optional<ScalarPrelude> split;
  int prelude_id = -1;  ///< into ProgramState::preludes, with `split`
  std::vector<std::string> states;
};

/// A parameter's optimizer state and update.
struct ProgramParameter {
  std::vector<Tensor> states;
  const ProgramUpdate* update = nullptr;
};

/// What a Program caches between calls.
struct ProgramState {
  std::map<std::string, Traced> traced;           ///< by type_key
  std::map<std::string, ProgramUpdate> updates;   ///< by dtype + shape
  std::vector<std::string> preludes;              ///< distinct scalar preludes, as dumps
  std::map<const void*, ProgramParameter> state;  ///< per parameter (by storage identity)
  std::vector<std::string> state_names;
  uint64_t calls = 0;
};

Program::Program() = default;
Program::~Program() = default;

std::unique_ptr<Program> Program::load(const std::string& path, const LoadOptions& options) {
  std::unique_ptr<Program> p(new Program());
  p->impl_ = std::make_unique<Interpreter>(path, options);
  p->state_ = std::make_unique<ProgramState>();
  return p;
}

std::vector<std::string> Program::functions() const { return impl_->function_names(); }

Graph Program::trace(const std::string& fn, const std::vector<TensorType>& args) {
  return *impl_->trace(impl_->function(fn), args, false).graph;
}

std::vector<TensorType> Program::example_types(const std::string& fn, int64_t free_size) {
  return impl_->example_types(impl_->function(fn), free_size);
}

const Traced& Program::traced(const std::string& fn, const std::vector<TensorType>& types,
                              bool training) {
  const std::string key = type_key(fn, types, training);
  auto it = state_->traced.find(key);
  if (it == state_->traced.end()) {
    Traced t = impl_->trace(impl_->function(fn), types, training);
    CompiledGraph c = compile_graph(*t.graph, {});
    t.fused = std::make_shared<const Graph>(std::move(c.fused));  // runs fused
    t.charges = std::make_shared<const GraphCharges>(
        fused_charges(*t.fused, c.graph, c.fused_source));
    it = state_->traced.emplace(key, std::move(t)).first;
  }
  return it->second;
}

std::vector<Tensor> Program::call(const std::string& fn, const std::vector<Tensor>& args) {
  const Traced& t = traced(fn, types_of(args), false);
  return impl_->run(t, args, state_->calls++);
}

namespace {

/// Traces `fn` again with a size of its own for each dim nothing binds (8, 16, 24, ...: each
/// divisible by whatever 8 is): a function that traced with all of them 8 but fails now
/// treats two dims of different names as one (`x: f32[b d]`, `w: f32[e f]`, `x @ w`), which
/// a call with real sizes would find. The error says so.
void check_distinct_dims(Interpreter& in, const std::shared_ptr<Closure>& fn) {
  std::vector<std::pair<std::string, int64_t>> free;
  std::vector<TensorType> types;
  try {
    types = in.example_types(fn, 8, true, &free);
  } catch (const UserError&) {
    return;  // too many dims for sizes of their own to make a tensor below 2^63 bytes
  }
  if (free.size() < 2) return;
  try {
    in.trace(fn, types, false);
  } catch (UserError& e) {
    std::string sizes;
    for (const auto& [name, size] : free)
      sizes += fmt::format("{}{}={}", sizes.empty() ? "" : ", ", name, size);
    e.note(
        fmt::format("{0} traces with 8 for every dim that nothing binds, but not with a size "
                    "of its own for each ({1}), as ein check tries too: {0} treats dims of "
                    "different names as one. Give them one name, or bind them with `dim`",
                    fn->qualname, sizes));
    throw;
  }
}

}  // namespace

int Program::check_all() {
  int n = 0;
  for (const std::string& fn : functions()) {
    const auto closure = impl_->function(fn);
    if (fn == "train.batch" || closure->decl->params.empty()) {
      impl_->trace(closure, {}, false);
    } else {
      impl_->trace(closure, impl_->example_types(closure, 8), false);
      check_distinct_dims(*impl_, closure);
    }
    ++n;
  }
  return n;
}

bool Program::has_train() const { return impl_->train_env() != nullptr; }

const TrainSpec& Program::train_spec() const { return impl_->spec(); }

std::vector<NamedTensor> Program::parameters() const { return impl_->parameters(); }

void Program::set_parameter(const std::string& name, const Tensor& value) {
  impl_->set_parameter(name, value);
}

std::vector<ParamInfo> Program::parameter_info() const {
  std::map<const ParamSlot*, std::vector<std::string>> aliases;
  std::vector<ParamInfo> out;
  for (const auto& [name, slot] : impl_->parameter_slots(&aliases))
    out.push_back({name, slot->shape, slot->dtype, aliases[slot]});
  return out;
}

TraceInfo Program::trace_info(const std::string& fn, const std::vector<TensorType>& args,
                              bool training) {
  const Traced t = impl_->trace(impl_->function(fn), args, training);
  TraceInfo info;
  info.graph = *t.graph;
  info.blocks = t.blocks;
  for (size_t i = 0; i < t.graph->nodes.size(); ++i)
    info.sources.push_back(node_source(t, static_cast<int>(i)));
  std::map<const ParamSlot*, std::string> names;
  for (const auto& [name, slot] : impl_->parameter_slots())
    names[slot] = name;
  for (const Feed& f : t.feeds) {
    switch (f.kind) {
      case Feed::Kind::arg:
        info.inputs.push_back(fmt::format("arg:{}", f.index));
        break;
      case Feed::Kind::param: {
        auto it = names.find(f.slot.get());
        info.inputs.push_back("param:" + (it != names.end() ? it->second : f.slot->name));
        break;
      }
      case Feed::Kind::constant:
      case Feed::Kind::arange:
        info.inputs.push_back("constant");
        break;
      case Feed::Kind::normal:
      case Feed::Kind::uniform:
      case Feed::Kind::randint:
        info.inputs.push_back("random");
        break;
    }
  }
  return info;
}

std::vector<DimInfo> Program::dims() const {
  std::vector<DimInfo> out;
  const Unit* main = impl_->main_unit();
  for (const Decl& d : main->script.decls)
    if (d.kind == Decl::Kind::dim) {
      auto it = main->globals->vars.find(d.name);
      if (it != main->globals->vars.end() && it->second.kind == Value::Kind::number)
        out.push_back({d.name, static_cast<int64_t>(it->second.num)});
    }
  return out;
}

std::optional<OptimizerInfo> Program::optimizer_info() const {
  const std::shared_ptr<Object> opt = impl_->optimizer();
  if (!opt) return std::nullopt;
  OptimizerInfo info{opt->cls->decl->name, {}};
  for (const Decl& c : opt->cls->decl->children)
    if (c.kind == Decl::Kind::state) info.states.push_back(c.name);
  return info;
}

std::vector<Tensor> Program::make_batch(int64_t step) {
  NoGrad no_grad;
  const Traced& t = traced("train.batch", {}, false);
  return impl_->run(t, {}, static_cast<uint64_t>(step) * 2 + 1);
}

Tensor Program::loss(const std::vector<Tensor>& batch, int64_t step) {
  const Traced& t = traced("train.loss", types_of(batch), true);
  std::vector<Tensor> out = impl_->run(t, batch, static_cast<uint64_t>(step) * 2);
  if (out.size() != 1 || out[0].dim() != 0)
    throw UserError("train.loss must return one 0-dim tensor (the mean loss)");
  return out[0];
}

Tensor Program::eval_loss(const std::vector<Tensor>& batch) {
  const Traced& t = traced("train.loss", types_of(batch), false);
  std::vector<Tensor> out = impl_->run(t, batch, 0);
  if (out.size() != 1 || out[0].dim() != 0)
    throw UserError("train.loss must return one 0-dim tensor (the mean loss)");
  return out[0];
}

void Program::init_optimizer_state() {
  init_optimizer_state_of({});
}

void Program::init_optimizer_state_of(const std::vector<bool>& owned) {
  NoGrad no_grad;
  const std::vector<NamedTensor> params = parameters();
  require_values(params, "the optimizer's state");
  for (size_t i = 0; i < params.size(); ++i)
    if (owned.empty() || (i < owned.size() && owned[i])) state_for(params[i].tensor);
}

ProgramParameter& Program::state_for(const Tensor& param) {
  ProgramParameter& s = state_->state[param.autograd().get()];
  if (s.update) return s;
  const std::string key =
      fmt::format("{}[{}]", dtype_name(param.dtype()), fmt::join(param.shape(), ","));
  auto u = state_->updates.find(key);
  if (u == state_->updates.end()) {
    ProgramUpdate up;
    const Traced t = impl_->trace_update(param.shape(), param.dtype(), up.states);
    up.fused = std::make_shared<const Graph>(compile_graph(*t.graph, {}).fused);
    // inputs: the parameter, its gradient, its states, then the step's lr, t and grad scale
    const int scalars = 2 + static_cast<int>(up.states.size());
    up.split = split_scalar_prelude(*up.fused, {scalars, scalars + 1, scalars + 2});
    if (up.split) {
      std::string prelude = dump(up.split->prelude);
      for (const GraphNode& n : up.split->prelude.nodes)  // dumps do not spell kernel bodies
        if (const auto* f = std::get_if<FusedAttr>(&n.attr)) kernel_code_key(*f->kernel, prelude);
      const auto same = std::find(state_->preludes.begin(), state_->preludes.end(), prelude);
      up.prelude_id = static_cast<int>(same - state_->preludes.begin());
      if (same == state_->preludes.end()) state_->preludes.push_back(std::move(prelude));
    }
    u = state_->updates.emplace(key, std::move(up)).first;
    state_->state_names = u->second.states;
  }
  s.update = &u->second;
  if (s.states.empty())
    for (const std::string& name : u->second.states)
      s.states.push_back(
          full(param.shape(), impl_->state_initial(name), param.dtype(), param.device()));
  return s;
}

void Program::optimizer_step(int64_t t, double lr, double grad_scale) {
  NoGrad no_grad;
  const std::vector<NamedTensor> params = parameters();
  if (params.empty()) return;
  require_values(params, "an optimizer step");
  const Device device = params.front().tensor.device();
  const Tensor lr_t = full({}, lr, DType::f32, device);
  const Tensor t_t = full({}, static_cast<double>(t), DType::f32, device);
  const Tensor scale_f32 = full({}, grad_scale, DType::f32, device);
  Tensor scale_f64;  // for f64 parameters, made once they come
  // Per distinct scalar prelude, its values this step (computed for the first update to need
  // them: they depend on lr, t and the grad scale alone).
  std::vector<std::vector<Tensor>> preludes(state_->preludes.size());
  for (const NamedTensor& p : params) {
    const Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    ProgramParameter& param = state_for(p.tensor);
    const ProgramUpdate& up = *param.update;
    std::vector<Tensor> inputs{p.tensor.detach(), g};
    inputs.insert(inputs.end(), param.states.begin(), param.states.end());
    inputs.push_back(lr_t);
    inputs.push_back(t_t);
    if (p.tensor.dtype() == DType::f64 && !scale_f64.defined())
      scale_f64 = full({}, grad_scale, DType::f64, device);
    inputs.push_back(p.tensor.dtype() == DType::f64 ? scale_f64 : scale_f32);
    if (up.split) {
      if (static_cast<size_t>(up.prelude_id) >= preludes.size())
        preludes.resize(static_cast<size_t>(up.prelude_id) + 1);  // a prelude new this step
      std::vector<Tensor>& values = preludes[static_cast<size_t>(up.prelude_id)];
      if (values.empty()) values = execute(up.split->prelude, inputs);
      inputs.insert(inputs.end(), values.begin(), values.end());
    }
    // The update writes the parameter and its state in place where its kernel allows
    // (execute_into); what it could not is copied back.
    std::vector<Tensor> into{p.tensor.detach()};
    into.insert(into.end(), param.states.begin(), param.states.end());
    const Graph& graph = up.split ? up.split->rest : *up.fused;
    const std::vector<Tensor> out = execute_into(graph, std::move(inputs), into);
    for (size_t i = 0; i < into.size(); ++i)
      if (!out[i].same_storage(into[i])) into[i].copy_(out[i]);
  }
}

std::vector<NamedTensor> Program::optimizer_state() const {
  std::vector<NamedTensor> out;
  for (const NamedTensor& p : parameters()) {
    auto it = state_->state.find(p.tensor.autograd().get());
    if (it == state_->state.end()) continue;
    const std::vector<Tensor>& states = it->second.states;
    for (size_t i = 0; i < states.size(); ++i)
      out.push_back({fmt::format("optimizer.{}.{}", state_->state_names.at(i), p.name), states[i]});
  }
  return out;
}

void Program::set_compute_dtype(DType dtype) {
  impl_->set_compute_dtype(dtype);
  state_->traced.clear();
}

Tensor Program::logits(const Tensor& tokens) {
  NoGrad no_grad;
  std::string fn = "train.logits";
  bool has_logits = false;
  for (const std::string& f : functions())
    has_logits = has_logits || f == fn;
  if (!has_logits) throw UserError("generating a sample needs fn logits(x: i64[b t]) in the train block");
  const Traced& t = traced(fn, types_of({tokens}), false);
  return impl_->run(t, {tokens}, 0).front();
}

}  // namespace ein::script
