// Graph execution on a CUDA device, end to end: tensors on cuda:0, kernels emitted, prepared and
// launched by exec/cuda_executor.h, contractions through cuBLASLt's plan, the runtime's
// strided copies, gathers and scatter-adds, the autograd tape, and training a script's model.
// Every result is compared with the same computation on the CPU (itself tested against the
// float64 reference). Each test runs twice:
//   FakeCuda/...  on the fake device of tests/support/fake_cuda.h (host memory, the emitted
//                 CUDA C++ compiled for the host under the emulation): runs in CI;
//   Gpu/...       on the machine's GPU; skipped, with the driver's reason, where there is none.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <ein/ops.h>
#include <ein/tensor_math.h>
#include <fmt/format.h>

#include <ein/autograd.h>
#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/storage.h>
#include <ein/trainer.h>
#include "api/train_dist.h"
#include "exec/amx_tiles.h"
#include "exec/attention.h"
#include "exec/attention_cuda.h"
#include "exec/cross_entropy.h"
#include "exec/cuda_executor.h"
#include "exec/indexing.h"
#include "runtime/blas/contract.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/device_checks.h"
#include "runtime/dist/gradient_sync.h"
#include "runtime/dist/nccl_communicator.h"
#include "script/script.h"
#include "support/cuda_device_test.h"
#include "support/fake_cuda.h"
#include "support/temp_path.h"

namespace ein {
namespace {

/// Tokens in [0, 256) for a [2, 9] window (x = the first 8, y = the last 8).
Tensor randint_tokens(int64_t seed) {
  std::vector<int64_t> t;
  for (double u : rand({2, 9}, DType::f64, cpu(), static_cast<uint64_t>(seed)).to_vector<double>())
    t.push_back(static_cast<int64_t>(u * 256) % 256);
  return from_data(t, {2, 9});
}

class DeviceExecution : public testing::CudaDeviceTest {
 protected:

  /// The CPU tensor `x` on cuda:0, laid out like `x` (its strides kept: a permuted or sliced
  /// view stays one on the device).
  static Tensor on_gpu(const Tensor& x) {
    // The smallest storage holding x's elements, copied over; then the same view of it.
    int64_t extent = 1;
    for (int64_t d = 0; d < x.dim(); ++d)
      extent += (x.size(d) - 1) * x.stride(d);
    if (x.numel() == 0) return x.to(cuda());
    const Tensor flat = x.as_strided({extent}, {1}, x.offset());
    return flat.to(cuda()).as_strided(x.shape(), x.strides(), 0);
  }

