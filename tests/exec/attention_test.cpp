// The fused attention (compiler/fuse/attention.h, exec/attention.h):
//  - Kernel.*: attention_forward/backward against a float64 evaluation of the definition
//    (softmax(scale q kᵀ + bias) v and its gradients), on odd sizes that are no multiple of the
//    tiles, masks with fully masked rows, causal masks (skipped tiles), broadcast and permuted
//    operands, zero sizes, f64/f32/bf16; the f64 kernel's gradients against finite differences.
//  - Recogniser.*: a table of attention spellings in `.ein` (positive: fused, same values and
//    gradients as the unfused trace; negative: left unfused, with the reason).
// The CUDA kernels' tests are in attention_cuda_test.cpp, the cases both use in
// attention_cases.h.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <ein/autograd.h>
#include <fmt/format.h>
#include <tbb/global_control.h>

#include "compiler/fuse/attention.h"
#include "exec/amx_tiles.h"
#include "exec/attention.h"
#include "exec/tile_gemm.h"
#include "script/script.h"
#include "support/temp_path.h"
#include "tests/exec/attention_cases.h"

namespace ein {
namespace {

using namespace attention_testing;

TEST(AttentionKernel, MatchesTheDefinitionInFloat64) {
  // Causal and padding masks run as per-row key limits, the others add the bias.
  for (Mask m : {Mask::none, Mask::causal, Mask::random_rows, Mask::additive, Mask::padding}) {
    run_case({3, 37, 53, 7, 5, m, DType::f64, 1e-10});   // odd sizes, one partial tile
    run_case({2, 130, 261, 16, 9, m, DType::f64, 1e-10}); // several tiles, partial last ones
    run_case({2, 130, 261, 16, 9, m, DType::f32, 2e-4});
    run_case({2, 70, 200, 33, 70, m, DType::f32, 2e-4});  // rows wider than a 64-column panel
    // bf16 operands: on a CPU with AMX the tile products take them as they are and round P,
    // dS and dO to bf16 (attention_amx.h); elsewhere, and with AMX turned off, the f32 kernels
    // widen them row block by row block.
    run_case({2, 130, 261, 16, 9, m, DType::bf16, 2e-4});
    run_case({2, 70, 200, 33, 70, m, DType::bf16, 2e-4});
    force_no_amx_tiles(true);
    run_case({2, 130, 261, 16, 9, m, DType::bf16, 2e-4});
    force_no_amx_tiles(false);
    // The AVX2 tile kernels, as CPUs with AVX2 and no AVX-512 run them (an AVX-512 CPU's too),
    // and the portable ones (the BLAS and vector_math.h), as CPUs without either run them.
    force_avx2_tile_kernels(true);
    run_case({2, 130, 261, 16, 9, m, DType::f32, 2e-4});
    run_case({3, 1, 300, 64, 64, m, DType::f32, 2e-4});
    force_avx2_tile_kernels(false);
    force_portable_tile_kernels(true);
    run_case({2, 130, 261, 16, 9, m, DType::f32, 2e-4});
    run_case({3, 1, 300, 64, 64, m, DType::bf16, 2e-4});
    force_portable_tile_kernels(false);
    // One query row per batch row (a decode step's): attention_query.h's kernel, keys read in
    // place; rows of whole vectors (16, 64: its AVX-512 products, on CPUs with AVX-512) and
    // not (9, 33, 70: vector_math.h's), and above with those products turned off.
    run_case({5, 1, 261, 16, 9, m, DType::f32, 2e-4});
    run_case({3, 1, 300, 64, 64, m, DType::f32, 2e-4});
    run_case({3, 1, 200, 33, 70, m, DType::f32, 2e-4});
    run_case({5, 1, 261, 16, 9, m, DType::bf16, 2e-4});
    run_case({3, 1, 300, 64, 64, m, DType::bf16, 2e-4});
    run_case({3, 1, 37, 7, 5, m, DType::f64, 1e-10});  // f64: the tiles
  }
  run_case({2, 70, 70, 8, 8, Mask::causal, DType::bf16, 2e-4});
  run_case({1, 1, 1, 1, 1, Mask::none, DType::bf16, 2e-4});
}

TEST(AttentionKernel, ZeroSizes) {
  run_case({0, 5, 5, 4, 4, Mask::none, DType::f64, 1e-12});
  run_case({2, 0, 5, 4, 4, Mask::causal, DType::f64, 1e-12});
  run_case({2, 5, 0, 4, 4, Mask::none, DType::f64, 1e-12});  // no keys: o = 0, lse = -inf
  run_case({2, 5, 6, 0, 4, Mask::none, DType::f64, 1e-12});  // logits 0: a uniform average
  run_case({2, 5, 6, 4, 0, Mask::additive, DType::f64, 1e-12});
  // One query row: no keys, empty key rows (logits 0), empty value rows.
  run_case({2, 1, 0, 4, 4, Mask::none, DType::f32, 1e-6});
  run_case({2, 1, 6, 0, 4, Mask::none, DType::f32, 1e-6});
  run_case({2, 1, 6, 4, 0, Mask::additive, DType::f32, 1e-6});
}

TEST(AttentionKernel, OneQueryRowSpecialValues) {
  // Batch rows: plain; a NaN in q (its row NaN); +inf in a key it sees (q · k = +inf: NaN,
  // as exp(x - max) gives); the same +inf key masked by the bias (ignored, even though the
  // key row is read); every key masked (o = 0, lse = -inf); NaN in a value row whose key
  // has probability 0 after exp underflows (0 · NaN: NaN, as the unfused product).
  const int64_t n = 6, s = 3, e = 2, f = 1;
  Mat q{n, 1, e, {1, 0, NAN, 0, 1, 0, 1, 0, 1, 0, 1, 0}};
  Mat k{n, s, e, {1, 0, 0, 1, 2, 0,  1, 0, 0, 1, 2, 0,  kInf, 0, 0, 1, 2, 0,
                  kInf, 0, 0, 1, 2, 0,  1, 0, 0, 1, 2, 0,  -200, 0, 0, 1, 2, 0}};
  Mat v{n, s, f, {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, NAN, 2, 3}};
  Mat bias{n, 1, s, {0, 0, 0, 0, 0, 0, 0, 0, 0, -kInf, 0.5, 0, -kInf, -kInf, -kInf, 0, 0, 0}};
  for (const DType kv : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(kv));
    const std::vector<double> got =
        attention_forward(tensor_of(q, DType::f32), tensor_of(k, kv), tensor_of(v, kv),
                          tensor_of(bias, DType::f32), 1.0, DType::f32)
            .to(DType::f64)
            .to_vector<double>();
    ASSERT_EQ(got.size(), static_cast<size_t>(n * (f + 1)));
    // Row 0: logits 1, 0, 2.
    const double z = std::exp(1.0) + 1 + std::exp(2.0);
    EXPECT_NEAR(got[0], (std::exp(1.0) + 2 + 3 * std::exp(2.0)) / z, 1e-5);
    EXPECT_NEAR(got[1], std::log(z), 1e-5);
    EXPECT_TRUE(std::isnan(got[2])) << "a NaN query";
    EXPECT_TRUE(std::isnan(got[4])) << "an infinite logit";
    // Row 3: key 0 masked, logits 0 + 0.5 and 2.
    const double z3 = std::exp(0.5) + std::exp(2.0);
    EXPECT_NEAR(got[6], (2 * std::exp(0.5) + 3 * std::exp(2.0)) / z3, 1e-5);
    EXPECT_NEAR(got[7], std::log(z3), 1e-5);
    EXPECT_EQ(got[8], 0.0);
    EXPECT_EQ(got[9], -kInf);
    EXPECT_TRUE(std::isnan(got[10])) << "0 · NaN";
  }
}

TEST(AttentionKernel, SpecialValuesPropagateLikeTheUnfusedSoftmax) {
  // A NaN in q spoils its row only; an inf in k makes the rows that see it NaN or one-hot,
  // as exp(x - max) does; a masked position ignores whatever q·k is there.
  Mat q{1, 3, 2, {1, 2, NAN, 0, 0.5, -0.5}}, k{1, 4, 2, {1, 0, 0, 1, 1, 1, -1, 0}};
  Mat v{1, 4, 1, {1, 2, 3, 4}}, d{1, 3, 1, {1, 1, 1}};
  const Reference want = reference(q, k, v, nullptr, 1.0, d);
  const Tensor out = attention_forward(tensor_of(q, DType::f32), tensor_of(k, DType::f32),
                                       tensor_of(v, DType::f32), Tensor(), 1.0, DType::f32);
  const std::vector<double> got = out.to(DType::f64).to_vector<double>();
  EXPECT_NEAR(got[0], want.o.v[0], 1e-5);
  EXPECT_TRUE(std::isnan(got[2])) << "row 1 has a NaN query";
  EXPECT_NEAR(got[4], want.o.v[2], 1e-5);
  // An infinite logit under a -inf mask stays masked.
  Mat kinf{1, 2, 1, {kInf, 1}}, q1{1, 1, 1, {1}}, v2{1, 2, 1, {10, 20}}, mask{1, 1, 2, {-kInf, 0}};
  const Tensor masked = attention_forward(tensor_of(q1, DType::f32), tensor_of(kinf, DType::f32),
                                          tensor_of(v2, DType::f32), tensor_of(mask, DType::f32),
                                          1.0, DType::f32);
  EXPECT_EQ(masked.to(DType::f64).to_vector<double>()[0], 20.0);
}

TEST(AttentionKernel, BroadcastAndPermutedOperandsAreReadInPlace) {
  // q given as a permuted view ([t, n, e] storage), the bias a stride-0 broadcast of one
  // causal [t, s] matrix over the batch.
  std::mt19937 rng(5);
  const int64_t n = 3, t = 20, s = 20, e = 6, f = 4;
  const Mat q = random_mat(n, t, e, rng), k = random_mat(n, s, e, rng), v = random_mat(n, s, f, rng);
  const Tensor tq = tensor_of(q, DType::f32).permute({1, 0, 2}).contiguous().permute({1, 0, 2});
  ASSERT_FALSE(tq.is_contiguous());
  std::vector<double> causal(t * s);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j) causal[i * s + j] = j > i ? -kInf : 0;
  const Tensor one = from_data(causal, {1, t, s}).to(DType::f32);
  const Tensor broadcast = one.as_strided({n, t, s}, {0, s, 1}, 0);
  Mat full{n, t, s, {}};
  for (int64_t b = 0; b < n; ++b) full.v.insert(full.v.end(), causal.begin(), causal.end());
  const Mat d_o = random_mat(n, t, f, rng);
  const Reference want = reference(q, k, v, &full, 0.5, d_o);
  const Tensor out = attention_forward(tq, tensor_of(k, DType::f32), tensor_of(v, DType::f32),
                                       broadcast, 0.5, DType::f32);
  std::vector<double> o;
  const std::vector<double> got = out.to(DType::f64).to_vector<double>();
  for (int64_t r = 0; r < n * t; ++r)
    for (int64_t c = 0; c < f; ++c) o.push_back(got[r * (f + 1) + c]);
  expect_near(o, want.o.v, 2e-5, "o");
}


