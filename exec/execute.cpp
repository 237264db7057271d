// Graph IR on CPU tensors: one function per op, chosen by a table keyed by GraphOp.
#include "exec/execute.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>

#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/quantize.h>
#include <fmt/format.h>

#include "exec/attention.h"
#include "exec/cross_entropy.h"
#include "exec/executed_cost.h"
#include "exec/indexing.h"
#include "exec/run_fused.h"
#include "exec/tensor_kernels.h"
#include "runtime/blas/contract.h"
#include "runtime/counters.h"
#include "runtime/device_checks.h"
#include "runtime/dist/gradient_sync.h"

namespace ein {
namespace {

using Tensors = std::vector<Tensor>;
/// Per node, its results: one tensor, several for a multi-output fused node.
using Values = std::vector<Tensors>;

/// What every rule sees besides the node and the values so far: the graph's inputs, which
/// execute() owns (an input node takes its tensor over, see run_input), and where a node
/// without inputs (a constant) runs: where the graph's inputs live.
struct Context {
  const Graph* graph;
  Tensors& inputs;
  std::vector<int> taker;  ///< per input index, the last input node of that index
  int node = 0;            ///< the node running
  Device device;
  /// ZeRO 3: the graph's reads of sharded parameters, prefetched (null: none here), and per
  /// node, its read's index there (input nodes).
  dist::GraphFetches* fetches = nullptr;
  std::vector<int> read_of = {};
  /// execute_into(): per fused node, the tensor each of its outputs should be written into.
  std::vector<std::vector<Tensor>> into = {};
  /// Concats of contractions (ConcatAttr::placed): per contraction, the concat it writes into
  /// and which of its inputs that is ({-1, -1}: none); per concat, its buffer from when the
  /// first of them ran until the concat takes it. Empty when the graph has none.
  std::vector<std::pair<int, int>> placed_in = {};
  std::vector<Tensor> concat_buffer = {};
};

/// Whether `a` and `b` are the same elements of one storage (strides of size-1 dims aside).
bool same_view(const Tensor& a, const Tensor& b) {
  if (!a.same_storage(b) || a.offset() != b.offset() || a.shape() != b.shape()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

/// Input i's slot of concat `out` (node n): the slice along its dim, shaped as the input.
std::optional<Tensor> concat_slot(const Graph& g, const GraphNode& n, const Tensor& out, size_t i) {
  const auto& a = std::get<ConcatAttr>(n.attr);
  int64_t at = 0, len = 0;
  for (size_t j = 0; j <= i; ++j) {
    const Shape& shape = g.nodes[n.inputs[j]].shape;
    len = 1;
    for (int64_t d = a.dim; d < a.dim + a.spans[j]; ++d)
      len *= shape[static_cast<size_t>(d)];
    if (j < i) at += len;
  }
  const Tensor slot = out.slice(a.dim, at, at + len);
  const Shape& shape = g.nodes[n.inputs[i]].shape;
  const std::optional<Shape> strides = view_strides(slot.shape(), slot.strides(), shape);
  if (!strides) return std::nullopt;
  return slot.as_strided(shape, *strides, slot.offset());
}

/// Where contraction node `p`, of a `result` dtype result, writes it: its slot of the concat
/// that alone reads it (allocated here when it is the first), taken back through the layout
/// nodes between them; an undefined tensor when it has none, the slot cannot be taken back, or
/// the concat's dtype is not `result` (a graph run in another dtype than it was built in: the
/// concat converts as it copies).
Tensor placed_destination(const Graph& g, int p, DType result, Device device, Context& c) {
  if (c.placed_in.empty() || c.placed_in[static_cast<size_t>(p)].first < 0) return Tensor();
  const auto [concat, i] = c.placed_in[static_cast<size_t>(p)];
  const GraphNode& n = g.nodes[static_cast<size_t>(concat)];
  if (n.dtype != result) return Tensor();
  Tensor& buffer = c.concat_buffer[static_cast<size_t>(concat)];
  if (!buffer.defined()) buffer = empty(n.shape, n.dtype, device);
  std::optional<Tensor> dest = concat_slot(g, n, buffer, static_cast<size_t>(i));
  for (int x = n.inputs[static_cast<size_t>(i)]; dest && x != p;) {
    const GraphNode& layout = g.nodes[static_cast<size_t>(x)];
    x = layout.inputs[0];
    const Shape& in = g.nodes[static_cast<size_t>(x)].shape;
    const std::optional<Shape> strides = strides_before_layout(layout, in, dest->strides());
    dest = strides ? std::optional<Tensor>(dest->as_strided(in, *strides, dest->offset()))
                   : std::nullopt;
  }
  return dest ? *dest : Tensor();
}

/// A node reading another reads its first result (`result` nodes pick the others).
const Tensor& arg(const Values& v, const GraphNode& n, size_t i) {
  return v[n.inputs[i]].front();
}

Tensor run_input(const GraphNode& n, const Values&, Context& c) {
  // The last input node of an index takes the tensor over, so execute() holds no reference of
  // its own once that node's value dies.
  // A parameter of a sharded ZeRO 3 run is fetched from its owner here, at the node that
  // reads it (the next one already travelling: GraphFetches), and freed with the node's
  // value after its last reader.
  const int index = std::get<InputAttr>(n.attr).index;
  Tensor x = c.taker[index] == c.node ? std::move(c.inputs[index]) : Tensor(c.inputs[index]);
  if (c.fetches) return c.fetches->take(static_cast<size_t>(c.read_of[c.node]), std::move(x));
  return dist::fetch_sharded(std::move(x));
}

Tensor run_view(const GraphNode& n, const Values& v, Context&) {
  const Tensor& x = arg(v, n, 0);
  const Shape strides = view_output_strides(std::get<ViewAttr>(n.attr), x.strides());
  return x.as_strided(n.shape, strides, x.offset());
}

Tensor run_reshape(const GraphNode& n, const Values& v, Context&) {
  const Tensor& x = arg(v, n, 0);
  if (std::optional<Shape> s = view_strides(x.shape(), x.strides(), n.shape))
    return x.as_strided(n.shape, *s, x.offset());
  Tensor out = empty(n.shape, x.dtype(), x.device());
  copy_into(out.as_strided(x.shape(), contiguous_strides(x.shape()), 0), x);
  return out;
}

Tensor run_permute(const GraphNode& n, const Values& v, Context&) {
  return arg(v, n, 0).permute(std::get<PermuteAttr>(n.attr).order);
}

Tensor run_reduce(const GraphNode& n, const Values& v, Context&) {
  const auto& a = std::get<ReduceAttr>(n.attr);
  return reduce_dims(arg(v, n, 0), a.reduced, a.reduction, a.ddof, a.out_order);
}

Tensor run_contract(const GraphNode& n, const Values& v, Context& c) {
  const auto& a = std::get<ContractAttr>(n.attr);
  const Tensor& x = arg(v, n, 0);
  // An f32 node of 16-bit operands (the fusion pass's widen_contractions) returns the f32
  // sums; otherwise the result has the operands' dtype (a graph may run in another dtype
  // than it was built in, as the tests' float64 runs do).
  const bool widened =
      n.dtype == DType::f32 && (x.dtype() == DType::bf16 || x.dtype() == DType::f16);
  const DType result = widened ? DType::f32 : x.dtype();
  if (Tensor into = placed_destination(*c.graph, c.node, result, x.device(), c); into.defined()) {
    contract_into(into, x, a.a_axes, arg(v, n, 1), a.b_axes, a.out_axes);
    return into;
  }
  return contract(x, a.a_axes, arg(v, n, 1), a.b_axes, a.out_axes,
                  widened ? std::optional<DType>(DType::f32) : std::nullopt);
}

Tensor run_map_node(const GraphNode& n, const Values& v, Context& c) {
  const auto& a = std::get<MapAttr>(n.attr);
  Kernel k = *a.body;
  k.domain = n.shape;
  k.buffers.reserve(n.inputs.size() + 1);  // run_map adds the output
  std::vector<Tensor> ins;
  ins.reserve(n.inputs.size() + 1);
  std::vector<DType> dtypes;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Tensor x = arg(v, n, i);
    if ((x.dtype() == DType::f8e4m3 || x.dtype() == DType::f8e5m2) && x.device() == cpu())
      x = x.to(DType::f32);
    Shape strides(n.shape.size(), 0);
    for (size_t d = 0; d < a.axes[i].size(); ++d)
      if (x.size(static_cast<int64_t>(d)) != 1)
        strides[a.axes[i][d]] = x.stride(static_cast<int64_t>(d));
    k.add_buffer(x.dtype(), std::move(strides));
    dtypes.push_back(x.dtype());
    ins.push_back(std::move(x));
  }
  k.compute = compute_type(dtypes);
  return run_map(std::move(k), std::move(ins), n.dtype, c.device);
}

Tensor run_concat(const GraphNode& n, const Values& v, Context& c) {
  const auto& a = std::get<ConcatAttr>(n.attr);
  // Where contractions wrote their slots already (ConcatAttr::placed), the buffer is theirs
  // and those inputs are views of it.
  Tensor out;
  if (!c.concat_buffer.empty()) out = std::move(c.concat_buffer[static_cast<size_t>(c.node)]);
  if (!out.defined()) out = empty(n.shape, n.dtype, arg(v, n, 0).device());
  int64_t at = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Tensor& x = arg(v, n, i);
    int64_t len = 1;
    for (int64_t d = a.dim; d < a.dim + a.spans[i]; ++d)
      len *= x.size(d);
    const Tensor slot = out.slice(a.dim, at, at + len).view(x.shape());
    if (!same_view(slot, x)) copy_into(slot, x);
    at += len;
  }
  return out;
}

Tensor run_slice(const GraphNode& n, const Values& v, Context&) {
  const auto& a = std::get<SliceAttr>(n.attr);
  return arg(v, n, 0).slice(a.dim, a.start, a.stop, a.step);
}

/// `rows()` (a gather of node n's), its indices out of range reported at the script's
/// expression when n came from one, whether found now (on the host) or when the host next
/// waits for the device that checked them (runtime/device_checks.h).
template <class Rows>
Tensor at_gather_source(const GraphNode& n, const Rows& rows) {
  if (!n.source) return rows();
  const auto at_expression = [source = n.source, range = n.range](std::string_view what) {
    if (what.starts_with("gather: ")) what.remove_prefix(8);  // the script wrote x[indices]
    throw UserError(std::string(what), source, range);
  };
  const detail::DeviceCheckScope deferred(at_expression);
  try {
    return rows();
  } catch (const RuntimeError& e) {
    at_expression(e.what());
    throw;  // (at_expression throws)
  }
}

Tensor run_gather(const GraphNode& n, const Values& v, Context&) {
  return at_gather_source(n, [&] { return gather_rows(arg(v, n, 0), arg(v, n, 1)); });
}

Tensor run_scatter_add(const GraphNode& n, const Values& v, Context&) {
  return scatter_add_rows(arg(v, n, 0), arg(v, n, 1), n.shape.front());
}

Tensor run_attention(const GraphNode& n, const Values& v, Context&) {
  const auto& a = std::get<AttentionAttr>(n.attr);
  return attention_forward(arg(v, n, 0), arg(v, n, 1), arg(v, n, 2),
                           a.bias ? arg(v, n, 3) : Tensor(), a.scale, n.dtype, a.kv_repeat);
}

Tensor run_attention_grad(const GraphNode& n, const Values& v, Context&) {
  const auto& a = std::get<AttentionAttr>(n.attr);
  const size_t at = a.bias ? 4 : 3;
  return attention_backward(arg(v, n, 0), arg(v, n, 1), arg(v, n, 2),
                            a.bias ? arg(v, n, 3) : Tensor(), arg(v, n, at), arg(v, n, at + 1),
                            a.scale, n.dtype, a.kv_repeat);
}

Tensors run_linear_cross_entropy(const GraphNode& n, const Values& v, Context&) {
  if (const auto* a = std::get_if<CrossEntropyAttr>(&n.attr); a && a->unit_grads) {
    CrossEntropyWithGrads r =
        linear_cross_entropy_with_grads(arg(v, n, 0), arg(v, n, 1), arg(v, n, 2), n.dtype);
    return {std::move(r.out), std::move(r.dh), std::move(r.dw)};
  }
  return {linear_cross_entropy_forward(arg(v, n, 0), arg(v, n, 1), arg(v, n, 2), n.dtype)};
}

Tensors run_linear_cross_entropy_grad(const GraphNode& n, const Values& v, Context&) {
  auto [dh, dw] =
      n.inputs.size() == 7
          ? linear_cross_entropy_backward(arg(v, n, 0), arg(v, n, 1), arg(v, n, 2), arg(v, n, 3),
                                          arg(v, n, 4), arg(v, n, 5), arg(v, n, 6), n.dtype)
          : linear_cross_entropy_backward(arg(v, n, 0), arg(v, n, 1), arg(v, n, 2), arg(v, n, 3),
                                          arg(v, n, 4), n.dtype);
  return {std::move(dh), std::move(dw)};
}

Tensor run_quantized_matmul(const GraphNode& n, const Values& v, Context&) {
  const auto& a = std::get<QuantMatmulAttr>(n.attr);
  QuantizedTensor w{a.type, n.dtype, a.weight, arg(v, n, 1), arg(v, n, 2)};
  Tensor y = quantized_matmul(arg(v, n, 0), w, a.layout);
  return y.dtype() == n.dtype ? y : y.to(n.dtype);
}

/// The rows' codes and scales gathered, then dequantized: only the rows picked are read.
Tensor run_quantized_gather(const GraphNode& n, const Values& v, Context&) {
  const auto& a = std::get<QuantGatherAttr>(n.attr);
  return at_gather_source(n, [&] {
    const Tensor& indices = arg(v, n, 2);
    QuantizedTensor rows{a.type, DType::f32, n.shape, gather_rows(arg(v, n, 0), indices),
                         gather_rows(arg(v, n, 1), indices)};
    return dequantize(rows);
  });
}

Tensor run_write_row(const GraphNode& n, const Values& v, Context&) {
  const int64_t dim = std::get<WriteRowAttr>(n.attr).dim;
  const Tensor& cache = arg(v, n, 0);
  const int64_t p = arg(v, n, 2).to(cpu()).data<int64_t>()[0];
  if (p < 0 || p >= cache.size(dim))
    throw std::logic_error(fmt::format("write_row: index {} outside the cache's {} rows", p,
                                       cache.size(dim)));
  cache.slice(dim, p, p + 1).copy_(arg(v, n, 1));
  return cache;
}

Tensor run_cast(const GraphNode& n, const Values& v, Context&) {
  return arg(v, n, 0).to(n.dtype);
}

Tensors run_fused_node(const GraphNode& n, const Values& v, Context& c) {
  Tensors ins;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    ins.push_back(arg(v, n, i));
  const bool wished = !c.into.empty() && !c.into[static_cast<size_t>(c.node)].empty();
  return run_fused(std::get<FusedAttr>(n.attr), ins, c.device,
                   wished ? &c.into[static_cast<size_t>(c.node)] : nullptr);
}

Tensors run_result(const GraphNode& n, const Values& v, Context&) {
  return {v[n.inputs[0]][std::get<ResultAttr>(n.attr).index]};
}

using Rule = Tensors (*)(const GraphNode&, const Values&, Context&);
/// A rule for an op with one result.
template <Tensor (*F)(const GraphNode&, const Values&, Context&)>
Tensors one(const GraphNode& n, const Values& v, Context& c) {
  Tensors result;
  result.push_back(F(n, v, c));  // moved: `return {F(...)}` would copy it out of the list
  return result;
}

// One rule per op, in ops.def order.
constexpr std::array<Rule, 21> kRules = {
    one<run_input>,     one<run_view>,           one<run_reshape>,   one<run_permute>,
    one<run_reduce>,    one<run_contract>,       one<run_map_node>,  one<run_concat>,
    one<run_slice>,     one<run_cast>,           one<run_gather>,    one<run_scatter_add>,
    one<run_attention>, one<run_attention_grad>, run_linear_cross_entropy,
    run_linear_cross_entropy_grad,               one<run_quantized_matmul>,
    one<run_quantized_gather>,                   one<run_write_row>,
    run_fused_node,                              run_result,
};
static_assert(static_cast<int>(GraphOp::result) + 1 == kRules.size(), "a rule per op in ops.def");

/// EIN_PROFILE=1: wall time per node kind (op, kernel name, shape), the 25 slowest printed to
/// stderr at exit (EIN_PROFILE=N: the N slowest). A diagnostic for finding the node that
/// dominates a graph's time. A kind called more than once leaves its first call (a kernel's
/// JIT compile, a GEMM's first packing, cold caches) out of its row, totalled on its own, so
/// the rows of a training run are its steady state; a kind called once shows that call.
struct NodeProfile {
  struct Row {
    double first = 0;    // the first call
    double seconds = 0;  // every call after it
    int64_t calls = 0;   // every call, the first included
  };
  std::map<std::string, Row> time;
  void add(const std::string& key, double seconds) {
    Row& row = time[key];
    if (row.calls++ == 0) row.first = seconds;
    else row.seconds += seconds;
  }
  ~NodeProfile() {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0, first_calls = 0;
    for (const auto& [k, v] : time) {
      const bool once = v.calls == 1;
      if (!once) first_calls += v.first;
      const double t = once ? v.first : v.seconds;
      rows.emplace_back(t, fmt::format("{:>8} calls  {}", once ? 1 : v.calls - 1, k));
      total += t;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr,
                 "EIN_PROFILE: %.3f s in graph nodes (first calls of kinds called again, left "
                 "out: %.3f s); slowest:\n",
                 total, first_calls);
    const long shown = std::max(25L, std::strtol(std::getenv("EIN_PROFILE"), nullptr, 10));
    for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(shown); ++i)
      std::fprintf(stderr, "  %9.3f ms  %s\n", rows[i].first * 1e3, rows[i].second.c_str());
  }
};

NodeProfile* profile() {
  static NodeProfile* p = std::getenv("EIN_PROFILE") ? new NodeProfile() : nullptr;
  static struct Flush {
    ~Flush() { delete profile(); }
  } flush;
  return p;
}

/// Per node, the last node that reads it (the graph's size for an output: it lives to the end;
/// -1 for a node nobody reads).
std::vector<int> last_readers(const Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> last(n, -1);
  for (int i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs)
      last[in] = i;
  for (int o : g.outputs)
    last[o] = n;
  return last;
}

/// Per node, the outputs (indices into g.outputs) that are final once it has run
/// (outputs_final_after): what execute() offers an OutputReady then.
std::vector<std::vector<size_t>> final_outputs(const Graph& g) {
  std::vector<std::vector<size_t>> final_at(g.nodes.size());
  const std::vector<int> after = outputs_final_after(g);
  for (size_t k = 0; k < after.size(); ++k)
    if (after[k] >= 0) final_at[static_cast<size_t>(after[k])].push_back(k);
  return final_at;
}

/// Per node, the tensors its fused outputs should be written into (execute_into): output k
/// of the graph is a fused node's output 0 or a result node picking output j of one.
std::vector<std::vector<Tensor>> destinations(const Graph& g, const std::vector<Tensor>& into) {
  std::vector<std::vector<Tensor>> per_node(g.nodes.size());
  for (size_t k = 0; k < g.outputs.size() && k < into.size(); ++k) {
    int node = g.outputs[k];
    size_t j = 0;
    if (g.nodes[node].op == GraphOp::result) {
      j = static_cast<size_t>(std::get<ResultAttr>(g.nodes[node].attr).index);
      node = g.nodes[node].inputs[0];
    }
    if (g.nodes[node].op != GraphOp::fused || !into[k].defined()) continue;
    std::vector<Tensor>& slots = per_node[static_cast<size_t>(node)];
    if (slots.size() <= j) slots.resize(j + 1);
    slots[j] = into[k];
  }
  return per_node;
}

std::vector<Tensor> run_graph(const Graph& g, std::vector<Tensor> inputs,
                              std::span<const CostPhase> phases, const GraphCharges* charges,
                              const OutputReady* ready = nullptr,
                              const std::vector<Tensor>* into = nullptr) {
  Context c{&g, inputs, std::vector<int>(inputs.size(), -1), 0,
            inputs.empty() ? cpu() : inputs.front().device()};
  if (into) c.into = destinations(g, *into);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (const auto* a = std::get_if<ConcatAttr>(&g.nodes[i].attr))
      for (size_t k = 0; k < a->placed.size(); ++k)
        if (a->placed[k] >= 0) {
          if (c.placed_in.empty()) {
            c.placed_in.assign(g.nodes.size(), {-1, -1});
            c.concat_buffer.resize(g.nodes.size());
          }
          c.placed_in[static_cast<size_t>(a->placed[k])] = {static_cast<int>(i), static_cast<int>(k)};
        }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == GraphOp::input) {
      const int index = std::get<InputAttr>(g.nodes[i].attr).index;
      if (index < 0 || index >= static_cast<int>(inputs.size()))
        throw std::logic_error(fmt::format("execute: graph input {} of {} given", index,
                                           inputs.size()));
      c.taker[index] = static_cast<int>(i);
    }
  // ZeRO 3: the sharded parameters this graph reads, in the order its input nodes run.
  std::optional<dist::GraphFetches> fetches;
  if (dist::fetching()) {
    std::vector<Tensor> reads;
    c.read_of.assign(g.nodes.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].op == GraphOp::input) {
        c.read_of[i] = static_cast<int>(reads.size());
        reads.push_back(inputs[static_cast<size_t>(std::get<InputAttr>(g.nodes[i].attr).index)]);
      }
    fetches.emplace(reads);
    if (fetches->any()) c.fetches = &*fetches;
  }
  Values values(g.nodes.size());
  NodeProfile* prof = profile();
  // A node's results are dropped after its last reader ran, so an intermediate's memory goes
  // back to the allocator as soon as the graph is done with it (views hold their base's
  // storage, so a base read only through a view lives as long as the view).
  const std::vector<int> last = last_readers(g);
  const std::vector<std::vector<size_t>> final_at =
      ready ? final_outputs(g) : std::vector<std::vector<size_t>>();
  std::vector<char> handed(ready ? g.outputs.size() : 0, 0);  // per output: taken by `ready`
  // After node p ran: what died with it (the inputs it read last, and itself if unread), then
  // the outputs that became final, offered to `ready`.
  const auto retire = [&](int p) {
    for (int in : g.nodes[p].inputs)
      if (last[in] == p) values[in].clear();
    if (last[p] < 0) values[p].clear();
    // A result node took its output of a multi-output kernel: the kernel's entry keeps only
    // output 0 (its own readers'), so each output is freed after its own last reader.
    const GraphNode& node = g.nodes[p];
    if (node.op == GraphOp::result && !values[node.inputs[0]].empty()) {
      const int k = std::get<ResultAttr>(node.attr).index;
      if (k > 0) values[node.inputs[0]][k] = Tensor();
    }
    if (!ready) return;
    for (size_t k : final_at[p]) {
      Tensor& value = values[g.outputs[k]].front();
      Tensor offered = std::move(value);
      if ((*ready)(k, offered)) handed[k] = 1;
      else value = std::move(offered);
    }
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GraphNode& n = g.nodes[i];
    if (i > 0) retire(static_cast<int>(i) - 1);
    c.node = static_cast<int>(i);
    // The node's rule, timed under EIN_PROFILE (which counts FLOPs as without it).
    const auto run = [&] {
      if (!prof) {
        values[i] = kRules[static_cast<int>(n.op)](n, values, c);
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      values[i] = kRules[static_cast<int>(n.op)](n, values, c);
      std::string name(graph_op_name(n.op));
      if (n.op == GraphOp::fused) name += " " + std::get<FusedAttr>(n.attr).kernel->name;
      std::string key = fmt::format("{} [{}]", name, fmt::join(n.shape, ","));
      for (int in : n.inputs)
        key += fmt::format(" ({})", fmt::join(values[in].front().strides(), ","));
      prof->add(key, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    if (!detail::counting()) {  // no FlopCounter alive: one thread-local load per node
      run();
      continue;
    }
    if (charges) {
      const std::vector<NodeCharge>& owed = (*charges)[i];
      const CostPhase phase = !owed.empty() && owed.front().phase ? *owed.front().phase
                                                                  : detail::current_phase();
      const detail::CountingNode at(g.origin, phase);  // launches inside are this node's
      run();
      for (const NodeCharge& charge : owed)
        detail::count_cost(g.origin, charge.phase ? *charge.phase : detail::current_phase(),
                           charge.cost);
      continue;
    }
    const CostPhase phase = i < phases.size() ? phases[i] : detail::current_phase();
    const detail::CountingNode at(g.origin, phase);  // launches inside are this node's
    run();
    count_executed_node(g, static_cast<int>(i), phase, values[i].front(),
                        n.inputs.empty() ? Tensor() : values[n.inputs[0]].front());
  }
  if (ready && !g.nodes.empty()) retire(static_cast<int>(g.nodes.size()) - 1);
  std::vector<Tensor> out;
  for (size_t k = 0; k < g.outputs.size(); ++k)
    out.push_back(ready && handed[k] ? Tensor() : values[g.outputs[k]].front());
  return out;
}

}  // namespace

std::vector<Tensor> execute(const Graph& g, std::vector<Tensor> inputs,
                            std::span<const CostPhase> phases) {
  return run_graph(g, std::move(inputs), phases, nullptr);
}

std::vector<Tensor> execute(const Graph& g, std::vector<Tensor> inputs,
                            const GraphCharges& charges) {
  if (charges.size() != g.nodes.size())
    throw std::logic_error("execute: the charges do not match the graph");
  return run_graph(g, std::move(inputs), {}, &charges);
}

std::vector<Tensor> execute_into(const Graph& g, std::vector<Tensor> inputs,
                                 const std::vector<Tensor>& into, const GraphCharges* charges) {
  if (charges && charges->size() != g.nodes.size())
    throw std::logic_error("execute_into: the charges do not match the graph");
  return run_graph(g, std::move(inputs), {}, charges, nullptr, &into);
}

std::vector<Tensor> execute(const Graph& g, std::vector<Tensor> inputs,
                            const GraphCharges& charges, const OutputReady& ready) {
  if (charges.size() != g.nodes.size())
    throw std::logic_error("execute: the charges do not match the graph");
  return run_graph(g, std::move(inputs), {}, &charges, ready ? &ready : nullptr);
}

}  // namespace ein