  /// Every element within `tol` (relative to 1 + |want|); except, with `flip` > 0, up to 1%
  /// of them within `flip` absolute (AdamW's steps of opposite sign on noise-level gradients).
  static void expect_close(const Tensor& got, const Tensor& want, double tol,
                           const std::string& what, double flip = 0) {
    ASSERT_EQ(got.device(), cuda()) << what << ": the result left the device";
    ASSERT_EQ(got.shape(), want.shape()) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
    int bad = 0;
    size_t flips = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double d = std::abs(g[i] - w[i]);
      if (d <= tol * (1 + std::abs(w[i]))) continue;
      if (d <= flip && ++flips <= g.size() / 100) continue;
      if (bad++ < 5)
        ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << w[i];
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements differ";
  }
};

TEST_P(DeviceExecution, StridedCopiesConvertAndStayOnTheDevice) {
  const Tensor x = randn({5, 7, 3}, DType::f32, cpu(), 1);
  const Tensor gx = on_gpu(x);
  ASSERT_EQ(gx.device(), cuda());
  // A transposed view made contiguous: the runtime's copy_ runs the device copy kernel.
  expect_close(gx.permute({2, 0, 1}).contiguous(), x.permute({2, 0, 1}).contiguous(), 0,
               "contiguous() of a permuted view");
  // Converting copies, and a broadcast source.
  expect_close(gx.to(DType::bf16), x.to(DType::bf16), 0, "f32 -> bf16");
  expect_close(gx.to(DType::f64).slice(1, 1, 6, 2).contiguous(),
               x.to(DType::f64).slice(1, 1, 6, 2).contiguous(), 0, "a strided slice in f64");
  const Tensor dst = empty({4, 3}, DType::f32, cuda()).permute({1, 0});
  dst.copy_(on_gpu(from_data<float>({1, 2, 3, 4}, {4})));
  expect_close(dst, from_data<float>({1, 2, 3, 4}, {4}).expand({3, 4}).contiguous(), 0,
               "a broadcast row copied into a transposed destination");
  const Tensor filled = empty({2, 3}, DType::f16, cuda());
  filled.fill_(2.5);
  expect_close(filled, full({2, 3}, 2.5, DType::f16), 0, "fill_");
}

// Pinned host tensors (torch's pin_memory) and non-blocking copies: the values arrive, the
// device-to-host result is pinned, pinned memory is counted on the cpu and freed with its
// tensor; pageable memory and non_blocking = false copy synchronously, as torch does.
TEST_P(DeviceExecution, PinnedTensorsCopyWithoutBlocking) {
  const Tensor x = randn({33, 5}, DType::f32, cpu(), 3);
  EXPECT_FALSE(x.is_pinned());
  const int64_t cpu_before = memory_allocated(cpu());
  {
    const Tensor p = x.permute({1, 0}).pin_memory();  // a view: pinned as a contiguous copy
    ASSERT_TRUE(p.is_pinned());
    EXPECT_EQ(p.device(), cpu());
    EXPECT_TRUE(p.pin_memory().same_storage(p));  // already pinned: itself
    EXPECT_EQ(memory_allocated(cpu()), cpu_before + p.nbytes());
    if (fake_) {
      EXPECT_EQ(fake_->pinned_bytes(), p.nbytes());
    }
    const int64_t async_before = fake_ ? fake_->async_copies() : 0;
    const Tensor on_device = p.to(cuda(), /*non_blocking=*/true);
    const Tensor back = on_device.to(cpu(), /*non_blocking=*/true);
    EXPECT_TRUE(back.is_pinned());
    if (fake_) {
      EXPECT_EQ(fake_->async_copies(), async_before + 2);
      // The fake lands a copy to the host as late as a GPU may: when the host waits.
      for (const float v : back.to_vector<float>())
        ASSERT_TRUE(std::isnan(v)) << "read before synchronize(), the copy has not landed";
    }
    synchronize();
    EXPECT_EQ(back.to_vector<float>(), x.permute({1, 0}).contiguous().to_vector<float>());
    // Pageable memory, or non_blocking = false: the synchronous copies.
    const Tensor sync = x.to(cuda(), true).to(cpu(), false);
    EXPECT_FALSE(sync.is_pinned());
    EXPECT_EQ(sync.to_vector<float>(), x.to_vector<float>());
    if (fake_) {
      EXPECT_EQ(fake_->async_copies(), async_before + 2);
    }
    EXPECT_THROW((void)on_device.pin_memory(), RuntimeError);  // only cpu tensors pin
  }
  EXPECT_EQ(memory_allocated(cpu()), cpu_before);
  if (fake_) {
    EXPECT_EQ(fake_->pinned_bytes(), 0);
  }
}

TEST_P(DeviceExecution, PatternsReductionsAndMapsMatchTheCpu) {
  const Tensor x = randn({2, 6, 8}, DType::f32, cpu(), 2).permute({0, 2, 1});  // b (h d) s
  const Tensor gx = on_gpu(x);
  expect_close(rearrange(gx, "b (h d) s -> b h s d", {{"h", 2}}),
               rearrange(x, "b (h d) s -> b h s d", {{"h", 2}}), 0, "rearrange");
  for (const std::string r : {"sum", "mean", "max", "logsumexp", "var"}) {
    const std::optional<int64_t> ddof = r == "var" ? std::optional<int64_t>(1) : std::nullopt;
    expect_close(reduce(gx, "b c s -> b s", r, {}, ddof), reduce(x, "b c s -> b s", r, {}, ddof),
                 1e-5, r);
  }
  const Tensor y = randn({8}, DType::f32, cpu(), 3);
  expect_close(map("x[b c s], y[c] -> exp(x) * y + tanh(x)", {gx, on_gpu(y)}),
               map("x[b c s], y[c] -> exp(x) * y + tanh(x)", {x, y}), 1e-5, "map with broadcast");
  const Tensor z = empty({0, 8}, DType::f32, cuda());
  EXPECT_EQ(reduce(z, "a b -> b", "sum").to_vector<float>(), std::vector<float>(8, 0.0f))
      << "a sum over zero rows";
}

TEST_P(DeviceExecution, ContractionsGoThroughTheGemmPlan) {
  // Batched attention scores from non-contiguous operands, and one with a lone axis (summed
  // by a GEMM against ones on the device).
  const Tensor q = randn({2, 3, 5, 4}, DType::f32, cpu(), 4);
  const Tensor k = randn({2, 5, 3, 4}, DType::f32, cpu(), 5).permute({0, 2, 1, 3});
  expect_close(einsum("b h q d, b h k d -> b h q k", {on_gpu(q), on_gpu(k)}),
               einsum("b h q d, b h k d -> b h q k", {q, k}), 1e-5, "scores");
  const Tensor a = randn({6, 7, 3}, DType::f32, cpu(), 6), b = randn({3, 4}, DType::f32, cpu(), 7);
  expect_close(contract(on_gpu(a), {0, 1, 2}, on_gpu(b), {2, 3}, {0, 3}),
               contract(a, {0, 1, 2}, b, {2, 3}, {0, 3}), 1e-5, "a lone axis summed out");
  // bf16 operands are multiplied as they are (f32 accumulation), rounded once.
  const Tensor x = randn({16, 32}, DType::f32, cpu(), 8).to(DType::bf16);
  const Tensor w = randn({32, 8}, DType::f32, cpu(), 9).to(DType::bf16);
  expect_close(einsum("s d, d f -> s f", {on_gpu(x), on_gpu(w)}),
               einsum("s d, d f -> s f", {x, w}), 1e-2, "bf16");
  // Two products of 520 · 400 · 330 multiply-adds, one operand transposed: on the fake device,
  // beyond its naive loop (the host's f64 GEMM on the plan's operands, fake_cuda.cpp).
  const Tensor big_q = randn({2, 520, 330}, DType::f32, cpu(), 10);
  const Tensor big_k = randn({2, 330, 400}, DType::f32, cpu(), 11).permute({0, 2, 1});
  expect_close(einsum("b q d, b k d -> b q k", {on_gpu(big_q), on_gpu(big_k)}),
               einsum("b q d, b k d -> b q k", {big_q, big_k}), 1e-4, "large");
}

TEST_P(DeviceExecution, GathersAndScatterAddsMatchTheCpu) {
  const Tensor table = randn({10, 6}, DType::f32, cpu(), 10);
  const Tensor idx = from_data<int64_t>({3, -1, 3, 0, 9, 3}, {2, 3});
  expect_close(gather_rows(on_gpu(table), on_gpu(idx)), gather_rows(table, idx), 0, "gather");
  // A table starting one row in (24 bytes): rows move in words its address allows.
  const Tensor idx9 = from_data<int64_t>({8, 0, 4}, {3});
  expect_close(gather_rows(on_gpu(table).slice(0, 1, 10), on_gpu(idx9)),
               gather_rows(table.slice(0, 1, 10), idx9), 0, "gather from a sliced table");
  const Tensor values = randn({2, 3, 6}, DType::f32, cpu(), 11);
  expect_close(scatter_add_rows(on_gpu(values), on_gpu(idx), 10),
               scatter_add_rows(values, idx, 10), 1e-6, "scatter_add with repeated rows");
  // Indices the kernels read where they are: a transposed view (made contiguous on the
  // device) and int32 ones.
  const Tensor idx_t = from_data<int64_t>({3, 1, 3, 0, 9, 3}, {3, 2}).permute({1, 0});
  expect_close(scatter_add_rows(on_gpu(values), on_gpu(idx_t), 10),
               scatter_add_rows(values, idx_t, 10), 1e-6, "scatter_add, transposed indices");
  expect_close(gather_rows(on_gpu(table), on_gpu(idx_t)), gather_rows(table, idx_t), 0,
               "gather, transposed indices");
  const Tensor idx32 = idx_t.to(DType::i32);
  expect_close(gather_rows(on_gpu(table), on_gpu(idx32)), gather_rows(table, idx32), 0,
               "gather, int32 indices");
  // Zero-width rows: nothing to launch, the host checks the indices.
  EXPECT_THROW(gather_rows(on_gpu(zeros({10, 0})), on_gpu(from_data<int64_t>({10}, {1}))),
               RuntimeError)
      << "an index past a table of empty rows";
}

// Indices already on the device are checked there: a copy to the host to check them first
// would wait for the stream. An index out of range is reported at the host's next wait for
// the device (a copy of any tensor to the host, ein::synchronize()) with the message the CPU
// gives at once: the first bad flat position, of the first op that found one, once.
TEST_P(DeviceExecution, IndicesOnTheDeviceAreCheckedThereAndReportedAtTheNextWait) {
  const auto error_of = [](const std::function<void()>& run) -> std::string {
    try {
      run();
    } catch (const RuntimeError& e) {
      return e.what();
    }
    return "no error";
  };
  const Tensor table = randn({10, 6}, DType::f32, cpu(), 10);
  const Tensor values = randn({5, 6}, DType::f32, cpu(), 11);
  const Tensor bad = from_data<int64_t>({0, 3, -11, 9, 10}, {5});  // positions 2 and 4
  const std::string gather_error = error_of([&] { gather_rows(table, bad); });
  ASSERT_NE(gather_error.find("gather: index -11 at flat position 2 is out of range for 10 rows"),
            std::string::npos)
      << gather_error;

  Tensor out;
  EXPECT_EQ(error_of([&] { out = gather_rows(on_gpu(table), on_gpu(bad)); }), "no error");
  EXPECT_EQ(error_of([&] { (void)out.to(cpu()); }), gather_error);
  EXPECT_EQ(error_of([&] { (void)out.to(cpu()); }), "no error") << "reported once";

  // int32 indices, a scatter-add, a table of no rows; reported by ein::synchronize() too.
  const Tensor bad32 = bad.to(DType::i32);
  Tensor sum = scatter_add_rows(on_gpu(values), on_gpu(bad32), 10);
  EXPECT_EQ(error_of([] { synchronize(); }),
            error_of([&] { scatter_add_rows(values, bad32, 10); }));
  const Tensor none = zeros({0, 6});
  out = gather_rows(on_gpu(none), on_gpu(from_data<int64_t>({0}, {1})));
  EXPECT_EQ(error_of([&] { (void)out.to(cpu()); }),
            error_of([&] { gather_rows(none, from_data<int64_t>({0}, {1})); }));

  // Two ops with bad indices: the first one's error; then good indices give the CPU's rows.
  out = gather_rows(on_gpu(table), on_gpu(bad));
  sum = scatter_add_rows(on_gpu(values), on_gpu(from_data<int64_t>({1, 2, 3, 4, 99}, {5})), 10);
  EXPECT_EQ(error_of([&] { (void)sum.to(cpu()); }), gather_error);
  const Tensor good = from_data<int64_t>({0, 3, -10, 9, 1}, {5});
  expect_close(gather_rows(on_gpu(table), on_gpu(good)), gather_rows(table, good), 0, "gather");
  expect_close(scatter_add_rows(on_gpu(values), on_gpu(good), 10),
               scatter_add_rows(values, good, 10), 1e-6, "scatter_add");
}

// A script's x[indices] with an index out of range: the error points at the expression on the
// device as on the CPU, though there it comes when the host next waits (reading the result).
TEST_P(DeviceExecution, AScriptsBadIndexIsReportedAtItsExpression) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / fmt::format("ein_bad_index_{}.ein", ::getpid());
  std::ofstream(path) << "fn look(w: f32[4 3], i: i64[2]) = w[i] * 2\n";
  const auto error_on = [&](Device device) -> std::string {
    script::LoadOptions o;
    o.device = device;
    const auto p = script::Program::load(path.string(), o);
    try {
      const Tensor w = randn({4, 3}, DType::f32, cpu(), 3).to(device);
      const Tensor out = p->call("look", {w, from_data<int64_t>({1, 7}, {2}).to(device)}).at(0);
      (void)out.to(cpu());
    } catch (const UserError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string on_cpu = error_on(cpu());
  EXPECT_NE(on_cpu.find(":1:35: error: index 7 at flat position 1 is out of range for 4 rows"),
            std::string::npos)
      << on_cpu;
  EXPECT_EQ(error_on(cuda()), on_cpu);
  std::filesystem::remove(path);
}

// More checks than the device keeps words for (4 here): a launch that needs a word reads the
// oldest first, so the error of an earlier launch may come from a later one; none is lost.
TEST_P(DeviceExecution, DeviceChecksOutliveTheirWords) {
  if (!fake_) GTEST_SKIP() << "sets the words of a fresh device (the fake's)";
  const int64_t words = detail::set_device_check_words(4);
  const Tensor table = randn({10, 6}, DType::f32, cpu(), 10).to(cuda());
  const Tensor good = from_data<int64_t>({0, 3, -10, 9, 1}, {5}).to(cuda());
  const Tensor bad = from_data<int64_t>({0, 3, -11, 9, 10}, {5}).to(cuda());
  for (const int bad_launch : {0, 3, 4, 8}) {
    SCOPED_TRACE(fmt::format("launch {} of 9 bad", bad_launch));
    std::vector<std::string> errors;
    for (int i = 0; i <= 9; ++i) {
      try {
        if (i < 9)
          (void)gather_rows(table, i == bad_launch ? bad : good);
        else
          synchronize();
      } catch (const RuntimeError& e) {
        errors.push_back(fmt::format("{} at {}", e.what(), i));
      }
      EXPECT_LE(detail::pending_device_checks(table.device()), 4);
    }
    // The words of launches 0-3 are read at launch 4, those of 4-7 at 8, the rest at the end.
    const int reported = bad_launch < 8 ? bad_launch / 4 * 4 + 4 : 9;
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].find(fmt::format("index -11 at flat position 2 is out of range for 10 "
                                         "rows (valid: -10..9) at {}",
                                         reported)),
              std::string::npos)
        << errors[0];
  }
  detail::set_device_check_words(words);
}

TEST_P(DeviceExecution, GradientsThroughTheTapeMatchTheCpu) {
  auto loss_and_grad = [](Device d) {
    Tensor w = randn({8, 4}, DType::f32, cpu(), 12).to(d);
    w.requires_grad_();
    const Tensor x = randn({3, 8}, DType::f32, cpu(), 13).to(d);
    const Tensor h = map("h[s f] -> tanh(h)", {einsum("s d, d f -> s f", {x, w})});
    const Tensor loss = reduce(h, "s f ->", "mean");
    loss.backward();
    return std::pair{loss.detach(), w.grad()};
  };
  const auto [l_cpu, g_cpu] = loss_and_grad(cpu());
  const auto [l_gpu, g_gpu] = loss_and_grad(cuda());
  expect_close(l_gpu, l_cpu, 1e-5, "loss");
  expect_close(g_gpu, g_cpu, 1e-5, "grad");
}

/// Three AdamW steps of tests/models/gpt_reference.ein (T 8, B 2, one block of `d` features
/// in two heads) on `device`, in `compute` (bf16: mixed precision): the losses and parameters.
std::pair<std::vector<double>, std::vector<script::NamedTensor>> train_gpt(
    Device device, int64_t d, DType compute, const std::function<void()>& after_step = {}) {
  script::LoadOptions o;
  o.sets = {{"T", "8"}, {"D", std::to_string(d)}, {"B", "2"}, {"L", "1"}};
  o.seed = 7;
  o.device = device;
  auto p = script::Program::load(EIN_TESTS_DIR "/models/gpt_reference.ein", o);
  if (compute != DType::f32) p->set_compute_dtype(compute);
  p->init_optimizer_state();
  std::vector<double> losses;
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor tokens = randint_tokens(step);
    const Tensor x = tokens.slice(1, 0, 8), y = tokens.slice(1, 1, 9);
    const Tensor loss = p->loss({x.contiguous(), y.contiguous()}, step - 1);
    EXPECT_EQ(loss.device(), device);
    losses.push_back(loss.item());
    loss.backward();
    p->optimizer_step(step, 1e-2);
    std::vector<Tensor> params;
    for (const auto& n : p->parameters()) params.push_back(n.tensor);
    zero_grad(params);
    if (after_step) after_step();
  }
  return {losses, p->parameters()};
}

