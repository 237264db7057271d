// `ein emit` (tools/emit_command.h). Steps: build the unfused graph of <what> (a standard
// function from compiler/graph/stdlib_graphs.h, a map expression, or a reduce pattern), take its
// backward graph with --backward (compiler/autodiff/autodiff.h), then print the requested stage; with
// --target cuda|mlir, the generated source of every fused kernel (compiler/emit/emit_cuda.h,
// compiler/emit/emit_mlir.h).
#include "tools/emit_command.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "compiler/cost/cost_model.h"
#include "compiler/fuse/attention.h"
#include "compiler/fuse/cross_entropy.h"
#include "compiler/pipeline.h"
#include "exec/cpu_executor.h"
#include "compiler/emit/emit_cuda.h"
#include "compiler/kernel/split_rows.h"
#include "compiler/graph/expression_graphs.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "exec/run_fused.h"
#include "script/script.h"
#include "compiler/graph/stdlib_graphs.h"
#include <ein/diagnostic.h>
#include "tools/cli_errors.h"
#include "tools/cli_options.h"
#include "tools/script_command.h"
#include "tools/shape_args.h"
#include "tools/shape_command.h"

namespace ein::cli {
namespace {

constexpr const char* kDescription =
    R"(Show a computation at one stage of the compiler.

<what> is one of
  a standard function   softmax log_softmax layer_norm rms_norm cross_entropy mse_loss adamw
                        (--shape: the shape of its first input: x, logits, pred or param)
  a map expression      'x[b n], m[b] -> exp(x - m)'  (one --shape per input)
  a reduce pattern      'b n -> b' with --reduction (sum, mean, max, ..., var with --ddof)
  an einsum             'b s d, d f -> b s f'  (one --shape per input)
  a rearrange/repeat    'b s (h d) -> b h s d'  (one --shape; sizes as h=8)
                        and --size h=8 (or a trailing h=8) for axis sizes the shape does
                        not give
Stages:
  ir      the unfused Graph IR, one line per node
  fused   each fused kernel with the IR nodes it holds, each node left as is with the
          reason, then the fused graph
  kernels the Kernel IR of every fused kernel (domain, buffers, scalar DAG, stages, stores),
          for contiguous inputs
  mlir    the MLIR of every fused kernel, for contiguous inputs (as --target mlir)
  cuda    the CUDA C++ of every fused kernel, for contiguous inputs (as --target cuda)
  cost    FLOPs (2 per multiply-add), bytes and intensity per node of the unfused graph;
          with --backward also the split into input-gradient, weight-gradient and
          recomputed work and the bytes saved for backward (--weight N marks input N as a
          weight, repeatable)
--target cuda|mlir prints the generated source of every fused kernel for that target: CUDA
C++ for NVRTC (one __global__ per kernel, its launch in the header comment; docs/cuda.md) or
MLIR for the CPU JIT. It stands for --stage cuda|mlir and cannot be combined with --stage.
--backward emits the backward graph of <what> (gradients of every float input) instead.

Examples:
  ein emit softmax --shape 64,1024,512 --stage fused
  ein emit layer_norm --shape 8,768 --stage mlir
  ein emit softmax --shape 64,1024,512 --dtype bf16 --target cuda
  ein emit 'a (b c) -> c a' --reduction sum --shape 4,30 --target cuda b=6
  ein emit 'x[b s d], m[b s] -> (x - m)**2' --shape 4,8,16 --shape 4,8
  ein emit 'b s d -> b s' --reduction mean --shape 4,8,16 --stage fused
  ein emit 'b s d, d f -> b s f' --shape 4,8,16 --shape 16,32 --stage cost
  ein emit rms_norm --shape 32,4096 --backward --stage fused
  ein emit layer_norm --shape 8,1024,768 --backward --weight 1 --weight 2 --stage cost
)";

struct EmitOptions {
  std::string what, stage = "fused", dtype = "f32", reduction, target;
  std::vector<std::string> shapes, sizes;
  std::optional<int64_t> ddof;
  std::vector<int> weights;  ///< --stage cost --backward: inputs that are weights
  bool backward = false;
  std::string fn;                 ///< a .ein script: the function traced
  std::vector<std::string> sets;  ///< a .ein script: --set NAME=VALUE
};

DType parse_dtype(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    if (dtype_name(t) == name) return t;
  throw UsageError(fmt::format("--dtype {}: expected f32, f64, f16 or bf16", name));
}

/// `64,1024,512`, `(5,)`, `[2,3]`, or one size `7`.
Shape parse_dims(const std::string& text) {
  const bool single = text.find_first_of(",([") == std::string::npos && !text.empty();
  return parse_shape_arg(single ? "(" + text + ",)" : text, "--shape");
}

/// What the attention recogniser made of a script's trace, for `--stage fused`.
std::string attention_notes(const AttentionFusion& f) {
  std::string out;
  for (size_t i = 0; i < f.graph.nodes.size(); ++i) {
    const GraphNode& n = f.graph.nodes[i];
    if (n.op != GraphOp::attention) continue;
    const Shape& k = f.graph.nodes[n.inputs[1]].shape;
    out += fmt::format(
        "attention fused: %{} is one FlashAttention-2 kernel (exec/attention.h) over {} queries "
        "x {} keys{}; the matrix of their logits is never stored\n",
        i, n.shape[n.shape.size() - 2], k[k.size() - 2],
        std::get<AttentionAttr>(n.attr).bias ? " with a bias (mask)" : "");
  }
  for (const AttentionMiss& m : f.misses)
    out += fmt::format("attention not fused at contraction %{} (unfused trace): {}\n", m.node,
                       m.why);
  return out;
}

/// What the linear + cross-entropy recogniser made of it.
std::string cross_entropy_notes(const CrossEntropyFusion& f) {
  std::string out;
  for (size_t i = 0; i < f.graph.nodes.size(); ++i) {
    const GraphNode& n = f.graph.nodes[i];
    if (n.op != GraphOp::linear_cross_entropy) continue;
    out += fmt::format(
        "linear + cross-entropy fused: %{} is one tiled kernel (exec/cross_entropy.h) over {} rows "
        "x {} classes; the logits are never stored\n",
        i, n.shape[0], f.graph.nodes[n.inputs[1]].shape[1]);
  }
  for (const AttentionMiss& m : f.misses)
    out += fmt::format("linear + cross-entropy not fused at %{} (after attention): {}\n", m.node,
                       m.why);
  return out;
}

/// A .ein script's function traced for its annotated sizes (or --shape per input); the trace
/// without the pattern-replacing passes goes through them here, so `notes` can say what they
/// did (and which candidates they left, and why).
Graph build_script(const EmitOptions& o, std::string* notes) {
  script::LoadOptions load{parse_settings(o.sets), 0, {}};
  load.fused_attention = false;
  load.fused_cross_entropy = false;
  auto program = script::Program::load(o.what, load);
  std::string fn = o.fn;
  if (fn.empty()) {
    const auto fns = program->functions();
    if (fns.empty()) throw UserError(fmt::format("{} has no fn to emit", o.what));
    fn = std::find(fns.begin(), fns.end(), "train.loss") != fns.end() ? "train.loss" : fns.front();
  }
  std::vector<TensorType> types = program->example_types(fn);
  for (size_t i = 0; i < o.shapes.size() && i < types.size(); ++i)
    types[i].shape = parse_dims(o.shapes[i]);
  AttentionFusion f = fuse_attention(program->trace(fn, types));
  CrossEntropyFusion c = fuse_linear_cross_entropy(f.graph);
  if (notes) *notes = attention_notes(f) + cross_entropy_notes(c);
  return std::move(c.graph);
}

Graph build(const EmitOptions& o, std::string* notes = nullptr) {
  if (o.what.size() > 4 && o.what.ends_with(".ein")) return build_script(o, notes);
  if (o.shapes.empty()) throw UsageError("--shape is required (except for a .ein script)");
  const DType dtype = parse_dtype(o.dtype);
  std::vector<Shape> shapes;
  for (const std::string& s : o.shapes)
    shapes.push_back(parse_dims(s));
  if (const StandardFunction* f = find_standard_function(o.what)) {
    if (shapes.size() != 1)
      throw UsageError(
          fmt::format("{} takes one --shape (its first input's), got {}", o.what, shapes.size()));
    try {
      return f->build(shapes.front(), dtype);
    } catch (const std::invalid_argument& e) {
      throw UserError(e.what());
    }
  }
  if (o.what.find("->") == std::string::npos) {
    std::string names;
    for (const StandardFunction& f : standard_functions())
      names += (names.empty() ? "" : ", ") + std::string(f.name);
    throw UsageError(
        fmt::format("'{}' is not a standard function ({}), a map expression or an "
                    "einops pattern (both contain '->')",
                    o.what, names));
  }
  if (o.what.find('[') != std::string::npos) {
    if (!o.reduction.empty()) throw UsageError("--reduction applies to reduce patterns only");
    return map_expression_graph(o.what, shapes, dtype);
  }
  // An einops pattern: reduce with --reduction, else einsum (several inputs, or axes that
  // vanish), repeat (axes that appear) or rearrange, as ein::compile chooses.
  std::optional<Reduction> r;
  if (!o.reduction.empty()) {
    r = parse_reduction(o.reduction);
    if (!r) throw UsageError(fmt::format("--reduction {}: unknown reduction", o.reduction));
    if (shapes.size() != 1) throw UsageError("a reduce pattern takes one --shape");
  }
  std::vector<AxisSize> sizes;
  for (const std::string& s : o.sizes)
    sizes.push_back(parse_axis_size(s, "--size"));
  return pattern_graph(o.what, shapes, dtype, r, o.ddof, sizes);
}

/// Each fused kernel, bound for contiguous inputs, as Kernel IR text (stage "kernels"), MLIR
/// ("mlir") or CUDA C++ ("cuda"); nodes left as is as comments with their reasons.
std::string kernels_of(const Graph& fused, const std::string& stage) {
  std::string out;
  int number = 0;
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const GraphNode& n = fused.nodes[i];
    if (n.op != GraphOp::fused) {
      if (!n.note.empty()) out += fmt::format("// %{} {}: {}\n", i, graph_op_name(n.op), n.note);
      continue;
    }
    std::vector<Shape> shapes, strides;
    for (int in : n.inputs) {
      shapes.push_back(fused.nodes[in].shape);
      strides.push_back(contiguous_strides(fused.nodes[in].shape));
    }
    const Kernel k = bind_fused(std::get<FusedAttr>(n.attr), shapes, strides);
    if (stage == "cuda") {
      // A column reduction over few points and many rows runs as two kernels (split_rows.h).
      const std::optional<RowSplit> split = split_for_gpu(k);
      ++number;
      if (split)
        out += fmt::format("// kernel {} (%{}): a column reduction over {} rows, run as two "
                           "kernels: its rows in {} chunks, then the chunks combined\n",
                           number, i, split->chunks * split->partial.domain.back(),
                           split->chunks);
      const std::vector<const Kernel*> parts =
          split ? std::vector<const Kernel*>{&split->partial, &split->combine}
                : std::vector<const Kernel*>{&k};
      for (const Kernel* part : parts) {
        const CudaKernel c = emit_cuda(*part);
        out += fmt::format("// kernel {} (%{}), contiguous inputs: {}, {}, grid {} x block {}\n{}\n",
                           number, i, c.entry, cuda_strategy_name(c.strategy), c.launch.grid,
                           c.launch.block, c.source);
      }
      continue;
    }
    out += fmt::format("// kernel {} (%{}), contiguous inputs\n{}\n", ++number, i,
                       stage == "mlir" ? emit_kernel(k, Target::mlir) : dump(k));
  }
  return out;
}

