// Example 6: the lecture's Cruncher as a C++ module, trained with AdamW, checkpointed and
// resumed — the resumed run's losses are bitwise those of the run that never stopped.
//
// Run: scripts/build.sh && build/bin/example_06_checkpoint_resume [steps] [stop_at]
//
// 1. Cruncher: num_layers D×D linear layers and a final D → 1 layer, no biases (the lecture's
//    model), as ein::nn::Module subclasses: named_parameters() gives layers.0.weight, ...
// 2. A training loop over batches that are pure functions of the step (explicit seeds).
// 3. At step `stop_at` the model's and the optimizer's state_dict() go to one safetensors file
//    (model.* and optim.*); a fresh model and optimizer load it and train on.
// 4. Both runs' losses are compared bit for bit.
#include <ein/ein.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int64_t kD = 32, kBatch = 16;

struct Linear : ein::nn::Module {
  ein::Tensor weight;
  Linear(int64_t in, int64_t out, uint64_t seed)
      : weight(register_parameter("weight", ein::init::fan_in_normal({in, out}, {.seed = seed}))) {}
  ein::Tensor operator()(const ein::Tensor& x) const { return ein::einsum("b i, i o -> b o", x, weight); }
};

struct Cruncher : ein::nn::Module {
  Linear layer0{kD, kD, 1}, layer1{kD, kD, 2}, final{kD, 1, 3};
  Cruncher() {
    register_module("layers.0", layer0);
    register_module("layers.1", layer1);
    register_module("final", final);
  }
  ein::Tensor operator()(const ein::Tensor& x) const { return final(layer1(layer0(x))); }
};

/// Step k's batch: x random, y a fixed linear function of x (the lecture's toy target).
std::vector<ein::Tensor> batch(int64_t k) {
  const ein::Tensor x = ein::randn({kBatch, kD}, ein::DType::f32, ein::cpu(), 100 + static_cast<uint64_t>(k));
  const ein::Tensor w = ein::map("i[d o] -> i / 32", {ein::arange(kD, ein::DType::f32).reshape({kD, 1})});
  return {x, ein::einsum("b d, d o -> b o", x, w)};
}

/// Trains `model` with `opt` from step `from` to `to`, appending each loss.
void train(Cruncher& model, ein::optim::AdamW& opt, int64_t from, int64_t to, std::vector<double>& losses) {
  for (int64_t k = from; k < to; ++k) {
    const std::vector<ein::Tensor> b = batch(k);
    const ein::Tensor loss = ein::nn::mse_loss(model(b[0]), b[1]);
    losses.push_back(loss.item());
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

ein::StateDict prefixed(const ein::StateDict& state, const std::string& prefix) {
  ein::StateDict out;
  for (const auto& [name, t] : state) out.emplace_back(prefix + name, t);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 20;
  const int64_t stop_at = argc > 2 ? std::atoll(argv[2]) : steps / 2;
  try {
    // The run that never stops.
    std::vector<double> straight;
    {
      Cruncher model;
      ein::optim::AdamW opt(model.parameters(), {.lr = 3e-3});
      train(model, opt, 0, steps, straight);
    }
    // The run that stops at `stop_at`, saves, and is resumed by a fresh process's objects.
    const std::string path =
        (std::filesystem::temp_directory_path() / "ein_example_06.safetensors").string();
    std::vector<double> resumed;
    {
      Cruncher model;
      ein::optim::AdamW opt(model.parameters(), {.lr = 3e-3});
      train(model, opt, 0, stop_at, resumed);
      ein::StateDict all = prefixed(model.state_dict(), "model.");
      for (auto& entry : prefixed(opt.state_dict(), "optim.")) all.push_back(std::move(entry));
      ein::save_safetensors(path, all);
    }
    {
      Cruncher model;  // fresh weights (the same seeds here, but loading overwrites them)
      ein::optim::AdamW opt(model.parameters(), {.lr = 3e-3});
      const ein::Checkpoint c = ein::load_safetensors(path);
      ein::StateDict model_state, optim_state;
      for (const auto& [name, t] : c.tensors)
        (name.starts_with("model.") ? model_state : optim_state)
            .emplace_back(name.substr(name.find('.') + 1), t);
      model.load_state_dict(model_state);
      opt.load_state_dict(optim_state);
      train(model, opt, stop_at, steps, resumed);
    }
    std::filesystem::remove(path);
    std::printf("parameters:");
    {
      Cruncher m;
      for (const auto& [name, t] : m.named_parameters()) std::printf(" %s%s", name.c_str(), ein::shape_str(t.shape()).c_str());
    }
    std::printf("\n");
    for (size_t k = 0; k < straight.size(); ++k)
      std::printf("step %2zu  straight %.9g  resumed %.9g%s\n", k + 1, straight[k], resumed[k],
                  straight[k] == resumed[k] ? "" : "  <- differs");
    if (straight != resumed) {
      std::fprintf(stderr, "the resumed run's losses differ from the uninterrupted run's\n");
      return 1;
    }
    if (!(straight.back() < straight.front())) {
      std::fprintf(stderr, "the loss did not fall\n");
      return 1;
    }
    std::printf("resumed at step %lld: all %zu losses bitwise equal\n", static_cast<long long>(stop_at), straight.size());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
}
