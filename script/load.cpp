// The `.ein` interpreter, loading: files and imports, the top level (dims, lets, `--set`),
// the train block's members and settings, and the names of the modules and parameters it
// holds.
#include "script/interp.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ein/errors.h>
#include <ein/init.h>
#include <fmt/format.h>

#include "script/stdlib_dirs.h"
#include "script/support.h"
#include "api/tape.h"
#include "dsl/script_parser.h"

namespace ein::script {

namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Loading

Interpreter::Interpreter(const std::string& path, const LoadOptions& options)
    : options_(options) {
  builtins_ = std::make_shared<Env>();
  for (const auto& [name, fn] : builtin_table()) {
    Value v;
    v.kind = Value::Kind::builtin;
    v.str = name;
    builtins_->vars[name] = v;
  }
  builtins_->vars["inf"] = Value::number(INFINITY, false);
  builtins_->vars["pi"] = Value::number(M_PI, false);
  builtins_->vars["true"] = Value::number(1, true);
  builtins_->vars["false"] = Value::number(0, true);
  builtins_->vars["none"] = Value{};
  if (options_.stdlib.empty()) options_.stdlib = default_stdlib_dirs();
  main_ = load_unit(path, nullptr, {});
}

Unit* Interpreter::load_unit(const std::string& path, SourcePtr from, SourceRange at) {
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  for (auto& u : units_)
    if (u->path == canonical) {
      if (u->loading)
        throw UserError(fmt::format("import cycle: '{}' imports itself", path), from, at);
      return u.get();
    }
  if (!fs::is_regular_file(path, ec)) {
    const std::string msg = fmt::format("cannot read '{}': no such file", path);
    if (from) throw UserError(msg, from, at);
    throw UserError(msg);
  }
  std::string text = read_file(path);
  auto unit = std::make_unique<Unit>();
  unit->path = canonical;
  Unit* u = unit.get();
  units_.push_back(std::move(unit));
  // A stdlib file is named relative to the stdlib's root in diagnostics ("stdlib/nn.ein"),
  // wherever the library is installed.
  const std::string name = stdlib_display_name(path, options_.stdlib).value_or(path);
  u->script = parse_script(make_source(name, std::move(text)));
  const Unit* saved = cur_;
  cur_ = u;
  u->globals = Env::child(builtins_);
  cycles_.scopes.push_back(u->globals);
  eval_top(*u, units_.size() == 1);
  u->loading = false;
  cur_ = saved;
  return u;
}

void Interpreter::fail(SourceRange range, const std::string& message) {
  if (cur_) throw UserError(message, cur_->script.source, range);
  throw UserError(message);
}

void Interpreter::fail(const CallSite& site, SourceRange range, const std::string& message) {
  if (site.unit) throw UserError(message, site.unit->script.source, range);
  fail(range, message);
}

void Interpreter::eval_top(Unit& unit, bool is_main) {
  EnvPtr g = unit.globals;
  std::vector<std::string> settable;
  for (const Decl& d : unit.script.decls) {
    switch (d.kind) {
      case Decl::Kind::import_: {
        fs::path target;
        const fs::path dir = fs::path(unit.path).parent_path();
        std::vector<fs::path> candidates;
        if (d.is_path) {
          candidates.push_back(dir / d.name);
        } else {
          candidates.push_back(dir / (d.name + ".ein"));
          for (const std::string& s : options_.stdlib)
            candidates.push_back(fs::path(s) / (d.name + ".ein"));
        }
        std::error_code ec;
        for (const fs::path& c : candidates)
          if (fs::is_regular_file(c, ec) && fs::weakly_canonical(c, ec).string() != unit.path) {
            target = c;
            break;
          }
        if (target.empty()) {
          std::string where;
          for (const fs::path& c : candidates)
            where += (where.empty() ? "" : ", ") + c.string();
          fail(d.name_range, fmt::format("cannot find module '{}' (looked for {})", d.name, where));
        }
        Unit* imported = load_unit(target.string(), unit.script.source, d.name_range);
        cur_ = &unit;
        for (const auto& [name, v] : imported->globals->vars)
          g->vars[name] = v;
        break;
      }
      case Decl::Kind::dim:
      case Decl::Kind::let: {
        const bool is_dim = d.kind == Decl::Kind::dim;
        Value v;
        const Setting* set = nullptr;
        if (is_main)
          for (const Setting& s : options_.sets)
            if (s.name == d.name) set = &s;
        if (set) {
          char* end = nullptr;
          const double x = std::strtod(set->value.c_str(), &end);
          if (set->value.empty() || end != set->value.c_str() + set->value.size() || !std::isfinite(x))
            throw UserError(fmt::format("--set {}={}: '{}' is not a number", set->name, set->value,
                                        set->value));
          if (is_dim && (!is_integral(x) || x < 1))
            throw UserError(fmt::format("--set {}={}: the dim {} needs a positive integer", set->name,
                                        set->value, set->name));
          if (is_dim && !fits_int64(x))
            throw UserError(fmt::format("--set {}={}: the dim {} needs a positive integer below "
                                        "2^63 (9223372036854775808), got {}",
                                        set->name, set->value, set->name, format_number(x)));
          v = Value::number(x, is_integral(x) && set->value.find_first_of(".eE") == std::string::npos);
        } else {
          v = eval(*d.value, g);
        }
        if (is_dim) {
          if (v.kind != Value::Kind::number || !is_integral(v.num) || v.num < 1)
            fail(d.value ? d.value->range : d.name_range,
                 fmt::format("dim {} must be a positive integer, got {}", d.name, describe(v)));
          if (!fits_int64(v.num))
            fail(d.value ? d.value->range : d.name_range,
                 fmt::format("dim {} must be a positive integer below 2^63 (9223372036854775808), "
                             "got {}",
                             d.name, describe(v)));
          v.is_int = true;
        }
        g->vars[d.name] = v;
        settable.push_back(d.name);
        break;
      }
      case Decl::Kind::module:
      case Decl::Kind::optimizer: {
        auto cls = std::make_shared<ClassDef>();
        cls->decl = &d;
        cls->env = g;
        cls->unit = &unit;
        Value v;
        v.kind = Value::Kind::klass;
        v.klass = cls;
        g->vars[d.name] = v;
        break;
      }
      case Decl::Kind::function: {
        auto c = std::make_shared<Closure>();
        c->decl = &d;
        c->env = g;
        c->unit = &unit;
        c->qualname = d.name;
        Value v;
        v.kind = Value::Kind::closure;
        v.closure = c;
        g->vars[d.name] = v;
        break;
      }
      case Decl::Kind::train:
        if (!is_main) fail(d.name_range, "a train block is only allowed in the script ein runs");
        if (train_env_) fail(d.name_range, "a script has at most one train block");
        build_train(unit, d);
        break;
      default:
        fail(d.name_range, "this declaration is only allowed inside a module or optimizer");
    }
  }
  if (is_main)
    for (const Setting& s : options_.sets)
      if (std::find(settable.begin(), settable.end(), s.name) == settable.end())
        throw UserError(fmt::format("--set {}={}: the script has no dim or let named '{}'{}",
                                    s.name, s.value, s.name,
                                    settable.empty() ? std::string()
                                                     : fmt::format(" (it has: {})",
                                                                   fmt::join(settable, ", "))));
}

void Interpreter::build_train(Unit& unit, const Decl& d) {
  train_env_ = Env::child(unit.globals);
  cycles_.scopes.push_back(train_env_);
  for (const Decl& c : d.children) {
    if (c.kind == Decl::Kind::function) {
      auto cl = std::make_shared<Closure>();
      cl->decl = &c;
      cl->env = train_env_;
      cl->unit = &unit;
      cl->qualname = "train." + c.name;
      Value v;
      v.kind = Value::Kind::closure;
      v.closure = cl;
      train_env_->vars[c.name] = v;
    } else if (c.kind == Decl::Kind::member) {
      Value v = eval(*c.value, train_env_);
      train_env_->vars[c.name] = v;
      const bool module_like =
          (v.kind == Value::Kind::object && v.object->cls->decl->kind == Decl::Kind::module) ||
          (v.kind == Value::Kind::list && !v.items->empty() &&
           v.items->front().kind == Value::Kind::object);
      if (module_like) train_roots_.push_back(c.name);
      if (v.kind == Value::Kind::object && v.object->cls->decl->kind == Decl::Kind::optimizer)
        optimizer_ = v.object;
    } else {
      fail(c.name_range, "a train block holds settings (name = value) and fn declarations");
    }
  }
  // A misspelt setting must not be ignored: plain values (numbers, strings, settings records)
  // are only allowed under the names ein train reads.
  static const std::vector<std::string> known = {
      "steps",  "clip",        "log_every",   "checkpoint_every", "accumulate", "sample",
      "sample_length", "temperature", "precision", "schedule", "data",
      "eval_data",     "eval_every",  "eval_batches", "top_k", "top_p"};
  for (const Decl& c : d.children) {
    if (c.kind != Decl::Kind::member) continue;
    const Value& v = train_env_->vars[c.name];
    const bool plain = v.kind == Value::Kind::number || v.kind == Value::Kind::string ||
                       v.kind == Value::Kind::record;
    if (plain && std::find(known.begin(), known.end(), c.name) == known.end())
      fail(c.name_range, fmt::format("'{}' is not a train setting (settings: {}; models and "
                                     "optimizers may have any name)",
                                     c.name, fmt::join(known, ", ")));
    if (c.name == "schedule" && v.kind != Value::Kind::record)
      fail(c.value->range, fmt::format("schedule must be warmup_cosine(...) or constant_lr(), got {}",
                                       describe(v)));
    if ((c.name == "data" || c.name == "eval_data") &&
        (v.kind != Value::Kind::record || (v.record->type != "bytes" && v.record->type != "tokens")))
      fail(c.value->range,
           fmt::format("{} must be bytes(...) or tokens(...), got {}", c.name, describe(v)));
    if ((c.name == "sample" || c.name == "precision") && v.kind != Value::Kind::string)
      fail(c.value->range, fmt::format("{} must be a string, got {}", c.name, describe(v)));
  }
  // The settings ein train reads, checked here so that a typo fails before any work.
  auto number = [&](const char* key, double fallback, bool integer, double min) {
    Value* v = train_env_->find(key);
    if (!v || train_env_->vars.find(key) == train_env_->vars.end()) return fallback;
    const Decl* decl = nullptr;
    for (const Decl& c : d.children)
      if (c.name == key) decl = &c;
    // A setting's name may also be taken by a function (`fn clip(...)`), which has no value
    // expression: the caret goes under its name then.
    const SourceRange at = !decl ? d.name_range : decl->value ? decl->value->range : decl->name_range;
    if (v->kind != Value::Kind::number || (integer && !is_integral(v->num)) || v->num < min ||
        (integer && !fits_int64(v->num)))
      fail(at, fmt::format("train setting '{}' must be {} >= {}, got {}", key,
                           integer ? "an integer" : "a number", format_number(min), describe(*v)));
    return v->num;
  };
  spec_.steps = static_cast<int64_t>(number("steps", 100, true, 0));
  spec_.clip = number("clip", 0, false, 0);
  spec_.log_every = static_cast<int64_t>(number("log_every", 10, true, 1));
  spec_.checkpoint_every = static_cast<int64_t>(number("checkpoint_every", 0, true, 0));
  spec_.accumulate = static_cast<int64_t>(number("accumulate", 1, true, 1));
  spec_.sample_length = static_cast<int64_t>(number("sample_length", 0, true, 0));
  spec_.temperature = number("temperature", 1.0, false, 0);
  spec_.top_k = static_cast<int64_t>(number("top_k", 0, true, 0));
  spec_.top_p = number("top_p", 1.0, false, 0);
  if (!(spec_.top_p > 0 && spec_.top_p <= 1))
    for (const Decl& c : d.children)
      if (c.kind == Decl::Kind::member && c.name == "top_p")
        fail(c.value->range, fmt::format("train setting 'top_p' must be a probability in (0, 1], "
                                         "got {}",
                                         format_number(spec_.top_p)));
  if (Value* s = train_env_->find("sample"); s && s->kind == Value::Kind::string) spec_.sample = s->str;
  if (Value* s = train_env_->find("precision"); s && s->kind == Value::Kind::string)
    spec_.precision = s->str;
  if (Value* s = train_env_->find("schedule"); s && s->kind == Value::Kind::record) {
    spec_.schedule = s->record->type;
    spec_.warmup = static_cast<int64_t>(s->record->numbers["warmup"]);
    if (s->record->numbers.count("min_ratio")) spec_.min_lr_ratio = s->record->numbers["min_ratio"];
  }
  // `data` and `eval_data`: an order left out is random for training, sequential (the same
  // windows every time) for the held-out loss.
  auto data_spec = [&](const char* key, const char* order) -> std::optional<DataSpec> {
    Value* s = train_env_->find(key);
    if (!s || s->kind != Value::Kind::record) return std::nullopt;
    DataSpec ds;
    ds.kind = s->record->type;
    ds.path = s->record->strings["path"];
    ds.dtype = s->record->strings["dtype"];
    ds.order = s->record->strings["order"].empty() ? order : s->record->strings["order"];
    ds.batch = static_cast<int64_t>(s->record->numbers["batch"]);
    ds.context = static_cast<int64_t>(s->record->numbers["context"]);
    ds.part_begin = s->record->numbers["part_begin"];
    ds.part_end = s->record->numbers["part_end"];
    const fs::path p(ds.path);
    if (p.is_relative()) ds.path = (fs::path(unit.path).parent_path() / p).string();
    for (const Decl& c : d.children)
      if (c.kind == Decl::Kind::member && c.name == key) {
        ds.source = unit.script.source;
        ds.range = c.value->range;
      }
    return ds;
  };
  spec_.data = data_spec("data", "random");
  spec_.eval_data = data_spec("eval_data", "sequential");
  spec_.eval_every = static_cast<int64_t>(number("eval_every", 0, true, 0));
  spec_.eval_batches = static_cast<int64_t>(number("eval_batches", 0, true, 1));
  if (optimizer_) {
    if (Value* lr = optimizer_->env->find("lr"); lr && lr->kind == Value::Kind::number)
      spec_.lr = lr->num;
  }
  for (const std::string& root : train_roots_)
    assign_paths(root == "model" ? "" : root, train_env_->vars.at(root));
}

std::vector<std::string> Interpreter::function_names() const {
  std::vector<std::string> out;
  for (const Decl& d : main_->script.decls)
    if (d.kind == Decl::Kind::function) out.push_back(d.name);
  if (train_env_)
    for (const Decl& d : main_->script.decls)
      if (d.kind == Decl::Kind::train)
        for (const Decl& c : d.children)
          if (c.kind == Decl::Kind::function) out.push_back("train." + c.name);
  return out;
}

std::shared_ptr<Closure> Interpreter::function(const std::string& name) {
  Value* v = nullptr;
  if (name.rfind("train.", 0) == 0 && train_env_) {
    auto it = train_env_->vars.find(name.substr(6));
    if (it != train_env_->vars.end()) v = &it->second;
  } else {
    v = main_->globals->find(name);
  }
  if (!v || v->kind != Value::Kind::closure) {
    throw UserError(fmt::format("{} has no fn '{}' (functions: {})", main_->script.source->name(), name,
                                fmt::join(function_names(), ", ")));
  }
  return v->closure;
}

void Interpreter::collect(const std::string& prefix, const Value& v,
                          std::vector<std::pair<std::string, const ParamSlot*>>& out,
                          std::map<const ParamSlot*, std::vector<std::string>>* aliases) const {
  if (v.kind == Value::Kind::param) {
    for (const auto& [name, slot] : out)
      if (slot == v.param.get()) {  // tied: counted once, under its first name
        if (aliases) (*aliases)[slot].push_back(prefix);
        return;
      }
    out.emplace_back(prefix, v.param.get());
  } else if (v.kind == Value::Kind::object && v.object->cls->decl->kind == Decl::Kind::module) {
    for (const std::string& name : v.object->order)
      collect(prefix.empty() ? name : prefix + "." + name, v.object->env->vars.at(name), out,
              aliases);
  } else if (v.kind == Value::Kind::list) {
    for (size_t i = 0; i < v.items->size(); ++i)
      collect(prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i), (*v.items)[i],
              out, aliases);
  }
}