/// `--stage cost`: the forward graph's cost per node, or with --backward the backward graph's
/// and its split (compiler/cost/cost_model.h, compiler/cost/backward_cost.h).
std::string cost_listing(const Graph& forward, const EmitOptions& o) {
  if (!o.backward) return format_cost(forward, cost(forward));
  std::vector<bool> needs, weights;
  for (const GraphNode& n : forward.nodes)
    if (n.op == GraphOp::input) {
      needs.push_back(kFloatDTypes.contains(n.dtype));
      weights.push_back(false);
    }
  for (int w : o.weights) {
    if (w < 0 || w >= static_cast<int>(weights.size()))
      throw UsageError(fmt::format("--weight {}: the graph has inputs 0..{}", w,
                                   static_cast<int>(weights.size()) - 1));
    weights[w] = true;
  }
  CompiledGraph compiled =
      compile_graph(forward, {.differentiate = needs, .cost = true, .fuse = false});
  Backward& b = *compiled.backward;
  b.graph.origin = "backward of " + forward.origin;
  const BackwardCost c = backward_cost(b, b.forward, weights);
  return format_cost(b.graph, *compiled.cost) +
         fmt::format(
             "\nbackward split ({}):\n  input gradients   {:>14} FLOPs\n  weight gradients  "
             "{:>14} FLOPs\n  recomputed        {:>14} FLOPs\n  saved for backward "
             "{:>13} bytes ({} of them activations)\n",
             kFlopConvention, c.input_grad.flops, c.weight_grad.flops, c.recompute.flops,
             c.saved_total, c.saved_activations);
}

