// ein's ops on a GPU against the device's own copy bandwidth, for bench/gpu/run.sh: one table
// row per line in cuda_timings.cpp's format ("name | value | unit | how"), on cuda:0.
//
//   (a) device-to-device copy of 1 GiB through DeviceBackend::copy_on_device (cuMemcpyDtoDAsync):
//       the reference every "% of D2D copy" row divides by; and Tensor::clone() of the same
//       buffer, which on CUDA runs a Kernel IR copy kernel (exec/cuda_executor.cpp), not
//       the driver's memcpy;
//   (b) a fused elementwise chain, map("x[n], y[n] -> tanh(x) * y + x") over 2^28 f32;
//   (c) a permuting rearrange made contiguous, "b s (h d) -> b h s d" (32, 2048, 16·64) bf16;
//   (d) softmax over rows of 4096 (bf16 and f32) and a row sum, reduce("r c -> r", "sum");
//   (e) host dispatch: 10000 calls of a map over 1024 elements (compiled in the warm-up) with
//       no synchronisation inside the loop, in µs of host time per launch; next to it the same
//       loop with the queue drained, and the floor: a compiled kernel launched through
//       launch_cuda_function with no ein op around it;
//   (f) the fused attention forward and backward at b=4 h=8 t=4096 e=128 bf16, in TFLOP/s and
//       % of the dense bf16 peak (issue 18's target: the forward ≥ 50%).
//
// Bandwidth rows: the wall clock around one call with cuda_synchronize(0) before and after,
// median of --reps (≥ 20) calls after --warmup calls (the first compiles). Bytes are what the op
// must move at least: each input read once, each output written once (an elementwise chain: 2
// reads + 1 write); GB/s = bytes / median / 1e9. Each row's "how" names the calls and the
// kernels launched per call (cuda_executor_stats()), and the target where one exists:
// elementwise ≥ 85 % of the copy, permute ≥ 75 %, row softmax / reductions ≥ 80 %,
// dispatch ≤ 5 µs. Without a driver it prints one line saying why and exits 0.
//
// --host-dispatch measures only ein's host time per op up to the driver call, on host memory
// posing as cuda:0 with launches that do nothing: a number this needs no GPU for.
//
//   ein_op_bandwidth [--reps N] [--warmup N] [--host-dispatch]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ein/ein.h>
#include <ein/hardware.h>
#include <fmt/format.h>

#include "exec/attention.h"
#include "exec/attention_cuda.h"

#include "exec/cuda_executor.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/execution.h"
#include "runtime/cuda/launch.h"
#include "runtime/cuda/nvrtc.h"