// A script's GPT trained three AdamW steps on the device gives the CPU run's losses and
// parameters: the forward, the backward, cross-entropy, the fused optimizer update.
TEST_P(DeviceExecution, AScriptModelTrainsAsOnTheCpu) {
  const auto [cpu_losses, cpu_params] = train_gpt(cpu(), 16, DType::f32);
  const auto [gpu_losses, gpu_params] = train_gpt(cuda(), 16, DType::f32);
  for (size_t i = 0; i < cpu_losses.size(); ++i)
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 1e-4 * std::abs(cpu_losses[i])) << "step " << i + 1;
  ASSERT_EQ(gpu_params.size(), cpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i)
    expect_close(gpu_params[i].tensor.detach(), cpu_params[i].tensor.detach(), 1e-3,
                 cpu_params[i].name);

  // A checkpoint of the device's parameters holds their values, and restores onto the device.
  const std::string path = testing::temp_path("device_params.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> named;
  for (const auto& p : gpu_params) named.emplace_back(p.name, p.tensor.detach());
  save_safetensors(path, named);
  const Checkpoint ck = load_safetensors(path);
  std::vector<std::pair<std::string, Tensor>> fresh;
  for (const auto& p : gpu_params)
    fresh.emplace_back(p.name, zeros(p.tensor.shape(), p.tensor.dtype(), cuda()));
  copy_into(ck, fresh);
  for (size_t i = 0; i < fresh.size(); ++i)
    expect_close(fresh[i].second, gpu_params[i].tensor.detach(), 0,
                 "restored " + fresh[i].first);
}

