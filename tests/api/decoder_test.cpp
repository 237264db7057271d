// Trainable::decoder() of `.ein` scripts (script/decoder.cpp over compiler/decode/decode_step.h):
// the key-value cache derived from fn logits's window graph. Each step's logits against the
// window's row at that position (GPT: learned positions, LayerNorm, GELU; LLaMA: RoPE's tables,
// RMSNorm, SwiGLU, grouped-query heads whose cache holds only the k/v heads; bf16), reset and
// capacity, generate() with the cache drawing what it draws without, and each model the step
// cannot be derived for saying why and where.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/ops.h>
#include <ein/quantize.h>
#include <ein/storage.h>
#include <ein/tensor_math.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "tests/support/temp_path.h"

namespace ein {
namespace {

TrainScript load(const std::string& path, std::vector<std::pair<std::string, std::string>> sets,
                 double times = 10) {
  ScriptTrainOptions o;
  o.sets = std::move(sets);
  o.seed = 5;
  TrainScript s = load_train_script(path, o);
  // Initial weights (std 0.02) give logits within ~0.1 of each other; ten times larger ones
  // make rows that differ as a trained model's do, so a wrong row cannot pass as rounding.
  NoGrad no_grad;
  for (const NamedTensor& p : s.model->parameters()) p.tensor *= times;
  return s;
}

std::string script(const std::string& name, const std::string& text) {
  const std::string path = testing::temp_path(name).string();
  std::ofstream(path) << text;
  return path;
}

std::vector<int64_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t& x : t) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(V));
  return t;
}

/// Expects `got` (a decoder's logits) within `tol` of `want`'s largest magnitude, which must be
/// large enough to prove something; returns false when they differ in size.
bool expect_row_near(const Tensor& got_logits, const std::vector<double>& want, double tol,
                     const std::string& what) {
  const std::vector<double> got = got_logits.to(DType::f64).to_vector<double>();
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return false;
  double scale = 0, worst = 0;
  for (size_t v = 0; v < want.size(); ++v) {
    scale = std::max(scale, std::abs(want[v]));
    worst = std::max(worst, std::abs(got[v] - want[v]));
  }
  EXPECT_GT(scale, 0.5) << what << ": rows this small prove little";
  EXPECT_LE(worst, tol * scale) << what;
  return true;
}

/// Feeds T random tokens to the model's decoder one at a time: after each, its logits equal
/// the window's row at that position (logits() of all T tokens: a causal model's row p sees
/// tokens 0..p only), within `tol` of the row's largest magnitude; then the window's passes
/// (prefill() of a prompt, window() past the window) give the same rows.
void expect_steps_match_the_window(Trainable& model, int64_t T, int64_t V, double tol,
                                   const DecoderOptions& options = {}) {
  std::string why;
  std::unique_ptr<Decoder> d = model.decoder(T, why, options);
  ASSERT_TRUE(d) << why;
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_EQ(d->capacity(), T);
  const std::vector<int64_t> tokens = random_tokens(T, V, 11);
  const Tensor window =
      model.logits(from_data<int64_t>(tokens, {1, T})).to(DType::f64).contiguous();
  ASSERT_EQ(window.shape(), (Shape{1, T, V}));
  const auto row = [&](int64_t p) { return window.select(1, p).select(0, 0).to_vector<double>(); };
  std::vector<double> first;
  for (int64_t p = 0; p < T; ++p) {
    ASSERT_EQ(d->position(), p);
    const Tensor got = d->next(tokens[static_cast<size_t>(p)]);
    ASSERT_TRUE(expect_row_near(got, row(p), tol, fmt::format("position {}", p)));
    if (p == 0) first = got.to(DType::f64).to_vector<double>();
  }
  EXPECT_THROW(d->next(0), UserError);  // a token past the window
  d->reset();
  EXPECT_EQ(d->position(), 0);
  EXPECT_EQ(d->next(tokens[0]).to(DType::f64).to_vector<double>(), first);
  // The window's pass (a long prompt, and the window past its end) gives the same rows.
  for (int64_t n : {int64_t{1}, T / 2, T}) {
    d->reset();
    expect_row_near(d->prefill(std::vector<int64_t>(tokens.begin(), tokens.begin() + n)),
                    row(n - 1), tol, fmt::format("prefill of {}", n));
  }
  // window(): the window's pass that caches nothing (a token past the window): its last row,
  // and then the decoder is to be reset.
  expect_row_near(d->window(tokens), row(T - 1), tol, "window()");
  EXPECT_THROW(d->next(tokens[0]), UserError);
  EXPECT_THROW(d->window(std::vector<int64_t>(tokens.begin(), tokens.end() - 1)), UserError);
  d->reset();
  EXPECT_EQ(d->next(tokens[0]).to(DType::f64).to_vector<double>(), first);
}

