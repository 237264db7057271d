// thread_cpu_seconds, OthersShare and CpuPeakRecord (runtime/cpu_measure.h).
#include "runtime/cpu_measure.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace ein {
namespace {

double clock_seconds(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Busy seconds of the CPUs in this process's affinity set, summed over everything that ran
/// on them (/proc/stat's cpuN lines: user, nice, system, irq, softirq, steal; guest time is
/// inside user), and how many CPUs that is; busy -1 where it cannot be read.
std::pair<double, int> allowed_cpus_busy() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {-1, 0};
  std::ifstream in("/proc/stat");
  const long ticks = sysconf(_SC_CLK_TCK);
  if (!in || ticks <= 0) return {-1, 0};
  double busy = 0;
  int cpus = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    fields >> steal;  // absent on old kernels
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &set)) continue;
    busy += user + nice + system + irq + softirq + steal;
    ++cpus;
  }
  if (cpus == 0) return {-1, 0};
  return {busy / static_cast<double>(ticks), cpus};
}

}  // namespace

double thread_cpu_seconds() { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }

OthersShare::OthersShare()
    : busy_(allowed_cpus_busy().first),
      own_(clock_seconds(CLOCK_PROCESS_CPUTIME_ID)),
      wall_(clock_seconds(CLOCK_MONOTONIC)) {}

double OthersShare::share() const {
  const auto [busy, cpus] = allowed_cpus_busy();
  const double wall = clock_seconds(CLOCK_MONOTONIC) - wall_;
  if (busy_ < 0 || busy < 0 || wall <= 0) return 0;
  const double others = (busy - busy_) - (clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - own_);
  return std::clamp(others / (wall * cpus), 0.0, 1.0);
}

std::optional<CpuPeakRecord> CpuPeakRecord::parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  CpuPeakRecord r;
  std::string rest;
  if (!(in >> r.fma32 >> r.fma64 >> r.gemm32 >> r.gemm64 >> r.gemm16 >> r.amx16 >> r.others) ||
      (in >> rest))
    return std::nullopt;
  if (!(r.fma32 > 0 && r.fma64 > 0 && r.gemm32 > 0 && r.gemm64 > 0 && r.gemm16 >= 0 &&
        r.amx16 >= 0 && r.others >= 0 && r.others <= 1))
    return std::nullopt;
  return r;
}

std::string CpuPeakRecord::format() const {
  return fmt::format("{:.6e} {:.6e} {:.6e} {:.6e} {:.6e} {:.6e} {:.4f}\n", fma32, fma64, gemm32,
                     gemm64, gemm16, amx16, others);
}

CpuPeakRecord CpuPeakRecord::merged(const CpuPeakRecord& o) const {
  return {std::max(fma32, o.fma32),   std::max(fma64, o.fma64), std::max(gemm32, o.gemm32),
          std::max(gemm64, o.gemm64), std::max(gemm16, o.gemm16), std::max(amx16, o.amx16),
          std::min(others, o.others)};
}

}  // namespace ein