TEST(AttentionKernel, AQueryReadsTheKeysItsMaskLeavesAndGroupsShareThem) {
  // A decode step's shape: one query per head over a cache of 300 rows of which each head's
  // mask (zeros, then -inf) leaves a different prefix. The kernels stage the keys and values
  // some query reads, once per k/v head; the heads of a group that need more than the one
  // before them stage again. 16 query heads share one k/v head, their prefixes rising and
  // falling; the cache rows no mask leaves are NaN (never read into a result).
  // Head dims of 8 and 6 (vector_math.h's products), 64 and 32 (whole vectors: AVX-512's).
  for (const auto& [e, f] : {std::pair<int64_t, int64_t>{8, 6}, {64, 32}}) {
    SCOPED_TRACE(fmt::format("e {} f {}", e, f));
    std::mt19937 rng(11);
    const int64_t h = 16, s = 300;
    const Mat q = random_mat(h, 1, e, rng), d_o = random_mat(h, 1, f, rng);
    Mat k = random_mat(1, s, e, rng), v = random_mat(1, s, f, rng);
    Mat bias{h, 1, s, std::vector<double>(h * s)};
    int64_t widest = 0;
    for (int64_t j = 0; j < h; ++j) {
      const int64_t keys = (j * 37) % 280 + 1;
      widest = std::max(widest, keys);
      for (int64_t c = 0; c < s; ++c) bias.at(j, 0, c) = c < keys ? 0 : -kInf;
    }
    // The definition's sums multiply a masked probability 0 by v: its k and v rows are the
    // cache's with zeros where the kernels see NaN.
    Mat k_rep{h, s, e, {}}, v_rep{h, s, f, {}};
    for (int64_t j = 0; j < h; ++j) {
      k_rep.v.insert(k_rep.v.end(), k.v.begin(), k.v.begin() + widest * e);
      k_rep.v.resize(k_rep.v.size() + (s - widest) * e, 0.0);
      v_rep.v.insert(v_rep.v.end(), v.v.begin(), v.v.begin() + widest * f);
      v_rep.v.resize(v_rep.v.size() + (s - widest) * f, 0.0);
    }
    for (int64_t c = widest; c < s; ++c) {
      for (int64_t x = 0; x < e; ++x) k.at(0, c, x) = NAN;
      for (int64_t x = 0; x < f; ++x) v.at(0, c, x) = NAN;
    }
    const Reference want = reference(q, k_rep, v_rep, &bias, 0.3, d_o);
    // q's dtype, then k's and v's: f32 q over a bf16 cache too (ein sample --cache-dtype bf16).
    const std::pair<DType, DType> dtypes[] = {
        {DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f32, DType::bf16}};
    for (const int threads : {1, 0})  // one thread: the heads in one loop, sharing what is staged
    for (const auto& [q_dtype, dtype] : dtypes) {
      for (const bool amx : {true, false}) {
        SCOPED_TRACE(fmt::format("q {}, k and v {}, AMX {}, threads {}", dtype_name(q_dtype),
                                 dtype_name(dtype), amx ? "if there" : "off",
                                 threads ? "1" : "all"));
        std::optional<tbb::global_control> one;
        if (threads == 1) one.emplace(tbb::global_control::max_allowed_parallelism, 1);
        force_no_amx_tiles(!amx);
        const Tensor out = attention_forward(
            tensor_of(q, q_dtype).reshape({1, h, 1, e}), tensor_of(k, dtype).reshape({1, 1, s, e}),
            tensor_of(v, dtype).reshape({1, 1, s, f}),
            tensor_of(bias, DType::f32).reshape({1, h, 1, s}), 0.3, DType::f32, h);
        force_no_amx_tiles(false);
        const std::vector<double> got = out.to(DType::f64).to_vector<double>();
        for (int64_t j = 0; j < h; ++j)
          for (int64_t c = 0; c < f; ++c)
            EXPECT_NEAR(got[j * (f + 1) + c], want.o.at(j, 0, c),
                        dtype == DType::f32 ? 2e-5 : 0.05 * want.o_abs.at(j, 0, c) + 1e-3)
                << "head " << j << ", column " << c;
      }
    }
  }
}

