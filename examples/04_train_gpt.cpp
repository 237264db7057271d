// Example 4: training a .ein model from C++ with ein::Trainer — what `ein train` does.
//
// Run: scripts/build.sh && build/bin/example_04_train_gpt [steps] [script.ein]
//
// 1. load_train_script() reads examples/gpt/byte_gpt.ein: a byte-level GPT, its corpus, its
//    AdamW and warmup-cosine schedule; the train block's settings arrive as TrainOptions.
// 2. We shrink the run (a few dozen steps), watch each step through on_step, and fit().
// 3. The summary is `ein train`'s; then the model continues a prompt.
// A C++ model trains the same way: subclass ein::Trainable (parameters(), batch(), loss(),
// optimizer_step()) and hand it to a Trainer; see include/ein/trainer.h.
#include <ein/diagnostic.h>
#include <ein/trainer.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 40;
  const std::string path = argc > 2 ? argv[2] : EIN_EXAMPLES_DIR "/gpt/byte_gpt.ein";
  try {
    // 1. The script, on the CPU (select_device("auto") would take a GPU when there is one).
    ein::ScriptTrainOptions load;
    load.seed = 0;
    load.device = ein::select_device("cpu");
    ein::TrainScript script = ein::load_train_script(path, load);

    // 2. Its settings, shortened; the warmup scaled to the shorter run.
    ein::TrainOptions& options = script.options;
    options.steps = steps;
    options.warmup = steps / 5;
    options.quiet = true;  // our own line per step instead of the progress line
    options.sample_length = 60;
    options.on_step = [](const ein::StepStats& s) {
      if (s.step == 1 || s.step % 10 == 0 || s.step == s.steps)
        std::printf("step %3lld  loss %.4f  lr %.2e  %.0f ms\n", static_cast<long long>(s.step),
                    s.loss, s.lr, s.seconds * 1e3);
    };
    ein::Trainer trainer(*script.model, options);
    const ein::TrainResult result = trainer.fit();

    // 3. What it cost, and what it learned.
    std::cout << ein::format_summary(result, path);
    std::cout << "sample:\n" << trainer.sample() << '\n';
    if (!(result.final_loss < result.losses.front())) {
      std::fprintf(stderr, "the loss did not fall: %g -> %g\n", result.losses.front(),
                   result.final_loss);
      return 1;
    }
    return 0;
  } catch (const ein::UserError& e) {
    std::cerr << e.what();
    return 1;
  }
}