// After its first, a training step on the device moves its batch there and back its loss and
// the words of the device's checks of the embedding's token ids (one for the gather, read with
// the loss, one for the scatter-add, read at the step's end), and nothing else. Parameters,
// gradients, optimizer state and intermediates stay put, the mean loss is combined there, zeroed
// buffers are filled by a kernel, and constants and the attention's bias offsets are moved once: on
// a GPU every copy from pageable host memory, however small, waits for the stream. Also fill_ on a
// strided view, and of other dtypes: the values, and no bytes moved.
TEST_P(DeviceExecution, AStepMovesOnlyItsBatchAndItsLoss) {
  if (!fake_) GTEST_SKIP() << "counts the copies of the fake device";
  std::vector<std::pair<int64_t, int64_t>> moved;  // bytes to the device and back, after a step
  train_gpt(cuda(), 16, DType::f32,
            [&] { moved.emplace_back(fake_->bytes_to_device(), fake_->bytes_to_host()); });
  ASSERT_EQ(moved.size(), 3u);
  const int64_t tokens = 2 * 8 * 8;  // x or y: [2, 8] i64
  for (size_t s = 1; s < moved.size(); ++s) {
    SCOPED_TRACE(fmt::format("step {}", s + 1));
    EXPECT_EQ(moved[s].first - moved[s - 1].first, 2 * tokens);
    EXPECT_EQ(moved[s].second - moved[s - 1].second, 4 + 2 * 8);  // the f32 loss, two words
  }

  const Tensor x = randn({6, 10}, DType::f32, cpu(), 12).to(cuda());
  const int64_t before = fake_->bytes_to_device() + fake_->bytes_to_host();
  const Tensor view = x.slice(1, 2, 9).permute({1, 0});
  view.fill_(-2.5);
  std::vector<Tensor> filled;
  for (const DType dtype : {DType::bf16, DType::f64, DType::i64, DType::boolean}) {
    filled.push_back(zeros({3, 5}, dtype, cuda()));
    filled.back().fill_(dtype == DType::boolean ? 1 : -3);
  }
  EXPECT_EQ(fake_->bytes_to_device() + fake_->bytes_to_host(), before);
  for (const Tensor& t : filled)
    EXPECT_EQ(t.to(cpu()).to(DType::f64).to_vector<double>(),
              std::vector<double>(15, t.dtype() == DType::boolean ? 1 : -3))
        << dtype_name(t.dtype());
  const std::vector<float> got = x.to(cpu()).to_vector<float>();
  const std::vector<float> want = [&] {
    Tensor w = x.to(cpu()).clone();
    w.slice(1, 2, 9).fill_(-2.5);
    return w.to_vector<float>();
  }();
  EXPECT_EQ(got, want);
  EXPECT_EQ(zeros({2, 3}, DType::i64, cuda()).to(cpu()).to_vector<int64_t>(),
            std::vector<int64_t>(6, 0));
  EXPECT_EQ(full({4}, 3, DType::bf16, cuda()).to(cpu()).to(DType::f32).to_vector<float>(),
            std::vector<float>(4, 3.0f));
}