TEST(AttentionKernel, GroupedQueryHeadsReadTheirGroup) { grouped_query_heads(cpu(), 1e-12); }
TEST(AttentionKernel, GroupedQueryHeadsReadTheirGroupInBf16) {
  grouped_query_heads(cpu(), 1e-5, DType::bf16);
}

TEST(AttentionKernel, GradientsMatchFiniteDifferences) {
  // The f64 kernel's backward against central differences of its own forward.
  std::mt19937 rng(11);
  const int64_t n = 1, t = 9, s = 11, e = 3, f = 2;
  Mat q = random_mat(n, t, e, rng), k = random_mat(n, s, e, rng), v = random_mat(n, s, f, rng);
  const Mat w = random_mat(n, t, f, rng);  // loss = Σ w ∘ o
  Case c{n, t, s, e, f, Mask::causal, DType::f64, 0};
  Mat bias = make_bias(c, rng);
  if (c.shared)  // every batch row gets row 0's mask
    for (int64_t b = 1; b < c.n; ++b)
      std::copy_n(bias.v.begin(), c.t * c.s, bias.v.begin() + b * c.t * c.s);
  auto loss = [&](const Mat& qq, const Mat& kk, const Mat& vv) {
    const Tensor out = attention_forward(tensor_of(qq, DType::f64), tensor_of(kk, DType::f64),
                                         tensor_of(vv, DType::f64), tensor_of(bias, DType::f64),
                                         0.7, DType::f64);
    const std::vector<double> o = out.to_vector<double>();
    double sum = 0;
    for (int64_t r = 0; r < t; ++r)
      for (int64_t col = 0; col < f; ++col) sum += w.v[r * f + col] * o[r * (f + 1) + col];
    return sum;
  };
  std::vector<double> d_packed;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t col = 0; col < f; ++col) d_packed.push_back(w.v[r * f + col]);
    d_packed.push_back(0);
  }
  const Tensor packed = attention_forward(tensor_of(q, DType::f64), tensor_of(k, DType::f64),
                                          tensor_of(v, DType::f64), tensor_of(bias, DType::f64),
                                          0.7, DType::f64);
  const std::vector<double> g =
      attention_backward(tensor_of(q, DType::f64), tensor_of(k, DType::f64),
                         tensor_of(v, DType::f64), tensor_of(bias, DType::f64), packed,
                         from_data(d_packed, {n, t, f + 1}), 0.7, DType::f64)
          .to_vector<double>();
  const double h = 1e-6;
  int64_t offset = 0;
  for (Mat* m : {&q, &k, &v}) {
    for (size_t i = 0; i < m->v.size(); ++i) {
      const double x = m->v[i];
      m->v[i] = x + h;
      const double up = loss(q, k, v);
      m->v[i] = x - h;
      const double down = loss(q, k, v);
      m->v[i] = x;
      EXPECT_NEAR(g[offset + i], (up - down) / (2 * h), 1e-7) << "element " << offset + i;
    }
    offset += static_cast<int64_t>(m->v.size());
  }
}

