// ein::Trainer (include/ein/trainer.h) on a C++ Trainable and on .ein scripts: a linear
// regression converges to its true weights; two accumulated micro-batches equal one double
// batch; a script trained 3 steps and resumed to 6 gives bit-identical losses to 6 straight;
// token data, sampling, the JSON log, stop() and option errors behave as ein train's do.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include <ein/autograd.h>
#include <ein/cpu_peak.h>
#include <ein/diagnostic.h>
#include <ein/flop_counter.h>
#include <ein/grad_clip.h>
#include <ein/checkpoint.h>
#include <ein/nn.h>
#include <ein/ops.h>
#include <ein/optim.h>
#include <ein/quantize.h>
#include <ein/trainer.h>

#include "api/train_report.h"

namespace ein {
namespace {

namespace fs = std::filesystem;

/// y = x · w_true with x ~ N(0, 1): batch k is a window of `rows` rows of a fixed data set,
/// the loss the mean squared error, the optimizer plain SGD (which, unlike Adam, would
/// show a gradient scaled wrongly by accumulation).
class Regression : public Trainable {
 public:
  Regression(int64_t rows, int64_t total_rows) : rows_(rows) {
    std::vector<float> truth(kD);
    for (int64_t i = 0; i < kD; ++i)
      truth[i] = static_cast<float>(i) - 2.5f;
    x_ = randn({total_rows, kD}, DType::f32, cpu(), /*seed=*/7);
    y_ = einsum("n d, d o -> n o", x_, from_data(truth, {kD, 1}));
    w_ = zeros({kD, 1}, DType::f32).requires_grad_();
  }
  std::vector<NamedTensor> parameters() override { return {{"w", w_}}; }
  std::vector<Tensor> batch(int64_t k) override {
    const int64_t n = x_.size(0) / rows_;
    const int64_t i = k % n;
    return {x_.slice(0, i * rows_, (i + 1) * rows_), y_.slice(0, i * rows_, (i + 1) * rows_)};
  }
  Tensor loss(const std::vector<Tensor>& b, int64_t) override {
    return nn::mse_loss(einsum("b d, d o -> b o", b[0], w_), b[1]);
  }
  void optimizer_step(int64_t, double lr) override { optim::SGD({w_}, {.lr = lr}).step(); }
  std::vector<double> weights() const { return w_.to_vector<double>(); }

  static constexpr int64_t kD = 6;

