// The fused linear + cross-entropy (compiler/fuse/cross_entropy.h, exec/cross_entropy.h):
//  - Kernel.*: forward and backward against a float64 evaluation of the definition on sizes
//    that are no multiple of the tiles, targets out of range, a transposed (tied) weight,
//    zero sizes, f64/f32; the f64 backward against finite differences.
//  - Recogniser.*: `.ein` spellings fused (values and gradients equal to the unfused trace)
//    or left unfused with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "compiler/fuse/cross_entropy.h"
#include "exec/cross_entropy.h"
#include "script/script.h"
#include "support/temp_path.h"

namespace ein {
namespace {

std::vector<double> normal(size_t n, std::mt19937& rng, double scale = 1) {
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

struct Want {
  std::vector<double> loss, lse, dh, dw;
};

/// The definition in float64; cotangent g per row. h [n, d], w [d, v] row-major.
Want reference(const std::vector<double>& h, const std::vector<double>& w,
               const std::vector<int64_t>& t, const std::vector<double>& g, int64_t n, int64_t d,
               int64_t v) {
  Want r;
  r.dh.assign(n * d, 0);
  r.dw.assign(d * v, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> logit(v);
    double mx = -INFINITY;
    for (int64_t c = 0; c < v; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < d; ++k) acc += h[i * d + k] * w[k * v + c];
      logit[c] = acc;
      mx = std::max(mx, acc);
    }
    double sum = 0;
    for (double x : logit) sum += std::exp(x - mx);
    const double lse = mx + std::log(sum);
    const bool hit = t[i] >= 0 && t[i] < v;
    r.lse.push_back(lse);
    r.loss.push_back(lse - (hit ? logit[t[i]] : 0));
    for (int64_t c = 0; c < v; ++c) {
      const double dl = (std::exp(logit[c] - lse) - (hit && c == t[i] ? 1 : 0)) * g[i];
      for (int64_t k = 0; k < d; ++k) {
        r.dh[i * d + k] += dl * w[k * v + c];
        r.dw[k * v + c] += dl * h[i * d + k];
      }
    }
  }
  return r;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]))))
      if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