namespace ein {
namespace {

using Clock = std::chrono::steady_clock;

/// Dispatch rows: calls per timed round, and rounds (the median is reported).
constexpr int kCalls = 10000, kRounds = 5;

struct Options {
  int reps = 20;
  int warmup = 3;
  bool host_dispatch = false;  ///< only host_dispatch_rows(), on a null device (no GPU needed)
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void row(const std::string& name, double value, const std::string& unit, const std::string& how) {
  fmt::print("{:<34} | {:>10.3f} | {:<7} | {}\n", name, value, unit, how);
  std::fflush(stdout);
}

/// One op's timing: the median seconds per call and the kernels it launched per call.
struct Timing {
  double seconds = 0;
  double launches = 0;
};

/// `f` called `warmup` times, then `reps` times with the device synchronised before and after
/// each call; the result of a call is released only after its timing (outside the clock).
Timing time_op(const Options& o, const std::function<Tensor()>& f) {
  for (int i = 0; i < o.warmup; ++i)
    (void)f();
  cuda_synchronize(0);
  std::vector<double> seconds;
  const int64_t launches_before = cuda_executor_stats().launches;
  for (int i = 0; i < o.reps; ++i) {
    cuda_synchronize(0);
    const Clock::time_point t0 = Clock::now();
    const Tensor out = f();
    cuda_synchronize(0);
    seconds.push_back(seconds_since(t0));
  }
  const double launches =
      static_cast<double>(cuda_executor_stats().launches - launches_before) / o.reps;
  return {median(seconds), launches};
}

/// `text` on one line: each line break and the indentation after it become "; " (" " after
/// a colon).
std::string one_line(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    while (i + 1 < text.size() && text[i + 1] == ' ')
      ++i;
    out += !out.empty() && out.back() == ':' ? " " : "; ";
  }
  return out;
}

/// A row for what could not be measured, and why (on one line).
void skipped(const std::string& name, const std::string& why) {
  fmt::print("{:<34} | {:>10} | {:<7} | skipped: {}\n", name, "-", "", one_line(why));
}

std::string kernels(double per_call) {
  return per_call == 1 ? std::string("1 kernel") : fmt::format("{:g} kernels", per_call);
}

/// The GB/s row of an op that moves `bytes`, and with a reference, its "% of D2D copy" row
/// against `target_pct` (none when nullopt).
double bandwidth_rows(const std::string& name, double bytes, const Timing& t,
                      const std::string& how, const Options& o,
                      std::optional<double> reference_gbs = std::nullopt,
                      std::optional<double> target_pct = std::nullopt) {
  const double gbs = bytes / t.seconds / 1e9;
  row(name, gbs, "GB/s",
      fmt::format("{}; {} per call; median of {}, {:.3f} ms", how, kernels(t.launches), o.reps,
                  t.seconds * 1e3));
  if (reference_gbs) {
    const double pct = 100.0 * gbs / *reference_gbs;
    row("  % of D2D copy", pct, "%",
        target_pct
            ? fmt::format("target >= {:g}%: {}", *target_pct, pct >= *target_pct ? "met" : "MISSED")
            : std::string("no target"));
  }
  return gbs;
}

/// (a) The reference: cuMemcpyDtoDAsync through the backend, then Tensor::clone().
double copy_rows(const Options& o) {
  constexpr int64_t n = int64_t{1} << 28;  // 1 GiB of f32
  const Tensor src = empty({n}, DType::f32, cuda());
  const Tensor dst = empty({n}, DType::f32, cuda());
  DeviceBackend& backend = backend_for(cuda());
  const double bytes = 2.0 * static_cast<double>(src.nbytes());  // read + write
  const Timing memcpy_time = time_op(o, [&] {
    backend.copy_on_device(cuda(), dst.device_ptr(), src.device_ptr(), src.nbytes());
    return Tensor();
  });
  const double reference =
      bandwidth_rows("D2D copy 1 GiB (reference)", bytes, memcpy_time,
                     "DeviceBackend::copy_on_device = cuMemcpyDtoDAsync; read + write", o);
  bandwidth_rows("clone 1 GiB f32", bytes, time_op(o, [&] { return src.clone(); }),
                 "Tensor::clone() of a contiguous tensor: a Kernel IR copy; read + write", o,
                 reference);
  return reference;
}

/// (b) The fused elementwise chain.
void elementwise_rows(const Options& o, double reference) {
  constexpr int64_t n = int64_t{1} << 28;
  const Tensor x = randn({n}, DType::f32, cuda(), 1);
  const Tensor y = randn({n}, DType::f32, cuda(), 2);
  const Timing t = time_op(o, [&] { return map("x[n], y[n] -> tanh(x) * y + x", {x, y}); });
  bandwidth_rows("map tanh(x)*y+x f32 2^28", 3.0 * static_cast<double>(x.nbytes()), t,
                 "ein::map x[n], y[n]; 2 reads + 1 write", o, reference, 85);
}

/// (c) The permuting rearrange: a view, made contiguous by one copy kernel (copy_into in
/// exec/tensor_kernels.cpp; d stays innermost on both sides).
void permute_rows(const Options& o, double reference) {
  const Tensor x = randn({32, 2048, 16 * 64}, DType::bf16, cuda(), 3);
  const Timing t = time_op(o, [&] {
    return rearrange(x, "b s (h d) -> b h s d", {{"h", 16}}).contiguous();
  });
  bandwidth_rows("permute bs(hd)->bhsd bf16", 2.0 * static_cast<double>(x.nbytes()), t,
                 "rearrange(b=32 s=2048 h=16 d=64).contiguous(); read + write", o, reference, 75);
}

/// (d) Row softmax and a row sum over 16384 rows of 4096.
void row_rows(const Options& o, double reference) {
  constexpr int64_t rows = 16384, cols = 4096;
  for (const DType dtype : {DType::bf16, DType::f32}) {
    const Tensor x = randn({rows, cols}, dtype, cuda(), 4);
    const double in = static_cast<double>(x.nbytes());
    const std::string dt(dtype_name(dtype));
    bandwidth_rows(fmt::format("softmax 16384x4096 {}", dt), 2 * in,
                   time_op(o, [&] { return nn::softmax(x); }),
                   "ein::nn::softmax over the last dim; read + write", o, reference, 80);
    const double out = in / cols;
    bandwidth_rows(fmt::format("sum rows 16384x4096 {}", dt), in + out,
                   time_op(o, [&] { return reduce(x, "r c -> r", "sum"); }),
                   "ein::reduce(r c -> r, sum); read + write of the sums", o, reference, 80);
  }
}

/// (e) Host time per launch of a small compiled map, and the floor: a bare driver launch.
void dispatch_rows() {
  const Tensor x = randn({1024}, DType::f32, cuda(), 5);
  const Tensor y = randn({1024}, DType::f32, cuda(), 6);
  auto call = [&] { return map("x[n], y[n] -> tanh(x) * y + x", {x, y}); };
  for (int i = 0; i < 10; ++i)
    (void)call();  // compile, load, fill the allocator's cache
  cuda_synchronize(0);
  const CudaExecutorStats before = cuda_executor_stats();
  std::vector<double> host, drained;
  for (int r = 0; r < kRounds; ++r) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i)
      (void)call();
    host.push_back(seconds_since(t0) / kCalls);
    cuda_synchronize(0);
    drained.push_back(seconds_since(t0) / kCalls);
  }
  const CudaExecutorStats after = cuda_executor_stats();
  const double per_call =
      static_cast<double>(after.launches - before.launches) / (kRounds * kCalls);
  const double us = median(host) * 1e6;
  row("dispatch map 1024 f32", us, "us",
      fmt::format("host time per call, {} calls unsynchronised, median of {} rounds; {} per "
                  "call, {} prepared in the loop; target <= 5 us: {}",
                  kCalls, kRounds, kernels(per_call),
                  after.kernels_prepared - before.kernels_prepared, us <= 5 ? "met" : "MISSED"));
  row("  drained", median(drained) * 1e6, "us",
      "the same loop until the GPU has run every kernel, per call: the GPU's pace; a host "
      "time close to it means the launch queue filled and the host waited for the GPU");