 private:
  int64_t rows_;
  Tensor x_, y_, w_;
};

/// A fresh directory under the temporary directory, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("ein_trainer_test_" + name + "_" + std::to_string(getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string example(const std::string& relative) {
  return std::string(EIN_SOURCE_DIR) + "/examples/" + relative;
}

/// The byte-level GPT at D=32, H=2, T=16, B=4 with `layers` blocks, set to train 4 steps
/// quietly (into `out`) without a sample.
TrainScript tiny_byte_gpt(int layers, std::ostream& out) {
  ScriptTrainOptions load;
  load.sets = {{"D", "32"}, {"L", std::to_string(layers)}, {"H", "2"}, {"T", "16"}, {"B", "4"}};
  TrainScript s = load_train_script(example("gpt/byte_gpt.ein"), load);
  s.options.steps = 4;
  s.options.quiet = true;
  s.options.out = &out;
  s.options.sample_length = 0;
  return s;
}

/// Every parameter's values, one after another, as float64.
std::vector<double> parameter_values(Trainable& model) {
  std::vector<double> out;
  for (const NamedTensor& p : model.parameters())
    for (double v : p.tensor.detach().to(DType::f64).to_vector<double>())
      out.push_back(v);
  return out;
}

TrainOptions quiet_options(std::ostream& out) {
  TrainOptions o;
  o.quiet = true;
  o.out = &out;
  return o;
}

TEST(Trainer, LinearRegressionConverges) {
  Regression model(8, 64);
  std::ostringstream out;
  TrainOptions o = quiet_options(out);
  o.steps = 200;
  o.lr = 0.1;
  const TrainResult r = Trainer(model, o).fit();
  EXPECT_EQ(r.done, 200);
  EXPECT_EQ(r.last, 200);
  ASSERT_EQ(r.losses.size(), 200u);
  EXPECT_GT(r.losses.front(), 1.0);
  EXPECT_LT(r.final_loss, 1e-8);
  const std::vector<double> w = model.weights();
  for (int64_t i = 0; i < Regression::kD; ++i)
    EXPECT_NEAR(w[i], static_cast<double>(i) - 2.5, 1e-4) << "w[" << i << "]";
  EXPECT_EQ(r.parameters, Regression::kD);
  EXPECT_GT(r.flops, 0);
  EXPECT_EQ(out.str(), "");  // quiet, no checkpoint: nothing to say
  EXPECT_NE(format_summary(r, "regression").find("trained regression for 200 steps (0 to 200)"),
            std::string::npos);
  // A CPU run carries this_cpu()'s note on its peak: "" where it was measured on a quiet
  // machine; printed on a line of its own when not.
  EXPECT_EQ(r.peak_note, this_cpu_peak_note());
  TrainResult busy = r;
  busy.peak_note = "measured beside a build";
  EXPECT_NE(format_summary(busy, "regression").find("\n  (measured beside a build)\n"),
            std::string::npos);
}

TEST(Trainer, AccumulatingTwoMicroBatchesEqualsOneDoubleBatch) {
  // Equal-sized halves: the mean of the two micro-batch means is the double batch's mean, so
  // the summed gradients (each scaled by 1/2) are the double batch's gradient.
  Regression halves(4, 48), whole(8, 48);
  std::ostringstream out;
  TrainOptions o = quiet_options(out);
  o.steps = 5;
  o.lr = 0.05;
  o.accumulate = 2;
  const TrainResult a = Trainer(halves, o).fit();
  o.accumulate = 1;
  const TrainResult b = Trainer(whole, o).fit();
  ASSERT_EQ(a.losses.size(), 5u);
  ASSERT_EQ(b.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * b.losses[i]) << "step " << i + 1;
  const std::vector<double> wa = halves.weights(), wb = whole.weights();
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_NEAR(wa[i], wb[i], 1e-5) << "w[" << i << "]";
  EXPECT_GT(std::fabs(wa[5]), 0.1);  // it moved: the comparison is not of two zero vectors
  EXPECT_EQ(a.tokens_per_step, b.tokens_per_step);
}

TEST(Trainer, ScriptResumesExactly) {
  // AdaGrad keeps state: the resumed run must restore it, not only the parameters.
  const std::string path = example("scripts/cruncher_adagrad.ein");
  TempDir dir("resume");
  std::ostringstream out;

  TrainScript straight = load_train_script(path);
  straight.options.steps = 6;
  straight.options.quiet = true;
  straight.options.out = &out;
  const TrainResult a = Trainer(*straight.model, straight.options).fit();
  ASSERT_EQ(a.losses.size(), 6u);

  TrainScript first = load_train_script(path);
  first.options.steps = 3;
  first.options.quiet = true;
  first.options.out = &out;
  first.options.checkpoint = dir.path.string();
  const TrainResult b = Trainer(*first.model, first.options).fit();
  ASSERT_TRUE(fs::exists(dir.path / "step_3.safetensors"));

  TrainScript second = load_train_script(path);
  second.options.steps = 6;
  second.options.quiet = true;
  second.options.out = &out;
  second.options.checkpoint = dir.path.string();
  second.options.resume = true;
  second.options.name = "t";
  const TrainResult c = Trainer(*second.model, second.options).fit();
  EXPECT_EQ(c.start, 3);
  EXPECT_EQ(c.done, 3);
  EXPECT_NE(out.str().find("t: resumed from "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("(step 3)"), std::string::npos) << out.str();

  const std::vector<double> expected_b(a.losses.begin(), a.losses.begin() + 3);
  const std::vector<double> expected_c(a.losses.begin() + 3, a.losses.end());
  EXPECT_EQ(b.losses, expected_b);  // bit-identical, not merely close
  EXPECT_EQ(c.losses, expected_c);
  EXPECT_NE(a.losses[3], a.losses[4]);  // the steps differ: equality above means something
}

TEST(Trainer, ScriptLogMatchesResult) {
  TempDir dir("log");
  std::ostringstream out;
  TrainScript s = load_train_script(example("scripts/linear_regression.ein"));
  s.options.steps = 4;
  s.options.quiet = true;
  s.options.out = &out;
  s.options.log = (dir.path / "log.jsonl").string();
  std::vector<int64_t> seen;
  s.options.on_step = [&](const StepStats& st) { seen.push_back(st.step); };
  const TrainResult r = Trainer(*s.model, s.options).fit();
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2, 3, 4}));
  std::ifstream log(s.options.log);
  std::string line;
  int n = 0;
  while (std::getline(log, line)) {
    ASSERT_LT(n, 4);
    EXPECT_NE(line.find("\"step\":" + std::to_string(n + 1)), std::string::npos) << line;
    EXPECT_NE(line.find("\"lr\":0.1,"), std::string::npos) << line;  // the script's lr
    ++n;
  }
  EXPECT_EQ(n, 4);
  EXPECT_EQ(r.losses.size(), 4u);
}

