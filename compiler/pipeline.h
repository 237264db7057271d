// The compiler's stage chain in one place: the table of contents of compiler/
// (docs/architecture.md).
//
//   text ─ parse (dsl/) ─ sema (sema/) ─ Graph IR (graph/: lowering, contraction planning)
//        ─ autodiff (autodiff/) ─ cost (cost/) ─ fuse (fuse/)
//        ─ Kernel IR (kernel/: a fused node bound to layouts, then prepare_kernel)
//        ─ emit (emit/: MLIR for the CPU JIT, CUDA C++ for NVRTC)
//
// Every caller that takes a graph through these stages goes through compile_pattern() and
// compile_graph() (the eager tape, `.ein` scripts, `ein emit`, `ein report`), and every kernel
// an executor compiles through emit_kernel() or emit_cuda(), both of which start with
// prepare_kernel(). Each stage's output can be written to stderr as it is produced:
// EIN_DUMP=ir,fused (stage names, comma-separated, or `all`); `ein emit --stage` prints the
// same texts for one computation. Running graphs and kernels is exec/'s, not this file's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/patterns.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/cost_model.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// The stages whose output can be dumped, in pipeline order.
enum class Stage : uint8_t { sema, ir, backward, cost, fused, kernels, mlir, cuda };

/// The stage's name as EIN_DUMP and `ein emit --stage` spell it.
std::string_view stage_name(Stage stage);
/// The stage named `name`, if any.
std::optional<Stage> parse_stage(std::string_view name);
/// Whether EIN_DUMP asks for `stage` (the variable is read once per process).
bool dump_enabled(Stage stage);
/// When dump_enabled(stage), writes `text()` to stderr under a header naming the stage and
/// `what`; `text` is not called otherwise, so a dump costs nothing when off.
void dump_stage(Stage stage, std::string_view what, const std::function<std::string()>& text);

/// parse → sema → Graph IR for an einops pattern: `recipe` is the pattern's resolution for
/// these inputs (parse and sema, cached by include/ein/pattern_cache.h's resolve_cached);
/// the result is its graph (graph/lower_patterns.h). `star` is pack/unpack's `*` position.
Graph compile_pattern(const Recipe& recipe, std::string_view pattern,
                      const std::vector<TensorType>& inputs, std::optional<int64_t> ddof,
                      int star = 0);

/// What compile_graph() does after the front end.
struct GraphStages {
  std::vector<bool> differentiate;  ///< per graph input; empty: no autodiff (the forward graph)
  /// What the backward saves or rebuilds (autodiff.h); `full` makes a backward graph that needs
  /// nothing of the forward but its inputs.
  Recompute recompute = Recompute::full;
  std::vector<int> blocks = {};  ///< per graph node, its block under Recompute::blocks (-1: none)
  /// Keep parameters' casts to the compute dtype for the backward (autodiff.h; false: ZeRO 3).
  bool save_parameter_casts = true;
  /// Under Recompute::automatic, the fraction of its saved bytes the forward may save
  /// (autodiff.h; 1: no contraction is recomputed).
  double activation_budget = 1;
  bool cost = false;                ///< cost every node of the graph the later stages take
  bool fuse = true;                 ///< fuse that graph into kernels
};

/// Each stage's output. `graph` is the graph the later stages took: the forward graph, or
/// the backward graph when `differentiate` was given.
struct CompiledGraph {
  Graph graph;
  std::optional<Backward> backward;  ///< autodiff's output, when asked
  std::optional<GraphCost> cost;     ///< per node of `graph`, when asked
  Graph fused;                       ///< `graph` fused (fuse/fuse.h), when asked
  std::vector<int> fused_source;     ///< per node of `fused`, the node of `graph` it came from
};

/// Graph IR → autodiff → cost → fuse, each stage one step, each dumped when EIN_DUMP asks.
CompiledGraph compile_graph(Graph graph, const GraphStages& stages);

/// The targets a kernel is emitted for.
enum class Target : uint8_t { mlir, cuda };

/// Kernel IR → source text for `target`: prepare_kernel (kernel/prepare.h), verify, then the
/// MLIR the CPU JIT compiles (entry `symbol`, default `ein_<name>`) or the CUDA C++ NVRTC
/// compiles (its launch in the header comment). Dumped as `kernels` and `mlir`/`cuda` when
/// EIN_DUMP asks. prepare_kernel is idempotent, so a prepared kernel may be passed again.
std::string emit_kernel(const Kernel& kernel, Target target, std::string_view symbol = {});

}  // namespace ein