  // The floor under any op: the same arithmetic as a hand-written kernel, compiled by NVRTC,
  // loaded once and launched with launch_cuda_function (parameter packing + cuLaunchKernel).
  const char* source =
      "extern \"C\" __global__ void ein_bench_chain(const float* x, const float* y, float* z) {\n"
      "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < 1024) z[i] = tanhf(x[i]) * y[i] + x[i];\n"
      "}\n";
  if (!nvrtc_info().available) return skipped("  driver launch floor", nvrtc_info().reason);
  CudaCompileOptions options;
  options.arch = cuda_device_properties(0).arch();
  const auto binary = CudaCompiler::instance().compile(source, "op_bandwidth.cu", options);
  const CuFunction function = load_cuda_function(*binary, "ein_bench_chain", 0);
  const Tensor z = empty({1024}, DType::f32, cuda());
  void* const buffers[] = {x.device_ptr(), y.device_ptr(), z.device_ptr()};
  const Stream stream = Stream::current(0);
  auto launch_once = [&] {
    launch_cuda_function(function, "ein_bench_chain", 4, 256, buffers, {}, stream);
  };
  for (int i = 0; i < 10; ++i)
    launch_once();
  cuda_synchronize(0);
  std::vector<double> floor;
  for (int r = 0; r < kRounds; ++r) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i)
      launch_once();
    floor.push_back(seconds_since(t0) / kCalls);
    cuda_synchronize(0);
  }
  row("  driver launch floor", median(floor) * 1e6, "us",
      "host time per launch_cuda_function of the same arithmetic, no ein op around it");
}

/// --host-dispatch: ein's host time per op on a CUDA tensor before the driver, measurable
/// without a GPU: cuda:0 memory is host memory and the CudaExecution prepares nothing and
/// launches nothing, so the loop times everything of an op but cuLaunchKernel itself (the
/// graph cache, binding, kernel key and lookup, allocation of the result).
void host_dispatch_rows() {

  class NoLaunch final : public CudaExecution {
    struct Function final : CudaFunction {
      std::string name;
      const std::string& entry() const override { return name; }
    };
   public:
    std::shared_ptr<const CudaFunction> prepare(int, const CudaSource& kernel) override {
      auto f = std::make_shared<Function>();
      f->name = kernel.entry;
      return f;
    }
    void launch(int, const CudaFunction&, int64_t, int, std::span<void* const>,
                std::span<const double>, int) override {}
    void gemm(int, const GemmBatch&, GemmMath) override {}
    int arch(int) override { return 90; }
  };
  // Host memory posing as cuda:0 (the CPU's backend); it outlives every tensor.
  static const auto memory = detail::make_cpu_backend();
  register_backend(DeviceKind::cuda, memory);
  set_cuda_execution(std::make_shared<NoLaunch>());
  const Tensor x = randn({1024}, DType::f32, cuda(), 5);
  const Tensor y = randn({1024}, DType::f32, cuda(), 6);
  auto call = [&] { return map("x[n], y[n] -> tanh(x) * y + x", {x, y}); };
  for (int i = 0; i < 10; ++i)
    (void)call();
  const CudaExecutorStats before = cuda_executor_stats();
  std::vector<double> host;
  for (int r = 0; r < kRounds; ++r) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i)
      (void)call();
    host.push_back(seconds_since(t0) / kCalls);
  }
  const CudaExecutorStats after = cuda_executor_stats();
  row("host dispatch map 1024 f32", median(host) * 1e6, "us",
      fmt::format("ein's host time per call up to the driver (no GPU: launches are no-ops), {} "
                  "calls, median of {} rounds, {}; add the driver's launch (the floor row on a "
                  "GPU) for the target's <= 5 us",
                  kCalls, kRounds,
                  kernels(static_cast<double>(after.launches - before.launches) /
                          (kRounds * kCalls))));
  set_cuda_execution(nullptr);
}

