// cpu_info() from /proc/cpuinfo and sysfs, the computed peak, and the FMA micro-benchmark.
// Steps of cpu_info():
//   1. the CPUs this process may run on (sched_getaffinity), counted once per physical core
//      (sysfs topology: package id + core id), so SMT siblings that share FMA pipes count once;
//   2. the flags of the first processor in /proc/cpuinfo: avx512f, avx/avx2, fma;
//   3. FMA pipes per core: 2, except AMD family 19h (Zen 3/4), whose 512-bit ops run on two
//      256-bit pipes (1 per 512-bit op);
//   4. the clock: sysfs cpuinfo_max_freq (the boost clock, as GPU datasheets quote), else
//      /proc/cpuinfo's "cpu MHz" (in a VM: the host's nominal clock).
#include <ein/cpu_peak.h>

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <atomic>
#include <optional>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <fmt/format.h>

#include "runtime/amx.h"
#include "runtime/atomic_file.h"
#include "runtime/blas/gemm.h"
#include "runtime/cache_dir.h"
#include "runtime/cpu_measure.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ein {
namespace {

/// The first line of a small sysfs file, or "".
std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// "key : value" lines of the first processor block in /proc/cpuinfo.
std::vector<std::pair<std::string, std::string>> first_processor() {
  std::ifstream in("/proc/cpuinfo");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (!out.empty()) break;
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t'))
      key.pop_back();
    const size_t v = line.find_first_not_of(' ', colon + 1);
    out.emplace_back(key, v == std::string::npos ? "" : line.substr(v));
  }
  return out;
}

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0)
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::set<std::pair<std::string, std::string>> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const std::string package = read_line(base + "physical_package_id");
    const std::string core = read_line(base + "core_id");
    if (core.empty()) return static_cast<int>(CPU_COUNT(&set));  // no topology: count CPUs
    cores.emplace(package, core);
  }
  return std::max(1, static_cast<int>(cores.size()));
}

CpuInfo detect() {
  CpuInfo info;
  std::string flags, vendor;
  int family = 0;
  double mhz = 0;
  for (const auto& [key, value] : first_processor()) {
    if (key == "model name") info.model = value;
    if (key == "flags") flags = " " + value + " ";
    if (key == "vendor_id") vendor = value;
    if (key == "cpu family") family = std::atoi(value.c_str());
    if (key == "cpu MHz") mhz = std::atof(value.c_str());
  }
  const auto has = [&](const char* f) {
    return flags.find(std::string(" ") + f + " ") != flags.npos;
  };
  info.cores = physical_cores();
  info.simd_bits = has("avx512f") ? 512 : has("avx") ? 256 : 128;
  info.fma = has("fma") || has("avx512f");
  // Zen 3 has no AVX-512; Zen 4 (also family 19h) runs a 512-bit FMA on both 256-bit pipes.
  info.fma_units =
      info.fma ? (vendor == "AuthenticAMD" && family == 0x19 && info.simd_bits == 512 ? 1 : 2) : 1;
  const std::string max_khz = read_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  if (!max_khz.empty() && std::atof(max_khz.c_str()) > 0) {
    info.clock_hz = std::atof(max_khz.c_str()) * 1e3;
    info.clock_source = "sysfs cpufreq/cpuinfo_max_freq";
  } else if (mhz > 0) {
    info.clock_hz = mhz * 1e6;
    info.clock_source = "/proc/cpuinfo cpu MHz";
  } else {
    info.clock_hz = 2e9;
    info.clock_source = "unknown (2 GHz assumed)";
  }
  if (info.model.empty()) info.model = "unknown CPU";
  return info;
}

int64_t memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

#if defined(__x86_64__)
// Twelve independent accumulators hide the FMA latency (4-5 cycles) on two pipes. Values are
// set and summed through GCC's vector subscripts, not _mm*_set1/_reduce (whose "undefined"
// upper halves trip -Wmaybe-uninitialized in GCC 12).
constexpr int kChains = 12;