TEST(Trainer, ByteGptFromTokenDataAndSample) {
  std::ostringstream out;
  ScriptTrainOptions load;
  load.sets = {{"D", "32"}, {"L", "1"}, {"H", "2"}, {"T", "16"}, {"B", "4"}};
  TrainScript s = load_train_script(example("gpt/byte_gpt.ein"), load);
  ASSERT_TRUE(s.options.data.has_value());
  EXPECT_EQ(s.options.data->kind, "bytes");
  EXPECT_EQ(s.options.data->context, 16);
  s.options.steps = 3;
  s.options.quiet = true;
  s.options.out = &out;
  s.options.sample = "The ";
  s.options.sample_length = 5;
  Trainer trainer(*s.model, s.options);
  const TrainResult r = trainer.fit();
  ASSERT_EQ(r.losses.size(), 3u);
  // An untrained byte model predicts about uniformly: ln 256 = 5.545 nats.
  EXPECT_NEAR(r.losses.front(), std::log(256.0), 0.5);
  EXPECT_EQ(r.tokens_per_step, 4 * 16);
  const std::string text = trainer.sample();
  EXPECT_EQ(text.rfind("The ", 0), 0u) << text;
  EXPECT_GE(text.size(), 9u);
}

// evaluate() scores the batches fit() trains on with the parameters as they are: the loss of
// batch k after k steps is the loss fit() logs at step k + 1 (no dropout in this model), and
// scoring changes no parameter and records nothing on the tape.
TEST(Trainer, EvaluateScoresTheBatchesFitTrainsOn) {
  std::ostringstream out;
  TempDir dir("evaluate");
  TrainScript s = tiny_byte_gpt(1, out);
  s.options.checkpoint = (dir.path / "ck").string();
  s.options.checkpoint_every = 2;
  Trainer trainer(*s.model, s.options);
  const TrainResult r = trainer.fit();
  ASSERT_EQ(r.losses.size(), 4u);

  // A fresh model loaded from the step-2 checkpoint scores batch 2 as step 3 logged it.
  std::ostringstream out2;
  TrainScript fresh = tiny_byte_gpt(1, out2);
  fresh.options.init = (dir.path / "ck" / "step_2.safetensors").string();
  Trainer scorer(*fresh.model, fresh.options);
  const std::vector<double> before = parameter_values(*fresh.model);
  EXPECT_NEAR(scorer.evaluate(1, 2), r.losses[2], 1e-5 * std::fabs(r.losses[2]));
  const std::vector<double> loaded = parameter_values(*fresh.model);
  EXPECT_NE(before, loaded);  // --init replaced the random initial values
  EXPECT_NEAR(scorer.evaluate(2, 2), scorer.evaluate(1, 2) / 2 + scorer.evaluate(1, 3) / 2, 1e-6);
  EXPECT_EQ(parameter_values(*fresh.model), loaded);
  for (const NamedTensor& p : fresh.model->parameters()) EXPECT_FALSE(p.tensor.grad().defined());
  EXPECT_THROW(scorer.evaluate(0), UserError);
  EXPECT_THROW(scorer.evaluate(1, -1), UserError);
}

