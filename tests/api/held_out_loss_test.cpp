// The Trainer's held-out loss (TrainOptions::eval_data): it scores the held-out batches as
// Trainer::evaluate() scores the same batches, after the steps eval_every and the last; it
// changes nothing the training reads (the same losses to the bit with and without it); the
// checkpoints of scored steps carry it; random order scores the same batches every time; and
// its mistakes are UserErrors that say what.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>

#include <unistd.h>

#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/trainer.h>
#include <ein/training_checkpoint.h>
#include <fmt/format.h>

namespace ein {
namespace {

namespace fs = std::filesystem;

std::string example(const std::string& relative) {
  return std::string(EIN_SOURCE_DIR) + "/examples/" + relative;
}

/// The byte-level GPT at a toy size, training on the first 90% of its text.
TrainScript byte_gpt(std::ostream& out) {
  ScriptTrainOptions load;
  load.sets = {{"D", "32"}, {"L", "1"}, {"H", "2"}, {"T", "16"}, {"B", "4"}};
  TrainScript s = load_train_script(example("gpt/byte_gpt.ein"), load);
  s.options.steps = 4;
  s.options.quiet = true;
  s.options.out = &out;
  s.options.sample_length = 0;
  s.options.data->part_end = 0.9;
  return s;
}

/// The last 10% of the same text, `batches` batches of it, in `order`.
TokenDataOptions held_out(const TrainScript& s, const std::string& order) {
  TokenDataOptions d = *s.options.data;
  d.part_begin = 0.9;
  d.part_end = 1;
  d.order = order;
  return d;
}

TEST(HeldOutLoss, ScoresWhatEvaluateScoresAndChangesNothing) {
  std::ostringstream out;
  TrainScript plain = byte_gpt(out);
  const TrainResult a = Trainer(*plain.model, plain.options).fit();

  TrainScript s = byte_gpt(out);
  s.options.eval_data = held_out(s, "sequential");
  s.options.eval_every = 3;
  s.options.eval_batches = 5;
  std::vector<int64_t> evaluated;
  s.options.on_step = [&](const StepStats& st) {
    if (st.eval_loss) evaluated.push_back(st.step);
  };
  const TrainResult b = Trainer(*s.model, s.options).fit();
  EXPECT_EQ(b.losses, a.losses);  // bit for bit: the evaluations read nothing the steps do
  EXPECT_EQ(evaluated, (std::vector<int64_t>{3, 4}));  // every 3 steps, and after the last
  ASSERT_EQ(b.eval_losses.size(), 2u);
  EXPECT_EQ(b.eval_batches, 5);
  EXPECT_EQ(b.eval_tokens, 5 * 4 * 16);

  // The parameters are step 4's now: evaluate() of the same five held-out batches agrees.
  TrainOptions score = s.options;
  score.data = s.options.eval_data;
  score.eval_data.reset();
  const double direct = Trainer(*s.model, score).evaluate(5);
  EXPECT_NEAR(b.eval_losses.back().second, direct, 1e-6 * direct);
  EXPECT_NE(b.eval_losses.front().second, b.eval_losses.back().second);  // trained in between
  // Without eval_batches: one pass up to 200 batches. The last 10% of the text (13,081 bytes)
  // holds 817 windows of 16: 204 batches of 4, of which 200.
  TrainScript d = byte_gpt(out);
  d.options.steps = 1;
  d.options.eval_data = held_out(d, "sequential");
  EXPECT_EQ(Trainer(*d.model, d.options).fit().eval_batches, 200);
  // An untrained byte model is near ln 256 on held-out text, as on its training text.
  EXPECT_NEAR(b.eval_losses.front().second, std::log(256.0), 0.6);
}

// A checkpoint of a step that scored its weights carries the held-out loss (exactly, as
// "%.17g"), which prune_checkpoints() reads to keep the best one.
TEST(HeldOutLoss, CheckpointsCarryIt) {
  std::ostringstream out;
  TrainScript s = byte_gpt(out);
  const fs::path dir = fs::temp_directory_path() / fmt::format("ein_held_out_{}", getpid());
  fs::remove_all(dir);
  s.options.eval_data = held_out(s, "sequential");
  s.options.eval_every = 2;
  s.options.eval_batches = 2;
  s.options.checkpoint = dir.string();
  s.options.checkpoint_every = 1;
  s.options.keep = 10;
  const TrainResult r = Trainer(*s.model, s.options).fit();
  ASSERT_EQ(r.eval_losses.size(), 2u);
  for (int64_t step = 1; step <= 4; ++step) {
    const Checkpoint ck = load_safetensors((dir / fmt::format("step_{}.safetensors", step)).string());
    const auto it = ck.metadata.find(kEvalLossMetadataKey);
    if (step % 2 == 1) {
      EXPECT_EQ(it, ck.metadata.end()) << step;  // not scored after this step
    } else {
      ASSERT_NE(it, ck.metadata.end()) << step;
      EXPECT_EQ(std::strtod(it->second.c_str(), nullptr), r.eval_losses[step / 2 - 1].second);
    }
  }
  fs::remove_all(dir);
}

TEST(HeldOutLoss, RandomOrderScoresTheSameBatchesEveryTime) {
  std::ostringstream out;
  TrainScript s = byte_gpt(out);
  s.options.lr = 0;  // AdamW at lr 0 (its decay too) leaves the weights as they are
  s.options.eval_data = held_out(s, "random");
  s.options.eval_every = 1;
  s.options.eval_batches = 3;
  const TrainResult r = Trainer(*s.model, s.options).fit();
  ASSERT_EQ(r.eval_losses.size(), 4u);
  for (const auto& [step, loss] : r.eval_losses) EXPECT_EQ(loss, r.eval_losses.front().second);
  EXPECT_NE(r.losses[0], r.losses[1]);  // the training batches do change
  EXPECT_EQ(r.eval_tokens, 3 * 4 * 16);
}

TEST(HeldOutLoss, MistakesAreUserErrors) {
  std::ostringstream out;
  const auto message = [&](const std::function<void(TrainOptions&)>& change) {
    TrainScript s = byte_gpt(out);
    s.options.eval_data = held_out(s, "sequential");
    change(s.options);
    try {
      Trainer(*s.model, s.options).fit();
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([](TrainOptions& o) { o.eval_every = -1; }).find("eval_every -1 is negative"),
            std::string::npos);
  EXPECT_NE(message([](TrainOptions& o) { o.eval_batches = -2; }).find("eval_batches -2"),
            std::string::npos);
  // A pass over the last 10% (about 13 kB) holds some 800 windows of 16: not a batch of 2000.
  const std::string big = message([](TrainOptions& o) { o.eval_data->batch = 2000; });
  EXPECT_NE(big.find("one pass holds fewer windows of 16 tokens than a batch of 2000"),
            std::string::npos)
      << big;
  const std::string tiny = message([](TrainOptions& o) { o.eval_data->part_begin = 0.99999; });
  EXPECT_NE(tiny.find("a window of context 16 needs 17"), std::string::npos) << tiny;
  const std::string bad = message([](TrainOptions& o) { o.eval_data->part_end = 1.5; });
  EXPECT_NE(bad.find("expected 0 <= begin < end <= 1"), std::string::npos) << bad;
  // A held-out batch the loss does not take fails before the first step, not after it.
  int64_t steps_run = 0;
  const std::string shape = message([&](TrainOptions& o) {
    o.eval_data->batch = 64;
    o.eval_every = 1;
    o.on_step = [&](const StepStats&) { ++steps_run; };
  });
  EXPECT_NE(shape.find("dim 'B' received size 64, but B is bound to 4"), std::string::npos) << shape;
  EXPECT_EQ(steps_run, 0);
  const std::string missing = message([](TrainOptions& o) { o.eval_data_path = "/no/such/file"; });
  EXPECT_NE(missing.find("data file '/no/such/file' does not exist"), std::string::npos) << missing;
  const std::string without = message([](TrainOptions& o) {
    o.eval_data.reset();
    o.eval_data_path = "x.txt";
  });
  EXPECT_NE(without.find("--eval-data: the train block has no eval_data"), std::string::npos)
      << without;
}

}  // namespace
}  // namespace ein