/// The fused attention (exec/attention_cuda_mma.h) at issue 18's GPU size: b=4 h=8 t=4096 e=f=128,
/// bf16 in, no mask. TFLOP/s counts the dense work, 4·b·h·t²·e forward (two matmuls) and 2.5×
/// that backward (FlashAttention-2's count: the logits recomputed), against the device's dense
/// bf16 peak (ein/hardware.h). The target: the forward at ≥ 50% of that peak.
void attention_rows(const Options& o) {
  constexpr int64_t b = 4, h = 8, t = 4096, e = 128;
  const Tensor q = randn({b, h, t, e}, DType::bf16, cuda(), 11);
  const Tensor k = randn({b, h, t, e}, DType::bf16, cuda(), 12);
  const Tensor v = randn({b, h, t, e}, DType::bf16, cuda(), 13);
  const double scale = 1 / std::sqrt(static_cast<double>(e));
  const double fwd_flops = 4.0 * b * h * t * t * e;
  const char* set = cuda_attention_kernel_set(q, k, v, DType::bf16);
  const HardwareProfile* hw = hardware_for_gpu(cuda_device_properties(0).name);
  const double peak = hw ? hw->peak(MathMode::bf16) : 0;
  const auto flops_row = [&](const std::string& name, double flops, const Timing& tm,
                             std::optional<double> target) {
    const double tflops = flops / tm.seconds / 1e12;
    row(name, tflops, "TFLOP/s",
        fmt::format("exec/attention_cuda_mma.h, bf16 in, f32 accumulation, the {} kernels "
                    "(wmma, ptx and wgmma: tensor cores; simt: scalar); {} per call; median of "
                    "{}, {:.3f} ms",
                    set, kernels(tm.launches), o.reps, tm.seconds * 1e3));
    if (peak > 0) {
      const double pct = 100.0 * tflops * 1e12 / peak;
      row("  % of dense bf16 peak", pct, "%",
          target ? fmt::format("target >= {:g}%: {}", *target, pct >= *target ? "met" : "MISSED")
                 : std::string("no target"));
    }
  };
  Tensor out;
  const Timing fwd = time_op(o, [&] { return out = attention_forward(q, k, v, Tensor(), scale, DType::bf16); });
  flops_row("attention fwd 4x8x4096x128", fwd_flops, fwd, 50);
  const Tensor d_out = randn(out.shape(), DType::bf16, cuda(), 14);
  const Timing bwd = time_op(o, [&] {
    return attention_backward(q, k, v, Tensor(), out, d_out, scale, DType::bf16);
  });
  flops_row("attention bwd 4x8x4096x128", 2.5 * fwd_flops, bwd, std::nullopt);
}

}  // namespace

}  // namespace ein

int main(int argc, char** argv) {
  ein::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--host-dispatch") {
      o.host_dispatch = true;
    } else if ((a == "--reps" || a == "--warmup") && i + 1 < argc) {
      (a == "--reps" ? o.reps : o.warmup) = std::atoi(argv[++i]);
    } else {
      fmt::print(stderr, "usage: {} [--reps N (>= 20)] [--warmup N] [--host-dispatch]\n", argv[0]);
      return 2;
    }
  }
  if (o.reps < 20 || o.warmup < 1) {
    fmt::print(stderr, "--reps must be at least 20 and --warmup at least 1\n");
    return 2;
  }
  if (o.host_dispatch) {
    fmt::print("{:<34} | {:>10} | {:<7} | {}\n", "measure", "value", "unit", "how");
    ein::host_dispatch_rows();
    return 0;
  }
  if (!ein::cuda_is_available()) {
    ein::skipped("op bandwidth on cuda:0", ein::cuda_driver_info().reason);
    return 0;
  }
  try {
    const ein::CudaDeviceProperties& props = ein::cuda_device_properties(0);
    fmt::print("# ein ops on {} (sm_{}, {} SMs, {:.1f} GiB), driver {}\n", props.name, props.arch(),
               props.sm_count, props.total_memory / double(int64_t{1} << 30),
               ein::cuda_driver_info().version);
    fmt::print("{:<34} | {:>10} | {:<7} | {}\n", "measure", "value", "unit", "how");
    const double reference = ein::copy_rows(o);
    ein::elementwise_rows(o, reference);
    ein::permute_rows(o, reference);
    ein::row_rows(o, reference);
    ein::dispatch_rows();
    ein::attention_rows(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
