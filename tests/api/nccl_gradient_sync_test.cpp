// The NCCL backend (runtime/dist/nccl_communicator.h) under `mpirun -np 2`, on the fake CUDA
// device (tests/support/fake_cuda.h) with the fake NCCL (tests/support/fake_nccl.cpp, loaded
// through EIN_NCCL_LIBRARY): GradientSync over NCCL with device buffers gives bitwise the
// gradients and parameters that GradientSync over MPI with host buffers gives, at ZeRO 0, 1
// and 2, with several buckets; it sends the same bytes; and the collectives keep their
// contracts (self parts, in-place gathers, broadcast).
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <sstream>

#include <ein/autograd.h>
#include <ein/nn.h>
#include <ein/ops.h>
#include <ein/optim.h>
#include <ein/tensor.h>
#include <ein/trainer.h>

#include "api/train_dist.h"
#include "runtime/dist/communicator.h"
#include "runtime/dist/gradient_sync.h"
#include "runtime/dist/nccl_communicator.h"
#include "support/fake_cuda.h"

namespace ein {
namespace {

std::vector<float> floats(const Tensor& t) { return t.to(cpu()).to_vector<float>(); }

class NcclOnFakeDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!testing::FakeCudaDevice::available(&why)) GTEST_SKIP() << why;
    ASSERT_TRUE(dist::nccl_available(&why)) << why;
    ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  }
  static dist::Communicator& world() { return dist::world(); }
};

// Parameters of rank-dependent gradients whose sums round (so the order of the additions
// shows), in buckets of a few parameters each.
TEST_F(NcclOnFakeDevice, GradientSyncMatchesTheMpiHostPathBitwise) {
  testing::FakeCudaDevice fake;
  const std::unique_ptr<dist::Communicator> nccl = dist::make_nccl_communicator(world(), 0);
  EXPECT_EQ(nccl->backend(), "nccl");
  EXPECT_TRUE(nccl->device_memory());
  const std::vector<Shape> shapes = {{5, 3}, {7}, {2, 2, 2}, {1}, {9, 4}};
  const int rank = world().rank();
  for (int zero : {0, 1, 2}) {
    std::vector<Tensor> host, device;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor value = randn(shapes[i], DType::f32, cpu(), 10 + i);
      host.push_back(value.clone().requires_grad_());
      device.push_back(value.to(cuda()).requires_grad_());
      // Parameter 1 has no gradient on rank 1 (it counts as zeros), as after an unused branch.
      if (i == 1 && rank == 1) continue;
      const Tensor g = map("x[...], s[] -> x * s", {randn(shapes[i], DType::f32, cpu(), 100 * rank + i),
                                                      full({}, 1.0 + 1e-3 * rank)});
      host.back().autograd()->grad = g.clone();
      device.back().autograd()->grad = g.to(cuda());
    }
    const int64_t bucket = 48;  // bytes: most buckets hold one or two parameters
    dist::GradientSync on_host(world(), host, {zero, bucket, {}});
    dist::GradientSync on_device(*nccl, device, {zero, bucket, detail::rank_order_average()});
    const int64_t host_before = world().stats.sent_bytes, device_before = nccl->stats.sent_bytes;
    on_host.reduce_gradients();
    on_device.reduce_gradients();
    for (size_t i = 0; i < shapes.size(); ++i) {
      ASSERT_EQ(host[i].grad().defined(), device[i].grad().defined()) << "zero " << zero << " param " << i;
      if (!host[i].grad().defined()) continue;
      EXPECT_EQ(device[i].grad().device(), cuda());
      EXPECT_EQ(floats(host[i].grad()), floats(device[i].grad())) << "zero " << zero << " param " << i;
    }
    // The owners change their parameters; the gather hands the new values to every rank.
    {
      NoGrad no_grad;
      for (size_t i = 0; i < shapes.size(); ++i)
        if (on_host.owns(i)) {
          host[i].detach().copy_(map("p[...] -> p * 3 + 1", {host[i].detach()}));
          device[i].detach().copy_(map("p[...] -> p * 3 + 1", {device[i].detach()}));
        }
    }
    on_host.gather_parameters();
    on_device.gather_parameters();
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_EQ(floats(host[i].detach()), floats(device[i].detach())) << "zero " << zero << " param " << i;
    EXPECT_EQ(nccl->stats.sent_bytes - device_before, world().stats.sent_bytes - host_before);
    EXPECT_EQ(nccl->stats.sent_bytes - device_before, on_device.bytes_per_step());
  }
}