// ---------------------------------------------------------------------------------------------
// The recogniser, through `.ein` traces.

struct Spelling {
  const char* name;
  const char* body;  ///< the fn's body; q [b h t e] (or per `layout`), k, v [b h s e]
  bool fused;
  const char* why = "";  ///< negative cases: a phrase of the reason
  const char* layout = "b h t e";
};

const Spelling kSpellings[] = {
    {"gpt", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s") / sqrt(e)
  future = triu(ones(t, s), diagonal = 1)
  return einsum(softmax(where(future > 0, -inf, scores)), v, "b h t s, b h s e -> b h t e"))",
     true},
    {"scale_first_keep_branch", R"(scores = einsum(q * 0.125, k, "b h t e, b h s e -> b h t s")
  keep = tril(ones(t, s))
  return einsum(softmax(where(keep > 0, scores * 2.0, -inf)), v, "b h t s, b h s e -> b h t e"))",
     true},
    {"no_mask_multiply", R"(att = softmax(0.5 * einsum(q, k, "b h t e, b h s e -> b h t s"))
  return einsum(att, v, "b h t s, b h s e -> b h t e"))",
     true},
    {"keys_first_value_first", R"(scores = einsum(k, q, "b h s e, b h t e -> b h t s") / 3
  return einsum(v, softmax(scores), "b h s e, b h t s -> b h t e"))",
     true},
    {"sequence_major_layout", R"(scores = einsum(q, k, "b t h e, b s h e -> b h t s") / sqrt(e)
  future = triu(ones(t, s), diagonal = 1)
  att = softmax(where(future > 0, -inf, scores))
  return einsum(att, v, "b h t s, b s h e -> b t h e"))",
     true, "", "b t h e"},
    {"mask_then_scale", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  future = triu(ones(t, s), diagonal = 1)
  return einsum(softmax(where(future > 0, -inf, scores) / sqrt(e)), v, "b h t s, b h s e -> b h t e"))",
     true},
    // Negative cases.
    {"finite_fill", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  future = triu(ones(t, s), diagonal = 1)
  return einsum(softmax(where(future > 0, -1e9, scores)), v, "b h t s, b h s e -> b h t e"))",
     false, "not -inf"},
    {"float_bias", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  return einsum(softmax(scores + einsum(k, "b h s e -> s")), v, "b h t s, b h s e -> b h t e"))",
     false, "float tensors"},
    {"softmax_over_queries", R"(scores = einsum(q, k, "b h t e, b h s e -> b h s t")
  return einsum(softmax(scores), v, "b h s t, b h s e -> b h t e"))",
     false, ""},
    {"squared_scores", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  return einsum(softmax(scores * scores), v, "b h t s, b h s e -> b h t e"))",
     false, "twice"},
    {"probabilities_reused", R"(att = softmax(einsum(q, k, "b h t e, b h s e -> b h t s"))
  return einsum(att, v, "b h t s, b h s e -> b h t e") + einsum(att, v * 2.0, "b h t s, b h s e -> b h t e"))",
     false, "read elsewhere"},
};