// `ein train --device cuda`'s loop (ein::Trainer) on a train block whose batches come from a
// text file: each batch staged in pinned memory and copied to the device without blocking,
// gradient clipping and the warmup-cosine schedule on the device. The losses are the CPU run's,
// and so are the held-out losses of the file's last 10% (eval_data), staged the same way.
TEST_P(DeviceExecution, ATrainBlockReadingTokensTrainsAsOnTheCpu) {
  const auto train = [](Device device) {
    ScriptTrainOptions load;
    load.sets = {{"D", "16"}, {"L", "1"}, {"H", "2"}, {"T", "8"}, {"B", "2"}};
    load.device = device;
    TrainScript s = load_train_script(EIN_EXAMPLES_DIR "/gpt/byte_gpt.ein", load);
    std::ostringstream out;
    s.options.out = &out;
    s.options.quiet = true;
    s.options.steps = 4;
    s.options.sample_length = 0;
    s.options.checkpoint_every = 0;
    EXPECT_EQ(s.options.device, device);
    EXPECT_TRUE(s.options.data) << "the batches are to come from the script's text file";
    s.options.data->part_end = 0.9;
    s.options.eval_data = s.options.data;
    s.options.eval_data->part_begin = 0.9;
    s.options.eval_data->part_end = 1;
    s.options.eval_data->order = "sequential";
    s.options.eval_every = 2;
    s.options.eval_batches = 3;
    const TrainResult r = Trainer(*s.model, s.options).fit();
    std::vector<double> losses = r.losses;
    for (const auto& [step, loss] : r.eval_losses) losses.push_back(loss);
    return losses;
  };
  const std::vector<double> on_cpu = train(cpu());
  const int64_t async_before = fake_ ? fake_->async_copies() : 0;
  const std::vector<double> on_gpu = train(cuda());
  ASSERT_EQ(on_cpu.size(), 4u + 2u);  // 4 steps, then the held-out losses after steps 2 and 4
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i)
    EXPECT_NEAR(on_gpu[i], on_cpu[i], 1e-4 * std::abs(on_cpu[i])) << "loss " << i;
  // x and y of each step and of each held-out batch, through the backend's non-blocking copies
  if (fake_) {
    EXPECT_GE(fake_->async_copies() - async_before, 2 * 4 + 2 * 3 * 2);
  }
}

