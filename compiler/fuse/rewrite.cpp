#include "compiler/fuse/rewrite.h"

#include <numeric>
#include <set>

#include <fmt/format.h>

namespace ein::detail {

std::optional<Graph> compact(Graph out, const std::vector<int>& src,
                             const std::vector<int>& must_die, std::vector<int>& source,
                             std::string& why) {
  std::vector<char> live(out.nodes.size(), 0);
  for (int o : out.outputs) live[o] = 1;
  for (size_t i = out.nodes.size(); i-- > 0;) {
    if (out.nodes[i].op == GraphOp::input) live[i] = 1;
    if (!live[i]) continue;
    for (int in : out.nodes[i].inputs) live[in] = 1;
  }
  for (int n : must_die)
    if (n >= 0 && live[n]) {
      why = fmt::format("node %{} of the chain is read elsewhere", src[n]);
      return std::nullopt;
    }
  Graph compacted;
  compacted.origin = out.origin;
  std::vector<int> renumbered(out.nodes.size(), -1);
  source.clear();
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    if (!live[i]) continue;
    GraphNode n = std::move(out.nodes[i]);
    for (int& in : n.inputs) in = renumbered[in];
    renumbered[i] = compacted.add(std::move(n));
    source.push_back(src[i]);
  }
  for (int o : out.outputs) compacted.outputs.push_back(renumbered[o]);
  return compacted;
}

Replacements replace_all(
    const Graph& graph, const std::function<bool(const Graph&, int)>& candidate,
    const std::function<std::optional<Graph>(const Graph&, int, std::vector<int>& source,
                                             std::string& why)>& attempt) {
  Replacements r;
  r.graph = graph;
  r.source.resize(graph.nodes.size());
  std::iota(r.source.begin(), r.source.end(), 0);
  std::set<int> tried;  // input-graph nodes already attempted
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < r.graph.nodes.size(); ++i) {
      const int id = static_cast<int>(i);
      if (tried.count(r.source[i]) || !candidate(r.graph, id)) continue;
      tried.insert(r.source[i]);
      std::string why;
      std::vector<int> source;
      if (std::optional<Graph> out = attempt(r.graph, id, source, why)) {
        for (int& s : source) s = s >= 0 ? r.source[s] : -1;
        r.graph = std::move(*out);
        r.source = std::move(source);
        ++r.replaced;
        again = true;
        break;
      }
      r.misses.emplace_back(r.source[i], std::move(why));
    }
  }
  return r;
}

}  // namespace ein::detail