void run_case(int64_t n, int64_t d, int64_t v, DType dtype, bool tied, double tol) {
  SCOPED_TRACE(fmt::format("n {} d {} v {} {} {}", n, d, v, dtype_name(dtype), tied ? "tied" : ""));
  std::mt19937 rng(static_cast<unsigned>(n * 7 + d * 3 + v));
  const std::vector<double> h = normal(n * d, rng), w = normal(d * v, rng, 0.3),
                            g = normal(n, rng);
  std::vector<int64_t> t(n);
  std::uniform_int_distribution<int64_t> pick(0, v - 1);
  for (int64_t i = 0; i < n; ++i) t[i] = i % 11 == 5 ? -1 : i % 13 == 7 ? v + 3 : pick(rng);
  const Tensor th = from_data(h, {n, d}).to(dtype);
  // A tied weight is the embedding table [v, d] seen transposed: column-major [d, v].
  Tensor tw = from_data(w, {d, v}).to(dtype);
  if (tied) {
    tw = tw.permute({1, 0}).contiguous().permute({1, 0});
    ASSERT_FALSE(tw.is_contiguous());
  }
  const Tensor tt = from_data(t, {n});
  const DType out = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Want want = reference(th.to(DType::f64).to_vector<double>(),
                              tw.to(DType::f64).contiguous().to_vector<double>(), t, g, n, d, v);
  const Tensor packed = linear_cross_entropy_forward(th, tw, tt, out);
  ASSERT_EQ(packed.shape(), (Shape{n, 2}));
  const std::vector<double> p = packed.to(DType::f64).to_vector<double>();
  std::vector<double> loss, lse;
  for (int64_t i = 0; i < n; ++i) {
    loss.push_back(p[2 * i]);
    lse.push_back(p[2 * i + 1]);
  }
  expect_near(loss, want.loss, tol, "loss");
  expect_near(lse, want.lse, tol, "lse");
  std::vector<double> dp;
  for (int64_t i = 0; i < n; ++i) {
    dp.push_back(g[i]);
    dp.push_back(1e6);  // the lse column's cotangent: ignored
  }
  const auto [dh, dw] =
      linear_cross_entropy_backward(th, tw, tt, packed, from_data(dp, {n, 2}).to(out), out);
  ASSERT_EQ(dh.shape(), (Shape{n, d}));
  ASSERT_EQ(dw.shape(), (Shape{d, v}));
  // Each its own buffer: a weight's gradient is kept without a copy.
  EXPECT_NE(dh.storage(), dw.storage());
  expect_near(dh.to(DType::f64).to_vector<double>(), want.dh, tol, "dh");
  expect_near(dw.to(DType::f64).to_vector<double>(), want.dw, tol, "dw");

  // The forward with the gradients of the rows' summed losses (CrossEntropyAttr::unit_grads),
  // in chunks of rows; then the backward from them: s times them, in place, for one cotangent
  // s on every row, the logits recomputed for any other.
  const Want unit = reference(th.to(DType::f64).to_vector<double>(),
                              tw.to(DType::f64).contiguous().to_vector<double>(), t,
                              std::vector<double>(n, 1.0), n, d, v);
  CrossEntropyWithGrads u = linear_cross_entropy_with_grads(th, tw, tt, out);
  ASSERT_EQ(u.out.shape(), (Shape{n, 2}));
  const std::vector<double> up = u.out.to(DType::f64).to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(up[2 * i], want.loss[i], tol * (1 + std::abs(want.loss[i]))) << "loss " << i;
    EXPECT_NEAR(up[2 * i + 1], want.lse[i], tol * (1 + std::abs(want.lse[i]))) << "lse " << i;
  }
  expect_near(u.dh.to(DType::f64).to_vector<double>(), unit.dh, tol, "unit dh");
  expect_near(u.dw.to(DType::f64).to_vector<double>(), unit.dw, tol, "unit dw");
  const double s = 0.375;
  std::vector<double> ds;
  for (int64_t i = 0; i < n; ++i) ds.insert(ds.end(), {s, -2.0});
  const auto [dh_s, dw_s] = linear_cross_entropy_backward(th, tw, tt, u.out,
                                                          from_data(ds, {n, 2}).to(out), u.dh,
                                                          u.dw, out);
  if (n > 0 && d > 0) {
    EXPECT_TRUE(dh_s.same_storage(u.dh)) << "scaled in place";
  }
  std::vector<double> sdh = unit.dh, sdw = unit.dw;
  for (double& x : sdh) x *= s;
  for (double& x : sdw) x *= s;
  expect_near(dh_s.to(DType::f64).to_vector<double>(), sdh, tol, "uniform cotangent dh");
  expect_near(dw_s.to(DType::f64).to_vector<double>(), sdw, tol, "uniform cotangent dw");
  if (n > 1) {  // rows of different cotangents: the unit gradients cannot serve
    u = linear_cross_entropy_with_grads(th, tw, tt, out);
    const auto [dh_g, dw_g] = linear_cross_entropy_backward(
        th, tw, tt, u.out, from_data(dp, {n, 2}).to(out), u.dh, u.dw, out);
    expect_near(dh_g.to(DType::f64).to_vector<double>(), want.dh, tol, "per-row cotangent dh");
    expect_near(dw_g.to(DType::f64).to_vector<double>(), want.dw, tol, "per-row cotangent dw");
  }
}

TEST(LinearCrossEntropyKernel, MatchesTheDefinitionInFloat64) {
  run_case(70, 13, 2500, DType::f64, false, 1e-10);  // partial row chunk and class tile
  run_case(70, 13, 2500, DType::f64, true, 1e-10);
  run_case(130, 24, 4100, DType::f32, false, 2e-4);
  run_case(130, 24, 4100, DType::f32, true, 2e-4);
  run_case(3, 5, 7, DType::f64, false, 1e-10);       // smaller than one tile
  run_case(600, 9, 2100, DType::f64, false, 1e-10);  // three row tiles, the last partial
  run_case(600, 9, 2100, DType::f32, true, 2e-4);
  run_case(150, 7, 9000, DType::f64, false, 1e-10);  // dh of the gradients' chunks in pieces
  run_case(150, 7, 9000, DType::f64, true, 1e-10);
  run_case(700, 5, 9000, DType::f64, false, 1e-10);  // four chunks of rows, the last partial
  run_case(700, 5, 9000, DType::f32, true, 2e-4);
}