template <class V, int Lanes>
double sum_chains(const V* v) {
  double sum = 0;
  for (int k = 0; k < kChains; ++k)
    for (int l = 0; l < Lanes; ++l)
      sum += v[k][l];
  return sum;
}

// The FMA loops touch nothing but their own accumulators; ASan's and UBSan's checks on those
// (bounds, object size; their address escapes to sum_chains, so they live in memory) would
// measure the instrumentation instead of the FMA units.
__attribute__((target("avx512f"), no_sanitize("address", "undefined"))) double fma_avx512(
    int64_t iters, bool f64) {
  if (f64) {
    __m512d d[kChains];
    const auto m = (__m512d{} + 0.999999), c = (__m512d{} + 1e-7);
    for (int k = 0; k < kChains; ++k)
      d[k] = (__m512d{} + static_cast<double>(k));
    for (int64_t i = 0; i < iters; ++i)
      for (int k = 0; k < kChains; ++k)
        d[k] = _mm512_fmadd_pd(d[k], m, c);
    return sum_chains<__m512d, 8>(d);
  }
  __m512 a[kChains];
  const auto m = (__m512{} + 0.999999f), c = (__m512{} + 1e-7f);
  for (int k = 0; k < kChains; ++k)
    a[k] = (__m512{} + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k)
      a[k] = _mm512_fmadd_ps(a[k], m, c);
  return sum_chains<__m512, 16>(a);
}

__attribute__((target("avx2,fma"), no_sanitize("address", "undefined"))) double fma_avx2(
    int64_t iters, bool f64) {
  if (f64) {
    __m256d d[kChains];
    const auto m = (__m256d{} + 0.999999), c = (__m256d{} + 1e-7);
    for (int k = 0; k < kChains; ++k)
      d[k] = (__m256d{} + static_cast<double>(k));
    for (int64_t i = 0; i < iters; ++i)
      for (int k = 0; k < kChains; ++k)
        d[k] = _mm256_fmadd_pd(d[k], m, c);
    return sum_chains<__m256d, 4>(d);
  }
  __m256 a[kChains];
  const auto m = (__m256{} + 0.999999f), c = (__m256{} + 1e-7f);
  for (int k = 0; k < kChains; ++k)
    a[k] = (__m256{} + static_cast<float>(k));
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kChains; ++k)
      a[k] = _mm256_fmadd_ps(a[k], m, c);
  return sum_chains<__m256, 8>(a);
}
#endif

/// Runs `iters` iterations of the FMA loop; returns FLOPs done (0 when no SIMD FMA is known).
double fma_kernel(int64_t iters, bool f64, double* sink) {
#if defined(__x86_64__)
  const CpuInfo& info = cpu_info();
  if (info.fma && info.simd_bits == 512) {
    *sink += fma_avx512(iters, f64);
    return 2.0 * kChains * (f64 ? 8 : 16) * static_cast<double>(iters);
  }
  if (info.fma && info.simd_bits == 256) {
    *sink += fma_avx2(iters, f64);
    return 2.0 * kChains * (f64 ? 4 : 8) * static_cast<double>(iters);
  }
#endif
  (void)iters, (void)f64, (void)sink;
  return 0;
}

}  // namespace