TEST(Decoder, GptStepsMatchTheWindow) {
  TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                       {{"T", "19"}, {"L", "2"}, {"H", "4"}, {"D", "32"}});
  expect_steps_match_the_window(*s.model, 19, 256, 1e-5);
  std::string why;
  // Keys and values of each layer: 2 · L · T · D floats.
  EXPECT_EQ(s.model->decoder(19, why)->cache_bytes(), 2 * 2 * 19 * 32 * 4);
}

// A token past the window, whose positions have all shifted, recomputes the window: where it
// costs fewer FLOPs (here the LM head and the last block's tail are most of a pass), by a pass
// over the first T - 1 tokens that only refills the caches and a step for the last. Its row is
// the window's, generate() draws what fn logits over each window draws, and the FLOPs counted
// are window_flops(), `ein report`'s past_window_flops_per_token. Where it would not save
// enough, window() is the window's pass.
TEST(Decoder, ATokenPastTheWindowRefillsTheCachesWhereThatCostsFewerFlops) {
  TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                       {{"T", "64"}, {"L", "2"}, {"H", "2"}, {"D", "16"}});
  // The step's attention (one query row: exec/attention_query.h) and the window's (tiles) sum
  // in different orders; with weights x10 the attention is sharp enough that a logit's last
  // bit moves position 62's row by 3e-5 of its largest logit (the others by ~2e-7), where
  // both kernels' o and lse are within 3e-7 of the float64 definition at this head's shape.
  expect_steps_match_the_window(*s.model, 64, 256, 1e-4);
  std::string why;
  std::unique_ptr<Decoder> d = s.model->decoder(64, why);
  ASSERT_TRUE(d) << why;
  EXPECT_LT(static_cast<double>(d->window_flops()), 0.85 * static_cast<double>(d->prefill_flops()));
  {
    FlopCounter counter;
    d->window(random_tokens(64, 256, 3));
    EXPECT_EQ(counter.totals().flops, d->window_flops());
  }
  EXPECT_EQ(d->position(), 64);
  EXPECT_THROW(d->next(0), UserError);
  GenerateOptions o;
  o.prompt = random_tokens(64, 256, 4);
  o.length = 20;  // the first from the prompt's pass, the others past the window
  o.context = 64;
  o.temperature = 0;
  o.cache = false;
  const Generated logits = generate(*s.model, o);
  const Generated decoded = generate(*d, o);
  EXPECT_EQ(decoded.tokens, logits.tokens);
  EXPECT_EQ(decoded.flops, d->prefill_flops() + 19 * d->window_flops());

  TrainScript small = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                           {{"T", "16"}, {"L", "1"}, {"H", "2"}, {"D", "32"}});
  std::unique_ptr<Decoder> pass = small.model->decoder(16, why);
  ASSERT_TRUE(pass) << why;
  EXPECT_EQ(pass->window_flops(), pass->prefill_flops());
}

/// A two-layer LLaMA (V 64, T 11) whose four query heads share two k/v heads.
std::string gqa_llama() {
  return script("gqa.ein", R"ein(import llama
import optim
dim V = 64
dim T = 11
train {
  model = Llama(V, T, 2, 4, 32, 48, kv_heads = 2)
  optimizer = AdamW(lr = 1e-3)
  fn batch() -> i64[2 T] = randint(0, V, 2, T)
  fn loss(x: i64[2 T]) -> f32[] = cross_entropy(model(x), x)
  fn logits(x: i64[1 T]) -> f32[1 T V] = model(x)
}
)ein");
}

TEST(Decoder, LlamaStepsMatchTheWindowWithRotaryTablesAndGroupedHeads) {
  TrainScript s = load(EIN_SOURCE_DIR "/examples/scripts/llama_tiny.ein",
                       {{"T", "13"}, {"L", "2"}, {"H", "4"}, {"D", "32"}, {"F", "40"}});
  expect_steps_match_the_window(*s.model, 13, 256, 1e-5);

  const std::string gqa = gqa_llama();
  TrainScript g = load(gqa, {});
  expect_steps_match_the_window(*g.model, 11, 64, 1e-5);
  std::string why;
  // Two k/v heads of 8 features, not four: the cache of grouped-query attention is half.
  EXPECT_EQ(g.model->decoder(11, why)->cache_bytes(), 2 * 2 * 11 * (2 * 8) * 4);
}

