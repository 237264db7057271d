// ein's host time per training step on a CUDA device, measured without a GPU: `ein train`'s
// Trainer runs a script on the fake CUDA device (tests/support/fake_cuda.h: real values, the
// kernels emulated on the host), and the CPU time of the thread that runs the step, less what
// it spent inside the fake's operations (launches, GEMMs, copies, allocations: what the GPU and
// its driver do), is what ein's own code took on the host: tracing, the graph and kernel
// caches, autograd, the optimizer's dispatch, the trainer. Thread CPU time, not wall time: other
// processes take the machine's cores meanwhile. On a GPU a step cannot take
// less than that plus the driver's own time per launch and GEMM, so when a small model's GPU
// work is shorter, as the byte-level GPT's is, this decides the GPU target (`ein train --device
// cuda` >= 1.0x torch eager tokens/s). The host's work hardly depends on the sizes (the same
// graph, the same launches), so small sizes measure it in less time.
//
//   ein_train_host_time [SCRIPT] [--steps N] [--warmup N] [--set NAME=VALUE]... [--bf16]
//                       [--count-only]
//
// SCRIPT defaults to examples/gpt/byte_gpt.ein. --count-only has the fake count the launches
// and GEMMs without computing them (FakeCudaDevice::Work::count): the host takes the same path
// (check the launches and GEMMs per step against a run without it), the losses are
// meaningless, and a step is shorter (byte_gpt on a 2-core Zen 3, 2026-12-02: 95 ms of wall
// time, 87 ms of it inside the fake's operations: the JSON's fake_device_ms_per_step), so a
// profiler should record the stepping thread alone, after the warm-up (perf record -t). Its host
// time is also lower (byte_gpt on that machine, 2026-12-02, one run each: 3.9 ms a step,
// against 7.7 ms with the kernels emulated; ~15 ms when the emulation ran a block's threads as real
// threads): the kernels' work on the host between the launches leaves the host's own code cold
// caches, which a GPU running the kernels does not, so count-only is the figure to compare with a
// GPU machine.
//
// Prints rows "name | value | unit | how" (as bench/gpu/run.sh's table) and a last line of
// JSON: the medians over the timed steps of the host time, the launches, GEMMs and bytes copied
// per step, and each step's host time.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <ein/ein.h>
#include <ein/trainer.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/fake_cuda.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string script = EIN_SOURCE_DIR "/examples/gpt/byte_gpt.ein";
  int steps = 20, warmup = 3;
  std::vector<std::pair<std::string, std::string>> sets;
  bool bf16 = false;
  bool count_only = false;
};

/// The clocks and the fake device's counts at one moment.
struct Counts {
  Clock::time_point at;
  double cpu, in_operations;  // this thread's CPU seconds: in all, in the fake's operations
  int64_t launches, gemms, copied;
};

