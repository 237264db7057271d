// ein::generate() (include/ein/trainer.h) on models whose logits are known: the windows it
// passes to logits(), greedy, top-k (ties with the k-th kept) and top-p draws, the frequencies
// of its draws against the softmax they follow, seeds, and every bad option or logit as a UserError;
// and ein::load_parameters() on plain, "model."-prefixed and quantized checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/ops.h>
#include <ein/quantize.h>
#include <ein/trainer.h>

#include "tests/support/temp_path.h"

namespace ein {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// A model of V tokens whose logits at each position are `row(token at that position)`; it
/// records every window logits() is given.
class KnownLogits : public Trainable {
 public:
  using Row = std::function<std::vector<double>(int64_t token)>;
  KnownLogits(int64_t V, Row row) : V_(V), row_(std::move(row)) {}

  std::vector<NamedTensor> parameters() override { return {}; }
  Tensor loss(const std::vector<Tensor>&, int64_t) override { return zeros({}, DType::f32); }
  void optimizer_step(int64_t, double) override {}
  Tensor logits(const Tensor& tokens) override {
    const std::vector<int64_t> window = tokens.to_vector<int64_t>();
    windows.push_back(window);
    std::vector<double> values;
    for (int64_t t : window) {
      const std::vector<double> r = row_(t);
      values.insert(values.end(), r.begin(), r.end());
    }
    return from_data(values, {1, static_cast<int64_t>(window.size()), V_});
  }

  std::vector<std::vector<int64_t>> windows;

 private:
  int64_t V_;
  Row row_;
};

/// Logits that make the token after t certain to be (t + 1) mod V under greedy decoding.
KnownLogits counting(int64_t V) {
  return KnownLogits(V, [V](int64_t t) {
    std::vector<double> r(static_cast<size_t>(V), 0.0);
    r[static_cast<size_t>((t + 1) % V)] = 5.0;
    return r;
  });
}

GenerateOptions options(std::vector<int64_t> prompt, int64_t length, int64_t context) {
  GenerateOptions o;
  o.prompt = std::move(prompt);
  o.length = length;
  o.context = context;
  return o;
}

// Each token is drawn from the logits at the last real position of a window of the last T
// tokens, right-padded with token 0 while fewer than T exist.
TEST(Generate, GreedyReadsTheLastTTokensRightPadded) {
  KnownLogits model = counting(10);
  GenerateOptions o = options({3}, 6, 4);
  o.temperature = 0;
  const Generated g = generate(model, o);
  EXPECT_EQ(g.tokens, (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9}));
  const std::vector<std::vector<int64_t>> want = {{3, 0, 0, 0}, {3, 4, 0, 0}, {3, 4, 5, 0},
                                                  {3, 4, 5, 6}, {4, 5, 6, 7}, {5, 6, 7, 8}};
  EXPECT_EQ(model.windows, want);
  ASSERT_EQ(g.token_seconds.size(), 6u);
  EXPECT_EQ(g.first_seconds, g.token_seconds.front());
  double sum = 0;
  for (double s : g.token_seconds) {
    EXPECT_GT(s, 0);
    sum += s;
  }
  EXPECT_LE(sum, g.seconds);
}

