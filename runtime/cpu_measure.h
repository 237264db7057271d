// Measuring this CPU's rates on a machine other processes share (include/ein/cpu_peak.h,
// runtime/amx.h): loops timed in their threads' own CPU time, the share of the cores that
// others took while a measurement ran, and the cached record that keeps the best of the
// measurements until one was made on a quiet machine. A neighbour only ever lowers a rate, and
// a peak measured too low makes an MFU read above 100%.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ein {

/// CPU seconds the calling thread has run.
double thread_cpu_seconds();

/// FLOP/s of `threads` threads each running `chunk()` (it returns the FLOPs it did) for
/// `seconds` of wall time after one warm-up call, summed over the threads; each thread's rate
/// is over the CPU time it ran, not the wall time, so time the scheduler gave another process
/// does not count against the loop.
template <class Chunk>
double sustained_rate(double seconds, int threads, Chunk chunk) {
  std::atomic<double> total{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      chunk();  // warm up: let the core reach its vector clock
      const double cpu0 = thread_cpu_seconds();
      double flops = 0, cpu = 0;
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             seconds) {
        const double done = chunk();
        if (done == 0) break;
        flops += done;
      }
      cpu = thread_cpu_seconds() - cpu0;
      const double rate = cpu > 0 ? flops / cpu : 0;
      double seen = total.load();
      while (!total.compare_exchange_weak(seen, seen + rate)) {
      }
    });
  for (std::thread& t : pool) t.join();
  return total.load();
}

/// The share of the time of the CPUs this process may run on that other processes (and, in
/// a VM, the host: steal time) took between construction and share(): from /proc/stat's
/// per-CPU busy times less this process's own CPU time. 0 where /proc/stat cannot be read.
class OthersShare {
 public:
  OthersShare();
  double share() const;

 private:
  double busy_ = -1, own_ = 0, wall_ = 0;
};

/// What the cache file of the measured peak holds: the FMA loops' rates (f32, f64), the
/// GEMMs' (f32, f64, bf16: 0 without a bf16 GEMM), AMX's tile loop (0 without AMX), and the
/// share of the cores others took while they were measured (OthersShare).
struct CpuPeakRecord {
  double fma32 = 0, fma64 = 0, gemm32 = 0, gemm64 = 0, gemm16 = 0, amx16 = 0;
  double others = 0;

  /// Others' share above which a measurement is made again when the machine is quiet.
  static constexpr double kBusy = 0.1;

  /// The seven numbers of a file; nullopt for anything else (a file of an older build, with
  /// six, is measured again).
  static std::optional<CpuPeakRecord> parse(std::string_view text);
  std::string format() const;
  /// Each rate the larger of the two (contention only lowers a rate), others' share the
  /// smaller.
  CpuPeakRecord merged(const CpuPeakRecord& other) const;
  bool busy() const { return others > kBusy; }
};

}  // namespace ein
