// Fusion listings. Member lines are the unfused graph's own dump lines, so the ids match what
// `--stage ir` prints.
#include "compiler/fusion_report.h"

#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "compiler/fuse_internal.h"

namespace ein {
namespace {

/// dump()'s line for each node, without the leading spaces.
std::vector<std::string> node_lines(const Graph& g) {
  std::istringstream in(dump(g));
  std::string line;
  std::vector<std::string> lines;
  std::getline(in, line);  // "graph ..."
  while (lines.size() < g.nodes.size() && std::getline(in, line))
    lines.push_back(line.substr(line.find_first_not_of(' ')));
  return lines;
}

std::string plural(size_t n, std::string_view word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

int count_kernels(const Graph& g) {
  int n = 0;
  for (const GraphNode& node : g.nodes)
    n += node.op == GraphOp::fused ? 1 : 0;
  return n;
}

std::string fusion_report(const Graph& unfused, const Graph& fused) {
  const std::vector<std::string> before = node_lines(unfused), after = node_lines(fused);
  std::vector<int> left;
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const GraphOp op = fused.nodes[i].op;
    if (op != GraphOp::input && op != GraphOp::fused && op != GraphOp::result)
      left.push_back(static_cast<int>(i));
  }
  const int kernels = count_kernels(fused);
  std::string out =
      fmt::format("fused {}: {}, {} left as is\n", unfused.origin,
                  plural(static_cast<size_t>(kernels), "kernel"), plural(left.size(), "node"));
  int number = 0;
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const GraphNode& n = fused.nodes[i];
    if (n.op != GraphOp::fused) continue;
    const auto& f = std::get<FusedAttr>(n.attr);
    const Kernel general = to_general_form(*f.kernel);
    const Kernel& k = *f.kernel;
    Shape row(k.domain.end() - k.reduced, k.domain.end());
    out += fmt::format("\nkernel {} (%{}): {} over [{}]", ++number, i, k.name,
                       fmt::join(k.domain, ", "));
    out += k.reduced > 0 ? fmt::format(", row [{}]", fmt::join(row, ", ")) : ", pointwise";
    out += fmt::format(", {}, {}, {}\n", plural(general.stages.size(), "stage"),
                       plural(general.stores.size(), "store"), plural(f.reads.size(), "read"));
    bool first = true;
    for (int m : f.members) {
      const bool folded = detail::is_layout(unfused.nodes[m].op);
      out += fmt::format("  {} {}{}\n", first ? "holds" : "     ", before[m],
                         folded ? "  (folded into the strides)" : "");
      first = false;
    }
    if (!n.note.empty()) out += fmt::format("  kernel boundary: {}\n", n.note);
  }
  if (!left.empty()) {
    out += "\nleft as is:\n";
    for (int i : left)
      out += fmt::format("  {}\n", after[i]);
  }
  return out;
}

}  // namespace ein
