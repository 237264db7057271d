// The `.ein` interpreter (private): loads files and evaluates declarations (script_load.cpp),
// evaluates expressions, calls and modules (script_eval.cpp), and traces function calls into
// Graph IR (script_interp.cpp). script/script.cpp wraps it as ein::script::Program; the
// builtins live in script_builtins.cpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/cost/charges.h"
#include "script/script.h"
#include "script/value.h"
#include <ein/shape_check.h>
#include <ein/diagnostic.h>

namespace ein::script {

/// What feeds one input of a traced graph.
struct Feed {
  /// `arange` is made when the graph runs, not when it is traced: `ein check` and reports
  /// trace without running, and `x @ arange(D)` must not cost D elements there.
  enum class Kind : uint8_t { arg, param, constant, arange, normal, uniform, randint };
  Kind kind = Kind::arg;
  int index = 0;                     ///< arg: which argument
  std::shared_ptr<ParamSlot> slot;   ///< param
  Tensor constant;                   ///< constant
  /// constant, arange on a device other than the CPU: the value there, moved or made once (a
  /// copy to a GPU on every call would wait for its stream)
  mutable Tensor resident;
  Shape shape;                       ///< arange, normal, uniform, randint
  DType dtype = DType::f32;
  uint64_t draw = 0;                 ///< normal, uniform, randint: which draw of the call
  int64_t low = 0, high = 0;         ///< randint: [low, high)
};

/// The expression a traced node came from, and the module whose fn was running.
struct Where {
  const Unit* unit = nullptr;
  SourceRange range;
  std::string scope;
};

/// A function call being traced.
struct Trace {
  explicit Trace(std::string origin) : b(std::move(origin)) {}
  GraphBuilder b;
  std::vector<Feed> feeds;
  std::map<const ParamSlot*, TensorVal> params;
  std::vector<Where> wheres;  ///< indexed by the builder's tags
  uint64_t draws = 0;
  bool training = false;           ///< dropout active
  DType compute = DType::f32;      ///< mixed precision: what f32 parameters are read as
  std::vector<std::pair<size_t, TensorVal>> small_constants;  ///< constant(): feed, value
  /// Reads a parameter: one graph input per parameter per trace.
  TensorVal param(const std::shared_ptr<ParamSlot>& slot);
  /// A constant tensor fed at run time; a small one equal to one fed before (dtype, shape and
  /// bytes: every layer's `ones(t, t)`) is read from the same input, so what is computed from
  /// it alike is one value (a decoder's statics keep every layer's causal mask once).
  TensorVal constant(Tensor t);
  /// 0, 1, ..., n - 1 in `dtype`, made only when the graph runs.
  TensorVal arange(int64_t n, DType dtype);
};

/// A traced function ready to run: the graph, its feeds and how its outputs regroup.
struct Traced {
  std::shared_ptr<const Graph> graph;
  std::vector<int> tags;      ///< per node: its index into wheres (-1: none)
  std::vector<Where> wheres;
  std::shared_ptr<const Graph> fused;  ///< fuse(*graph): what runs forward (null: graph)
  /// What running `fused` charges a FlopCounter without autograd: the unfused graph's work,
  /// node by node (compiler/cost/charges.h), as ein report counts it (null: fused's own).
  std::shared_ptr<const GraphCharges> charges;
  std::vector<Feed> feeds;
  std::vector<int> blocks;  ///< per node: its block (blocks_of), -1 outside every block
};

/// Where node `node` of `t.graph` came from: its expression's file, line, column and first
/// line of text, and its module (all empty for a node of no expression).
NodeSource node_source(const Traced& t, int node);

/// The block a module path belongs to: the path through its first list item ("blocks.3" for
/// "blocks.3.attn"); empty when the path crosses no list.
std::string block_of_scope(const std::string& scope);

/// Per node of `t.graph`, the block (a module of a list: a GPT's blocks[i]) whose code made it,
/// numbered in order of first appearance; -1 for nodes made outside every block. What
/// Recompute::blocks checkpoints.
std::vector<int> blocks_of(const Traced& t);

/// One evaluated call argument.
struct CallArg {
  std::string name;  ///< keyword, or empty
  Value value;
  SourceRange range;
};

/// Where a call is written, for diagnostics.
struct CallSite {
  const Unit* unit = nullptr;
  SourceRange range;  ///< the whole call
};

class Interpreter;
using BuiltinFn = std::function<Value(Interpreter&, std::vector<CallArg>&, const CallSite&)>;

class Interpreter {
 public:
  Interpreter(const std::string& path, const LoadOptions& options);