TEST(Decoder, Bf16StepsMatchTheWindowToBf16Precision) {
  TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                       {{"T", "12"}, {"L", "1"}, {"H", "2"}, {"D", "32"}});
  s.model->set_compute_dtype(DType::bf16);
  expect_steps_match_the_window(*s.model, 12, 256, 3e-2);
}

// DecoderOptions::cache = bf16 (ein sample --cache-dtype bf16): the caches in half the bytes,
// keys and values rounded to bf16 as they are written (by a step, by prefill() and window()'s
// refill), the attention in f32 reading them as they are. Each row stays within bf16's
// rounding of the window's f32 row (GPT; LLaMA with grouped-query heads and RoPE), a step
// counts the f32 cache's FLOPs, the allocator holds the smaller caches, and greedy draws agree
// with the f32 cache's. An f32 cache for a bf16 model works the other way round; any other
// dtype is refused. The weights are x3 here, not x10: at x10 the attention is so sharp that
// bf16's rounding of a key (2^-9 of it) moves some rows by a third of their largest logit
// (measured at x3: GPT's rows within 0.17% of their largest logit, LLaMA's 0.44%; at x5 GPT's
// 1.1%), which says nothing about the cache.
TEST(Decoder, ABf16CacheHalvesTheCachesAndKeepsTheRowsWithinBf16Rounding) {
  DecoderOptions bf16;
  bf16.cache = DType::bf16;
  TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                       {{"T", "64"}, {"L", "2"}, {"H", "2"}, {"D", "16"}}, 3);
  expect_steps_match_the_window(*s.model, 64, 256, 1e-2, bf16);
  std::string why;
  const int64_t before = memory_allocated(cpu());
  std::unique_ptr<Decoder> f32 = s.model->decoder(64, why);
  ASSERT_TRUE(f32) << why;
  const int64_t f32_held = memory_allocated(cpu()) - before;
  std::unique_ptr<Decoder> d = s.model->decoder(64, why, bf16);
  ASSERT_TRUE(d) << why;
  const int64_t bf16_held = memory_allocated(cpu()) - before - f32_held;
  EXPECT_EQ(d->cache_bytes(), 2 * 2 * 64 * 16 * 2);  // 2 layers of keys and values, bf16
  EXPECT_EQ(2 * d->cache_bytes(), f32->cache_bytes());
  EXPECT_EQ(f32_held - bf16_held, f32->cache_bytes() - d->cache_bytes());
  EXPECT_EQ(d->step_flops(), f32->step_flops());
  {
    FlopCounter counter;
    d->next(7);
    EXPECT_EQ(counter.totals().flops, d->step_flops());
  }
  GenerateOptions o;
  o.prompt = {84, 104, 101, 32};
  o.length = 40;
  o.context = 64;
  o.temperature = 0;
  const std::vector<int64_t> tokens = generate(*f32, o).tokens;
  o.decoder = bf16;
  EXPECT_EQ(generate(*d, o).tokens, tokens);

  const std::string gqa = gqa_llama();
  TrainScript g = load(gqa, {}, 3);
  expect_steps_match_the_window(*g.model, 11, 64, 1e-2, bf16);
  EXPECT_EQ(g.model->decoder(11, why, bf16)->cache_bytes(), 2 * 2 * 11 * (2 * 8) * 2);

  // A bf16 model with an f32 cache: its rows within the bf16 model's own tolerance.
  TrainScript b = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                       {{"T", "12"}, {"L", "1"}, {"H", "2"}, {"D", "32"}});
  b.model->set_compute_dtype(DType::bf16);
  DecoderOptions wide;
  wide.cache = DType::f32;
  expect_steps_match_the_window(*b.model, 12, 256, 3e-2, wide);
  EXPECT_EQ(b.model->decoder(12, why, wide)->cache_bytes(), 2 * 12 * 32 * 4);

  DecoderOptions f16;
  f16.cache = DType::f16;
  EXPECT_THROW(s.model->decoder(64, why, f16), UserError);
}