Counts counts(const ein::testing::FakeCudaDevice& fake) {
  using Fake = ein::testing::FakeCudaDevice;
  return {Clock::now(),
          Fake::thread_cpu_seconds(),
          Fake::thread_cpu_seconds_in_operations(),
          fake.launches(),
          fake.gemms(),
          fake.bytes_to_device() + fake.bytes_to_host()};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void row(const std::string& name, double value, const std::string& unit, const std::string& how) {
  fmt::print("{:<34} | {:>10.3f} | {:<7} | {}\n", name, value, unit, how);
}

int usage(const char* argv0) {
  fmt::print(stderr,
             "usage: {} [SCRIPT] [--steps N (>= 1)] [--warmup N] [--set NAME=VALUE]... [--bf16] "
             "[--count-only]\n",
             argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--steps" && value) {
      o.steps = std::atoi(argv[++i]);
    } else if (a == "--warmup" && value) {
      o.warmup = std::atoi(argv[++i]);
    } else if (a == "--set" && value) {
      const std::string s = argv[++i];
      const size_t eq = s.find('=');
      if (eq == std::string::npos) return usage(argv[0]);
      o.sets.emplace_back(s.substr(0, eq), s.substr(eq + 1));
    } else if (a == "--bf16") {
      o.bf16 = true;
    } else if (a == "--count-only") {
      o.count_only = true;
    } else if (!a.starts_with("-")) {
      o.script = a;
    } else {
      return usage(argv[0]);
    }
  }
  if (o.steps < 1 || o.warmup < 0) return usage(argv[0]);
  std::string why;
  if (!ein::testing::FakeCudaDevice::available(&why)) {
    fmt::print("the fake CUDA device cannot run here: {}\n", why);
    return 1;
  }
  try {
    using Fake = ein::testing::FakeCudaDevice;
    const Fake fake(o.count_only ? Fake::Work::count : Fake::Work::run);
    ein::ScriptTrainOptions load;
    load.sets = o.sets;
    load.device = ein::cuda();
    ein::TrainScript s = ein::load_train_script(o.script, load);
    s.options.device = ein::cuda();
    s.options.steps = o.warmup + o.steps;
    s.options.precision = o.bf16 ? "bf16" : "fp32";
    s.options.quiet = true;
    s.options.checkpoint.clear();
    s.options.checkpoint_every = 0;
    s.options.log.clear();
    std::vector<Counts> at;  // after each step
    s.options.on_step = [&](const ein::StepStats&) { at.push_back(counts(fake)); };
    const Counts start = counts(fake);
    ein::Trainer(*s.model, s.options).fit();

    std::vector<double> host, device, wall, launches, gemms, copied;
    for (size_t i = static_cast<size_t>(o.warmup); i < at.size(); ++i) {
      const Counts& b = i == 0 ? start : at[i - 1];
      const Counts& e = at[i];
      const double inside = e.in_operations - b.in_operations;
      wall.push_back(std::chrono::duration<double>(e.at - b.at).count());
      device.push_back(inside);
      host.push_back(e.cpu - b.cpu - inside);
      launches.push_back(static_cast<double>(e.launches - b.launches));
      gemms.push_back(static_cast<double>(e.gemms - b.gemms));
      copied.push_back(static_cast<double>(e.copied - b.copied));
    }
    const double calls = median(launches) + median(gemms);
    const std::string steps =
        fmt::format("median of {} steps after {} warm-up", wall.size(), o.warmup);
    row("host time per step", median(host) * 1e3, "ms",
        "ein's own: the step's thread CPU time less the fake device's operations, " + steps);
    row("fake device time per step", median(device) * 1e3, "ms",
        "the thread's CPU time in emulated kernels, GEMMs, copies, allocations (not a GPU's)");
    row("wall time per step", median(wall) * 1e3, "ms", "on the fake device (not a GPU's)");
    row("kernel launches per step", median(launches), "",
        "each costs the driver's launch time on top on a GPU");
    row("GEMMs per step", median(gemms), "", "cuBLASLt calls");
    row("host time per launch or GEMM", calls > 0 ? median(host) / calls * 1e6 : 0, "us",
        "the host time per step over the launches and GEMMs per step");
    row("bytes copied per step", median(copied), "B", "host <-> device");
    nlohmann::json j = {{"script", o.script},
                        {"precision", s.options.precision},
                        {"count_only", o.count_only},
                        {"steps", wall.size()},
                        {"host_ms_per_step", median(host) * 1e3},
                        {"fake_device_ms_per_step", median(device) * 1e3},
                        {"wall_ms_per_step", median(wall) * 1e3},
                        {"launches_per_step", median(launches)},
                        {"gemms_per_step", median(gemms)},
                        {"bytes_copied_per_step", median(copied)},
                        {"host_ms_each_step", nlohmann::json::array()}};
    for (const double h : host)
      j["host_ms_each_step"].push_back(h * 1e3);
    std::cout << j.dump() << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "ein_train_host_time: {}\n", e.what());
    return 1;
  }
  return 0;
}
