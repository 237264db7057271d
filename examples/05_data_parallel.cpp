// Example 5: a C++ model trained data parallel with ein::Trainer (docs/distributed.md).
//
// Run: scripts/build.sh && mpirun -np 2 build/bin/example_05_data_parallel [zero] [steps]
//      (as one process, without mpirun, it trains the same model alone)
//
// 1. A Trainable: a two-layer MLP regressing a fixed random teacher, its batches a pure
//    function of the micro-step (under mpirun, rank r of N trains on micro-steps k·N + r).
// 2. The Trainer finds the other processes itself (MPI's environment), averages gradients
//    across them in a fixed order and, with TrainOptions::zero = 1 or 2, keeps AdamW's state
//    only for the parameters this rank owns (AdamW allocates state at a parameter's first
//    update, and a rank updates only what it owns); with zero = 3 a rank also keeps only the
//    parameters it owns, and each op fetches the others from their owner when it runs.
// 3. Every rank prints a checksum of its weights: they are equal on every rank, and the same
//    for zero = 0, 1, 2 and 3 (tests/cli/test_ein_train_distributed.py checks both).
#include <ein/diagnostic.h>
#include <ein/nn.h>
#include <ein/ops.h>
#include <ein/optim.h>
#include <ein/trainer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

namespace {

constexpr int64_t kIn = 32, kHidden = 64, kBatch = 64;

class Mlp final : public ein::Trainable {
 public:
  Mlp()
      : w1_(ein::randn({kIn, kHidden}, ein::DType::f32, ein::cpu(), 1)),
        w2_(ein::randn({kHidden, 1}, ein::DType::f32, ein::cpu(), 2)),
        teacher_(ein::randn({kIn, 1}, ein::DType::f32, ein::cpu(), 3)) {
    // Small initial weights (scaled copies), then leaves that require grad.
    w1_ = ein::map("w[i h] -> w * 0.1", {w1_}).requires_grad_();
    w2_ = ein::map("w[h o] -> w * 0.1", {w2_}).requires_grad_();
    teacher_ = ein::map("t[i o] -> t * 0.2", {teacher_});  // targets of about unit variance
    optimizer_ = std::make_unique<ein::optim::AdamW>(std::vector<ein::Tensor>{w1_, w2_},
                                                     ein::optim::AdamWOptions{.lr = 2e-2});
  }

  std::vector<ein::NamedTensor> parameters() override { return {{"w1", w1_}, {"w2", w2_}}; }

  /// Micro-step k's inputs and the teacher's targets: the same k gives the same batch.
  std::vector<ein::Tensor> batch(int64_t k) override {
    const ein::Tensor x = ein::randn({kBatch, kIn}, ein::DType::f32, ein::cpu(), 1000 + static_cast<uint64_t>(k));
    return {x, ein::einsum("b i, i o -> b o", x, teacher_)};
  }

  ein::Tensor loss(const std::vector<ein::Tensor>& b, int64_t) override {
    const ein::Tensor h = ein::map("a[b h] -> tanh(a)", {ein::einsum("b i, i h -> b h", b[0], w1_)});
    return ein::nn::mse_loss(ein::einsum("b h, h o -> b o", h, w2_), b[1]);
  }

  void optimizer_step(int64_t, double lr) override {
    optimizer_->options().lr = lr;
    optimizer_->step();  // the parameters with a gradient: under ZeRO, this rank's own
  }

  /// FNV-1a of the weights' bytes.
  uint64_t checksum() const {
    uint64_t h = 1469598103934665603ull;
    for (const ein::Tensor& w : {w1_, w2_})
      for (float v : w.detach().to_vector<float>()) {
        uint32_t bits = 0;
        std::memcpy(&bits, &v, sizeof bits);
        for (int i = 0; i < 4; ++i)
          h = (h ^ ((bits >> (8 * i)) & 0xFF)) * 1099511628211ull;
      }
    return h;
  }

 private:
  ein::Tensor w1_, w2_, teacher_;
  std::unique_ptr<ein::optim::AdamW> optimizer_;
};

}  // namespace

int main(int argc, char** argv) {
  const int zero = argc > 1 ? std::atoi(argv[1]) : 0;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 100;
  try {
    Mlp model;
    ein::TrainOptions options;
    options.steps = steps;
    options.zero = zero;
    options.clip = 1.0;  // the global norm, from every rank's shard
    options.quiet = true;
    const ein::TrainResult r = ein::Trainer(model, options).fit();
    // Every rank: its weights' checksum (equal on all ranks). The summary: the run's.
    std::printf("weights %016llx\n", static_cast<unsigned long long>(model.checksum()));
    std::printf("ranks %d zero %d: loss %.6f -> %.6f, %lld bytes sent per step\n", r.world_size,
                r.zero, r.losses.front(), r.final_loss,
                static_cast<long long>(r.comm_bytes_per_step));
    if (!(r.final_loss < 0.5 * r.losses.front())) {
      std::fprintf(stderr, "the loss did not fall by half: %g -> %g\n", r.losses.front(), r.final_loss);
      return 1;
    }
    return 0;
  } catch (const ein::UserError& e) {
    std::cerr << e.what();
    return 1;
  }
}