double CpuInfo::flops_per_cycle(DType dtype) const {
  const int lane_bits = dtype == DType::f64 ? 64 : 32;
  return static_cast<double>(simd_bits / lane_bits) * fma_units * 2;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

double cpu_peak(DType dtype) {
  const CpuInfo& info = cpu_info();
  return info.cores * info.flops_per_cycle(dtype) * info.clock_hz;
}

namespace {

/// A measurement now: the better of two runs of each loop and GEMM (a neighbour on a shared
/// machine only ever lowers a run), with the share of the cores others took meanwhile.
CpuPeakRecord measure_record() {
  const OthersShare others;
  CpuPeakRecord r;
  for (int run = 0; run < 2; ++run) {
    r.fma32 = std::max(r.fma32, measure_cpu_peak(DType::f32, 0.15));
    r.fma64 = std::max(r.fma64, measure_cpu_peak(DType::f64, 0.15));
    r.gemm32 = std::max(r.gemm32, measure_gemm_rate(DType::f32));
    r.gemm64 = std::max(r.gemm64, measure_gemm_rate(DType::f64));
    if (bf16_gemm_available()) r.gemm16 = std::max(r.gemm16, measure_gemm_rate(DType::bf16));
    r.amx16 = std::max(r.amx16, measure_amx_peak(0.15));
  }
  r.others = others.share();
  return r;
}

/// Whether other processes keep this process's CPUs busy now (a 0.1 s look at /proc/stat).
bool busy_now() {
  const OthersShare others;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return others.share() > CpuPeakRecord::kBusy;
}

/// The measured rates, once per process: the cache file's where it was measured on a quiet
/// machine; else measured now, merged with a busy file's, and kept for the next process. A
/// busy file is measured again only when the machine is quiet, so a loaded machine (a test
/// suite on every core) does not measure in every process.
const CpuPeakRecord& measured_record() {
  static const CpuPeakRecord record = [] {
    const CpuInfo& info = cpu_info();
    std::string key = fmt::format("{}-{}c-{}b", info.model, info.cores, info.simd_bits);
    for (char& c : key)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
    const std::filesystem::path root = cache_root();
    const std::filesystem::path file = root.empty() ? root : root / "cpu_peak" / key;
    std::optional<CpuPeakRecord> cached;
    if (!file.empty()) {
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      cached = CpuPeakRecord::parse(text.str());
    }
    if (cached && (!cached->busy() || busy_now())) return *cached;
    CpuPeakRecord r = measure_record();
    if (cached) r = r.merged(*cached);
    if (!file.empty() && r.fma32 > 0 && r.fma64 > 0 && r.gemm32 > 0 && r.gemm64 > 0) {
      try {  // best effort: a read-only home only means measuring again next time
        std::filesystem::create_directories(file.parent_path());
        AtomicFile out(file.string());
        out.write(r.format());
        out.commit();
      } catch (const std::exception&) {
      }
    }
    return r;
  }();
  return record;
}

}  // namespace

double measured_cpu_peak(DType dtype) {
  const CpuPeakRecord& r = measured_record();
  const double f32 = std::max(r.fma32, r.gemm32);
  if (dtype == DType::bf16) return std::max({f32, r.gemm16, r.amx16});
  return dtype == DType::f64 ? std::max(r.fma64, r.gemm64) : f32;
}

double measured_cpu_peak_others_share() { return measured_record().others; }

std::string this_cpu_peak_note() {
  if (const char* env = std::getenv("EIN_CPU_PEAK"); env && *env) return "";
  const double others = measured_cpu_peak_others_share();
  if (others <= CpuPeakRecord::kBusy) return "";
  return fmt::format(
      "this CPU's peak was measured while other processes took {:.0f}% of its cores: the MFU may "
      "read high until a run on a quiet machine measures it again",
      100 * others);
}

const HardwareProfile& this_cpu() {
  static const HardwareProfile profile = [] {
    const std::string name =
        "this CPU (" + cpu_info().model + ", " + std::to_string(cpu_info().cores) + " cores)";
    // EIN_CPU_PEAK (f32 FLOP/s) is the user's word; else the larger of the datasheet number
    // and the measured rate (FMA loops on every core, a large GEMM), so that no MFU exceeds
    // 100% when the clock runs above the nominal one or a GEMM beats the FMA loop.
    double f32 = 0, f64 = 0, bf16 = 0;
    std::string source;
    if (const char* env = std::getenv("EIN_CPU_PEAK"); env && *env) {
      char* end = nullptr;
      f32 = std::strtod(env, &end);
      if (end == env || *end != '\0' || !(f32 > 0) || !std::isfinite(f32))
        throw UserError(fmt::format("EIN_CPU_PEAK={}: expected a positive number of FLOP/s "
                                    "(e.g. 2.5e11)",
                                    env));
      f64 = f32 / 2;
      bf16 = f32;
      source = "EIN_CPU_PEAK (f32; f64 half; bf16 the same)";
    } else {
      f32 = std::max(cpu_peak(DType::f32), measured_cpu_peak(DType::f32));
      f64 = std::max(cpu_peak(DType::f64), measured_cpu_peak(DType::f64));
      bf16 = std::max(f32, measured_cpu_peak(DType::bf16));
      source = fmt::format(
          "the larger of the computed peak (cores x SIMD lanes x FMA units x 2 x clock: {:.4g} "
          "FLOP/s f32) and the measured rate (FMA loops on every core, or a large GEMM, the "
          "better: {:.4g} FLOP/s f32), "
          "include/ein/cpu_peak.h",
          cpu_peak(DType::f32), measured_cpu_peak(DType::f32));
    }
    // bf16 contractions run as bf16 where oneDNN's matmul takes them, and the attention on
    // AMX tiles where the CPU has them (the measured bf16 GEMM or AMX tile rate, when above
    // f32's); f16 is computed in f32 on CPUs.
    return HardwareProfile{name, "cpu", {f64, f32, 0, bf16, f32, 0},
                           static_cast<double>(memory_bytes()), 0, source};
  }();
  return profile;
}

double measure_gemm_rate(DType dtype, int64_t size) {
  // One square GEMM through the BLAS every contraction uses (oneDNN for f32 where built in),
  // threaded as ein threads it; the best of three after a warm-up call.
  const DType dt = dtype == DType::f64                             ? DType::f64
                   : dtype == DType::bf16 && bf16_gemm_available() ? DType::bf16
                                                                   : DType::f32;
  const size_t elements = static_cast<size_t>(size * size);
  std::vector<double> a64, b64, c64;
  std::vector<float> a32, b32, c32;
  std::vector<uint16_t> a16, b16;
  GemmBatch g;
  g.dtype = dt;
  g.m = g.n = g.k = size;
  g.lda = g.ldb = g.ldc = size;
  if (dt == DType::f64) {
    a64.assign(elements, 0.5), b64.assign(elements, 0.25), c64.assign(elements, 0);
    g.a = a64.data(), g.b = b64.data(), g.c = c64.data();
  } else if (dt == DType::bf16) {  // bf16 operands (0.5 and 0.25 exactly), an f32 result
    a16.assign(elements, 0x3f00), b16.assign(elements, 0x3e80), c32.assign(elements, 0);
    g.a = a16.data(), g.b = b16.data(), g.c = c32.data();
  } else {
    a32.assign(elements, 0.5f), b32.assign(elements, 0.25f), c32.assign(elements, 0);
    g.a = a32.data(), g.b = b32.data(), g.c = c32.data();
  }
  const double flops = 2.0 * static_cast<double>(size) * static_cast<double>(size) *
                       static_cast<double>(size);
  double best = 0;
  for (int run = 0; run < 4; ++run) {
    const auto start = std::chrono::steady_clock::now();
    gemm_batched(g);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run > 0 && s > 0) best = std::max(best, flops / s);
  }
  return best;
}

double measure_cpu_peak(DType dtype, double seconds, int threads) {
  if (threads <= 0) threads = cpu_info().cores;
  const bool f64 = dtype == DType::f64;
  constexpr int64_t kIters = 1 << 16;  // ~0.2 ms per chunk: the clock is read rarely
  return sustained_rate(seconds, threads, [&] {
    double sink = 0;
    const double flops = fma_kernel(kIters, f64, &sink);
    // The sink keeps the loop from being optimised away; it is never that value.
    return sink != -1.0 ? flops : 0.0;
  });
}

}  // namespace ein
