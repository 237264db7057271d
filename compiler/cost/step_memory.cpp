// step_memory (compiler/cost/step_memory.h): one timeline over forward then backward nodes, one
// buffer per node that makes memory, an interval [allocated, last read] per buffer, and a sweep.
#include "compiler/cost/step_memory.h"

#include <algorithm>

#include "compiler/cost/backward_cost.h"
#include "compiler/cost/cost_model.h"
#include <ein/tensor.h>

namespace ein {
namespace {

bool is_alias(GraphOp op) {
  return op == GraphOp::view || op == GraphOp::reshape || op == GraphOp::permute ||
         op == GraphOp::slice;
}

int64_t node_bytes(const GraphNode& n) {
  return checked_numel(n.shape) * static_cast<int64_t>(element_size(n.dtype));
}

/// Per node of a fused graph, the concat whose slot it writes (ConcatAttr::placed), or -1.
std::vector<int> placed_into(const Graph& g) {
  std::vector<int> into(g.nodes.size(), -1);
  for (size_t c = 0; c < g.nodes.size(); ++c)
    if (const auto* a = std::get_if<ConcatAttr>(&g.nodes[c].attr))
      for (int p : a->placed)
        if (p >= 0) into[static_cast<size_t>(p)] = static_cast<int>(c);
  return into;
}

}  // namespace

StepMemory step_memory(const Graph& forward, const Backward& backward) {
  const int nf = static_cast<int>(forward.nodes.size());
  const Graph& bg = backward.graph;
  const int nb = static_cast<int>(bg.nodes.size());
  const std::vector<int> fwd_of = replica_sources(backward, forward);

  // Buffers: forward node f is buffer f, backward node j is buffer nf + j; an input of the
  // backward that is a forward value (a forward input or a saved value) is that value's
  // buffer. buffer_of follows aliases to the node that holds the memory. Backward node j runs
  // at time nf + j: a rebuilt value is allocated where autodiff put it, before its first reader.
  std::vector<int> fbuf(nf), bbuf(nb);
  for (int f = 0; f < nf; ++f) {
    const GraphNode& n = forward.nodes[f];
    fbuf[f] = is_alias(n.op) ? fbuf[n.inputs[0]] : f;
  }
  for (int j = 0; j < nb; ++j) {
    const GraphNode& n = bg.nodes[j];
    bbuf[j] = n.op == GraphOp::input && fwd_of[j] >= 0 ? fbuf[fwd_of[j]]
              : is_alias(n.op)                         ? bbuf[n.inputs[0]]
                                                       : nf + j;
  }
  const int buffers = nf + nb;
  std::vector<int64_t> size(buffers, 0);
  std::vector<int> born(buffers, -1), last(buffers, -1);
  StepMemory m;
  m.forward_bytes.assign(nf, 0);
  for (int f = 0; f < nf; ++f) {
    const GraphNode& n = forward.nodes[f];
    if (n.op == GraphOp::input || is_alias(n.op)) continue;
    size[f] = m.forward_bytes[f] = node_bytes(n);
    born[f] = last[f] = f;
  }
  for (int j = 0; j < nb; ++j) {
    const GraphNode& n = bg.nodes[j];
    if (n.op == GraphOp::input || is_alias(n.op)) continue;
    size[nf + j] = node_bytes(n);
    born[nf + j] = last[nf + j] = nf + j;
  }
  // Last readers; the forward's outputs live to its end, the backward's results (gradients)
  // belong to the ledger's gradient line.
  for (int f = 0; f < nf; ++f)
    for (int in : forward.nodes[f].inputs) last[fbuf[in]] = std::max(last[fbuf[in]], f);
  std::vector<bool> forward_output(buffers, false);
  for (int out : forward.outputs) {
    last[fbuf[out]] = std::max(last[fbuf[out]], nf - 1);
    forward_output[fbuf[out]] = true;
  }
  for (int j = 0; j < nb; ++j)
    for (int in : bg.nodes[j].inputs)
      last[bbuf[in]] = std::max(last[bbuf[in]], nf + j);
  for (int out : bg.outputs)
    if (bbuf[out] >= nf) size[bbuf[out]] = 0;

  // Sweep over the timeline.
  const int steps = nf + nb;
  std::vector<int64_t> delta(static_cast<size_t>(steps) + 1, 0);
  for (int b = 0; b < buffers; ++b) {
    if (born[b] < 0 || size[b] == 0) continue;
    delta[born[b]] += size[b];
    delta[last[b] + 1] -= size[b];
    if (b < nf && (last[b] >= nf || forward_output[b])) m.at_boundary += size[b];
  }
  int64_t live = 0;
  for (int t = 0; t < steps; ++t) {
    live += delta[t];
    if (live > m.peak) {
      m.peak = live;
      m.peak_in_backward = t >= nf;
      m.peak_node = t < nf ? t : t - nf;
    }
  }
  return m;
}

StepMemory fused_step_memory(const Graph& forward, int outputs, const Graph& backward,
                             int saved_base, std::span<const int> freed_after) {
  // One timeline: forward node f at time f, backward node j at nf + j. Buffers as in
  // step_memory(); a result node's buffer is allocated when its kernel runs.
  const int nf = static_cast<int>(forward.nodes.size());
  const int nb = static_cast<int>(backward.nodes.size());
  const int buffers = nf + nb;
  std::vector<int> buf(buffers);
  std::vector<int64_t> size(buffers, 0);
  std::vector<int> born(buffers, -1), last(buffers, -1);
  StepMemory m;
  m.forward_bytes.assign(nf, 0);
  // A contraction that writes its slot of a concat (ConcatAttr::placed) is the concat's
  // buffer, allocated when the first of them runs (exec/execute.cpp).
  const std::vector<int> forward_into = placed_into(forward), backward_into = placed_into(backward);
  // A reshape is a view unless its input's layout is known and allows none (a permuted view
  // of the attention's output, whose rows hold the logsumexp too): then the executor copies.
  const std::vector<std::optional<Shape>> forward_strides = static_strides(forward, nf - 1);
  std::vector<std::optional<Shape>> backward_inputs;
  for (const GraphNode& n : backward.nodes) {
    if (n.op != GraphOp::input) continue;
    const int index = std::get<InputAttr>(n.attr).index;
    const int k = index - saved_base + outputs;
    if (static_cast<int>(backward_inputs.size()) <= index) backward_inputs.resize(index + 1);
    backward_inputs[index] = index >= saved_base && k < static_cast<int>(forward.outputs.size())
                                 ? forward_strides[forward.outputs[k]]
                                 : std::optional<Shape>(contiguous_strides(n.shape));
  }
  const std::vector<std::optional<Shape>> backward_strides =
      static_strides(backward, nb - 1, backward_inputs);
  const auto copies = [&](const Graph& g, const std::vector<std::optional<Shape>>& strides,
                          const GraphNode& n) {
    const std::optional<Shape>& in = strides[n.inputs[0]];
    return n.op == GraphOp::reshape && in && g.nodes[n.inputs[0]].shape != n.shape &&
           !view_strides(g.nodes[n.inputs[0]].shape, *in, n.shape);
  };
  const auto place = [&](const Graph& g, int offset, int i) {
    const GraphNode& n = g.nodes[i];
    const int id = offset + i;
    const int into = (offset == 0 ? forward_into : backward_into)[static_cast<size_t>(i)];
    buf[id] = id;
    if (is_alias(n.op) && !copies(g, offset == 0 ? forward_strides : backward_strides, n)) {
      buf[id] = buf[offset + n.inputs[0]];
    } else if (into >= 0) {
      buf[id] = offset + into;
      born[offset + into] = born[offset + into] < 0 ? id : std::min(born[offset + into], id);
    } else if (n.op != GraphOp::input) {
      size[id] = node_bytes(n);
      const int at = n.op == GraphOp::result ? offset + n.inputs[0] : id;
      born[id] = born[id] < 0 ? at : std::min(born[id], at);
      last[id] = at;
    }
  };
  for (int f = 0; f < nf; ++f) {
    place(forward, 0, f);
    m.forward_bytes[f] = size[f];
  }
  // The backward's inputs from saved_base on are the forward's outputs from `outputs` on.
  for (int j = 0; j < nb; ++j) {
    const GraphNode& n = backward.nodes[j];
    const int index = n.op == GraphOp::input ? std::get<InputAttr>(n.attr).index : -1;
    const int k = index - saved_base + outputs;
    if (index >= saved_base && k < static_cast<int>(forward.outputs.size()))
      buf[nf + j] = buf[forward.outputs[k]];
    else
      place(backward, nf, j);
  }
  for (int f = 0; f < nf; ++f)
    for (int in : forward.nodes[f].inputs) last[buf[in]] = std::max(last[buf[in]], f);
  std::vector<bool> returned(buffers, false);
  for (size_t k = 0; k < forward.outputs.size(); ++k) {
    const int b = buf[forward.outputs[k]];
    last[b] = std::max(last[b], nf - 1);
    returned[b] = static_cast<int>(k) < outputs;
  }
  for (int j = 0; j < nb; ++j)
    for (int in : backward.nodes[j].inputs)
      last[buf[nf + in]] = std::max(last[buf[nf + in]], nf + j);
  const int steps = nf + nb;
  // Gradients are the ledger's line, not activations; they count only in peak_with_gradients,
  // from when they are made to the end of the step (or to freed_after).
  std::vector<bool> gradient(buffers, false);
  std::vector<int64_t> grown(static_cast<size_t>(steps) + 1, 0);
  for (size_t k = 0; k < backward.outputs.size(); ++k) {
    const int b = buf[nf + backward.outputs[k]];
    if (b < nf || gradient[b] || born[b] < 0) continue;
    gradient[b] = true;
    grown[born[b]] += size[b];
    if (k < freed_after.size() && freed_after[k] >= 0)
      grown[std::max(born[b] + 1, nf + freed_after[k] + 1)] -= size[b];
  }
  std::vector<int64_t> delta(static_cast<size_t>(steps) + 1, 0);
  for (int b = 0; b < buffers; ++b) {
    if (born[b] < 0 || size[b] == 0 || gradient[b]) continue;
    delta[born[b]] += size[b];
    delta[last[b] + 1] -= size[b];
    if (b < nf && (last[b] >= nf || returned[b])) m.at_boundary += size[b];
  }
  int64_t live = 0, gradients = 0;
  for (int t = 0; t < steps; ++t) {
    live += delta[t];
    gradients += grown[t];
    m.peak_with_gradients = std::max(m.peak_with_gradients, live + gradients);
    if (live > m.peak) {
      m.peak = live;
      m.peak_in_backward = t >= nf;
      m.peak_node = t < nf ? t : t - nf;
    }
  }
  return m;
}

}  // namespace ein
