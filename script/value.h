// The interpreter's values (private to compiler/script_*.cpp): numbers, strings, traced
// tensors, parameters, lists, modules, functions and the records builtins return. Values are
// small and copied freely; lists, modules and closures are shared.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "script/trace_graph.h"
#include "dsl/script_ast.h"
#include <ein/tensor.h>

namespace ein::script {

struct Unit;
struct Env;
struct Value;
struct CallArg;
struct CallSite;
class Interpreter;
using EnvPtr = std::shared_ptr<Env>;

/// A module parameter or optimizer state tensor: the runtime tensor a trace reads as an input.
struct ParamSlot {
  std::string name;  ///< local name in its module
  Shape shape;       ///< from its declaration
  DType dtype = DType::f32;
  Tensor tensor;     ///< undefined when the program was loaded without allocating
  const Decl* decl = nullptr;
};

/// A `module` or `optimizer` declaration with the scope it was declared in.
struct ClassDef {
  const Decl* decl = nullptr;
  EnvPtr env;
  const Unit* unit = nullptr;
};

/// An instance of a module (members and parameters live in `env`, in `order`) or of an
/// optimizer (its hyper-parameters).
struct Object {
  std::shared_ptr<const ClassDef> cls;
  EnvPtr env;
  std::vector<std::string> order;  ///< member and parameter names in declaration order
  std::string path;                ///< qualified name in the train block ("blocks.0.attn")
  /// A builtin module's forward (EinMix), run when the object is called: it has no script
  /// `fn forward`.
  std::function<Value(Interpreter&, std::vector<CallArg>&, const CallSite&)> native_forward;
};

/// A `fn` with its defining scope (a module instance's env for methods).
struct Closure {
  const Decl* decl = nullptr;
  EnvPtr env;
  const Unit* unit = nullptr;
  std::string qualname;     ///< "Linear.forward", "loss"
  Object* owner = nullptr;  ///< the module instance of a method (it outlives its closures)
};

/// What builtins like normal(...), bytes(...) or cosine(...) return: a tagged bag of fields.
struct Record {
  std::string type;
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
};

struct Value {
  enum class Kind : uint8_t {
    none, number, string, tensor, param, list, tuple, range, object, closure, builtin, klass, record
  };
  Kind kind = Kind::none;
  double num = 0;
  bool is_int = false;
  std::string str;  ///< string; builtin: its name
  TensorVal t;
  std::shared_ptr<ParamSlot> param;
  std::shared_ptr<std::vector<Value>> items;  ///< list, tuple
  int64_t lo = 0, hi = 0;                     ///< range
  std::shared_ptr<Object> object;
  std::shared_ptr<Closure> closure;
  std::shared_ptr<const ClassDef> klass;
  std::shared_ptr<Record> record;

  static Value number(double v, bool is_int) {
    Value x;
    x.kind = Kind::number;
    x.num = v;
    x.is_int = is_int;
    return x;
  }
  static Value string(std::string s) {
    Value x;
    x.kind = Kind::string;
    x.str = std::move(s);
    return x;
  }
  static Value tensor(TensorVal t) {
    Value x;
    x.kind = Kind::tensor;
    x.t = std::move(t);
    return x;
  }
  static Value list(std::vector<Value> v, Kind kind = Kind::list) {
    Value x;
    x.kind = kind;
    x.items = std::make_shared<std::vector<Value>>(std::move(v));
    return x;
  }
};

/// A scope: names to values, and the enclosing scope.
struct Env {
  std::unordered_map<std::string, Value> vars;
  EnvPtr parent;

  /// The value of `name` here or in an enclosing scope, or null.
  Value* find(const std::string& name) {
    for (Env* e = this; e; e = e->parent.get())
      if (auto it = e->vars.find(name); it != e->vars.end()) return &it->second;
    return nullptr;
  }
  static EnvPtr child(EnvPtr parent) {
    auto e = std::make_shared<Env>();
    e->parent = std::move(parent);
    return e;
  }
};

/// The scopes that hold closures or classes over themselves (a file's globals, the train
/// block's scope, a module instance's scope) are shared_ptr cycles: the interpreter registers
/// each here, and destroying the ScopeCycles empties them, so that they and all they hold
/// are freed.
struct ScopeCycles {
  std::vector<std::weak_ptr<Env>> scopes;
  ScopeCycles() = default;
  ScopeCycles(const ScopeCycles&) = delete;
  ScopeCycles& operator=(const ScopeCycles&) = delete;
  ~ScopeCycles() {
    for (const std::weak_ptr<Env>& scope : scopes)
      if (EnvPtr e = scope.lock()) e->vars.clear();
  }
};

/// One parsed file and its top-level scope.
struct Unit {
  Script script;
  EnvPtr globals;
  std::string path;
  bool loading = true;  ///< still evaluating its top level (an import of it now is a cycle)
};

}  // namespace ein::script