// The collectives themselves: an exchange with a part to oneself, an in-place gather and a
// broadcast, on device buffers.
TEST_F(NcclOnFakeDevice, CollectivesMoveTheRightBytes) {
  testing::FakeCudaDevice fake;
  const std::unique_ptr<dist::Communicator> nccl = dist::make_nccl_communicator(world(), 0);
  const int r = world().rank();
  // Rank r sends 1 + j floats to rank j (values 100 r + j), and receives 1 + r from each rank.
  const Tensor send = from_data<float>({100.0f * r, 100.0f * r + 1, 100.0f * r + 1}, {3}).to(cuda());
  const Tensor recv = full({2 * (1 + r)}, -1.0, DType::f32, cuda());
  nccl->all_to_all_v(send.device_ptr(), {4, 8}, {0, 4}, recv.device_ptr(), {4 * (1 + r), 4 * (1 + r)},
                     {0, 4 * (1 + r)}, "test exchange");
  if (r == 0) EXPECT_EQ(floats(recv), (std::vector<float>{0, 100}));
  else EXPECT_EQ(floats(recv), (std::vector<float>{1, 1, 101, 101}));
  // In place: each rank's part already sits at its offset.
  const Tensor all = from_data<float>({r == 0 ? 7.0f : 0.0f, r == 1 ? 8.0f : 0.0f, r == 1 ? 9.0f : 0.0f}, {3}).to(cuda());
  const auto base = static_cast<char*>(all.device_ptr());
  nccl->all_gather_v(base + (r == 0 ? 0 : 4), base, {4, 8}, {0, 4}, "test gather");
  EXPECT_EQ(floats(all), (std::vector<float>{7, 8, 9}));
  const Tensor b = full({2}, r == 1 ? 5.0 : 0.0, DType::f32, cuda());
  nccl->broadcast(b.device_ptr(), 8, 1, "test broadcast");
  EXPECT_EQ(floats(b), (std::vector<float>{5, 5}));
}

/// y = x · w_true, batch k the k-th window of 8 rows, SGD: a model a Trainer runs on any device.
class Regression : public Trainable {
 public:
  explicit Regression(Device device) {
    x_ = randn({64, 6}, DType::f32, cpu(), 7).to(device);
    y_ = einsum("n d, d o -> n o", x_, arange(6, DType::f32).to(device).view({6, 1}));
    w_ = zeros({6, 1}, DType::f32, device).requires_grad_();
  }
  std::vector<NamedTensor> parameters() override { return {{"w", w_}}; }
  std::vector<Tensor> batch(int64_t k) override {
    const int64_t i = k % 8;
    return {x_.slice(0, i * 8, (i + 1) * 8), y_.slice(0, i * 8, (i + 1) * 8)};
  }
  Tensor loss(const std::vector<Tensor>& b, int64_t) override {
    return nn::mse_loss(einsum("b d, d o -> b o", b[0], w_), b[1]);
  }
  void optimizer_step(int64_t, double lr) override { optim::SGD({w_}, {.lr = lr}).step(); }
  std::vector<float> weights() const { return floats(w_.detach()); }

 private:
  Tensor x_, y_, w_;
};

// ein::Trainer under mpirun with the model on the (fake) GPU averages through NCCL and trains
// what the same run on the CPUs trains through MPI.
TEST_F(NcclOnFakeDevice, TrainerAveragesCudaGradientsThroughNccl) {
  for (const int zero : {0, 3}) {
  SCOPED_TRACE(fmt::format("zero {}", zero));
  const auto run = [zero](Device device, std::string& log) {
    Regression model(device);
    std::ostringstream out;
    TrainOptions o;
    o.out = &out;
    o.quiet = true;
    o.steps = 20;
    o.lr = 0.05;
    o.device = device;
    o.zero = zero;  // 3: the parameters fetched through NCCL's broadcast on the device
    const TrainResult r = Trainer(model, o).fit();
    log = out.str();
    EXPECT_EQ(r.world_size, 2);
    return std::make_pair(model.weights(), r.losses);
  };
  std::string cpu_log, gpu_log;
  const auto [cpu_w, cpu_losses] = run(cpu(), cpu_log);
  std::pair<std::vector<float>, std::vector<double>> gpu;
  {
    testing::FakeCudaDevice fake;
    gpu = run(cuda(), gpu_log);
  }
  if (world().rank() == 0) {
    EXPECT_NE(gpu_log.find("gradients are averaged on cuda:0 by NCCL"), std::string::npos) << gpu_log;
  }
  ASSERT_EQ(gpu.second.size(), cpu_losses.size());
  EXPECT_LT(cpu_losses.back(), 0.1 * cpu_losses.front());
  for (size_t i = 0; i < cpu_losses.size(); ++i)
    EXPECT_NEAR(gpu.second[i], cpu_losses[i], 1e-5 * cpu_losses[i]) << "step " << i;
  for (size_t i = 0; i < cpu_w.size(); ++i)
    EXPECT_NEAR(gpu.first[i], cpu_w[i], 1e-5) << "w[" << i << "]";
  }
}

}  // namespace
}  // namespace ein