// `ein sample --device cuda`: ein::generate() through the train block's fn logits on the
// device, from the same parameters as a CPU model (a checkpoint of the CPU's, loaded by
// load_parameters()): the logits of a window agree, and the greedy tokens are the CPU's, the
// first through the decoder's key-value cache on the device. Where
// the two differ, the CPU's logits of the two tokens must be within rounding of a tie (a real
// GPU rounds differently from the fake device); nothing after that is compared.
TEST_P(DeviceExecution, SamplingDrawsTheCpusTokens) {
  const auto load = [](Device device) {
    ScriptTrainOptions o;
    o.sets = {{"D", "16"}, {"L", "1"}, {"H", "2"}, {"T", "8"}, {"B", "2"}};
    o.device = device;
    o.seed = 3;
    return load_train_script(EIN_EXAMPLES_DIR "/gpt/byte_gpt.ein", o);
  };
  TrainScript on_cpu = load(cpu()), on_gpu = load(cuda());
  const std::string path = testing::temp_path("sample_params.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> named;
  for (const auto& p : on_cpu.model->parameters())
    named.emplace_back(p.name, p.tensor.detach());
  save_safetensors(path, named);
  load_parameters(load_safetensors(path), on_gpu.model->parameters());
  ASSERT_EQ(on_gpu.model->parameters().front().tensor.device(), cuda());

  const Tensor window = from_data<int64_t>({84, 104, 101, 32, 108, 105, 99, 101}, {1, 8});
  expect_close(on_gpu.model->logits(window.to(cuda())), on_cpu.model->logits(window).to(cuda()),
               1e-4, "logits");

  GenerateOptions g;
  g.prompt = {84, 104, 101, 32};  // "The "
  g.length = 12;
  g.context = 8;
  g.temperature = 0;
  const std::vector<int64_t> want = generate(*on_cpu.model, g).tokens;
  const Generated on_device = generate(*on_gpu.model, g);
  // The first 8 tokens (the window's worth) through the decoder's key-value cache on the device.
  EXPECT_EQ(on_device.cached_tokens, 8) << on_device.uncached;
  // A step from quantized codes runs on the CPU only: on the device the decoder says so.
  std::string why;
  DecoderOptions codes;
  codes.weights = QuantType::q8_0;
  EXPECT_EQ(on_gpu.model->decoder(8, why, codes), nullptr);
  EXPECT_NE(why.find("quantized weights runs on the CPU"), std::string::npos) << why;
  const std::vector<int64_t> got = on_device.tokens;
  ASSERT_EQ(got.size(), want.size());
  if (fake_) {
    EXPECT_EQ(got, want);  // no near-tie on this model's path through the fake
  }
  for (size_t i = g.prompt.size(); i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    Tensor x = zeros({1, 8}, DType::i64);
    const size_t n = std::min<size_t>(i, 8);
    std::copy(want.begin() + static_cast<std::ptrdiff_t>(i - n),
              want.begin() + static_cast<std::ptrdiff_t>(i), x.data<int64_t>());
    const std::vector<double> row =
        on_cpu.model->logits(x).to(DType::f64).slice(1, n - 1, n).to_vector<double>();
    EXPECT_NEAR(row[got[i]], row[want[i]], 1e-4 * (1 + std::abs(row[want[i]])))
        << "token " << i << ": the device drew " << got[i] << ", the CPU " << want[i];
    break;
  }
}

// The same GPT in bf16 with heads of 16 features: its attention runs on the tensor-core
// kernels on the device (attention_cuda_mma.h) and on the CPU's bf16 kernels here, which round
// differently (P, dS and the GEMMs' inputs in bf16 on both, not at the same points): the
// losses and parameters agree to bf16's precision, not to f32's. Except the key bias: its
// exact gradient is 0 (softmax ignores a shift of a row's logits), so what each device gives
// it is rounding noise, which AdamW turns into full-size steps of random sign. The same holds
// for the few elements of a weight whose gradient is at noise level: how many depends on how
// the CPU's kernels round (AVX-512's or the portable ones: 6 of 9,216 elements of two weights
// on a Zen 3), so up to 1% of a weight's elements may differ by AdamW's three steps of 1e-2 each
// way (6e-2).
TEST_P(DeviceExecution, ABf16ScriptModelTrainsOnTensorCoresAsOnTheCpu) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto [cpu_losses, cpu_params] = train_gpt(cpu(), 32, DType::bf16);
  const auto [gpu_losses, gpu_params] = train_gpt(cuda(), 32, DType::bf16);
  ASSERT_TRUE(cuda_attention_uses_tensor_cores(zeros({2, 2, 8, 16}, DType::bf16, cuda()),
                                               zeros({2, 2, 8, 16}, DType::bf16, cuda()),
                                               zeros({2, 2, 8, 16}, DType::bf16, cuda()),
                                               DType::f32));
  for (size_t i = 0; i < cpu_losses.size(); ++i)
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 1e-2 * std::abs(cpu_losses[i])) << "step " << i + 1;
  ASSERT_EQ(gpu_params.size(), cpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const Tensor got = gpu_params[i].tensor.detach(), want = cpu_params[i].tensor.detach();
    if (cpu_params[i].name.ends_with("attn.qkv.bias")) {  // q's and v's thirds, not k's
      const int64_t d = want.size(0) / 3;
      expect_close(got.slice(0, 0, d), want.slice(0, 0, d), 2e-2, cpu_params[i].name + " q");
      expect_close(got.slice(0, 2 * d, 3 * d), want.slice(0, 2 * d, 3 * d), 2e-2,
                   cpu_params[i].name + " v");
    } else {
      expect_close(got, want, 2e-2, cpu_params[i].name, 2 * 3 * 1e-2);
    }
  }
}

