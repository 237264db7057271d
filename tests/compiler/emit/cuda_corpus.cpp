// The CUDA test corpus (cuda_corpus.h): graphs → fuse() → one bound Kernel per fused node.
#include "compiler/emit/cuda_corpus.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/graph/expression_graphs.h"
#include "compiler/fuse/fuse.h"
#include "compiler/kernel/kernel_ir.h"
#include "compiler/kernel/prepare.h"
#include "compiler/kernel/split_rows.h"
#include "compiler/reference/kernel_eval.h"
#include "compiler/graph/lower_patterns.h"
#include "exec/run_fused.h"
#include "compiler/graph/stdlib_graphs.h"
#include <ein/pattern_parser.h>
#include <ein/tensor.h>

namespace ein::testing {
namespace {

/// Strides of `shape` with the last two dims swapped in memory (a transposed view).
Shape transposed_strides(const Shape& shape) {
  if (shape.size() < 2) return contiguous_strides(shape);
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Shape s = contiguous_strides(swapped);
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

void add_graph(std::vector<CorpusKernel>& out, const std::string& label, const Graph& g,
               bool transposed = false) {
  int number = 0;
  for (Kernel& k : fused_kernels(g, transposed))
    out.push_back({fmt::format("{} #{}", label, ++number), std::move(k)});
}

Graph backward(const Graph& g) {
  std::vector<bool> needs;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) needs.push_back(kFloatDTypes.contains(n.dtype));
  return differentiate(g, needs).graph;
}

/// out = convert(x) from one dtype to another (an fp8 cast, which no graph makes yet).
Kernel cast_kernel(DType from, DType to, const Shape& shape) {
  Kernel k;
  k.name = fmt::format("cast_{}_{}", dtype_name(from), dtype_name(to));
  k.origin = k.name;
  k.domain = shape;
  const int in = k.add_buffer(from, contiguous_strides(shape));
  k.add_output(to, contiguous_strides(shape));
  k.body = k.result = k.apply(ScalarOp::mul, k.load(in), k.constant(2));
  return k;
}

std::vector<CorpusKernel> build() {
  std::vector<CorpusKernel> out;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  for (DType t : dtypes) {
    const std::string ty(dtype_name(t));
    // Rows for one warp, one block with the row in registers, one block reading it twice.
    for (const Shape& s : {Shape{8, 1000}, Shape{4, 5000}, Shape{2, 50257}})
      add_graph(out, fmt::format("softmax {} {}", ty, shape_str(s)), softmax_graph(s, t));
    add_graph(out, "log_softmax " + ty, log_softmax_graph({16, 256}, t));
    add_graph(out, "layer_norm " + ty, layer_norm_graph({4, 32, 768}, t));
    add_graph(out, "rms_norm " + ty, rms_norm_graph({16, 4096}, t));
    add_graph(out, "cross_entropy " + ty, cross_entropy_graph({8, 50257}, t));
    add_graph(out, "mse_loss " + ty, mse_loss_graph({8, 33}, t));
    add_graph(out, "adamw " + ty, adamw_graph({64, 128}, t));
    for (const char* name : {"softmax", "layer_norm", "rms_norm", "cross_entropy"})
      add_graph(out, fmt::format("{} backward {}", name, ty),
                backward(find_standard_function(name)->build({32, 768}, t)));
    add_graph(out, "gelu chain " + ty,
              map_expression_graph("h[b f] -> 0.5 * h * (1 + tanh(0.7978845608 * (h + 0.044715 * h**3)))",
                                   {{64, 256}}, t));
    add_graph(out, "broadcast map " + ty,
              map_expression_graph("x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c",
                                   {{4, 8, 64}, {4, 8}, {64}, {64}}, t));
    add_graph(out, "where map " + ty,
              map_expression_graph("a[i], b[i], t[i] -> where(a > b, a, b * t)",
                                   {{1001}, {1001}, {1001}}, t));
    add_graph(out, "sum b n -> b " + ty,
              reduce_pattern_graph("b n -> b", Reduction::sum, {}, {64, 300}, t));
    add_graph(out, "mean b n -> n " + ty,
              reduce_pattern_graph("b n -> n", Reduction::mean, {}, {300, 64}, t));
    add_graph(out, "max b h w -> b " + ty,
              reduce_pattern_graph("b h w -> b", Reduction::max, {}, {8, 40, 40}, t));
    add_graph(out, "min a b c -> a c " + ty,
              reduce_pattern_graph("a b c -> a c", Reduction::min, {}, {6, 50, 7}, t));
    add_graph(out, "var b n -> b " + ty,
              reduce_pattern_graph("b n -> b", Reduction::var, 1, {16, 100}, t));
    add_graph(out, "transpose " + ty, rearrange_exp("a b -> b a", {100, 300}, t));
    add_graph(out, "heads " + ty,
              rearrange_exp("b s (h d) -> b h s d", {2, 64, 256}, t, {{"h", 4}}));
    add_graph(out, "nhwc " + ty, rearrange_exp("b h w c -> b c h w", {2, 16, 16, 48}, t));
  }
  // f64 arithmetic, strided (transposed) inputs, broadcasts and empty domains.
  add_graph(out, "softmax f64", softmax_graph({8, 100}, DType::f64));
  add_graph(out, "softmax f32 transposed input", softmax_graph({64, 96}), true);
  add_graph(out, "layer_norm f32 transposed input", layer_norm_graph({96, 64}), true);
  add_graph(out, "softmax empty rows", softmax_graph({0, 16}));
  add_graph(out, "sum over an empty row", reduce_pattern_graph("b n -> b", Reduction::sum, {}, {4, 0}, DType::f32));
  add_graph(out, "map over nothing",
            map_expression_graph("x[b n], m[b] -> exp(x - m)", {{0, 8}, {0}}, DType::f32));
  add_graph(out, "broadcast row max",
            map_expression_graph("x[b n], m[b] -> exp(x - m)", {{128, 1000}, {128}}, DType::bf16));
  // A column reduction split across its rows, as the CUDA executor runs it
  // (compiler/kernel/split_rows.h): LayerNorm's backward over 2048 rows of 512, whose weight
  // and bias gradients sum down the rows.
  const Graph ln_backward = backward(find_standard_function("layer_norm")->build({2048, 512}, DType::f32));
  for (const Kernel& k : fused_kernels(ln_backward)) {
    const Kernel prepared = prepare_kernel(k);
    const int64_t chunks = gpu_row_chunks(prepared);
    if (chunks < 2) continue;
    if (std::optional<RowSplit> split = split_rows(prepared, chunks)) {
      out.push_back({fmt::format("{} rows split in {}: partial", k.name, chunks),
                     std::move(split->partial)});
      out.push_back({fmt::format("{} rows split in {}: combine", k.name, chunks),
                     std::move(split->combine)});
    }
  }
  for (auto [from, to] : {std::pair{DType::f32, DType::f8e4m3}, {DType::f32, DType::f8e5m2},
                          {DType::f8e4m3, DType::f32}, {DType::bf16, DType::f16}})
    out.push_back({fmt::format("cast {} -> {}", dtype_name(from), dtype_name(to)),
                   cast_kernel(from, to, {33, 128})});
  return out;
}

}  // namespace

std::vector<Kernel> fused_kernels(const Graph& g, bool transposed) {
  const Graph fused = fuse(g);
  std::vector<Kernel> out;
  for (const GraphNode& n : fused.nodes) {
    if (n.op != GraphOp::fused) continue;
    std::vector<Shape> shapes, strides;
    for (int in : n.inputs) {
      shapes.push_back(fused.nodes[in].shape);
      strides.push_back(transposed ? transposed_strides(fused.nodes[in].shape)
                                   : contiguous_strides(fused.nodes[in].shape));
    }
    out.push_back(bind_fused(std::get<FusedAttr>(n.attr), shapes, strides));
  }
  return out;
}

/// rearrange(x, pattern) then exp: a permute folded into a pointwise kernel's reads.
Graph rearrange_exp(const std::string& pattern, const Shape& shape, DType dtype,
                    const std::vector<AxisSize>& sizes) {
  ResolveRequest req;
  req.op = PatternOp::rearrange;
  req.shapes = {shape};
  req.sizes = sizes;
  Graph g = lower_pattern(resolve_pattern(parse_pattern(pattern), req), {{shape, dtype}}, {}, 0,
                          pattern);
  const int y = g.outputs.front();
  auto body = std::make_shared<Kernel>();
  body->name = "exp";
  body->body = body->result = body->apply(ScalarOp::exp, body->load(0));
  std::vector<int> axes(g.nodes[y].shape.size());
  for (size_t d = 0; d < axes.size(); ++d)
    axes[d] = static_cast<int>(d);
  GraphNode m;
  m.op = GraphOp::map;
  m.inputs = {y};
  m.shape = g.nodes[y].shape;
  m.dtype = dtype;
  m.attr = MapAttr{body, {axes}};
  g.outputs = {g.add(std::move(m))};
  return g;
}

const std::vector<CorpusKernel>& cuda_corpus() {
  static const std::vector<CorpusKernel> corpus = build();
  return corpus;
}

std::string corpus_test_name(int index) {
  std::string out = fmt::format("k{:03}_", index);
  for (char ch : cuda_corpus().at(index).label)
    out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

int64_t buffer_extent(const Kernel& k, const KernelBuffer& b) {
  int64_t last = 0;
  for (size_t d = 0; d < k.domain.size(); ++d) {
    if (b.strides[d] == 0) continue;
    if (k.domain[d] == 0) return 0;
    last += (k.domain[d] - 1) * b.strides[d];
  }
  return last + 1;
}

Tolerance corpus_tolerance(DType dtype, int64_t terms) {
  if (dtype == DType::f8e4m3) return {1.0 / 16, 1e-3};
  if (dtype == DType::f8e5m2) return {1.0 / 8, 1e-3};
  return tolerance_for(dtype, terms);
}

std::vector<double> combine_total(const Kernel& general, int buffer, const std::vector<double>& per_row) {
  Combine combine = Combine::none;
  for (const KernelStore& st : general.stores)
    if (st.buffer == buffer) combine = st.total;
  double acc = combine_identity(combine);
  for (double v : per_row)
    acc = combine_values(combine, acc, v);
  return {acc};
}

Tensor corpus_input(DType dtype, int64_t n, uint64_t seed) {
  std::vector<double> v = normal_values(n, seed);
  if (!kFloatDTypes.contains(dtype))
    for (double& x : v)
      x = std::floor(std::abs(x) * 3);
  return from_data<double>(v, {n}).to(dtype);
}

CorpusOracle corpus_oracle(int index) {
  CorpusOracle o;
  o.general = to_general_form(cuda_corpus().at(index).kernel);
  const Kernel& g = o.general;
  const size_t nb = g.buffers.size();
  o.total.assign(nb, false);
  for (const KernelStore& st : g.stores)
    o.total[st.buffer] = st.total != Combine::none;
  for (int d = 0; d < static_cast<int>(g.domain.size()); ++d)
    (d < g.parallel_dims() ? o.rows : o.row) *= g.domain[d];
  o.inputs.resize(nb);
  o.want.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    const KernelBuffer& buf = g.buffers[b];
    const int64_t n = buffer_extent(g, buf);
    if (!buf.output) {
      o.inputs[b] = corpus_input(buf.dtype, n, 1000 * static_cast<uint64_t>(index) + b);
      o.want[b] = o.inputs[b].to_vector<double>();
    } else {
      o.want[b].assign(n, CorpusOracle::kUnwritten);
    }
  }
  evaluate(g, o.want);
  // A 16-bit store rounds (past the finite range, to ±inf): compare with the rounded values.
  for (size_t b = 0; b < nb; ++b) {
    const DType t = g.buffers[b].dtype;
    if (g.buffers[b].output && !o.total[b] && (t == DType::f16 || t == DType::bf16))
      o.want[b] = from_data<double>(o.want[b], {static_cast<int64_t>(o.want[b].size())})
                      .to(t)
                      .to_vector<double>();
  }
  return o;
}

Tensor CorpusOracle::initial_slot(size_t b) const {
  const KernelBuffer& buf = general.buffers[b];
  if (!buf.output) return inputs[b];
  const DType t = total[b] ? general.compute : buf.dtype;
  const int64_t n = total[b] ? rows : buffer_extent(general, buf);
  return from_data<double>(std::vector<double>(n, kUnwritten), {n}).to(t);
}

void CorpusOracle::expect_output(size_t b, std::vector<double> slot,
                                 const std::string& context) const {
  if (total[b]) slot = combine_total(general, static_cast<int>(b), slot);
  expect_close(from_data<double>(slot, {static_cast<int64_t>(slot.size())}),
               {{static_cast<int64_t>(want[b].size())}, want[b]},
               corpus_tolerance(general.buffers[b].dtype, total[b] ? rows * row : row), context);
}

}  // namespace ein::testing