// A decoder whose steps read their weight matrices from q8_0 or q4_0 codes: on parameters
// rounded to those codes' values (what a checkpoint of `ein quantize` loads as), each step's
// logits equal the window's row, the matrices are the products' weights (GPT's thirds of qkv,
// its projections and MLP, the tied embedding as the LM head; LLaMA's Linears and head; under
// bf16 none: their bf16 copies' codes would not be the checkpoint's), a step's FLOPs are the
// float step's, and generate() draws the window's tokens.
TEST(Decoder, StepsFromQuantizedCodesMatchTheWindowOnTheirValues) {
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    const std::string what(quant_type_name(type));
    DecoderOptions options;
    options.weights = type;
    TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                         {{"T", "19"}, {"L", "2"}, {"H", "4"}, {"D", "32"}});
    std::string why;
    // Weights that are not their codes' values are read as floats.
    EXPECT_EQ(s.model->decoder(19, why, options)->quantized_matrices(), 0) << what;
    round_parameters_to_codes(s.model->parameters(), type);
    expect_steps_match_the_window(*s.model, 19, 256, 1e-5, options);
    const std::unique_ptr<Decoder> d = s.model->decoder(19, why, options);
    ASSERT_TRUE(d) << why;
    // Per layer q, k and v (thirds of qkv), proj, fc and fc2; then wte ([V D]), the LM head
    // and the embedding whose rows are gathered: one matrix, one set of codes.
    EXPECT_EQ(d->quantized_matrices(), 2 * 6 + 1) << what;
    EXPECT_EQ(d->quantized_bytes(),
              2 * (4 * quantized_nbytes({32, 32}, type) + quantized_nbytes({32, 128}, type) +
                   quantized_nbytes({128, 32}, type)) +
                  quantized_nbytes({256, 32}, type))
        << what;
    EXPECT_EQ(d->step_flops(), s.model->decoder(19, why)->step_flops()) << what;

    GenerateOptions o;
    o.prompt = {84, 104, 101, 32};
    o.length = 24;
    o.context = 19;
    o.temperature = 0;
    o.decoder = options;
    const Generated with = generate(*s.model, o);
    EXPECT_EQ(with.quantized_matrices, 13) << what;
    EXPECT_EQ(with.cached_tokens, 19) << what;
    o.cache = false;
    EXPECT_EQ(with.tokens, generate(*s.model, o).tokens) << what;

    TrainScript l = load(EIN_SOURCE_DIR "/examples/scripts/llama_tiny.ein",
                         {{"T", "13"}, {"L", "2"}, {"H", "4"}, {"D", "32"}, {"F", "64"}});
    round_parameters_to_codes(l.model->parameters(), type);
    expect_steps_match_the_window(*l.model, 13, 256, 1e-5, options);
    // Per layer wq, wk, wv, wo and the MLP's three; then the LM head and the embedding (its
    // rows gathered from codes).
    EXPECT_EQ(l.model->decoder(13, why, options)->quantized_matrices(), 2 * 7 + 2) << what;
    // bf16: the step reads bf16 copies of the weights, whose codes would not be the
    // checkpoint's; it reads them as floats, matching the window to bf16 precision.
    l.model->set_compute_dtype(DType::bf16);
    EXPECT_EQ(l.model->decoder(13, why, options)->quantized_matrices(), 0) << what;
    expect_steps_match_the_window(*l.model, 13, 256, 3e-2, options);
  }
}

// Sampling from codes keeps the codes, not the float matrices: a decoder reads every matrix
// it reads from codes from them in both passes (the embedding's rows too), so once the model
// is gone the process holds the codes and the small float weights (positions, norms, biases),
// and generate() from the decoder alone draws, past the window too, what the model's floats
// draw.
TEST(Decoder, SamplingFromCodesHoldsTheCodesNotTheFloatMatrices) {
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    const std::string what(quant_type_name(type));
    const int64_t before = memory_allocated(cpu());
    TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                         {{"T", "19"}, {"L", "2"}, {"H", "4"}, {"D", "32"}});
    round_parameters_to_codes(s.model->parameters(), type);
    GenerateOptions o;
    o.prompt = {84, 104, 101, 32};
    o.length = 30;  // 15 tokens past the window
    o.context = 19;
    o.temperature = 0;
    o.cache = false;
    const Generated floats = generate(*s.model, o);
    DecoderOptions options;
    options.weights = type;
    std::string why;
    std::unique_ptr<Decoder> d = s.model->decoder(19, why, options);
    ASSERT_TRUE(d) << why;
    ASSERT_EQ(d->quantized_matrices(), 13) << what;
    int64_t float_bytes = 0, matrix_bytes = 0;
    for (const NamedTensor& p : s.model->parameters()) {
      const bool matrix = p.tensor.dim() == 2 && p.name.find("wpe") == std::string::npos;
      (matrix ? matrix_bytes : float_bytes) += p.tensor.nbytes();
    }
    EXPECT_EQ(matrix_bytes, (2 * (4 * 32 * 32 + 2 * 32 * 128) + 256 * 32) * 4) << what;
    s.model.reset();
    // What it holds: the codes, the float weights it reads, and what it computed once (the
    // causal mask, the positions: a few kB).
    EXPECT_GE(d->weight_bytes(), d->quantized_bytes() + float_bytes) << what;
    EXPECT_LE(d->weight_bytes(), d->quantized_bytes() + float_bytes + 4096) << what;
    // All that is left of the model in memory: that, the caches and its window of tokens.
    EXPECT_EQ(memory_allocated(cpu()) - before, d->weight_bytes() + d->cache_bytes() + 19 * 8)
        << what;
    EXPECT_LT(d->weight_bytes(), float_bytes + matrix_bytes / 2) << what;

    o.decoder = options;
    const Generated drawn = generate(*d, o);
    EXPECT_EQ(drawn.tokens, floats.tokens) << what;
    EXPECT_EQ(drawn.cached_tokens, 19) << what;
    EXPECT_EQ(drawn.quantized_matrices, 13) << what;
    EXPECT_EQ(generate(*d, o).tokens, drawn.tokens) << what;  // reset() between samples
    o.context = 18;
    EXPECT_THROW(generate(*d, o), UserError) << what;
  }
}