// A quantized checkpoint (ein quantize) loads through --init as the values its codes stand
// for: the parameters equal dequantize_checkpoint()'s tensors exactly, and q8_0 costs little loss.
TEST(Trainer, InitLoadsAQuantizedCheckpointDequantized) {
  std::ostringstream out;
  TempDir dir("quantized_init");
  TrainScript s = tiny_byte_gpt(1, out);
  s.options.checkpoint = (dir.path / "ck").string();
  Trainer(*s.model, s.options).fit();
  const std::string trained = (dir.path / "ck" / "step_4.safetensors").string();
  const Checkpoint ck = load_safetensors(trained);
  QuantizeCheckpointOptions qo;
  qo.min_elements = 256;
  std::vector<QuantizedEntry> entries;
  auto [tensors, metadata] = quantize_checkpoint(ck, qo, &entries);
  const std::string quantized = (dir.path / "q8_0.safetensors").string();
  save_safetensors(quantized, tensors, metadata);
  const Checkpoint deq = dequantize_checkpoint(load_safetensors(quantized));

  std::ostringstream out2, out3;
  TrainScript a = tiny_byte_gpt(1, out2), b = tiny_byte_gpt(1, out3);
  a.options.init = trained;
  b.options.init = quantized;
  Trainer ta(*a.model, a.options), tb(*b.model, b.options);
  const double loss_a = ta.evaluate(4), loss_b = tb.evaluate(4);
  int compared = 0, changed = 0;
  for (const NamedTensor& p : b.model->parameters()) {
    const Tensor* want = deq.find("model." + p.name);
    ASSERT_NE(want, nullptr) << p.name;
    EXPECT_EQ(p.tensor.detach().to_vector<float>(), want->to_vector<float>()) << p.name;
    changed += p.tensor.detach().to_vector<float>() != ck.at("model." + p.name).to_vector<float>();
    ++compared;
  }
  EXPECT_GT(compared, 0);
  EXPECT_GT(changed, 0);  // some matrices were quantized, so they differ from the trained ones
  EXPECT_NE(loss_a, loss_b);
  EXPECT_NEAR(loss_b, loss_a, 0.01 * loss_a);
}

// Sampled bytes reach the terminal as valid UTF-8 without control characters: invalid bytes
// and C0, DEL and C1 controls (U+009B is CSI) become U+FFFD; newline, tab, ASCII and valid
// multi-byte characters stay.
TEST(Trainer, SampledBytesArePrintable) {
  const std::string bad = "\xEF\xBF\xBD";
  EXPECT_EQ(detail::printable_utf8("ab\n\tc"), "ab\n\tc");
  EXPECT_EQ(detail::printable_utf8("\x1b[2J\x07\x7f"), bad + "[2J" + bad + bad);
  EXPECT_EQ(detail::printable_utf8("\xC2\x9B"
                                   "1m\xC2\x80\xC2\x9F"),
            bad + "1m" + bad + bad);
  EXPECT_EQ(detail::printable_utf8("\xC2\xA0\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"),
            "\xC2\xA0\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");  // nbsp, é, €, an emoji
  EXPECT_EQ(detail::printable_utf8("\xFF\xC3"), bad + bad);   // no character; one cut short
}