TEST(LinearCrossEntropyKernel, ZeroSizes) {
  run_case(0, 5, 9, DType::f64, false, 1e-12);
  run_case(4, 0, 9, DType::f64, false, 1e-12);  // logits 0: every row's lse is log(v)
}

TEST(LinearCrossEntropyKernel, GradientsMatchFiniteDifferences) {
  std::mt19937 rng(2);
  const int64_t n = 5, d = 3, v = 9;
  std::vector<double> h = normal(n * d, rng), w = normal(d * v, rng);
  const std::vector<double> g = normal(n, rng);
  const std::vector<int64_t> t{0, 8, 3, -1, 4};
  const Tensor tt = from_data(t, {n});
  auto loss = [&] {
    const std::vector<double> p =
        linear_cross_entropy_forward(from_data(h, {n, d}), from_data(w, {d, v}), tt, DType::f64)
            .to_vector<double>();
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += g[i] * p[2 * i];
    return s;
  };
  const Tensor packed =
      linear_cross_entropy_forward(from_data(h, {n, d}), from_data(w, {d, v}), tt, DType::f64);
  std::vector<double> dp;
  for (int64_t i = 0; i < n; ++i) dp.insert(dp.end(), {g[i], 0.0});
  const auto [dh, dw] = linear_cross_entropy_backward(from_data(h, {n, d}), from_data(w, {d, v}),
                                                      tt, packed, from_data(dp, {n, 2}), DType::f64);
  std::vector<double> grads = dh.to_vector<double>();
  const std::vector<double> dwv = dw.to_vector<double>();
  grads.insert(grads.end(), dwv.begin(), dwv.end());
  size_t at = 0;
  for (std::vector<double>* x : {&h, &w})
    for (size_t i = 0; i < x->size(); ++i, ++at) {
      const double keep = (*x)[i], step = 1e-6;
      (*x)[i] = keep + step;
      const double up = loss();
      (*x)[i] = keep - step;
      const double down = loss();
      (*x)[i] = keep;
      EXPECT_NEAR(grads[at], (up - down) / (2 * step), 1e-7) << "element " << at;
    }
}