// `ein sample` from an `ein quantize` file: the script loaded without allocating, the file's
// codes given to the decoder as they are (q, k and v's thirds of qkv as slices of its codes)
// and only the other parameters (norms, biases, the short wpe) given floats, so that no f32
// matrix is ever allocated: from loading to the last token the allocator's peak stays below
// half the matrices' f32 bytes, which an allocating load holds all of. The tokens and what is
// read from codes are the allocating way's, also where a third of qkv does not start at a
// whole block (D = 48: they are read as floats, made from the codes).
TEST(Decoder, AQuantizedFileSamplesWithoutItsFloatMatricesEverAllocated) {
  const std::string path = EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein";
  for (int64_t D : {64, 48}) {
    for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
      const std::string what = fmt::format("{} D={}", quant_type_name(type), D);
      // wpe's 15 x D is below ein quantize's 1024 elements
      const std::vector<std::pair<std::string, std::string>> sets = {
          {"T", "15"}, {"L", "2"}, {"H", "4"}, {"D", std::to_string(D)}};
      const int64_t matrix_f32_bytes = (2 * (4 * D * D + 2 * D * 4 * D) + 256 * D) * 4;
      Checkpoint file;  // what `ein quantize` writes of a model
      {
        TrainScript s = load(path, sets);
        Checkpoint f32;
        for (const NamedTensor& p : s.model->parameters())
          f32.tensors.emplace_back(p.name, p.tensor.detach().clone());
        QuantizeCheckpointOptions qo;
        qo.type = type;
        auto [tensors, metadata] = quantize_checkpoint(f32, qo);
        file.tensors = std::move(tensors);
        file.metadata = std::move(metadata);
      }
      GenerateOptions o;
      o.prompt = {84, 104, 101, 32};
      o.length = 26;  // 15 tokens past the window
      o.context = 15;
      o.temperature = 0;
      o.decoder.weights = type;
      Generated want;
      {
        TrainScript s = load(path, sets);
        load_parameters(file, s.model->parameters());
        want = generate(*s.model, o);
      }
      // 13 = wte and six a block (q, k, v, proj, fc, out); at D = 48 a third of qkv reads from
      // codes only where quantizing it anew gives the same values (its blocks differ).
      if (D == 64)
        EXPECT_EQ(want.quantized_matrices, 13) << what;
      else
        EXPECT_LT(want.quantized_matrices, 13) << what;

      const int64_t before = memory_allocated(cpu());
      reset_peak_memory_stats(cpu());
      ScriptTrainOptions lazy;
      lazy.sets = sets;
      lazy.allocate = false;
      TrainScript s = load_train_script(path, lazy);
      EXPECT_EQ(memory_allocated(cpu()), before) << what;  // shapes and dtypes only
      DecoderOptions options;
      options.weights = type;
      options.codes = quantized_tensors(file);
      ASSERT_EQ(options.codes.size(), 9u) << what;  // wte; qkv, proj, fc and out a block
      load_parameters(file, *s.model, options.codes);
      int64_t float_bytes = 0, unset = 0;
      for (const NamedTensor& p : s.model->parameters())
        p.tensor.defined() ? float_bytes += p.tensor.nbytes() : ++unset;
      EXPECT_EQ(unset, 9) << what;
      std::string why;
      std::unique_ptr<Decoder> d = s.model->decoder(15, why, options);
      ASSERT_TRUE(d) << why;
      s.model.reset();
      EXPECT_EQ(d->quantized_matrices(), want.quantized_matrices) << what;
      int64_t codes_bytes = 0;
      for (const auto& [name, q] : options.codes) codes_bytes += q.nbytes();
      options.codes.clear();
      o.decoder = {};
      const Generated got = generate(*d, o);
      EXPECT_EQ(got.tokens, want.tokens) << what;
      if (D != 64) continue;
      EXPECT_EQ(d->quantized_bytes(), codes_bytes) << what;
      // Held: the codes (qkv's as three slices), the float parameters and the causal mask.
      EXPECT_GE(d->weight_bytes(), codes_bytes + float_bytes) << what;
      EXPECT_LE(d->weight_bytes(), codes_bytes + float_bytes + 15 * 15 * 4 + 4096) << what;
      EXPECT_LT(max_memory_allocated(cpu()) - before, matrix_f32_bytes / 2) << what;
    }
  }
}