std::vector<std::pair<std::string, const ParamSlot*>> Interpreter::parameter_slots(
    std::map<const ParamSlot*, std::vector<std::string>>* aliases) const {
  std::vector<std::pair<std::string, const ParamSlot*>> out;
  for (const std::string& root : train_roots_)
    collect(root == "model" ? "" : root, train_env_->vars.at(root), out, aliases);
  return out;
}

void Interpreter::assign_paths(const std::string& prefix, const Value& v) {
  if (v.kind == Value::Kind::object && v.object->cls->decl->kind == Decl::Kind::module) {
    if (!v.object->path.empty() || (prefix.empty() && v.object->order.empty())) return;
    v.object->path = prefix.empty() ? "model" : prefix;
    for (const std::string& name : v.object->order)
      assign_paths(prefix.empty() ? name : prefix + "." + name, v.object->env->vars.at(name));
  } else if (v.kind == Value::Kind::list) {
    for (size_t i = 0; i < v.items->size(); ++i)
      assign_paths(prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i),
                   (*v.items)[i]);
  }
}

std::vector<NamedTensor> Interpreter::parameters() const {
  std::vector<NamedTensor> out;
  for (const auto& [name, slot] : parameter_slots())
    out.push_back({name, slot->tensor});
  return out;
}

void Interpreter::set_parameter(const std::string& name, const Tensor& value) {
  std::map<const ParamSlot*, std::vector<std::string>> aliases;
  const auto slots = parameter_slots(&aliases);
  const ParamSlot* found = nullptr;
  for (const auto& [qualified, slot] : slots) {
    const std::vector<std::string>& others = aliases[slot];
    if (qualified == name || std::find(others.begin(), others.end(), name) != others.end())
      found = slot;
  }
  if (!found) throw UserError(fmt::format("the train block has no parameter '{}'", name));
  if (!value.defined() || value.shape() != found->shape || value.dtype() != found->dtype)
    throw UserError(fmt::format(
        "parameter '{}' is {} {}: it cannot take {}", name, dtype_name(found->dtype),
        shape_str(found->shape),
        value.defined() ? fmt::format("a {} {} tensor", dtype_name(value.dtype()),
                                      shape_str(value.shape()))
                        : std::string("an undefined tensor")));
  // The slot is the interpreter's own (every Value holding it shares it); parameter_slots()
  // hands out const views of it.
  auto* slot = const_cast<ParamSlot*>(found);
  slot->tensor = value.to(options_.device).detach().requires_grad_(true);
}

}  // namespace ein::script
