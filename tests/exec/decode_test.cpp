// The decode step (compiler/decode/decode_step.h) and its runtime (exec/decode.h) on graphs built
// by hand: every op the derivation follows the sequence through (gather, map with a static row,
// reshape merging a batch of 1, contraction with a weight, permute, view splitting another dim,
// reduce over another dim, concat and slice along another dim, cast, a recognised attention
// with a causal mask and grouped heads), each step's row against the window's on the same
// tokens; and each op that reads along the sequence refused, naming its node.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/ops.h>
#include <ein/trainer.h>

#include "compiler/decode/decode_step.h"
#include "compiler/graph/graph_builder.h"
#include "exec/decode.h"
#include "exec/execute.h"

namespace ein {
namespace {

constexpr int64_t T = 8, V = 11, H = 2, E = 4, D = H * E;

/// The window's inputs: the tokens (input 0), then `shapes` of random values.
std::vector<Tensor> feeds(const std::vector<int64_t>& tokens, const std::vector<Shape>& shapes) {
  std::vector<Tensor> f{from_data<int64_t>(tokens, {1, T})};
  uint64_t seed = 1;
  for (const Shape& s : shapes) f.push_back(randn(s, DType::f32, cpu(), seed++));
  return f;
}

std::vector<int64_t> tokens() {
  std::mt19937_64 rng(4);
  std::vector<int64_t> t(T);
  for (int64_t& x : t) x = static_cast<int64_t>(rng() % V);
  return t;
}

/// Derives the step of `g` and checks that each next() gives the window's row at its position
/// (the window run on all T tokens; its output's dim 1 is the sequence).
void expect_steps_match_the_window(const Graph& g, const std::vector<Tensor>& in) {
  NoGrad no_grad;
  DecodeStep step = derive_decode_step(g, 0, 1);
  ASSERT_TRUE(step.derived()) << step.why << " (node " << step.why_node << ")";
  const Tensor window = execute(g, in).front().to(DType::f64).contiguous();
  std::string why;
  std::unique_ptr<Decoder> d =
      make_graph_decoder(std::make_shared<const Graph>(g), 0, std::move(step), in, why);
  ASSERT_TRUE(d) << why;
  const std::vector<int64_t> t = in[0].to_vector<int64_t>();
  for (int64_t p = 0; p < T; ++p) {
    const std::vector<double> got = d->next(t[p]).to(DType::f64).to_vector<double>();
    const std::vector<double> want = window.select(1, p).contiguous().to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "position " << p << ", " << i;
  }
}

/// x + y elementwise over `shape`, y's dims on `axes`.
int add(GraphBuilder& b, int x, int y, std::vector<int> axes, Shape shape) {
  std::vector<int> all(shape.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return b.map({x, y}, {all, std::move(axes)}, shape, DType::f32, "add",
               [](Kernel& k, const std::vector<int>& l) { return k.apply(ScalarOp::add, l[0], l[1]); });
}

int unary(GraphBuilder& b, int x, ScalarOp op) {
  const Shape shape = b.node(x).shape;
  std::vector<int> all(shape.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return b.map({x}, {all}, shape, DType::f32, "unary",
               [op](Kernel& k, const std::vector<int>& l) { return k.apply(op, l[0]); });
}

/// Splits dim `d` of x (of size a·c) into (a, c).
int split(GraphBuilder& b, int x, int d, int64_t a, int64_t c) {
  const Shape in = b.node(x).shape;
  ViewAttr v;
  Shape out;
  int axis = 0;
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    if (i == d) {
      v.split.push_back({a, c});
      v.dims.push_back({axis++});
      v.dims.push_back({axis++});
      out.push_back(a);
      out.push_back(c);
    } else {
      v.split.push_back({in[i]});
      v.dims.push_back({axis++});
      out.push_back(in[i]);
    }
  }
  return b.add(GraphOp::view, {x}, out, DType::f32, std::move(v));
}

/// tokens [1 T] → embedding rows [1 T D] plus a learned position's row (a static input read at
/// the new position): the front of every graph here.
int embed(GraphBuilder& b) {
  const int x = b.input({1, T}, DType::i64);
  const int table = b.input({V, D});
  const int pos = b.input({T, D});
  return add(b, b.gather(table, x), pos, {1, 2}, {1, T, D});
}

TEST(DecodeStep, RowWiseOpsOfEveryKindFollowTheSequence) {
  GraphBuilder b;
  const int h = embed(b);                                  // [1 T D]
  const int w = b.input({D, 6});
  const int rows = b.reshape(h, {T, D});                   // (b t) d with b = 1
  const int c = b.add(GraphOp::contract, {rows, w}, {T, 6}, DType::f32,
                      ContractAttr{{0, 1}, {1, 2}, {0, 2}});
  const int c3 = b.reshape(c, {1, T, 6});
  const int p = b.permute(c3, {1, 0, 2});                  // [T 1 6]
  const int v = split(b, p, 2, 2, 3);                      // [T 1 2 3]
  const int m = b.reduce_dims(v, Reduction::max, {2});     // [T 1 3]
  const int e = unary(b, m, ScalarOp::tanh);
  const int cat = b.concat({m, e}, 2);                     // [T 1 6]
  const int s = b.slice(cat, 2, 1, 6);                     // [T 1 5]
  // A static [T 5] table (a map of a weight, computed once) added along the sequence.
  const int table = b.input({T, 5});
  const int scaled = unary(b, table, ScalarOp::sin);
  const int s2 = add(b, s, scaled, {0, 2}, {T, 1, 5});
  const int cast = b.cast(b.cast(s2, DType::f64), DType::f32);
  b.output(b.permute(cast, {1, 0, 2}));                    // [1 T 5]
  const Graph g = b.finish();
  const DecodeStep step = derive_decode_step(g, 0, 1);
  ASSERT_TRUE(step.derived()) << step.why;
  EXPECT_TRUE(step.caches.empty());
  EXPECT_EQ(step.static_nodes.size(), 1u);  // sin(table), once
  expect_steps_match_the_window(g, feeds(tokens(), {{V, D}, {T, D}, {D, 6}, {T, 5}}));
}

/// A causal attention over q, k, v made from the embedding, k and v with `kv_heads` heads; its
/// bias is input `bias` ([1 H T T], a static input). Output [1 T H E].
Graph attention_graph(int64_t kv_heads, bool with_bias) {
  GraphBuilder b;
  const int h = embed(b);
  const int wk = b.input({D, kv_heads * E});
  const int heads = b.permute(split(b, h, 2, H, E), {0, 2, 1, 3});  // [1 H T E]
  const int kx = b.add(GraphOp::contract, {h, wk}, {1, T, kv_heads * E}, DType::f32,
                       ContractAttr{{0, 1, 2}, {2, 3}, {0, 1, 3}});
  const int k = b.permute(split(b, kx, 2, kv_heads, E), {0, 2, 1, 3});  // [1 G T E]
  const int v = unary(b, k, ScalarOp::sin);
  std::vector<int> in{heads, k, v};
  if (with_bias) in.push_back(b.input({1, H, T, T}));
  const int att = b.add(GraphOp::attention, in, {1, H, T, E + 1}, DType::f32,
                        AttentionAttr{0.5, with_bias, H / kv_heads});
  const int o = b.slice(att, 3, 0, E);
  b.output(b.permute(o, {0, 2, 1, 3}));
  return b.finish();
}

Tensor mask(bool causal) {
  std::vector<float> m(static_cast<size_t>(H * T * T), 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < T; ++s)
        if (causal ? s > t : s < t - 1) m[(h * T + t) * T + s] = -INFINITY;
  return from_data<float>(m, {1, H, T, T});
}

TEST(DecodeStep, AttentionReadsItsKeysAndValuesFromTheCaches) {
  for (int64_t kv_heads : {H, int64_t{1}}) {
    const Graph g = attention_graph(kv_heads, true);
    const DecodeStep step = derive_decode_step(g, 0, 1);
    ASSERT_TRUE(step.derived()) << step.why;
    ASSERT_EQ(step.caches.size(), 2u);  // k and v
    EXPECT_EQ(step.caches[0].shape, (Shape{1, kv_heads, T, E}));
    // Each cache gets the step's row by one write_row: a row's bytes, not the cache's.
    int writes = 0;
    for (const GraphNode& n : step.step.nodes) writes += n.op == GraphOp::write_row;
    EXPECT_EQ(writes, 2);
    ASSERT_EQ(step.causal.size(), 1u);
    std::vector<Tensor> in = feeds(tokens(), {{V, D}, {T, D}, {D, kv_heads * E}});
    in.push_back(mask(true));
    expect_steps_match_the_window(g, in);
  }
}

TEST(DecodeStep, CachesOfAnotherDtypeRoundTheRowsTheyAreWritten) {
  const Graph g = attention_graph(H, true);
  const DecodeStep step = derive_decode_step(g, 0, 1);
  ASSERT_TRUE(step.derived()) << step.why;
  const DecodeStep bf16 = with_cache_dtype(step, DType::bf16);
  EXPECT_NO_THROW(verify(bf16.step));
  ASSERT_EQ(bf16.caches.size(), 2u);
  for (const CacheSlot& c : bf16.caches) EXPECT_EQ(c.dtype, DType::bf16);
  // The caches' inputs and their writes are bf16; the rows written and the attention are not.
  int writes = 0;
  for (const GraphNode& n : bf16.step.nodes) {
    if (n.op != GraphOp::write_row) continue;
    ++writes;
    EXPECT_EQ(n.dtype, DType::bf16);
    EXPECT_EQ(bf16.step.nodes[n.inputs[0]].dtype, DType::bf16);
    EXPECT_EQ(bf16.step.nodes[n.inputs[1]].dtype, DType::f32);
  }
  EXPECT_EQ(writes, 2);
  for (const GraphNode& n : bf16.step.nodes) {
    if (n.op == GraphOp::attention) {
      EXPECT_EQ(n.dtype, DType::f32);
    }
  }
  // The window's own dtype: nothing changes.
  EXPECT_EQ(dump(with_cache_dtype(step, DType::f32).step), dump(step.step));
  // write_row still refuses a row that is no float for a float cache.
  Graph bad = bf16.step;
  for (GraphNode& n : bad.nodes)
    if (n.op == GraphOp::write_row) bad.nodes[n.inputs[1]].dtype = DType::i64;
  try {
    verify(bad);
    ADD_FAILURE() << "an i64 row verified";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("write_row takes"), std::string::npos) << e.what();
  }
}

TEST(DecodeStep, AMaskThatShowsLaterKeysIsRefusedOnItsValues) {
  const Graph g = attention_graph(H, true);
  std::vector<Tensor> in = feeds(tokens(), {{V, D}, {T, D}, {D, H * E}});
  in.push_back(mask(false));  // hides the past: every query sees the keys after it
  std::string why;
  EXPECT_EQ(make_graph_decoder(std::make_shared<const Graph>(g), 0, derive_decode_step(g, 0, 1),
                               in, why),
            nullptr);
  EXPECT_NE(why.find("not causal"), std::string::npos) << why;
}

/// `g`'s step is refused at node `node`, saying `phrase`.
void expect_refused(const Graph& g, int node, const std::string& phrase) {
  const DecodeStep step = derive_decode_step(g, 0, 1);
  EXPECT_FALSE(step.derived());
  EXPECT_EQ(step.why_node, node) << step.why;
  EXPECT_NE(step.why.find(phrase), std::string::npos) << step.why;
}

TEST(DecodeStep, OpsThatReadAlongTheSequenceAreRefusedByNode) {
  const auto refused = [](const std::string& phrase, auto&& rest) {
    GraphBuilder b;
    const int h = embed(b);
    const int bad = rest(b, h);
    b.output(bad);  // the derivation stops there
    expect_refused(b.finish(), bad, phrase);
  };
  refused("reduces along the sequence",
          [](GraphBuilder& b, int h) { return b.reduce_dims(h, Reduction::mean, {1}); });
  refused("slices the sequence", [](GraphBuilder& b, int h) { return b.slice(h, 1, 0, T - 1); });
  refused("joins tensors along the sequence",
          [](GraphBuilder& b, int h) { return b.concat({h, h}, 1); });
  refused("splits the sequence", [](GraphBuilder& b, int h) {
    return b.add(GraphOp::view, {h}, {1, 2, T / 2, D}, DType::f32,
                 ViewAttr{{{1}, {2, T / 2}, {D}}, {{0}, {1}, {2}, {3}}});
  });
  refused("merges the sequence", [](GraphBuilder& b, int h) { return b.reshape(h, {1, T * D}); });
  refused("sums over the sequence", [](GraphBuilder& b, int h) {
    const int w = b.input({T, D});
    return b.add(GraphOp::contract, {h, w}, {1, D}, DType::f32, ContractAttr{{0, 1, 2}, {1, 2}, {0, 2}});
  });
  refused("multiplies two tensors along the sequence", [](GraphBuilder& b, int h) {
    return b.add(GraphOp::contract, {h, h}, {1, T, T}, DType::f32,
                 ContractAttr{{0, 1, 2}, {0, 3, 2}, {0, 1, 3}});
  });
  refused("picks rows of a table that depends on the tokens", [](GraphBuilder& b, int h) {
    const int idx = b.input({1, T}, DType::i64);
    return b.gather(b.reshape(h, {T, D}), idx);
  });
  // An attention without a mask sees later keys.
  const Graph g = attention_graph(H, false);
  int att = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == GraphOp::attention) att = static_cast<int>(i);
  expect_refused(g, att, "has no mask");
}

}  // namespace
}  // namespace ein
