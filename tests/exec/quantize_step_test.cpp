// The decode step read from quantized weights (compiler/decode/quantize_step.h, run by
// exec/decode.h) on a graph built by hand: which contractions become quantized_matmul nodes
// (x @ W, a weight first and read as x @ Wᵀ, x with its summed dim elsewhere, a batch of one
// the result drops; one matrix read by two products quantized once) and which stay (a matrix
// the rule leaves in float, a product whose weight dim is not the result's last), then every
// step's row against the window's on weights rounded to the same codes, for q8_0 and q4_0
// (weights that are not their codes' values stay float), and the window's pass reading the same
// codes, the float matrices let go.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/ops.h>
#include <ein/tensor_math.h>
#include <ein/quantize.h>
#include <ein/trainer.h>

#include "compiler/decode/decode_step.h"
#include "compiler/decode/quantize_step.h"
#include "compiler/graph/graph_builder.h"
#include "exec/decode.h"
#include "exec/execute.h"

namespace ein {
namespace {

constexpr int64_t T = 6, V = 13, K = 64, N1 = 96, N2 = 40, N3 = 64, N4 = 48, N5 = 8;

int contract(GraphBuilder& b, int a, int c, std::vector<int> a_axes, std::vector<int> c_axes,
             std::vector<int> out_axes, Shape shape) {
  return b.add(GraphOp::contract, {a, c}, std::move(shape), DType::f32,
               ContractAttr{std::move(a_axes), std::move(c_axes), std::move(out_axes)});
}

/// The window: tokens (input 0) → embedding rows [1 T K], then products with weights 2-7.
Graph window() {
  GraphBuilder b;
  const int x = b.input({1, T}, DType::i64);
  const int table = b.input({V, K});
  const int w1 = b.input({K, N1}), w2 = b.input({N2, N1}), w3 = b.input({N2, N3}),
            w4 = b.input({N3, N4}), w5 = b.input({N4, N5}), w6 = b.input({N5, N4});
  const int h = b.gather(table, x);                                          // [1 T K]
  // x @ W1, twice: one matrix, quantized once
  const int c1 = contract(b, h, w1, {0, 1, 2}, {2, 3}, {0, 1, 3}, {1, T, N1});
  const int c1b = contract(b, h, w1, {0, 1, 2}, {2, 3}, {0, 1, 3}, {1, T, N1});
  const int sum = b.map({c1, c1b}, {{0, 1, 2}, {0, 1, 2}}, {1, T, N1}, DType::f32, "add",
                        [](Kernel& k, const std::vector<int>& l) {
                          return k.apply(ScalarOp::add, l[0], l[1]);
                        });
  // W2 [N2, N1] first, summed over its last dim: x @ W2ᵀ (out_in)
  const int c2 = contract(b, w2, sum, {3, 2}, {0, 1, 2}, {0, 1, 3}, {1, T, N2});
  // x [1 N2 T]: its summed dim in the middle
  const int xt = b.permute(c2, {0, 2, 1});
  const int c3 = contract(b, xt, w3, {0, 2, 1}, {2, 3}, {0, 1, 3}, {1, T, N3});
  // the batch of one summed away: [T N4]
  const int c4 = b.reshape(contract(b, c3, w4, {0, 1, 2}, {2, 3}, {1, 3}, {T, N4}), {1, T, N4});
  // W5 [N4, 8]: rows of 8, fewer than a block; the rule keeps it in float
  const int c5 = contract(b, c4, w5, {0, 1, 2}, {2, 3}, {0, 1, 3}, {1, T, N5});
  // W6's other dim first in the result ([1 N4 T]): no matrix product of the kernel's form
  const int c6 = contract(b, c5, w6, {0, 1, 2}, {2, 3}, {0, 3, 1}, {1, N4, T});
  b.output(b.permute(c6, {0, 2, 1}));                                        // [1 T N4]
  return b.finish();
}

bool eligible(int, DType dtype, const Shape& shape) { return quantizes(dtype, shape); }

int count(const Graph& g, GraphOp op) {
  int n = 0;
  for (const GraphNode& node : g.nodes) n += node.op == op;
  return n;
}

std::vector<Tensor> feeds() {
  std::mt19937_64 rng(7);
  std::vector<int64_t> t(T);
  for (int64_t& x : t) x = static_cast<int64_t>(rng() % V);
  std::vector<Tensor> f{from_data<int64_t>(t, {1, T})};
  uint64_t seed = 3;
  for (const Shape& s : std::vector<Shape>{{V, K}, {K, N1}, {N2, N1}, {N2, N3}, {N3, N4},
                                           {N4, N5}, {N5, N4}})
    f.push_back(randn(s, DType::f32, cpu(), seed++) * 0.2);
  return f;
}

TEST(QuantizeStep, MatrixProductsOfEveryFormReadCodesAndTheRestStay) {
  const Graph g = window();
  const DecodeStep plain = derive_decode_step(g, 0, 1);
  ASSERT_TRUE(plain.derived()) << plain.why;
  ASSERT_EQ(count(plain.step, GraphOp::contract), 7);
  const DecodeStep step = quantize_step(plain, QuantType::q4_0, eligible);
  EXPECT_EQ(count(step.step, GraphOp::quantized_matmul), 5);
  EXPECT_EQ(count(step.step, GraphOp::contract), 2);  // W5 (rows of 8) and W6 (its result order)
  ASSERT_EQ(step.quantized.size(), 4u);              // W1 (read twice), W2, W3, W4
  std::vector<WeightLayout> layouts;
  for (const GraphNode& n : step.step.nodes)
    if (const auto* q = std::get_if<QuantMatmulAttr>(&n.attr)) {
      EXPECT_EQ(q->type, QuantType::q4_0);
      layouts.push_back(q->layout);
    }
  EXPECT_EQ(layouts, (std::vector<WeightLayout>{WeightLayout::in_out, WeightLayout::in_out,
                                                WeightLayout::out_in, WeightLayout::in_out,
                                                WeightLayout::in_out}));
  // Each matrix's codes and scales are two inputs more, after the step's own, and the matrix
  // itself, which nothing reads any more, is not one.
  EXPECT_EQ(step.inputs.size(), plain.inputs.size() - 4 + 8);
  for (const QuantizedMatrix& m : step.quantized)
    for (const StepInput& in : step.inputs)
      EXPECT_FALSE(in.kind == StepInput::Kind::whole && in.node == m.node) << m.node;
  int codes = 0, scales = 0;
  for (const StepInput& in : step.inputs) {
    codes += in.kind == StepInput::Kind::codes;
    scales += in.kind == StepInput::Kind::scales;
  }
  EXPECT_EQ(codes, 4);
  EXPECT_EQ(scales, 4);
  // Nothing to read from codes: the step as it was.
  const DecodeStep none =
      quantize_step(plain, QuantType::q8_0, [](int, DType, const Shape&) { return false; });
  EXPECT_EQ(count(none.step, GraphOp::quantized_matmul), 0);
  EXPECT_TRUE(none.quantized.empty());
  EXPECT_EQ(none.inputs.size(), plain.inputs.size());
}

TEST(QuantizeStep, StepsFromCodesMatchTheWindowOnTheCodesValues) {
  NoGrad no_grad;
  const Graph g = window();
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    std::vector<Tensor> in = feeds();
    // The window on the values the codes stand for; the rule's matrices only.
    std::vector<Tensor> rounded = in;
    for (size_t i = 1; i < in.size(); ++i)
      if (quantizes(in[i].dtype(), in[i].shape())) rounded[i] = dequantize(quantize(in[i], type));
    const Tensor want = execute(g, rounded).front().to(DType::f64).contiguous();
    DecoderOptions options;
    options.weights = type;
    std::string why;
    std::unique_ptr<Decoder> d = make_graph_decoder(
        std::make_shared<const Graph>(g), 0, derive_decode_step(g, 0, 1), rounded, why, options);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(d->quantized_matrices(), 4);
    EXPECT_EQ(d->quantized_bytes(), quantized_nbytes({K, N1}, type) +
                                        quantized_nbytes({N2, N1}, type) +
                                        quantized_nbytes({N2, N3}, type) +
                                        quantized_nbytes({N3, N4}, type));
    // Weights that are not their codes' values stay float: the step would not compute what
    // the window does.
    EXPECT_EQ(make_graph_decoder(std::make_shared<const Graph>(g), 0, derive_decode_step(g, 0, 1),
                                 in, why, options)
                  ->quantized_matrices(),
              0);
    // The FLOPs of a step are the float step's: the same products.
    std::string why2;
    std::unique_ptr<Decoder> f = make_graph_decoder(std::make_shared<const Graph>(g), 0,
                                                    derive_decode_step(g, 0, 1), in, why2);
    ASSERT_TRUE(f) << why2;
    EXPECT_EQ(d->step_flops(), f->step_flops());
    const std::vector<int64_t> t = in[0].to_vector<int64_t>();
    double differs = 0;  // from the float weights' rows: the codes do change the numbers
    for (int64_t p = 0; p < T; ++p) {
      const std::vector<double> got = d->next(t[p]).to(DType::f64).to_vector<double>();
      const std::vector<double> row = want.select(1, p).contiguous().to_vector<double>();
      const std::vector<double> plain = f->next(t[p]).to(DType::f64).to_vector<double>();
      ASSERT_EQ(got.size(), row.size());
      for (size_t i = 0; i < row.size(); ++i) {
        EXPECT_NEAR(got[i], row[i], 1e-5 * (1 + std::abs(row[i])))
            << quant_type_name(type) << " position " << p << ", " << i;
        differs = std::max(differs, std::abs(plain[i] - row[i]));
      }
    }
    EXPECT_GT(differs, 1e-4) << quant_type_name(type);
    // The window's pass reads the same codes: its rows are the window's too.
    for (int64_t n : {int64_t{1}, T}) {
      d->reset();
      const std::vector<int64_t> prompt(t.begin(), t.begin() + n);
      const std::vector<double> got = d->prefill(prompt).to(DType::f64).to_vector<double>();
      const std::vector<double> row = want.select(1, n - 1).contiguous().to_vector<double>();
      ASSERT_EQ(got.size(), row.size());
      for (size_t i = 0; i < row.size(); ++i)
        EXPECT_NEAR(got[i], row[i], 1e-5 * (1 + std::abs(row[i])))
            << quant_type_name(type) << " prefill of " << n << ", " << i;
    }
    // It holds the codes and the float matrices it still reads (the table, W5, W6), not W1-W4.
    EXPECT_EQ(d->weight_bytes(), d->quantized_bytes() + (V * K + 2 * N4 * N5) * 4);
    EXPECT_EQ(f->weight_bytes(),
              (V * K + K * N1 + N2 * N1 + N2 * N3 + N3 * N4 + 2 * N4 * N5) * 4);
  }
}

// A tied embedding: the table's rows gathered for the tokens, and the same table as the LM head
// (x @ tableᵀ). Both read one set of codes, the gather only the rows it picks (widths that are
// no multiple of a block, and q4_0's odd bytes, included); the window's pass does the same, so
// the decoder holds the codes alone; an index out of range is an error, not a read.
TEST(QuantizeStep, AnEmbeddingsRowsAreGatheredFromTheCodesItsLmHeadReads) {
  NoGrad no_grad;
  constexpr int64_t rows = 40, width = 41;
  GraphBuilder b;
  const int x = b.input({1, T}, DType::i64);
  const int table = b.input({rows, width});
  const int h = b.gather(table, x);  // [1 T width]
  b.output(contract(b, h, table, {0, 1, 2}, {3, 2}, {0, 1, 3}, {1, T, rows}));
  const Graph g = b.finish();
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    const std::string what(quant_type_name(type));
    const DecodeStep step = quantize_step(derive_decode_step(g, 0, 1), type, eligible);
    ASSERT_EQ(step.quantized.size(), 1u) << what;
    EXPECT_EQ(count(step.step, GraphOp::quantized_gather), 1) << what;
    EXPECT_EQ(count(step.step, GraphOp::quantized_matmul), 1) << what;
    EXPECT_EQ(count(step.step, GraphOp::gather), 0) << what;
    std::vector<int> inputs;
    const Graph pass = decoder_window(g, step, inputs);
    EXPECT_EQ(count(pass, GraphOp::quantized_gather), 1) << what;
    EXPECT_EQ(inputs, (std::vector<int>{0, 2, 3})) << what;  // the tokens, codes and scales

    std::mt19937_64 rng(5);
    std::vector<int64_t> t(T);
    for (int64_t& v : t) v = static_cast<int64_t>(rng() % rows);
    const Tensor w = dequantize(quantize(randn({rows, width}, DType::f32, cpu(), 9), type));
    const Tensor want =
        execute(g, {from_data<int64_t>(t, {1, T}), w}).front().to(DType::f64).contiguous();
    DecoderOptions options;
    options.weights = type;
    std::string why;
    std::unique_ptr<Decoder> d = make_graph_decoder(std::make_shared<const Graph>(g), 0,
                                                    derive_decode_step(g, 0, 1),
                                                    {from_data<int64_t>(t, {1, T}), w}, why, options);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(d->weight_bytes(), quantized_nbytes({rows, width}, type)) << what;
    for (int64_t p = 0; p < T; ++p) {
      const std::vector<double> got = d->next(t[p]).to(DType::f64).to_vector<double>();
      const std::vector<double> row = want.select(1, p).contiguous().to_vector<double>();
      ASSERT_EQ(got.size(), row.size());
      for (size_t i = 0; i < row.size(); ++i)
        EXPECT_NEAR(got[i], row[i], 1e-5 * (1 + std::abs(row[i]))) << what << " " << p;
    }
    d->reset();
    const std::vector<double> got = d->prefill(t).to(DType::f64).to_vector<double>();
    const std::vector<double> last = want.select(1, T - 1).contiguous().to_vector<double>();
    for (size_t i = 0; i < last.size(); ++i)
      EXPECT_NEAR(got[i], last[i], 1e-5 * (1 + std::abs(last[i]))) << what << " prefill";
    d->reset();
    EXPECT_THROW(d->next(rows), RuntimeError) << what;  // a token past the table
    d->reset();
    EXPECT_THROW(d->next(-rows - 1), RuntimeError) << what;  // (-1 is the last row, as gather's)
  }
}

}  // namespace
}  // namespace ein