/// Whether a and b agree: both NaN, or equal within tol (infinities equal).
void expect_same_values(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  const std::vector<double> x = a.to(DType::f64).to_vector<double>(),
                            y = b.to(DType::f64).to_vector<double>();
  ASSERT_EQ(x.size(), y.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool same = std::isnan(x[i]) ? std::isnan(y[i])
                      : std::isinf(x[i]) ? x[i] == y[i]
                                         : std::abs(x[i] - y[i]) <= tol * (1 + std::abs(y[i]));
    if (!same && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << x[i] << ", want " << y[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(LinearCrossEntropyKernel, GradientsInTheForwardAgreeOnSpecialValues) {
  // Rows of h holding inf, -inf, NaN, -0 and subnormals; a column of w of -inf (every row's
  // logit there -inf or NaN); the gradients made in the forward against the recomputing
  // backward, NaN for NaN, with a uniform and a per-row cotangent.
  const int64_t n = 90, d = 6, v = 300;
  std::mt19937 rng(9);
  std::vector<double> h = normal(n * d, rng), w = normal(d * v, rng, 0.3);
  h[3 * d + 1] = INFINITY;
  h[7 * d + 2] = -INFINITY;
  h[11 * d] = NAN;
  for (int64_t k = 0; k < d; ++k) h[20 * d + k] = -0.0;
  h[30 * d + 4] = 1e-310;
  h[31 * d + 1] = 1e-41;  // an f32 subnormal
  w[2 * v + 17] = -INFINITY;
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = (i * 37) % v;
  for (DType dtype : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor th = from_data(h, {n, d}).to(dtype), tw = from_data(w, {d, v}).to(dtype),
                 tt = from_data(t, {n});
    const Tensor packed = linear_cross_entropy_forward(th, tw, tt, dtype);
    const double tol = dtype == DType::f64 ? 1e-10 : 2e-4;
    for (bool uniform : {true, false}) {
      std::vector<double> dp;
      for (int64_t i = 0; i < n; ++i) dp.insert(dp.end(), {uniform ? 0.5 : 0.1 * (i % 7), 0.0});
      const Tensor g = from_data(dp, {n, 2}).to(dtype);
      const auto [dh, dw] = linear_cross_entropy_backward(th, tw, tt, packed, g, dtype);
      const CrossEntropyWithGrads u = linear_cross_entropy_with_grads(th, tw, tt, dtype);
      expect_same_values(u.out, packed, tol, "forward");
      const auto [dh_u, dw_u] =
          linear_cross_entropy_backward(th, tw, tt, u.out, g, u.dh, u.dw, dtype);
      expect_same_values(dh_u, dh, tol, uniform ? "dh, uniform" : "dh, per row");
      expect_same_values(dw_u, dw, tol, uniform ? "dw, uniform" : "dw, per row");
    }
  }
}

// ---------------------------------------------------------------------------------------------

struct Spelling {
  const char* name;
  const char* text;  ///< a fn `head(h: f32[n d], w: ..., y: i64[n]) -> f32[]`
  bool fused;
  const char* why = "";
};

const Spelling kSpellings[] = {
    {"head", "fn head(h: f32[n d], w: f32[d v], y: i64[n]) -> f32[] = cross_entropy(h @ w, y)",
     true},
    {"tied", R"(fn head(h: f32[n d], w: f32[v d], y: i64[n]) -> f32[] = cross_entropy(einsum(h, w, "n d, v d -> n v"), y))",
     true},
    {"rows_of_a_batch", R"(fn head(h: f32[b t d], w: f32[d v], y: i64[b t]) -> f32[] = cross_entropy(h @ w, y))",
     true},
    {"logits_reused", R"(fn head(h: f32[n d], w: f32[d v], y: i64[n]) -> f32[] {
  logits = h @ w
  return cross_entropy(logits, y) + mean(logits)
})",
     false, "read elsewhere"},
    {"scaled_logits", R"(fn head(h: f32[n d], w: f32[d v], y: i64[n]) -> f32[] = cross_entropy((h @ w) * 0.5, y))",
     false, "not a contraction"},
};

TEST(LinearCrossEntropyRecogniser, SpellingsTable) {
  const auto dir = testing::temp_path("ein_cross_entropy_test");
  std::filesystem::create_directories(dir);
  const int64_t v = 2100;  // two class tiles, the second partial; above kMinFusedClasses
  for (const Spelling& sp : kSpellings) {
    SCOPED_TRACE(sp.name);
    const auto path = dir / (std::string(sp.name) + ".ein");
    std::ofstream(path) << "import nn\n" << sp.text << "\n";
    const bool batch = std::string(sp.name) == "rows_of_a_batch";
    const bool tied = std::string(sp.name) == "tied";
    const Shape hs = batch ? Shape{3, 7, 16} : Shape{21, 16};
    const Shape ws = tied ? Shape{v, 16} : Shape{16, v};
    const Shape ys = batch ? Shape{3, 7} : Shape{21};
    const std::vector<TensorType> types{{hs, DType::f32}, {ws, DType::f32}, {ys, DType::i64}};
    script::LoadOptions on, off;
    on.stdlib = off.stdlib = {EIN_STDLIB_DIR};
    off.fused_cross_entropy = false;
    auto fused = script::Program::load(path.string(), on);
    auto plain = script::Program::load(path.string(), off);
    int count = 0;
    for (const GraphNode& n : fused->trace("head", types).nodes)
      count += n.op == GraphOp::linear_cross_entropy;
    ASSERT_EQ(count, sp.fused ? 1 : 0);
    if (!sp.fused) {
      const CrossEntropyFusion f = fuse_linear_cross_entropy(plain->trace("head", types));
      ASSERT_FALSE(f.misses.empty());
      EXPECT_NE(f.misses[0].why.find(sp.why), std::string::npos) << f.misses[0].why;
      continue;
    }
    std::mt19937 rng(4);
    auto random = [&](const Shape& s) {
      int64_t c = 1;
      for (int64_t x : s) c *= x;
      return from_data(normal(c, rng), s).to(DType::f32);
    };
    std::vector<int64_t> targets;
    for (int64_t i = 0; i < ys[0] * (batch ? ys[1] : 1); ++i) targets.push_back((i * 97) % v);
    const Tensor h = random(hs), w = random(ws), y = from_data(targets, ys);
    std::vector<std::vector<double>> results;
    for (script::Program* p : {fused.get(), plain.get()}) {
      Tensor hh = h.detach().requires_grad_(), ww = w.detach().requires_grad_();
      const Tensor loss = p->call("head", {hh, ww, y})[0];
      loss.backward(ones({}, DType::f32));
      std::vector<double> r = loss.detach().to(DType::f64).to_vector<double>();
      for (const Tensor& x : {hh, ww}) {
        const std::vector<double> gx = x.grad().to(DType::f64).to_vector<double>();
        r.insert(r.end(), gx.begin(), gx.end());
      }
      results.push_back(std::move(r));
    }
    expect_near(results[0], results[1], 2e-5, "fused against unfused");
  }
}

TEST(LinearCrossEntropyRecogniser, SmallVocabulariesStayUnfused) {
  const auto dir = testing::temp_path("ein_cross_entropy_test");
  std::filesystem::create_directories(dir);
  const auto path = dir / "small.ein";
  std::ofstream(path) << "import nn\n" << kSpellings[0].text << "\n";
  script::LoadOptions o;
  o.stdlib = {EIN_STDLIB_DIR};
  o.fused_cross_entropy = false;
  auto p = script::Program::load(path.string(), o);
  const CrossEntropyFusion f = fuse_linear_cross_entropy(
      p->trace("head", {{{8, 4}, DType::f32}, {{4, 256}, DType::f32}, {{8}, DType::i64}}));
  EXPECT_EQ(f.fused, 0);
  ASSERT_EQ(f.misses.size(), 1u);
  EXPECT_NE(f.misses[0].why.find("256 classes"), std::string::npos) << f.misses[0].why;
}

TEST(LinearCrossEntropyRecogniser, DifferentiatedHeadsComputeTheirGradientsInTheForward) {
  // A fused head whose h or w needs a gradient computes dh and dw in its forward (its
  // results 1 and 2, saved) and its grad node scales them: no product recomputed, the
  // recomputation line 0. Not under Recompute::full, whose backward rebuilds the head.
  const auto dir = testing::temp_path("ein_cross_entropy_test");
  std::filesystem::create_directories(dir);
  const auto path = dir / "plan.ein";
  std::ofstream(path) << "import nn\n" << kSpellings[0].text << "\n";
  script::LoadOptions o;
  o.stdlib = {EIN_STDLIB_DIR};
  auto p = script::Program::load(path.string(), o);
  const int64_t n = 33, d = 8, v = 2100;
  const Graph g = p->trace("head", {{{n, d}, DType::f32}, {{d, v}, DType::f32}, {{n}, DType::i64}});
  for (Recompute policy : {Recompute::automatic, Recompute::none, Recompute::full}) {
    SCOPED_TRACE(static_cast<int>(policy));
    const Backward b = differentiate(g, {true, true, false}, policy);
    const bool in_forward = policy != Recompute::full;
    int heads = 0, results = 0;
    for (size_t i = 0; i < b.forward.nodes.size(); ++i) {
      const GraphNode& f = b.forward.nodes[i];
      if (f.op == GraphOp::linear_cross_entropy) {
        ++heads;
        const auto* a = std::get_if<CrossEntropyAttr>(&f.attr);
        EXPECT_EQ(a && a->unit_grads, in_forward);
      }
      if (f.op == GraphOp::result) {
        ++results;
        EXPECT_NE(std::find(b.saved.begin(), b.saved.end(), static_cast<int>(i)), b.saved.end())
            << "the forward's dh and dw are saved";
      }
    }
    EXPECT_EQ(heads, 1);
    EXPECT_EQ(results, in_forward ? 2 : 0);
    EXPECT_EQ(b.forward.nodes.size(), g.nodes.size() + (in_forward ? 2 : 0));
    for (const GraphNode& x : b.graph.nodes) {
      if (x.op == GraphOp::linear_cross_entropy_grad) {
        EXPECT_EQ(x.inputs.size(), in_forward ? 7u : 5u);
      }
    }
    const BackwardCost c = backward_cost(b, b.forward, {false, true, false});
    const int64_t product = 2 * n * d * v;
    if (in_forward)
      EXPECT_EQ(c.recompute.matmul_flops, 0);
    else
      EXPECT_GE(c.recompute.matmul_flops, product);  // the head's forward, and its logits again
    // Of that, the grad kernel's own: its logits, rebuilt chunk by chunk (none when the
    // gradients are made in the forward).
    EXPECT_EQ(c.kernel_recompute.matmul_flops, in_forward ? 0 : product);
  }
}

}  // namespace
}  // namespace ein