int run_emit(EmitOptions o, bool stage_given) {
  o.what = unprotect(o.what);
  try {
    if (!o.target.empty()) {
      if (o.target != "cuda" && o.target != "mlir")
        throw UsageError(fmt::format("--target {}: expected cuda or mlir", o.target));
      if (stage_given)
        throw UsageError("--target prints generated source; it cannot be combined with --stage");
      o.stage = o.target;
    }
    if (o.stage != "ir" && o.stage != "fused" && o.stage != "kernels" && o.stage != "mlir" &&
        o.stage != "cuda" && o.stage != "cost")
      throw UsageError(
          fmt::format("--stage {}: expected ir, fused, kernels, mlir, cuda or cost", o.stage));
    std::string notes;
    Graph g = build(o, &notes);
    if (o.stage == "cost") {
      std::cout << cost_listing(g, o);
      return 0;
    }
    GraphStages stages;
    stages.fuse = o.stage != "ir";
    if (o.backward)
      for (const GraphNode& n : g.nodes)
        if (n.op == GraphOp::input)
          stages.differentiate.push_back(n.dtype == DType::f32 || n.dtype == DType::f64 ||
                                         n.dtype == DType::f16 || n.dtype == DType::bf16);
    const std::string origin = g.origin;
    CompiledGraph c = compile_graph(std::move(g), stages);
    if (o.backward) c.graph.origin = c.fused.origin = "backward of " + origin;
    if (o.stage == "ir")
      std::cout << dump(c.graph);
    else if (o.stage == "fused")
      std::cout << notes << fusion_report(c.graph, c.fused) << '\n' << dump(c.fused);
    else
      std::cout << kernels_of(c.fused, o.stage);
    return 0;
  } catch (...) {
    return report_error("emit");
  }
}

}  // namespace