// A prompt longer than T is read through its last T tokens; length 0 returns the prompt.
TEST(Generate, LongPromptsAndZeroLength) {
  KnownLogits model = counting(10);
  GenerateOptions o = options({1, 2, 3, 4, 5}, 1, 2);
  o.temperature = 0;
  EXPECT_EQ(generate(model, o).tokens, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(model.windows, (std::vector<std::vector<int64_t>>{{4, 5}}));
  o.length = 0;
  EXPECT_EQ(generate(model, o).tokens, o.prompt);
}

/// The draws of `length` tokens from one fixed row of logits, counted per token.
std::map<int64_t, int64_t> counts(const std::vector<double>& row, double temperature, int64_t top_k,
                                  int64_t length, uint64_t seed = 0) {
  KnownLogits model(static_cast<int64_t>(row.size()), [row](int64_t) { return row; });
  GenerateOptions o = options({0}, length, 1);
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  std::map<int64_t, int64_t> n;
  const Generated g = generate(model, o);
  for (size_t i = 1; i < g.tokens.size(); ++i)
    ++n[g.tokens[i]];
  return n;
}

// Top-k keeps the k largest logits and every logit equal to the k-th (nanoGPT's rule), and
// the draws follow softmax(logits / temperature) over those: each token's count is within
// 4.5 standard deviations of its expectation (binomial) over 6000 draws.
TEST(Generate, TopKDrawsFollowTheSoftmaxOfTheKept) {
  const std::vector<double> row = {0.5, 2.0, 1.0, 3.0, -1.0, 1.0, -kInf};
  const double temperature = 0.7;
  const int64_t draws = 6000;
  for (int64_t k : {0, 3, 1}) {
    // kept: k = 0 all finite; k = 3: 3, 2 and both 1s (the 3rd largest is 1); k = 1: token 3
    std::vector<int64_t> kept = k == 0   ? std::vector<int64_t>{0, 1, 2, 3, 4, 5}
                                : k == 3 ? std::vector<int64_t>{1, 2, 3, 5}
                                         : std::vector<int64_t>{3};
    double z = 0;
    for (int64_t t : kept)
      z += std::exp(row[t] / temperature);
    const std::map<int64_t, int64_t> n = counts(row, temperature, k, draws);
    int64_t seen = 0;
    for (const auto& [token, count] : n) {
      EXPECT_NE(std::find(kept.begin(), kept.end(), token), kept.end())
          << "k " << k << " drew token " << token;
      seen += count;
    }
    EXPECT_EQ(seen, draws);
    for (int64_t t : kept) {
      const double p = std::exp(row[t] / temperature) / z;
      const double mean = p * draws, sd = std::sqrt(draws * p * (1 - p));
      const int64_t got = n.count(t) ? n.at(t) : 0;
      EXPECT_LE(std::fabs(static_cast<double>(got) - mean), 4.5 * sd + 1e-9)
          << "k " << k << " token " << t << " drawn " << got << " times, expected " << mean;
    }
  }
}

// Top-p keeps the most likely tokens while the probability before each is below p (at least
// one; ties with the last kept stay), after temperature and top-k, and the draws follow the
// kept tokens' probabilities renormalised: counts within 4.5 standard deviations over 6000.
TEST(Generate, TopPDrawsFromTheNucleus) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 at temperature 1.
  const std::vector<double> row = {std::log(0.25), std::log(0.5), std::log(0.0625),
                                   std::log(0.125), std::log(0.0625)};
  struct Case {
    double p;
    int64_t k;
    std::vector<int64_t> kept;
  };
  const Case cases[] = {{0.45, 0, {1}},             // the mass before token 0 is 0.5: not below
                        {0.6, 0, {1, 0}},           // 0.75 ≥ 0.6 after two
                        {0.8, 0, {1, 0, 3}},        //
                        {0.9, 0, {1, 0, 3, 2, 4}},  // 0.875 < 0.9: the last two, tied, both stay
                        {1.0, 0, {0, 1, 2, 3, 4}},
                        {0.1, 0, {1}},              // always the most likely
                        {0.9, 2, {1, 0}}};          // top-k first: 0.5 and 0.25 of which 2/3, 1/3
  const int64_t draws = 6000;
  for (const Case& c : cases) {
    KnownLogits model(5, [row](int64_t) { return row; });
    GenerateOptions o = options({0}, draws, 1);
    o.top_p = c.p;
    o.top_k = c.k;
    std::map<int64_t, int64_t> n;
    const Generated g = generate(model, o);
    for (size_t i = 1; i < g.tokens.size(); ++i) ++n[g.tokens[i]];
    double z = 0;
    for (int64_t t : c.kept) z += std::exp(row[t]);
    int64_t seen = 0;
    for (const auto& [token, count] : n) {
      EXPECT_NE(std::find(c.kept.begin(), c.kept.end(), token), c.kept.end())
          << "p " << c.p << " drew token " << token;
      seen += count;
    }
    EXPECT_EQ(seen, draws);
    for (int64_t t : c.kept) {
      const double p = std::exp(row[t]) / z;
      const double mean = p * draws, sd = std::sqrt(draws * p * (1 - p));
      const int64_t got = n.count(t) ? n.at(t) : 0;
      EXPECT_LE(std::fabs(static_cast<double>(got) - mean), 4.5 * sd + 1e-9)
          << "p " << c.p << " token " << t << " drawn " << got << " times, expected " << mean;
    }
  }
}

