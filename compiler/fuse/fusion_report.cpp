// Fusion listings. Member lines are the unfused graph's own dump lines, so the ids match what
// `--stage ir` prints.
#include "compiler/fuse/fusion_report.h"

#include <cctype>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "compiler/fuse/fuse_internal.h"

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

/// `t` without parentheses around the whole of it.
std::string bare(const std::string& t) {
  if (t.size() < 2 || t.front() != '(' || t.back() != ')') return t;
  int depth = 0;
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    depth += t[i] == '(' ? 1 : t[i] == ')' ? -1 : 0;
    if (depth == 0) return t;  // the first '(' closes before the end: `(a) + (b)`
  }
  return t.substr(1, t.size() - 2);
}

/// A map body as an expression over its inputs' names, e.g. `exp(%0 - %1)`; empty when it
/// would be long (shared subexpressions are written out each time they are used).
std::string expression(const Kernel& k, const std::vector<std::string>& names) {
  constexpr size_t kLimit = 100;
  std::vector<std::string> text(k.nodes.size());
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ScalarNode& n = k.nodes[i];
    const std::string_view op = scalar_op_spelling(n.op);
    switch (scalar_op_arity(n.op)) {
      case 0:
        if (n.op == ScalarOp::load)
          text[i] = names.at(n.buffer);
        else if (n.op == ScalarOp::constant)
          text[i] = fmt::format("{:g}", n.value);
        else if (n.op == ScalarOp::index)
          text[i] = fmt::format("index({})", n.dim);
        else
          text[i] = std::string(op);
        break;
      case 1:
        text[i] = fmt::format("{}({})", op, bare(text[n.a]));
        break;
      case 2:
        if (std::isalpha(static_cast<unsigned char>(op.front())))
          text[i] = fmt::format("{}({}, {})", op, bare(text[n.a]), bare(text[n.b]));
        else
          text[i] = fmt::format("({} {} {})", text[n.a], op, text[n.b]);
        break;
      default:
        text[i] =
            fmt::format("{}({}, {}, {})", op, bare(text[n.a]), bare(text[n.b]), bare(text[n.c]));
    }
    if (text[i].size() > kLimit) return "";
  }
  return bare(text.at(k.result >= 0 ? k.result : k.body));
}

/// A member's line: dump()'s, plus a map's body as an expression.
std::string member_line(const Graph& g, int id, const std::string& line) {
  const GraphNode& n = g.nodes[id];
  const auto* m = std::get_if<MapAttr>(&n.attr);
  if (!m || !m->body) return line;
  std::vector<std::string> names;
  for (int in : n.inputs)
    names.push_back(fmt::format("%{}", in));
  const std::string e = expression(*m->body, names);
  return e.empty() ? line : line + "  = " + e;
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
    bool placed = false;
    for (const FusedOutput& o : f.outputs)
      placed = placed || o.placed();
    for (int m : f.members) {
      const GraphOp op = unfused.nodes[m].op;
      // Layout nodes after a concat fold into the placed stores, those before it into reads.
      const char* folded = "";
      if (op == GraphOp::concat)
        folded = "  (folded into the stores)";
      else if (detail::is_layout(op))
        folded = placed ? "  (folded into the strides or the stores)" : "  (folded into the strides)";
      out += fmt::format("  {} {}{}\n", first ? "holds" : "     ",
                         member_line(unfused, m, before[m]), folded);
      first = false;
    }
    std::vector<std::string> stores;
    for (size_t j = 0; j < f.stored.size(); ++j)
      stores.push_back(fmt::format(
          "%{}{}", f.stored[j],
          !f.outputs[j].placed()   ? ""
          : f.outputs[j].into >= 0 ? fmt::format(" (into output {}'s tensor)", f.outputs[j].into)
                                   : " (placed in a tensor of its own)"));
    out += fmt::format("  stores {}\n", fmt::join(stores, ", "));
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