  // ---- used by Program (script/script.cpp) ----
  std::vector<std::string> function_names() const;
  std::shared_ptr<Closure> function(const std::string& name);
  /// Traces `fn` on inputs of these types.
  Traced trace(const std::shared_ptr<Closure>& fn, const std::vector<TensorType>& args,
               bool training);
  /// Runs a traced function: feeds built from `args`, `stream` seeds the random draws.
  std::vector<Tensor> run(const Traced& t, const std::vector<Tensor>& args, uint64_t stream);
  /// The tensors a traced graph's inputs take: the arguments, parameters, constants and the
  /// random draws of `stream`, in input order. UserError for a parameter without a value
  /// (loaded without allocating, not given one since) unless it is in `unset`, whose inputs
  /// are then undefined (a decoder reads their codes instead).
  std::vector<Tensor> feed(const Traced& t, const std::vector<Tensor>& args, uint64_t stream,
                           const std::set<const ParamSlot*>& unset = {});
  /// The optimizer's update traced for one parameter: inputs p, g, the states (in
  /// `states` order), lr, t (0-dim f32) and a factor the update's g is g times (0-dim, the
  /// compute type: f64 for f64, else f32); outputs the new p, then the new states.
  Traced trace_update(const Shape& shape, DType dtype, std::vector<std::string>& states);
  /// The initial value of optimizer state `name` (`state m = 0.1`; 0 when not given).
  double state_initial(const std::string& name);
  /// Input types from a function's annotations. Dims bound nowhere get `free_size`, or with
  /// `distinct` each its own multiple of it (free_size, 2·free_size, ... in order of
  /// appearance); `free`, when given, receives their names and sizes.
  std::vector<TensorType> example_types(
      const std::shared_ptr<Closure>& fn, int64_t free_size, bool distinct = false,
      std::vector<std::pair<std::string, int64_t>>* free = nullptr);

  /// The train block's scope, or null.
  EnvPtr train_env() const { return train_env_; }
  const TrainSpec& spec() const { return spec_; }
  std::vector<NamedTensor> parameters() const;
  /// Gives parameter `name` (a parameters() name, or a tied one's other name) the tensor
  /// `value`, moved to the program's device: it must have the declared shape and dtype.
  /// UserError naming the parameter otherwise, or for a name the train block lacks.
  void set_parameter(const std::string& name, const Tensor& value);
  /// The train block's parameters by qualified name (tied ones once), in declaration order;
  /// `aliases`, when given, receives the other names of tied ones.
  std::vector<std::pair<std::string, const ParamSlot*>> parameter_slots(
      std::map<const ParamSlot*, std::vector<std::string>>* aliases = nullptr) const;
  /// The optimizer object of the train block (may be null).
  std::shared_ptr<Object> optimizer() const { return optimizer_; }
  uint64_t seed() const { return options_.seed; }
  /// Whether traces replace attention by the fused kernel (LoadOptions, EIN_ATTENTION).
  bool fused_attention() const;
  /// Whether traces replace an LM head's logits + cross_entropy by the fused kernel
  /// (LoadOptions, EIN_CROSS_ENTROPY).
  bool fused_cross_entropy() const;
  /// Mixed precision: traces read f32 parameters and inputs as `dtype` and return f32.
  void set_compute_dtype(DType dtype) { compute_ = dtype; }
  const Unit* main_unit() const { return main_; }