// Temperature 0 takes the largest logit; among equal largest ones it draws evenly.
TEST(Generate, TemperatureZeroTakesTheLargest) {
  const std::map<int64_t, int64_t> one = counts({1.0, 4.0, -2.0, 3.9}, 0, 0, 200);
  EXPECT_EQ(one, (std::map<int64_t, int64_t>{{1, 200}}));
  const std::map<int64_t, int64_t> tie = counts({4.0, 1.0, 4.0}, 0, 0, 2000);
  ASSERT_EQ(tie.size(), 2u);
  EXPECT_NEAR(static_cast<double>(tie.at(0)), 1000.0, 4.5 * std::sqrt(500.0));
  EXPECT_EQ(tie.at(0) + tie.at(2), 2000);
}

// One seed draws one sequence; another seed another.
TEST(Generate, SeedsDecideTheDraws) {
  const std::vector<double> row = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7};
  KnownLogits model(8, [row](int64_t) { return row; });
  GenerateOptions o = options({0}, 64, 3);
  o.seed = 11;
  const std::vector<int64_t> a = generate(model, o).tokens, b = generate(model, o).tokens;
  EXPECT_EQ(a, b);
  o.seed = 12;
  EXPECT_NE(generate(model, o).tokens, a);
}

// Bad options, and logits no token can be drawn from, are UserErrors that say why.
TEST(Generate, BadOptionsAndLogitsAreUserErrors) {
  KnownLogits model = counting(10);
  auto fails = [&](GenerateOptions o, const std::string& says) {
    try {
      generate(model, o);
      ADD_FAILURE() << "no error; expected one saying " << says;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  fails(options({}, 3, 4), "the prompt is empty");
  fails(options({1}, -1, 4), "length -1 is negative");
  fails(options({1}, 1, 0), "context 0");
  fails(options({-2}, 1, 4), "token -2");
  fails(options({12}, 1, 4), "token 12, beyond the model's vocabulary of 10");
  for (double t : {-1.0, std::nan(""), kInf}) {
    GenerateOptions o = options({1}, 1, 4);
    o.temperature = t;
    fails(o, "temperature");
  }
  GenerateOptions k = options({1}, 1, 4);
  k.top_k = -1;
  fails(k, "top-k -1 is negative");
  for (double p : {0.0, -0.5, 1.5, std::nan("")}) {
    GenerateOptions o = options({1}, 1, 4);
    o.top_p = p;
    fails(o, "expected a probability in (0, 1]");
  }

  auto row_fails = [&](std::vector<double> row, const std::string& says) {
    KnownLogits bad(static_cast<int64_t>(row.size()), [row](int64_t) { return row; });
    try {
      generate(bad, options({0, 0}, 2, 4));
      ADD_FAILURE() << "no error; expected one saying " << says;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  row_fails({0.0, std::nan(""), 1.0}, "the logits at position 1 hold nan (token 1)");
  row_fails({0.0, 1.0, kInf}, "hold inf (token 2)");
  row_fails({-kInf, -kInf}, "every logit at position 1 is -inf");

  class WrongShape : public KnownLogits {
   public:
    WrongShape() : KnownLogits(4, [](int64_t) { return std::vector<double>(4, 0.0); }) {}
    Tensor logits(const Tensor&) override { return zeros({2, 4}, DType::f32); }
  } wrong;
  EXPECT_THROW(generate(wrong, options({1}, 1, 4)), UserError);
}

// load_parameters() reads a parameter under its own name, else under "model." + its name (an
// ein train checkpoint), and a quantized checkpoint as its dequantized values; a missing
// tensor is a RuntimeError naming it.
// A training checkpoint's model tensors are read, its optimizer state is not; a quantized
// file's codes and scales are.
TEST(LoadParameters, OnlyTheTensorsAParameterCanTakeAreRead) {
  const Tensor w = zeros({4, 64}, DType::f32), b = zeros({4}, DType::f32);
  const std::vector<NamedTensor> params = {{"w", w}, {"b", b}};
  const std::string path = testing::temp_path("ein_load_parameter_tensors.safetensors").string();
  save_safetensors(path, {{"model.w", randn({4, 64}, DType::f32, cpu(), 3)},
                          {"optim.m.w", zeros({4, 64}, DType::f32)},
                          {"model.b.qcodes", zeros({4}, DType::i8)},
                          {"model.c", zeros({4}, DType::f32)}});
  const Checkpoint c = load_parameter_tensors(path, params);
  std::vector<std::string> names;
  for (const auto& [name, t] : c.tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.w", "model.b.qcodes"}));
}

TEST(LoadParameters, PlainPrefixedAndQuantized) {
  const Tensor w = zeros({4, 64}, DType::f32), b = zeros({4}, DType::f32);
  const std::vector<NamedTensor> params = {{"w", w}, {"b", b}};
  const Tensor w_values = randn({4, 64}, DType::f32, cpu(), 3);
  const Tensor b_values = randn({4}, DType::f32, cpu(), 4);

  Checkpoint prefixed;
  prefixed.tensors = {{"model.w", w_values}, {"model.b", b_values}, {"optim.m.w", w_values}};
  load_parameters(prefixed, params);
  EXPECT_EQ(w.to_vector<float>(), w_values.to_vector<float>());
  EXPECT_EQ(b.to_vector<float>(), b_values.to_vector<float>());

  Checkpoint plain;  // the plain name wins over "model."
  plain.tensors = {{"w", zeros({4, 64}, DType::f32)}, {"model.w", w_values}, {"b", b_values}};
  load_parameters(plain, params);
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4 * 64, 0.0f));

  QuantizeCheckpointOptions qo;
  qo.min_elements = 64;
  auto [tensors, metadata] = quantize_checkpoint(prefixed, qo);
  Checkpoint quantized;
  quantized.tensors = tensors;
  quantized.metadata = metadata;
  ASSERT_TRUE(is_quantized(quantized));
  load_parameters(quantized, params);
  const Checkpoint deq = dequantize_checkpoint(quantized);
  EXPECT_EQ(w.to_vector<float>(), deq.at("model.w").to_vector<float>());
  EXPECT_NE(w.to_vector<float>(),
            w_values.to_vector<float>());  // the codes' values, not the originals
  EXPECT_EQ(b.to_vector<float>(), b_values.to_vector<float>());  // kept as it was

  // A quantized tensor that does not fit is named before any parameter is written.
  const std::vector<NamedTensor> wide = {{"w", zeros({4, 32}, DType::f32)}, {"b", b}};
  try {
    load_parameters(quantized, wide);
    ADD_FAILURE() << "no error for a quantized tensor of another shape";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("'model.w' is f32 [4, 64] in the checkpoint but f32 "
                                         "[4, 32] here"),
              std::string::npos)
        << e.what();
  }

  Checkpoint missing;
  missing.tensors = {{"w", w_values}};
  try {
    load_parameters(missing, params);
    ADD_FAILURE() << "no error for a missing tensor";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

// `ein train --init` of an `ein quantize` file: each tensor is dequantized as it is copied into
// its parameter, so the allocator never holds more than one tensor's floats beside the
// parameters and the file (before, the whole file dequantized: all the weights twice).
TEST(LoadParameters, AQuantizedFileIsDequantizedATensorAtATime) {
  std::vector<NamedTensor> params;
  Checkpoint values;
  for (int i = 0; i < 6; ++i) {
    const std::string name = "w" + std::to_string(i);
    params.push_back({name, zeros({256, 256}, DType::f32)});
    values.tensors.emplace_back(name, randn({256, 256}, DType::f32, cpu(), 10 + i));
  }
  auto [tensors, metadata] = quantize_checkpoint(values, {});
  Checkpoint quantized;
  quantized.tensors = tensors;
  quantized.metadata = metadata;
  ASSERT_TRUE(is_quantized(quantized));
  const int64_t one = 256 * 256 * 4;
  reset_peak_memory_stats(cpu());
  const int64_t before = memory_allocated(cpu());
  load_parameters(quantized, params);
  EXPECT_EQ(memory_allocated(cpu()), before);
  EXPECT_LE(max_memory_allocated(cpu()) - before, one + 4096);
  const Checkpoint deq = dequantize_checkpoint(quantized);
  for (const NamedTensor& p : params)
    EXPECT_EQ(p.tensor.to_vector<float>(), deq.at(p.name).to_vector<float>()) << p.name;
}

}  // namespace
}  // namespace ein