std::filesystem::path write_script(const Spelling& sp) {
  const auto dir = testing::temp_path("ein_attention_test");
  std::filesystem::create_directories(dir);
  const auto path = dir / (std::string(sp.name) + ".ein");
  const std::string kv = std::string(sp.layout) == "b t h e" ? "b s h e" : "b h s e";
  std::ofstream(path) << fmt::format(
      "import nn\nfn attend(q: f32[{}], k: f32[{}], v: f32[{}]) -> f32[{}] {{\n  {}\n}}\n",
      sp.layout, kv, kv, sp.layout, sp.body);
  return path;
}

int count_attention(const Graph& g) {
  int n = 0;
  for (const GraphNode& node : g.nodes) n += node.op == GraphOp::attention;
  return n;
}

/// `attend(q, k, v)` of two loads of one script (fused and not): equal values and gradients on
/// random inputs, q [qs], k and v [ks].
void expect_same_attention(script::Program& fused, script::Program& plain, const Shape& qs,
                           const Shape& ks) {
  std::mt19937 rng(3);
  auto random = [&](const Shape& shape) {
    std::normal_distribution<double> d;
    int64_t count = 1;
    for (int64_t x : shape) count *= x;
    std::vector<double> v(count);
    for (double& x : v) x = d(rng);
    return from_data(v, shape).to(DType::f32);
  };
  const Tensor q = random(qs), k = random(ks), v = random(ks), w = random(qs);
  std::vector<std::vector<double>> results;
  for (script::Program* p : {&fused, &plain}) {
    Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_(),
           vv = v.detach().requires_grad_();
    const Tensor y = p->call("attend", {qq, kk, vv})[0];
    y.backward(w);
    std::vector<double> r = y.detach().to(DType::f64).to_vector<double>();
    for (const Tensor& x : {qq, kk, vv}) {
      const std::vector<double> gx = x.grad().to(DType::f64).to_vector<double>();
      r.insert(r.end(), gx.begin(), gx.end());
    }
    results.push_back(std::move(r));
  }
  expect_near(results[0], results[1], 2e-5, "fused against unfused");
}