// The same for LLaMA (RoPE's tables, grouped-query heads, SwiGLU; separate wq, wk, wv): from
// its file's codes as they are, the allocating way's tokens and matrices, and every matrix
// the step reads from codes is the file's (nothing quantized anew).
TEST(Decoder, AQuantizedLlamaFileSamplesFromItsCodesAsTheyAre) {
  const std::string path = EIN_SOURCE_DIR "/examples/scripts/llama_tiny.ein";
  const std::vector<std::pair<std::string, std::string>> sets = {
      {"T", "13"}, {"L", "2"}, {"H", "4"}, {"D", "32"}, {"F", "64"}};
  Checkpoint file;
  {
    TrainScript s = load(path, sets);
    Checkpoint f32;
    for (const NamedTensor& p : s.model->parameters())
      f32.tensors.emplace_back(p.name, p.tensor.detach().clone());
    QuantizeCheckpointOptions qo;
    qo.min_elements = 256;
    auto [tensors, metadata] = quantize_checkpoint(f32, qo);
    file.tensors = std::move(tensors);
    file.metadata = std::move(metadata);
  }
  GenerateOptions o;
  o.prompt = {84, 104, 101, 32};
  o.length = 20;
  o.context = 13;
  o.temperature = 0;
  o.decoder.weights = QuantType::q8_0;
  Generated want;
  {
    TrainScript s = load(path, sets);
    load_parameters(file, s.model->parameters());
    want = generate(*s.model, o);
  }
  ScriptTrainOptions lazy;
  lazy.sets = sets;
  lazy.allocate = false;
  TrainScript s = load_train_script(path, lazy);
  DecoderOptions options;
  options.weights = QuantType::q8_0;
  options.codes = quantized_tensors(file);
  load_parameters(file, *s.model, options.codes);
  std::string why;
  std::unique_ptr<Decoder> d = s.model->decoder(13, why, options);
  ASSERT_TRUE(d) << why;
  s.model.reset();
  int64_t codes_bytes = 0;
  for (const auto& [name, q] : options.codes) codes_bytes += q.nbytes();
  EXPECT_EQ(d->quantized_matrices(), want.quantized_matrices);
  EXPECT_EQ(d->quantized_bytes(), codes_bytes);  // every file matrix, as it is
  o.decoder = {};
  EXPECT_EQ(generate(*d, o).tokens, want.tokens);
}

