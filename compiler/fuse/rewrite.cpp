#include "compiler/fuse/rewrite.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace ein::detail {

namespace {

/// Per node: whether an output reads it (graph inputs always count).
std::vector<char> live_nodes(const Graph& g) {
  std::vector<char> live = read_by_outputs(g);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == GraphOp::input) live[i] = 1;
  return live;
}

}  // namespace

std::optional<Graph> compact(Graph out, const std::vector<int>& src,
                             const std::vector<int>& must_die, std::vector<int>& source,
                             std::string& why) {
  const std::vector<char> live = live_nodes(out);
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
    const std::function<std::optional<Site>(const Graph&, int, std::string& why)>& match) {
  Replacements r;
  std::vector<Site> sites;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const int id = static_cast<int>(i);
    if (!candidate(graph, id)) continue;
    std::string why;
    if (std::optional<Site> site = match(graph, id, why))
      sites.push_back(std::move(*site));
    else
      r.misses.emplace_back(id, std::move(why));
  }
  // A chain that something outside it reads (another site's chain included, say probabilities
  // read by two products) stays: its value would be made anyway.
  const std::vector<char> live_before = live_nodes(graph);
  std::vector<std::vector<int>> readers(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (live_before[i])
      for (int in : graph.nodes[i].inputs) readers[in].push_back(static_cast<int>(i));
  for (int o : graph.outputs) readers[o].push_back(-1);  // the caller reads the outputs
  // A site overlapping an earlier one (its end or chain in the other's chain, or the other's
  // end in its chain) stays too: the earlier one's replacement takes those nodes away.
  std::vector<char> claimed(graph.nodes.size(), 0);
  std::vector<Site> unread;
  for (Site& site : sites) {
    const std::set<int> chain(site.interior.begin(), site.interior.end());
    std::string why;
    if (claimed[site.at])
      why = fmt::format("node %{} is in the chain of another match", site.at);
    for (int n : site.interior)
      if (n >= 0 && claimed[n] && why.empty())
        why = fmt::format("node %{} of the chain is in the chain of another match", n);
    for (int n : site.interior) {
      if (n < 0 || !why.empty()) continue;
      for (int reader : readers[n])
        if (reader != site.at && !chain.count(reader)) {
          why = fmt::format("node %{} of the chain is read elsewhere", n);
          break;
        }
    }
    if (why.empty()) {
      claimed[site.at] = 1;
      for (int n : site.interior)
        if (n >= 0) claimed[n] = 1;
      unread.push_back(std::move(site));
    } else {
      r.misses.emplace_back(site.at, std::move(why));
    }
  }
  sites = std::move(unread);
  while (true) {
    Graph out;
    out.origin = graph.origin;
    std::vector<int> site_at(graph.nodes.size(), -1);
    for (size_t s = 0; s < sites.size(); ++s) site_at[sites[s].at] = static_cast<int>(s);
    std::vector<int> id(graph.nodes.size(), -1), src;
    const AddNode add = [&](GraphNode n, int from) {
      src.push_back(from);
      return out.add(std::move(n));
    };
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (site_at[i] >= 0) {
        id[i] = sites[site_at[i]].emit(id, add, out);
        continue;
      }
      GraphNode n = graph.nodes[i];
      for (int& in : n.inputs) in = id[in];
      id[i] = add(std::move(n), static_cast<int>(i));
    }
    for (int o : graph.outputs) out.outputs.push_back(id[o]);
    // The check above is on the input graph; should a chain still be read once the sites are
    // in place, that site stays unfused and the rest are placed again.
    const std::vector<char> live = live_nodes(out);
    std::vector<Site> kept;
    for (Site& site : sites) {
      auto read = std::find_if(site.interior.begin(), site.interior.end(),
                               [&](int n) { return n >= 0 && live[id[n]]; });
      if (read == site.interior.end()) {
        kept.push_back(std::move(site));
      } else {
        r.misses.emplace_back(site.at, fmt::format("node %{} of the chain is read elsewhere", *read));
      }
    }
    if (kept.size() < sites.size()) {
      sites = std::move(kept);
      continue;
    }
    std::string why;
    r.graph = *compact(std::move(out), src, {}, r.source, why);
    r.replaced = static_cast<int>(sites.size());
    std::sort(r.misses.begin(), r.misses.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return r;
  }
}

}  // namespace ein::detail