// The same bytes a byte at a time (ein sample's streaming) print the same text: random bytes
// (ASCII, continuation and lead bytes of every length, invalid ones) in random pieces.
TEST(Trainer, SampledBytesStreamAsTheyPrintWhole) {
  std::mt19937 rng(3);
  const unsigned char alphabet[] = {'a', '\n', 0x1b, 0x7f, 0x80, 0x9b, 0xa0, 0xbf, 0xc2,
                                    0xc3, 0xc0, 0xe0, 0xe2, 0xed, 0xf0, 0xf4, 0xf8, 0xff};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>(alphabet[rng() % sizeof alphabet]));
    detail::PrintableUtf8Stream stream;
    std::string streamed;
    for (size_t i = 0; i < bytes.size();) {
      const size_t piece = 1 + rng() % 3;
      streamed += stream.add(bytes.substr(i, piece));
      i += piece;
    }
    streamed += stream.finish();
    ASSERT_EQ(streamed, detail::printable_utf8(bytes)) << ::testing::PrintToString(bytes);
  }
  // A character cut short waits: "€" (E2 82 AC) byte by byte prints nothing until its end.
  detail::PrintableUtf8Stream euro;
  EXPECT_EQ(euro.add("\xE2"), "");
  EXPECT_EQ(euro.add("\x82"), "");
  EXPECT_EQ(euro.add("\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(euro.add("ab\xC3"), "ab");
  EXPECT_EQ(euro.finish(), "\xEF\xBF\xBD");  // the end came first
}

/// A script's model without Trainable::optimizer_step_scaled (the default: false), so the
/// Trainer scales the gradients in place before the update, as for any C++ Trainable.
class ScalesInPlace : public Trainable {
 public:
  explicit ScalesInPlace(Trainable& inner) : inner_(inner) {}
  std::vector<NamedTensor> parameters() override { return inner_.parameters(); }
  Tensor loss(const std::vector<Tensor>& b, int64_t k) override { return inner_.loss(b, k); }
  void optimizer_step(int64_t step, double lr) override { inner_.optimizer_step(step, lr); }
  std::vector<NamedTensor> optimizer_state() override { return inner_.optimizer_state(); }
  void init_optimizer_state() override { inner_.init_optimizer_state(); }

 private:
  Trainable& inner_;
};

// Clipping (a factor well below 1 at every step) folded into the script optimizer's update
// kernel trains the model that clipping the gradients in place first trains: same losses and
// parameters to f32 rounding. The clip is tiny so that it changes what AdamW does (its update
// is nearly invariant to the gradients' scale until they approach eps = 1e-8): the unclipped
// run's parameters differ.
TEST(Trainer, ClippingInTheUpdateEqualsClippingInPlace) {
  std::ostringstream out;
  const auto run = [&](double clip, bool in_place) {
    TrainScript s = tiny_byte_gpt(1, out);
    s.options.clip = clip;
    ScalesInPlace wrapped(*s.model);
    Trainable& model = in_place ? static_cast<Trainable&>(wrapped) : *s.model;
    const TrainResult r = Trainer(model, s.options).fit();
    return std::pair{r.losses, parameter_values(*s.model)};
  };
  const auto [fused_losses, fused_params] = run(1e-7, false);
  const auto [in_place_losses, in_place_params] = run(1e-7, true);
  const auto [unclipped_losses, unclipped_params] = run(0, false);
  ASSERT_EQ(fused_losses.size(), 4u);
  ASSERT_EQ(in_place_losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(fused_losses[i], in_place_losses[i], 1e-5 * in_place_losses[i]) << "step " << i + 1;
  ASSERT_EQ(fused_params.size(), in_place_params.size());
  double worst = 0, clipping = 0;
  for (size_t i = 0; i < fused_params.size(); ++i) {
    worst = std::max(worst, std::abs(fused_params[i] - in_place_params[i]));
    clipping = std::max(clipping, std::abs(fused_params[i] - unclipped_params[i]));
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(clipping, 1e-4);
}

// With clipping the step logs its gradients' norm before clipping: step 1's is the norm of the
// gradient of batch 0 at the initial weights, computed here by hand; without, none is logged.
TEST(Trainer, ClippingLogsTheGradientNormBeforeIt) {
  std::ostringstream out;
  const auto norms = [&](double clip) {
    Regression model(8, 64);
    TrainOptions o = quiet_options(out);
    o.steps = 3;
    o.lr = 0.05;
    o.clip = clip;
    std::vector<std::optional<double>> seen;
    o.on_step = [&](const StepStats& s) { seen.push_back(s.grad_norm); };
    Trainer(model, o).fit();
    return seen;
  };
  Regression fresh(8, 64);
  fresh.loss(fresh.batch(0), 0).backward();
  std::vector<Tensor> grads;
  for (const NamedTensor& p : fresh.parameters()) grads.push_back(p.tensor);
  const double expected = optim::grad_norm(grads);
  ASSERT_GT(expected, 1.0);
  const std::vector<std::optional<double>> clipped = norms(0.5);  // clips: 0.5 < the norm
  ASSERT_EQ(clipped.size(), 3u);
  ASSERT_TRUE(clipped[0].has_value());
  EXPECT_NEAR(*clipped[0], expected, 1e-12 * expected);
  EXPECT_TRUE(clipped[2].has_value());
  EXPECT_NE(*clipped[1], *clipped[0]);
  for (const std::optional<double>& n : norms(0)) EXPECT_FALSE(n.has_value());
}

// A script's loss is one node on the tape, whose backward is one graph; that graph hands each
// parameter's gradient over as soon as its last node ran (exec/execute.h's OutputReady), so a
// parameter's post_accumulate_hook runs while the backward still computes the others' (what
// lets data parallelism exchange buckets during the backward). Each hook runs once, and the
// gradient it sees is the final one, bit for bit.
TEST(Trainer, ParameterGradientsAreFinalBeforeTheBackwardEnds) {
  ScriptTrainOptions load;
  load.sets = {{"D", "32"}, {"L", "2"}, {"H", "2"}, {"T", "16"}, {"B", "4"}};
  TrainScript s = load_train_script(example("gpt/byte_gpt.ein"), load);
  const std::vector<NamedTensor> params = s.model->parameters();
  const size_t n = params.size();
  ASSERT_GT(n, 4u);
  FlopCounter counter;
  std::vector<int64_t> xs(4 * 16), ys(4 * 16);
  for (size_t k = 0; k < xs.size(); ++k) {
    xs[k] = static_cast<int64_t>((k * 37 + 11) % 256);
    ys[k] = static_cast<int64_t>((k * 53 + 7) % 256);
  }
  const Tensor loss = s.model->loss({from_data(xs, {4, 16}), from_data(ys, {4, 16})}, 0);
  std::vector<double> fired_at(n, -1);  // backward FLOPs counted when the hook ran
  std::vector<int> calls(n, 0);
  std::vector<std::vector<float>> seen(n);
  for (size_t i = 0; i < n; ++i)
    params[i].tensor.autograd()->post_accumulate_hook = [&, i] {
      fired_at[i] = static_cast<double>(counter.totals().flops);
      ++calls[i];
      seen[i] = params[i].tensor.grad().detach().contiguous().to_vector<float>();
    };
  loss.backward();
  const double end = static_cast<double>(counter.totals().flops);
  size_t early = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(calls[i], 1) << params[i].name;
    EXPECT_EQ(seen[i], params[i].tensor.grad().detach().contiguous().to_vector<float>())
        << params[i].name << ": the hook saw a gradient that changed afterwards";
    early += fired_at[i] < end ? 1 : 0;
    params[i].tensor.autograd()->post_accumulate_hook = nullptr;
  }
  // The last blocks' gradients come first; only those the backward's last nodes make (the
  // embeddings) can be final at its very end.
  EXPECT_GE(early, n - 2) << early << " of " << n << " hooks ran before the backward's end";
}

// The save/recompute plans (include/ein/autograd.h's Recompute) change what the backward
// keeps, never what it computes: a byte GPT of three blocks (enough for the blocks plan to
// recompute each one between the others' backward) trains to the same losses and parameters
// under each, up to the rounding of differently fused kernels.
TEST(Trainer, EveryRecomputePolicyTrainsTheSameModel) {
  std::map<std::string, std::vector<double>> losses;
  std::map<std::string, std::vector<double>> params;
  // "auto 0.3": auto within --activation-budget 0.3 (contractions recomputed).
  for (const std::string policy : {"full", "none", "auto", "blocks", "auto 0.3"}) {
    std::ostringstream out;
    TrainScript s = tiny_byte_gpt(3, out);
    s.options.recompute = policy.substr(0, policy.find(' '));
    if (policy == "auto 0.3") s.options.activation_budget = 0.3;
    Trainer trainer(*s.model, s.options);
    losses[policy] = trainer.fit().losses;
    params[policy] = parameter_values(*s.model);
  }
  for (const std::string policy : {"none", "auto", "blocks", "auto 0.3"}) {
    ASSERT_EQ(losses[policy].size(), 4u) << policy;
    for (size_t k = 0; k < 4; ++k)
      EXPECT_NEAR(losses[policy][k], losses["full"][k], 1e-5) << policy << " step " << k + 1;
    ASSERT_EQ(params[policy].size(), params["full"].size());
    double worst = 0;
    for (size_t i = 0; i < params[policy].size(); ++i)
      worst = std::max(worst, std::abs(params[policy][i] - params["full"][i]));
    EXPECT_LT(worst, 1e-5) << policy;  // four AdamW steps of lr 3e-3 move weights by ~1e-2
  }
  std::ostringstream out;
  TrainScript s = load_train_script(example("gpt/byte_gpt.ein"));
  s.options.recompute = "selective";
  s.options.out = &out;
  Trainer trainer(*s.model, s.options);
  EXPECT_THROW(
      {
        try {
          trainer.fit();
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("--recompute selective: expected none, auto, blocks or full"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      UserError);
  // A budget is a fraction, and only auto's plan has one.
  for (const auto& [recompute, budget, message] :
       {std::tuple{"auto", 1.5, "--activation-budget 1.5: expected a fraction from 0 to 1"},
        std::tuple{"auto", -0.1, "--activation-budget -0.1: expected a fraction from 0 to 1"},
        std::tuple{"blocks", 0.5, "--activation-budget applies to --recompute auto, not blocks"}}) {
    TrainScript bad = load_train_script(example("gpt/byte_gpt.ein"));
    bad.options.recompute = recompute;
    bad.options.activation_budget = budget;
    bad.options.out = &out;
    Trainer t(*bad.model, bad.options);
    try {
      t.fit();
      ADD_FAILURE() << "no error for " << message;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST(Trainer, StopEndsAfterTheCurrentStep) {
  Regression model(8, 64);
  std::ostringstream out;
  TrainOptions o = quiet_options(out);
  o.steps = 50;
  Trainer* self = nullptr;
  o.on_step = [&](const StepStats& s) {
    if (s.step == 2) self->stop();
  };
  Trainer stopping(model, o);
  self = &stopping;
  const TrainResult r = stopping.fit();
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.done, 2);
}

TEST(Trainer, OptionErrorsAreUserErrors) {
  Regression model(8, 64);
  std::ostringstream out;
  TrainOptions o = quiet_options(out);
  o.steps = 1;
  o.precision = "fp8";
  EXPECT_THROW(Trainer(model, o).fit(), UserError);
  o.precision = "bf16";  // a C++ model without set_compute_dtype: fp32 only
  EXPECT_THROW(Trainer(model, o).fit(), UserError);
  o.precision = "fp32";
  o.resume = true;  // without a checkpoint directory
  EXPECT_THROW(Trainer(model, o).fit(), UserError);
  EXPECT_THROW(select_device("tpu"), UserError);
  EXPECT_EQ(select_device("cpu").kind, DeviceKind::cpu);

  struct NoBatches : Trainable {
    Tensor w = zeros({1}, DType::f32).requires_grad_();
    std::vector<NamedTensor> parameters() override { return {{"w", w}}; }
    Tensor loss(const std::vector<Tensor>&, int64_t) override { return w; }
    void optimizer_step(int64_t, double) override {}
  } none;
  TrainOptions plain = quiet_options(out);
  plain.steps = 1;
  EXPECT_THROW(Trainer(none, plain).fit(), UserError);
}

}  // namespace
}  // namespace ein