// Each spelling at batch and heads (2, 3); the positive ones also with a batch of one (as
// `ein sample` calls fn logits) and with one head too: size-1 dims, which einsum's lowering
// keeps as contraction axes and views may read at no stride, are fused all the same.
TEST(AttentionRecogniser, SpellingsTable) {
  for (const Spelling& sp : kSpellings) {
    const auto path = write_script(sp);
    const bool seq_major = std::string(sp.layout) == "b t h e";
    using Sizes = std::pair<int64_t, int64_t>;  // batch, heads
    for (const auto& [b, h] : sp.fused ? std::vector<Sizes>{{2, 3}, {1, 3}, {1, 1}}
                                       : std::vector<Sizes>{{2, 3}}) {
      SCOPED_TRACE(fmt::format("{}, batch {} heads {}", sp.name, b, h));
      const Shape qs = seq_major ? Shape{b, 19, h, 8} : Shape{b, h, 19, 8};
      const Shape ks = seq_major ? Shape{b, 23, h, 8} : Shape{b, h, 23, 8};
      // t = s for the causal spellings whose mask is square; else 19 queries over 23 keys.
      const bool square = std::string(sp.body).find("ones(t, s)") != std::string::npos;
      const Shape ks2 = square ? qs : ks;
      std::vector<TensorType> types{{qs, DType::f32}, {ks2, DType::f32}, {ks2, DType::f32}};
      script::LoadOptions on, off;
      on.stdlib = off.stdlib = {EIN_STDLIB_DIR};
      off.fused_attention = false;
      auto fused = script::Program::load(path.string(), on);
      auto plain = script::Program::load(path.string(), off);
      const Graph g = fused->trace("attend", types);
      ASSERT_EQ(count_attention(g), sp.fused ? 1 : 0) << dump(g);
      ASSERT_EQ(count_attention(plain->trace("attend", types)), 0);
      if (!sp.fused) {
        // The reason names the failed condition.
        const AttentionFusion f = fuse_attention(plain->trace("attend", types));
        ASSERT_FALSE(f.misses.empty());
        EXPECT_NE(f.misses[0].why.find(sp.why), std::string::npos) << f.misses[0].why;
        continue;
      }
      // Same values and gradients as the unfused trace.
      expect_same_attention(*fused, *plain, qs, ks2);
    }
  }
}