  // ---- used by the builtins ----
  [[noreturn]] void fail(const CallSite& site, SourceRange range, const std::string& message);
  [[noreturn]] void fail(SourceRange range, const std::string& message);
  Trace& trace_or_fail(const CallSite& site, const std::string& what);
  Trace* active_trace() { return trace_; }
  /// Mixed precision, as torch.autocast runs a matmul in the compute dtype: the f32 operands of
  /// a contraction (`@`, einsum) are cast to it, so q and k that RoPE's f32 tables made f32
  /// meet v in bf16. Without mixed precision, leaves them as they are.
  void autocast_contraction(std::vector<TensorVal>& operands);
  /// A value as a traced tensor (numbers become 0-dim constants of `like`'s dtype).
  TensorVal as_tensor(const Value& v, const CallSite& site, SourceRange range);
  /// The number a value holds, or an error at `range`.
  double as_number(const Value& v, const CallSite& site, SourceRange range,
                   const std::string& what);
  int64_t as_int(const Value& v, const CallSite& site, SourceRange range, const std::string& what);
  /// Applies a scalar op elementwise (numbers fold; tensors map with broadcasting).
  Value elementwise(ScalarOp op, const std::vector<Value>& args, const CallSite& site,
                    SourceRange range, std::optional<DType> out = std::nullopt);
  /// Calls any callable value.
  Value call(const Value& callee, std::vector<CallArg> args, const CallSite& site);
  /// Seeds for parameter initialisation: one per parameter, in creation order.
  uint64_t next_param_seed();
  /// A builtin module's parameter (EinMix's): f32 U(a, b) of `shape`, with the next parameter
  /// seed and allocated as the script's own parameters are (checked against memory at `range`).
  Value uniform_parameter(std::string name, const Shape& shape, double a, double b,
                          SourceRange range);
  /// A UserError at `range` when a tensor of `shape` and `dtype` cannot exist: its element
  /// count or byte size overflows int64, or (when the script allocates) its bytes exceed the
  /// memory of the device it would live on. `what` names it ("parameter 'w'", "this tensor").
  void check_tensor_size(const Shape& shape, DType dtype, SourceRange range,
                         const std::string& what);
  /// Counts one iteration of a loop or comprehension at `range` against
  /// LoadOptions::max_loop_iterations (nested loops count together); `planned` is how many the
  /// loop will run when known up front (a range), so a huge one fails before its first.
  void count_iteration(SourceRange range, int64_t planned = 0);

 private:
  friend class Program;
  Unit* load_unit(const std::string& path, SourcePtr from, SourceRange at);
  void eval_top(Unit& unit, bool is_main);
  void apply_settings(Unit& unit);
  void build_train(Unit& unit, const Decl& d);

  Value eval(const Expr& e, const EnvPtr& env);
  Value eval_untagged(const Expr& e, const EnvPtr& env);
  Value eval_binary(const Expr& e, const EnvPtr& env);
  Value eval_index(const Expr& e, const EnvPtr& env);
  Value eval_attribute(const Expr& e, const EnvPtr& env);
  Value eval_call(const Expr& e, const EnvPtr& env);
  Value deref(const Value& v, SourceRange range);
  /// Runs statements; returns true when one returned (its value in `result`).
  bool exec(const std::vector<Stmt>& body, const EnvPtr& env, Value& result);
  Value call_closure(const Closure& c, std::vector<CallArg> args, const CallSite& site);
  Value construct(const std::shared_ptr<const ClassDef>& cls, std::vector<CallArg> args,
                  const CallSite& site);
  void bind_params(const std::vector<Param>& params, std::vector<CallArg>& args,
                   const EnvPtr& scope, const EnvPtr& defaults_env, const Unit* unit,
                   const CallSite& site, const std::string& what);
  void check_type(const ShapeSpec& spec, const Value& v, DimMemo& memo, const EnvPtr& scope,
                  const CallSite& site, SourceRange arg_range, const std::string& label,
                  const std::string& fn);
  Tensor init_param(const Decl& d, const Shape& shape, const Value& init, const EnvPtr& env);
  void collect(const std::string& prefix, const Value& v,
               std::vector<std::pair<std::string, const ParamSlot*>>& out,
               std::map<const ParamSlot*, std::vector<std::string>>* aliases = nullptr) const;
  /// Names every module instance reachable from the train block (Object::path).
  void assign_paths(const std::string& prefix, const Value& v);
  /// Without allocating: the initialiser must be one ein knows (and the seed is consumed).
  void check_initialiser(const Decl& d, const Value& init);
  std::string describe(const Value& v) const;

  LoadOptions options_;
  std::vector<std::unique_ptr<Unit>> units_;
  Unit* main_ = nullptr;
  const Unit* cur_ = nullptr;  ///< the file the expression being evaluated is in
  Trace* trace_ = nullptr;
  EnvPtr builtins_;
  EnvPtr train_env_;
  TrainSpec spec_;
  std::shared_ptr<Object> optimizer_;
  std::vector<std::string> train_roots_;  ///< train members holding modules, in order
  uint64_t param_counter_ = 0;
  int depth_ = 0;
  int loops_ = 0;                 ///< loops and comprehensions running, nested
  int64_t loop_iterations_ = 0;   ///< iterations run since the outermost loop began
  std::string scope_;  ///< the module whose fn is running (Object::path)
  DType compute_ = DType::f32;
  EnvPtr last_scope_;  ///< the body scope of the call_closure that finished last
  ScopeCycles cycles_;  ///< last: cut first, also when the constructor throws
};

/// The builtin table (name → function), filled once.
const std::map<std::string, BuiltinFn>& builtin_table();

}  // namespace ein::script