void add_emit_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<EmitOptions>();
  CLI::App* cmd = app.add_subcommand(
      "emit", "Show the Graph IR, the fused kernels or their MLIR for a function or expression");
  cmd->description(kDescription);
  cmd->add_option("what", opts->what,
                  "a standard function (softmax, layer_norm, ...), a map expression, a reduce "
                  "pattern, or a .ein script")
      ->required();
  cmd->add_option("--shape", opts->shapes, "an input shape, e.g. 64,1024,512 (repeat per input)");
  cmd->add_option("--fn", opts->fn, "a .ein script: the fn to trace (default train.loss, else the first)");
  add_set_option(*cmd, opts->sets, "a .ein script: ");
  CLI::Option* stage =
      cmd->add_option("--stage", opts->stage, "ir | fused | kernels | mlir | cuda | cost (default fused)");
  cmd->add_option("--target", opts->target,
                  "cuda | mlir: print every fused kernel's generated source for that target");
  cmd->add_option("--weight", opts->weights,
                  "--stage cost --backward: input N is a weight (repeatable)");
  cmd->add_option("--dtype", opts->dtype, "f32 (default), f64, f16 or bf16");
  cmd->add_option("-r,--reduction", opts->reduction, "reduce patterns: sum, mean, max, ...");
  cmd->add_option("--ddof", opts->ddof, "var/std: the delta degrees of freedom");
  cmd->add_option("--size", opts->sizes, "reduce patterns: an axis size, e.g. h=8 (repeatable)");
  cmd->add_option("sizes", opts->sizes, "reduce patterns: axis sizes after <what>, e.g. h=8 w=4");
  cmd->add_flag("--backward", opts->backward, "emit the backward graph instead");
  cmd->callback([opts, stage, &exit_code] { exit_code = run_emit(*opts, stage->count() > 0); });
}

}  // namespace ein::cli
