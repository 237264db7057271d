// The stage chain (pipeline.h): one function per entry, one step per stage, and EIN_DUMP.
#include "compiler/pipeline.h"

#include <array>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "compiler/emit/emit_cuda.h"
#include "compiler/emit/emit_mlir.h"
#include "compiler/fuse/fuse.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/kernel/prepare.h"

namespace ein {
namespace {

constexpr std::array<std::string_view, 8> kStageNames = {
    "sema", "ir", "backward", "cost", "fused", "kernels", "mlir", "cuda"};

/// The stages EIN_DUMP names, as a bit set (read once).
uint32_t dump_mask() {
  static const uint32_t mask = [] {
    uint32_t m = 0;
    const char* env = std::getenv("EIN_DUMP");
    std::string_view list = env ? env : "";
    while (!list.empty()) {
      const size_t comma = list.find(',');
      const std::string_view name = list.substr(0, comma);
      if (name == "all") m = ~0u;
      if (const auto s = parse_stage(name)) m |= 1u << static_cast<int>(*s);
      else if (name != "all" && !name.empty())
        std::cerr << fmt::format("ein: EIN_DUMP names no stage '{}' (stages: {}, all)\n", name,
                                 fmt::join(kStageNames, ", "));
      list = comma == std::string_view::npos ? "" : list.substr(comma + 1);
    }
    return m;
  }();
  return mask;
}

}  // namespace

std::string_view stage_name(Stage stage) {
  return kStageNames[static_cast<size_t>(stage)];
}

std::optional<Stage> parse_stage(std::string_view name) {
  for (size_t i = 0; i < kStageNames.size(); ++i)
    if (kStageNames[i] == name) return static_cast<Stage>(i);
  return std::nullopt;
}

bool dump_enabled(Stage stage) {
  return (dump_mask() >> static_cast<int>(stage)) & 1u;
}

void dump_stage(Stage stage, std::string_view what, const std::function<std::string()>& text) {
  if (!dump_enabled(stage)) return;
  static std::mutex mutex;  // dumps from several threads stay whole
  const std::string body = text();
  std::lock_guard lock(mutex);
  std::cerr << fmt::format("== ein {}: {}\n{}", stage_name(stage), what, body);
  if (!body.empty() && body.back() != '\n') std::cerr << '\n';
}

Graph compile_pattern(const Recipe& recipe, std::string_view pattern,
                      const std::vector<TensorType>& inputs, std::optional<int64_t> ddof,
                      int star) {
  dump_stage(Stage::sema, pattern, [&] { return explain(recipe); });
  Graph graph = lower_pattern(recipe, inputs, ddof, star, std::string(pattern));
  dump_stage(Stage::ir, pattern, [&] { return dump(graph); });
  return graph;
}

CompiledGraph compile_graph(Graph graph, const GraphStages& stages) {
  CompiledGraph c;
  dump_stage(Stage::ir, graph.origin, [&] { return dump(graph); });
  if (!stages.differentiate.empty()) {
    c.backward = differentiate(graph, stages.differentiate, stages.recompute, stages.blocks,
                               stages.save_parameter_casts, stages.activation_budget);
    dump_stage(Stage::backward, graph.origin, [&] { return dump(c.backward->graph); });
    c.graph = c.backward->graph;
  } else {
    c.graph = std::move(graph);
  }
  if (stages.cost) {
    c.cost = cost(c.graph);
    dump_stage(Stage::cost, c.graph.origin, [&] { return format_cost(c.graph, *c.cost); });
  }
  if (stages.fuse) {
    c.fused = fuse(c.graph, &c.fused_source);
    dump_stage(Stage::fused, c.graph.origin, [&] { return dump(c.fused); });
  }
  return c;
}

std::string emit_kernel(const Kernel& kernel, Target target, std::string_view symbol) {
  if (target == Target::cuda) {
    std::string source = emit_cuda(kernel).source;  // emit_cuda prepares and verifies
    dump_stage(Stage::cuda, kernel.name, [&] { return source; });
    return source;
  }
  const Kernel prepared = prepare_kernel(kernel);
  verify(prepared);
  dump_stage(Stage::kernels, kernel.name, [&] { return dump(prepared); });
  const std::string entry = symbol.empty() ? "ein_" + prepared.name : std::string(symbol);
  std::string source = emit_mlir(prepared, schedule_cpu(prepared), entry);
  dump_stage(Stage::mlir, kernel.name, [&] { return source; });
  return source;
}

}  // namespace ein