// A model loaded without allocating says which parameter has no value when something reads
// it, and set_parameter() checks what it is given.
TEST(Decoder, AModelLoadedWithoutAllocatingNamesTheParameterWithoutAValue) {
  ScriptTrainOptions lazy;
  lazy.sets = {{"T", "8"}, {"L", "1"}, {"H", "2"}, {"D", "32"}};
  lazy.allocate = false;
  TrainScript s = load_train_script(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein", lazy);
  GenerateOptions o;
  o.prompt = {84};
  o.length = 2;
  o.context = 8;
  try {
    generate(*s.model, o);
    ADD_FAILURE() << "no error for parameters without values";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("has no value"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.model->init_optimizer_state(), UserError);
  try {
    s.model->set_parameter("wte.weight", zeros({3, 32}, DType::f32));
    ADD_FAILURE() << "no error for a tensor of another shape";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("f32 [256, 32]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.model->set_parameter("no.such", zeros({1}, DType::f32)), UserError);
  DecoderOptions wrong;  // codes of another shape
  wrong.weights = QuantType::q8_0;
  wrong.codes["wte.weight"] = quantize(zeros({3, 32}, DType::f32), QuantType::q8_0);
  std::string why;
  try {
    s.model->decoder(8, why, wrong);
    ADD_FAILURE() << "no error for codes of another shape";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("the codes given for parameter 'wte.weight' do not fit: "
                                         "they stand for f32 [3, 32], and the parameter is f32 "
                                         "[256, 32]"),
              std::string::npos)
        << e.what();
  }
  // Given every value (here an allocating load's), it samples as that model does.
  ScriptTrainOptions eager = lazy;
  eager.allocate = true;
  TrainScript full = load_train_script(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein", eager);
  Checkpoint values;
  for (const NamedTensor& p : full.model->parameters())
    values.tensors.emplace_back(p.name, p.tensor);
  load_parameters(values, *s.model);
  for (const NamedTensor& p : s.model->parameters()) ASSERT_TRUE(p.tensor.defined()) << p.name;
  EXPECT_EQ(generate(*s.model, o).tokens, generate(*full.model, o).tokens);
}

// What a decoder holds besides the parameters is computed once per value: every layer builds
// its causal mask alike (triu(ones(t, t))), so three layers hold one mask, not three. The
// float decoders of 1 and 3 layers differ by the two blocks' parameters alone.
TEST(Decoder, EveryLayersMaskIsHeldOnce) {
  int64_t held[2] = {0, 0}, params[2] = {0, 0};
  for (int i : {0, 1}) {
    TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                         {{"T", "64"}, {"L", i == 0 ? "1" : "3"}, {"H", "2"}, {"D", "32"}});
    for (const NamedTensor& p : s.model->parameters()) params[i] += p.tensor.nbytes();
    std::string why;
    const std::unique_ptr<Decoder> d = s.model->decoder(64, why);
    ASSERT_TRUE(d) << why;
    held[i] = d->weight_bytes();
    EXPECT_GE(held[i], params[i] + 64 * 64 * 4);  // the parameters and one [T T] f32 mask
    EXPECT_LT(held[i], params[i] + 2 * 64 * 64 * 4);
  }
  EXPECT_EQ(held[1] - held[0], params[1] - params[0]);
}

// With the cache, generate() draws the tokens it draws without it (the same seeds, greedy
// and sampled), through the decoder while the tokens fit in the window and through logits()
// after; the decoder's FLOPs are a small part of the window's.
TEST(Decoder, GenerateDrawsTheSameTokensWithAndWithoutTheCache) {
  TrainScript s = load(EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein",
                       {{"T", "16"}, {"L", "2"}, {"H", "2"}, {"D", "32"}});
  for (double temperature : {0.0, 1.0}) {
    GenerateOptions o;
    o.prompt = {84, 104, 101, 32};
    o.length = 30;
    o.context = 16;
    o.temperature = temperature;
    o.seed = 9;
    const Generated with = generate(*s.model, o);
    o.cache = false;
    const Generated without = generate(*s.model, o);
    EXPECT_EQ(with.tokens, without.tokens) << "temperature " << temperature;
    EXPECT_EQ(with.cached_tokens, 16);  // the window's worth; the rest slide
    EXPECT_EQ(with.steps, 12);          // the 4-token prompt goes in by steps too
    EXPECT_EQ(with.cache_bytes, 2 * 2 * 16 * 32 * 4);
    EXPECT_TRUE(with.uncached.empty()) << with.uncached;
    EXPECT_EQ(without.cached_tokens, 0);
    EXPECT_LT(with.flops, without.flops);
  }
  // Every token through the cache: one row's forward each, not a window's.
  GenerateOptions o;
  o.prompt = {84};
  o.length = 15;
  o.context = 16;
  const Generated with = generate(*s.model, o);
  o.cache = false;
  const Generated without = generate(*s.model, o);
  EXPECT_EQ(with.tokens, without.tokens);
  EXPECT_EQ(with.cached_tokens, 15);
  EXPECT_EQ(with.steps, 15);
  EXPECT_EQ(with.step_flops, with.flops);
  EXPECT_LT(with.flops * 5, without.flops);
}

// A prompt of a whole window goes in by one pass over it (prefill()), which fills the caches
// as the steps would: the logits after it and after each later step equal the window's rows.
TEST(Decoder, PrefillFillsTheCachesAsTheStepsDo) {
  TrainScript s = load(EIN_SOURCE_DIR "/examples/scripts/llama_tiny.ein",
                       {{"T", "16"}, {"L", "2"}, {"H", "4"}, {"D", "32"}, {"F", "40"}});
  const std::vector<int64_t> tokens = random_tokens(16, 256, 3);
  const Tensor window =
      s.model->logits(from_data<int64_t>(tokens, {1, 16})).to(DType::f64).contiguous();
  const auto row = [&](int64_t p) { return window.select(1, p).select(0, 0).to_vector<double>(); };
  std::string why;
  std::unique_ptr<Decoder> d = s.model->decoder(16, why);
  ASSERT_TRUE(d) << why;
  EXPECT_GT(d->prefill_flops(), 8 * d->step_flops());
  const std::vector<int64_t> prompt(tokens.begin(), tokens.begin() + 10);
  expect_row_near(d->prefill(prompt), row(9), 1e-5, "after the prompt");
  EXPECT_EQ(d->position(), 10);
  for (int64_t p = 10; p < 16; ++p)
    expect_row_near(d->next(tokens[static_cast<size_t>(p)]), row(p), 1e-5,
                    "step " + std::to_string(p));
  EXPECT_THROW(d->prefill(prompt), UserError);  // not empty
  d->reset();
  EXPECT_THROW(d->prefill({}), UserError);
  EXPECT_THROW(d->prefill(std::vector<int64_t>(17, 1)), UserError);  // more than the window
  expect_row_near(d->prefill(tokens), row(15), 1e-5, "a whole window");

  // generate() takes a long prompt in by prefill(), a short one by steps; the same tokens.
  GenerateOptions o;
  o.prompt = prompt;
  o.length = 6;
  o.context = 16;
  o.temperature = 0;
  const Generated with = generate(*s.model, o);
  EXPECT_EQ(with.cached_tokens, 15);
  EXPECT_EQ(with.steps, 5);  // the drawn tokens read; the prompt in one pass
  o.cache = false;
  EXPECT_EQ(with.tokens, generate(*s.model, o).tokens);
}

/// The model's decoder() is null and says `want` (and, when given, where: `at`).
void expect_no_decoder(const std::string& path, const std::string& want, const std::string& at,
                       int64_t T) {
  TrainScript s = load_train_script(path, {});
  std::string why;
  EXPECT_EQ(s.model->decoder(T, why), nullptr);
  EXPECT_NE(why.find(want), std::string::npos) << why;
  EXPECT_NE(why.find(at), std::string::npos) << why;
  // generate() then reads windows, and says why it did.
  GenerateOptions o;
  o.prompt = {1};
  o.length = 2;
  o.context = T;
  const Generated g = generate(*s.model, o);
  EXPECT_EQ(g.cached_tokens, 0);
  EXPECT_EQ(g.uncached, why);
}

/// A one-layer model whose attention line is `attention` (q, k, v: b h t e), the rest `extra`.
std::string model(const std::string& name, const std::string& attention,
                  const std::string& extra = "x = x") {
  return script(name, R"ein(import nn
import optim
dim V = 16
dim T = 8
module M() {
  emb = Embedding(V, 16, std = 0.5)
  head = Linear(16, V, std = 0.5)
  fn forward(idx: i64[b t]) -> f32[b t V] {
    x = emb(idx)
    )ein" + extra + R"ein(
    q = rearrange(x, "b t (h e) -> b h t e", h = 2)
    k = q * 0.5
    v = q + 1
    )ein" + attention + R"ein(
    return head(rearrange(y, "b h t e -> b t (h e)"))
  }
}
train {
  model = M()
  optimizer = AdamW(lr = 1e-3)
  fn batch() -> i64[2 T] = randint(0, V, 2, T)
  fn loss(x: i64[2 T]) -> f32[] = cross_entropy(model(x), x)
  fn logits(x: i64[1 T]) -> f32[1 T V] = model(x)
}
)ein");
}

TEST(Decoder, ModelsWithoutADecodeStepSayWhy) {
  const std::string causal =
      R"ein(y = einsum(softmax(where(triu(ones(t, t), diagonal = 1) > 0, -inf, einsum(q, k, "b h t e, b h s e -> b h t s"))), v, "b h t s, b h s e -> b h t e"))ein";
  // The control: this model has one.
  {
    TrainScript s = load_train_script(model("causal.ein", causal), {});
    std::string why;
    EXPECT_NE(s.model->decoder(8, why), nullptr) << why;
  }
  expect_no_decoder(
      model("bidirectional.ein",
            R"ein(y = einsum(softmax(einsum(q, k, "b h t e, b h s e -> b h t s")), v, "b h t s, b h s e -> b h t e"))ein"),
      "has no mask", "bidirectional.ein:", 8);
  // A mask that hides the past, not the future.
  expect_no_decoder(
      model("anticausal.ein",
            R"ein(y = einsum(softmax(where(tril(ones(t, t), diagonal = -1) > 0, -inf, einsum(q, k, "b h t e, b h s e -> b h t s"))), v, "b h t s, b h s e -> b h t e"))ein"),
      "not causal", "", 8);
  // Each row minus the sequence's mean: every row reads every other.
  expect_no_decoder(model("centred.ein", causal, "x = x - reduce(x, \"b t d -> b 1 d\", \"mean\")"),
                    "` reduces along the sequence", "centred.ein:10:13: `reduce(x", 8);
  {
    TrainScript s = load_train_script(EIN_SOURCE_DIR "/examples/scripts/linear_regression.ein", {});
    std::string why;
    EXPECT_EQ(s.model->decoder(8, why), nullptr);
    EXPECT_NE(why.find("no fn logits"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace ein