TEST(AttentionRecogniser, GroupedQueryHeadsAreNotCopied) {
  // stdlib/llama.ein's spelling: k and v repeated per group with einops' repeat. The fused
  // node reads the groups (kv groups of 2), and values and gradients equal the unfused trace.
  const auto dir = testing::temp_path("ein_attention_test");
  std::filesystem::create_directories(dir);
  const auto path = dir / "gqa.ein";
  std::ofstream(path) << R"(import nn
fn attend(q: f32[b h t e], k: f32[b g t e], v: f32[b g t e]) -> f32[b h t e] {
  kk = repeat(k, "b g t e -> b (g r) t e", r = h // g)
  vv = repeat(v, "b g t e -> b (g r) t e", r = h // g)
  scores = einsum(q, kk, "b h t e, b h s e -> b h t s") / sqrt(e)
  future = triu(ones(t, t), diagonal = 1)
  return einsum(softmax(where(future > 0, -inf, scores)), vv, "b h t s, b h s e -> b h t e")
}
)";
  const Shape qs{2, 4, 21, 8}, ks{2, 2, 21, 8};
  const std::vector<TensorType> types{{qs, DType::f32}, {ks, DType::f32}, {ks, DType::f32}};
  script::LoadOptions on, off;
  on.stdlib = off.stdlib = {EIN_STDLIB_DIR};
  off.fused_attention = false;
  auto fused = script::Program::load(path.string(), on);
  auto plain = script::Program::load(path.string(), off);
  int groups = 0;
  for (const GraphNode& n : fused->trace("attend", types).nodes)
    if (n.op == GraphOp::attention) groups = static_cast<int>(std::get<AttentionAttr>(n.attr).kv_repeat);
  ASSERT_EQ(groups, 2);
  expect_same_attention(*fused, *plain, qs, ks);
}

}  // namespace
}  // namespace ein