// NCCL on a real GPU, in a world of one process (what a one-GPU machine can check): the
// library loads, the communicator starts, the collectives run on device buffers, and
// GradientSync's device path leaves a gradient averaged over one rank bitwise as it was.
TEST(NcclOnAGpu, AWorldOfOneRunsTheDevicePath) {
  std::string why;
  if (!cuda_is_available()) GTEST_SKIP() << "no GPU: " << cuda_driver_info().reason;
  if (!dist::nccl_available(&why)) GTEST_SKIP() << why;
  dist::Communicator& world = dist::world();
  if (world.size() != 1) GTEST_SKIP() << "run as one process";
  const std::unique_ptr<dist::Communicator> nccl = dist::make_nccl_communicator(world, 0);
  const Tensor send = from_data<float>({1, 2, 3}, {3}).to(cuda());
  const Tensor recv = full({3}, 0.0, DType::f32, cuda());
  nccl->all_to_all_v(send.device_ptr(), {12}, {0}, recv.device_ptr(), {12}, {0}, "exchange");
  EXPECT_EQ(recv.to(cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  nccl->broadcast(recv.device_ptr(), 12, 0, "broadcast");
  EXPECT_EQ(recv.to(cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor w = randn({5, 7}, DType::f32, cpu(), 1).to(cuda()).requires_grad_();
  const Tensor g = randn({5, 7}, DType::f32, cpu(), 2);
  w.autograd()->grad = g.to(cuda());
  dist::GradientSync sync(*nccl, {w}, {0, 64, detail::rank_order_average()});
  sync.reduce_gradients();
  EXPECT_EQ(w.grad().to(cpu()).to_vector<float>(), g.to_vector<float>());
  EXPECT_EQ(nccl->stats.sent_bytes, 0);  // nothing leaves a world of one
}

// The fused attention's CUDA kernels (exec/attention_cuda.h) against the CPU kernel (itself
// checked against the float64 definition in tests/exec/attention_test.cpp): a causal mask
// broadcast over batch and heads, grouped-query heads, f32 and bf16 inputs, a head dim of 128
// (the smallest tiles); forward and backward.
TEST_P(DeviceExecution, FusedAttentionMatchesTheCpuKernel) {
  struct Case {
    int64_t b, h, r, t, e;
    DType in;
    double tol;
  };
  for (const Case c : {Case{2, 3, 1, 100, 64, DType::f32, 1e-4}, Case{1, 6, 3, 77, 128, DType::f32, 1e-4},
                       Case{2, 4, 2, 130, 40, DType::bf16, 1e-3}}) {
    SCOPED_TRACE(fmt::format("b {} h {} r {} t {} e {} {}", c.b, c.h, c.r, c.t, c.e, dtype_name(c.in)));
    const Tensor q = randn({c.b, c.h, c.t, c.e}, DType::f32, cpu(), 1).to(c.in);
    const Tensor k = randn({c.b, c.h / c.r, c.t, c.e}, DType::f32, cpu(), 2).to(c.in);
    const Tensor v = randn({c.b, c.h / c.r, c.t, c.e}, DType::f32, cpu(), 3).to(c.in);
    std::vector<float> causal(static_cast<size_t>(c.t * c.t));
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t j = 0; j < c.t; ++j)
        causal[static_cast<size_t>(i * c.t + j)] = j > i ? -INFINITY : 0.0f;
    const Tensor mask = from_data(causal, {1, 1, c.t, c.t});
    const auto spread = [&](const Tensor& m) { return m.as_strided({c.b, c.h, c.t, c.t}, {0, 0, c.t, 1}, 0); };
    const double scale = 1 / std::sqrt(static_cast<double>(c.e));
    // The CUDA kernels multiply bf16 operands of this head dim (40: not a multiple of 16) in
    // f32, as the CPU's f32 kernels do; on a CPU with AMX, bf16 operands would go to the AMX
    // kernels, which round P and dS to bf16. The tensor-core kernels (head dims multiples of
    // 16) round P, dO and dS to bf16: tests/exec/attention_test.cpp checks them against
    // float64 with tolerances that follow from it (AttentionOnCuda, fake device and GPU).
    force_no_amx_tiles(true);
    const Tensor want = attention_forward(q, k, v, spread(mask), scale, DType::f32, c.r);
    const Tensor got = attention_forward(q.to(cuda()), k.to(cuda()), v.to(cuda()),
                                         spread(mask.to(cuda())), scale, DType::f32, c.r);
    const Tensor d = randn(want.shape(), DType::f32, cpu(), 4);
    const Tensor gwant = attention_backward(q, k, v, spread(mask), want, d, scale, DType::f32, c.r);
    force_no_amx_tiles(false);
    const Tensor ggot = attention_backward(q.to(cuda()), k.to(cuda()), v.to(cuda()), spread(mask.to(cuda())),
                                           got, d.to(cuda()), scale, DType::f32, c.r);
    for (const auto& [name, w, g] : {std::tuple{"o | lse", want, got}, std::tuple{"grads", gwant, ggot}}) {
      const std::vector<float> a = w.to_vector<float>(), b = g.to(cpu()).to_vector<float>();
      ASSERT_EQ(a.size(), b.size()) << name;
      int bad = 0;
      for (size_t i = 0; i < a.size(); ++i)
        if (!(std::fabs(a[i] - b[i]) <= c.tol * (1 + std::fabs(a[i]))) && !(a[i] == b[i]) && bad++ < 5)
          ADD_FAILURE() << name << "[" << i << "] = " << b[i] << ", want " << a[i];
      EXPECT_EQ(bad, 0) << name;
    }
  }
}

// The fused LM head's CUDA path (exec/cross_entropy_cuda.h: cuBLASLt GEMMs per chunk of rows and
// the rows kernel) against the CPU kernels (checked against float64 in
// tests/exec/cross_entropy_test.cpp): an untied and a tied weight, two chunks of rows, targets
// out of range, f32 and f64, zero sizes; the forward, the forward with the gradients, the
// backward recomputing the logits for a per-row cotangent, and the in-place scaling for a
// uniform one.
TEST_P(DeviceExecution, FusedCrossEntropyMatchesTheCpuKernel) {
  struct Case {
    int64_t n, d, v;
    bool tied;
    DType dtype;
    double tol;
  };
  for (const Case c : {Case{70, 13, 2500, false, DType::f32, 2e-5},
                       Case{600, 9, 2100, true, DType::f32, 2e-5},
                       Case{5, 3, 9, false, DType::f64, 1e-12}, Case{4, 0, 9, false, DType::f64, 0},
                       Case{0, 5, 9, false, DType::f64, 0}, Case{3, 4, 0, true, DType::f64, 0}}) {
    SCOPED_TRACE(fmt::format("n {} d {} v {}{} {}", c.n, c.d, c.v, c.tied ? " tied" : "",
                             dtype_name(c.dtype)));
    const Tensor h = randn({c.n, c.d}, c.dtype, cpu(), 5);
    Tensor w = randn({c.d, c.v}, c.dtype, cpu(), 6);
    w *= 0.3;
    if (c.tied) w = w.permute({1, 0}).contiguous().permute({1, 0});
    std::vector<int64_t> t;
    for (int64_t i = 0; i < c.n; ++i)
      t.push_back(i % 9 == 4 ? -1 : i % 13 == 6 ? c.v + 2 : (i * 37) % std::max<int64_t>(1, c.v));
    const Tensor y = from_data(t, {c.n});
    std::vector<double> per_row, uniform;
    for (int64_t i = 0; i < c.n; ++i) {
      per_row.insert(per_row.end(), {0.25 * (i % 5) - 0.5, 7.0});
      uniform.insert(uniform.end(), {0.125, -3.0});
    }
    const Tensor g = from_data(per_row, {c.n, 2}).to(c.dtype);
    const Tensor gu = from_data(uniform, {c.n, 2}).to(c.dtype);
    const auto compare = [&](const char* name, const Tensor& want, const Tensor& got) {
      ASSERT_TRUE(got.device().kind == DeviceKind::cuda) << name;
      const std::vector<double> a = want.to(DType::f64).to_vector<double>(),
                                b = got.to(cpu()).to(DType::f64).to_vector<double>();
      ASSERT_EQ(a.size(), b.size()) << name;
      int bad = 0;
      for (size_t i = 0; i < a.size(); ++i)
        if (!(std::fabs(a[i] - b[i]) <= c.tol * (1 + std::fabs(a[i]))) && !(a[i] == b[i]) &&
            bad++ < 5)
          ADD_FAILURE() << name << "[" << i << "] = " << b[i] << ", want " << a[i];
      EXPECT_EQ(bad, 0) << name;
    };
    const Tensor hc = h.to(cuda()), wc = w.to(cuda()), yc = y.to(cuda());
    const Tensor out = linear_cross_entropy_forward(h, w, y, c.dtype);
    compare("forward", out, linear_cross_entropy_forward(hc, wc, yc, c.dtype));
    const CrossEntropyWithGrads want = linear_cross_entropy_with_grads(h, w, y, c.dtype);
    CrossEntropyWithGrads got = linear_cross_entropy_with_grads(hc, wc, yc, c.dtype);
    compare("with grads: out", want.out, got.out);
    compare("with grads: dh", want.dh, got.dh);
    compare("with grads: dw", want.dw, got.dw);
    const auto [dh, dw] = linear_cross_entropy_backward(h, w, y, out, g, c.dtype);
    const auto [dhc, dwc] =
        linear_cross_entropy_backward(hc, wc, yc, got.out, g.to(cuda()), c.dtype);
    compare("backward: dh", dh, dhc);
    compare("backward: dw", dw, dwc);
    const auto [dhu, dwu] =
        linear_cross_entropy_backward(h, w, y, out, gu, want.dh, want.dw, c.dtype);
    const auto [dhuc, dwuc] =
        linear_cross_entropy_backward(hc, wc, yc, got.out, gu.to(cuda()), got.dh, got.dw, c.dtype);
    compare("uniform: dh", dhu, dhuc);
    compare("uniform: dw", dwu, dwuc);
  }
}

INSTANTIATE_TEST_SUITE_P(FakeCuda, DeviceExecution, ::testing::Values("fake"));
INSTANTIATE_TEST_SUITE_P(Gpu, DeviceExecution, ::testing::Values("gpu"));

}  // namespace
}  // namespace ein
