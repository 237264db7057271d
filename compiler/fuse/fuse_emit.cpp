// The fused graph from the fusion pass's groups (fuse.cpp): steps 4 to 6 of fuse.cpp's
// algorithm. Which layout nodes stay, which members are stored, and one super node per group
// and per node kept as is, written out in a topological order of the groups.
#include <functional>
#include <queue>

#include <fmt/format.h>

#include "compiler/fuse/fuse_internal.h"

namespace ein::detail {

Graph emit_fused(const Graph& g, Grouping& s, std::vector<int>* source) {
  if (source) source->clear();
  const size_t n_count = g.nodes.size();
  auto operands = [&](int i) -> const std::vector<Operand>& {
    if (s.operands[i].size() != g.nodes[i].inputs.size()) {
      s.operands[i].clear();
      for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k)
        s.operands[i].push_back(resolve_operand(g, i, k));
    }
    return s.operands[i];
  };
  // Step 3: which layout nodes stay; step 4: which members are stored.
  std::vector<bool> kept(n_count, false), single(n_count, false);
  for (size_t i = 0; i < n_count; ++i) {
    const GraphOp op = g.nodes[i].op;
    single[i] = op == GraphOp::input || (s.live[i] && !is_layout(op) && s.group_of[i] < 0);
  }
  std::vector<std::vector<int>> readers(n_count);
  for (size_t i = 0; i < n_count; ++i)
    for (int in : g.nodes[i].inputs)
      readers[in].push_back(static_cast<int>(i));
  for (size_t i = 0; i < n_count; ++i)
    if (s.group_of[i] >= 0)
      for (const Operand& op : operands(static_cast<int>(i)))
        if (is_layout(g.nodes[op.source].op)) kept[op.source] = true;
  for (int o : g.outputs)
    if (is_layout(g.nodes[o].op)) kept[o] = true;
  for (size_t i = n_count; i-- > 0;) {
    if (!s.live[i] || !is_layout(g.nodes[i].op)) continue;
    for (int c : readers[i])
      if (s.live[c] && ((single[c] && g.nodes[c].op != GraphOp::input) || kept[c])) kept[i] = true;
  }
  std::vector<bool> stored(n_count, false);
  for (int o : g.outputs)
    stored[o] = true;
  for (size_t i = 0; i < n_count; ++i) {
    if (!s.live[i]) continue;
    if (s.group_of[i] >= 0) {
      for (const Operand& op : operands(static_cast<int>(i)))
        if (s.group_of[op.source] != s.group_of[i]) stored[op.source] = true;
    } else if (single[i] || kept[i]) {
      for (int in : g.nodes[i].inputs)
        stored[in] = true;
    }
  }
  // Step 5: one super node per group and per node kept as is, in a topological order.
  const size_t count = n_count + s.groups.size();
  auto super = [&](int node) {
    return s.group_of[node] >= 0 ? n_count + s.group_of[node] : static_cast<size_t>(node);
  };
  std::vector<bool> present(count, false);
  std::vector<int> first(count, 0);
  for (size_t i = 0; i < n_count; ++i) {
    present[i] = single[i] || kept[i];
    first[i] = static_cast<int>(i);
  }
  for (size_t k = 0; k < s.groups.size(); ++k)
    if (!s.groups[k].dead && !s.groups[k].members.empty()) {
      present[n_count + k] = true;
      first[n_count + k] = s.groups[k].members.front();
    }
  std::vector<std::vector<size_t>> edges(count);
  std::vector<int> pending(count, 0);
  auto edge = [&](size_t from, size_t to) {
    if (from == to) return;
    edges[from].push_back(to);
    ++pending[to];
  };
  for (size_t i = 0; i < n_count; ++i) {
    if (s.group_of[i] >= 0) {
      for (const Operand& op : operands(static_cast<int>(i)))
        edge(super(op.source), super(static_cast<int>(i)));
    } else if (present[i]) {
      for (int in : g.nodes[i].inputs)
        edge(super(in), i);
    }
  }
  using Entry = std::pair<int, size_t>;  // (first member, super node): smallest first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
  for (size_t v = 0; v < count; ++v)
    if (present[v] && pending[v] == 0) ready.push({first[v], v});
  Graph out;
  out.origin = g.origin;
  std::vector<int> value(n_count, -1);
  while (!ready.empty()) {
    const size_t v = ready.top().second;
    ready.pop();
    if (v < n_count) {
      GraphNode node = g.nodes[v];
      for (int& in : node.inputs)
        in = value[in];
      node.note = s.unfused[v];
      if (node.note.empty() && is_layout(node.op))
        node.note = fmt::format("{}: a view, no copy, for an output or an unfused reader",
                                graph_op_name(node.op));
      value[v] = out.add(std::move(node));
      if (source) source->push_back(static_cast<int>(v));
    } else {
      const Group& grp = s.groups[v - n_count];
      std::vector<bool> store;
      for (int m : grp.members)
        store.push_back(stored[m]);
      GroupKernel gk = build_group_kernel(g, grp, store);
      GraphNode node;
      node.op = GraphOp::fused;
      for (int src : gk.sources)
        node.inputs.push_back(value[src]);
      node.shape = gk.attr.outputs.front().shape;
      node.dtype = gk.attr.outputs.front().dtype;
      std::vector<std::string> notes;
      for (int m : grp.members)
        if (!s.split[m].empty()) notes.push_back(fmt::format("%{} {}", m, s.split[m]));
      node.note = fmt::format("{}", fmt::join(notes, "; "));
      const std::vector<FusedOutput> outputs = gk.attr.outputs;
      node.attr = std::move(gk.attr);
      const int id = out.add(std::move(node));
      if (source) source->push_back(-1);
      for (size_t k = 0; k < gk.stored.size(); ++k) {
        if (k == 0) {
          value[gk.stored[k]] = id;
          continue;
        }
        GraphNode r;
        r.op = GraphOp::result;
        r.inputs = {id};
        r.shape = outputs[k].shape;
        r.dtype = outputs[k].dtype;
        r.attr = ResultAttr{static_cast<int>(k)};
        value[gk.stored[k]] = out.add(std::move(r));
        if (source) source->push_back(-1);
      }
    }
    for (size_t w : edges[v])
      if (--pending[w] == 0) ready.push({first[w], w});
  }
  for (int o : g.outputs)
    out.outputs.push_back(value[o]);
  verify(out);
  return out;
}

}  // namespace ein::detail
