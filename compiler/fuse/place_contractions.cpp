// Step 8 of the fusion pass (fuse_internal.h's place_contractions): a contraction whose only
// reader is a concat, directly or through layout nodes read by nothing else, writes its result
// into its slot of the concat's buffer (the GEMM's C at the concat's row stride) instead of a
// buffer of its own that the concat then copies. The weight gradient of a projection written as
// slices of one weight (stdlib/gpt.ein's q, k and v from the thirds of qkv.weight) is such a
// concat of three GEMMs: placed, its [768, 2304] copy per layer and step is gone.
//
// Between them may lie layout nodes that graph.h's strides_before_layout takes back: the slot,
// taken back through them, must be a strided tensor of the contraction's shape (a head split
// moved in front of the sequence, as attention's dO is, is not: that concat still copies).
#include <algorithm>
#include <optional>

#include <ein/tensor.h>

#include "compiler/fuse/fuse_internal.h"

namespace ein::detail {

void place_contractions(Graph& g) {
  std::vector<int> readers(g.nodes.size(), 0);
  for (const GraphNode& n : g.nodes)
    for (int in : n.inputs) ++readers[static_cast<size_t>(in)];
  for (int o : g.outputs) ++readers[static_cast<size_t>(o)];
  for (GraphNode& c : g.nodes) {
    if (c.op != GraphOp::concat) continue;
    auto& a = std::get<ConcatAttr>(c.attr);
    a.placed.assign(c.inputs.size(), -1);
    bool any = false;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      // The slot: the concat's (contiguous) buffer sliced along its dim, shaped as the input.
      const Shape& piece = g.nodes[static_cast<size_t>(c.inputs[i])].shape;
      Shape slot = c.shape;
      slot[static_cast<size_t>(a.dim)] = 1;
      for (int64_t d = a.dim; d < a.dim + a.spans[i]; ++d)
        slot[static_cast<size_t>(a.dim)] *= piece[static_cast<size_t>(d)];
      std::optional<Shape> strides = view_strides(slot, contiguous_strides(c.shape), piece);
      // Back from the input through layout nodes, each read only by the node after it (the
      // concat reads each of its inputs once: an input listed twice has two readers).
      int x = c.inputs[i];
      while (strides && readers[static_cast<size_t>(x)] == 1 &&
             g.nodes[static_cast<size_t>(x)].dtype == c.dtype) {
        const GraphNode& n = g.nodes[static_cast<size_t>(x)];
        if (n.op == GraphOp::contract) {
          a.placed[i] = x;
          any = true;
          break;
        }
        if (n.inputs.empty()) break;
        x = n.inputs[0];
        strides = strides_before_layout(n, g.nodes[static_cast<size_t>(x)].shape, *strides);
      }
    }
    if (!any) {
      a.placed.clear();
      continue;
    }
    const bool all = std::find(a.placed.begin(), a.placed.end(), -1) == a.placed.end();
    c.note = all ? "concat: no copy, each input's contraction writes its slot"
                 : "concat: the contractions write their slots, the other inputs are copied";
  }
}

}  // namespace ein::detail
