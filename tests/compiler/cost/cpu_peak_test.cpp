// The CPU peak: the computed figure is exactly cores × lanes × FMA units × 2 × clock, the
// hardware profile carries it, and the FMA micro-benchmark lands in a plausible band of it.
#include <gtest/gtest.h>

#include "runtime/amx.h"
#include "runtime/blas/gemm.h"

#include <algorithm>
#include <cstdlib>

#include <fstream>
#include <string>

#include <ein/flop_counter.h>

#include <ein/cpu_peak.h>

namespace ein {
namespace {

bool has_flag(const std::string& flag) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0)
      return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

TEST(CpuPeak, SimdWidthFollowsTheFlags) {
  const CpuInfo& info = cpu_info();
  EXPECT_GE(info.cores, 1);
  EXPECT_GT(info.clock_hz, 0);
  EXPECT_FALSE(info.clock_source.empty());
  EXPECT_EQ(info.simd_bits, has_flag("avx512f") ? 512 : has_flag("avx") ? 256 : 128);
  EXPECT_EQ(info.fma, has_flag("fma") || has_flag("avx512f"));
}

TEST(CpuPeak, ComputedPeakIsCoresTimesLanesTimesUnitsTimesTwoTimesClock) {
  const CpuInfo& info = cpu_info();
  const double lanes32 = info.simd_bits / 32.0;
  EXPECT_DOUBLE_EQ(cpu_peak(DType::f32), info.cores * lanes32 * info.fma_units * 2 * info.clock_hz);
  EXPECT_DOUBLE_EQ(cpu_peak(DType::f64), cpu_peak(DType::f32) / 2);
  EXPECT_DOUBLE_EQ(cpu_peak(DType::bf16), cpu_peak(DType::f32));  // computed in f32 on CPUs
}

TEST(CpuPeak, ThisCpuIsAHardwareProfile) {
  const HardwareProfile& p = this_cpu();
  EXPECT_EQ(p.key, "cpu");
  if (std::getenv("EIN_CPU_PEAK")) GTEST_SKIP() << "EIN_CPU_PEAK replaces the peak";
  // The larger of the datasheet number and the measured sustained rate: never below either,
  // so an MFU above 100% means the measurement, not the clock, was off.
  EXPECT_DOUBLE_EQ(p.peak(MathMode::fp32),
                   std::max(cpu_peak(DType::f32), measured_cpu_peak(DType::f32)));
  EXPECT_DOUBLE_EQ(p.peak(MathMode::fp64),
                   std::max(cpu_peak(DType::f64), measured_cpu_peak(DType::f64)));
  // bf16: the measured bf16 GEMM rate where bf16 GEMMs exist (about twice f32's on
  // AVX512_BF16), never below the f32 figure; f16 is computed in f32.
  EXPECT_DOUBLE_EQ(p.peak(MathMode::bf16),
                   std::max(p.peak(MathMode::fp32), measured_cpu_peak(DType::bf16)));
  if (!bf16_gemm_available()) {
    EXPECT_DOUBLE_EQ(p.peak(MathMode::bf16), p.peak(MathMode::fp32));
  }
  EXPECT_DOUBLE_EQ(p.peak(MathMode::fp16), p.peak(MathMode::fp32));
  EXPECT_EQ(p.peak(MathMode::tf32), 0);
  EXPECT_GT(p.memory_bytes, 0);
}

// One thread of FMAs against one core's computed peak. The band is wide on purpose: the
// machine is shared (other processes take cycles) and a VM's reported clock may be below the
// turbo clock; a measurement outside it means the SIMD width or FMA-unit assumption is off.
TEST(CpuPeak, MeasuredFmaThroughputIsInTheComputedBand) {
  if (!cpu_info().fma || cpu_info().simd_bits < 256) GTEST_SKIP() << "no AVX2/AVX-512 FMA here";
  const double per_core = cpu_peak(DType::f32) / cpu_info().cores;
  const double measured = measure_cpu_peak(DType::f32, 0.1, 1);
  EXPECT_GT(measured, 0.1 * per_core) << "measured " << measured << " FLOP/s";
  EXPECT_LT(measured, 2.0 * per_core) << "measured " << measured << " FLOP/s";
}

// The measured rate is cached: a second call gives the same number without measuring.
TEST(CpuPeak, MeasuredPeakIsCachedAndPlausible) {
  if (!cpu_info().fma || cpu_info().simd_bits < 256) GTEST_SKIP() << "no AVX2/AVX-512 FMA here";
  const double first = measured_cpu_peak(DType::f32);
  EXPECT_GT(first, 0.1 * cpu_peak(DType::f32));
  EXPECT_LT(first, 2.0 * cpu_peak(DType::f32));
  EXPECT_EQ(measured_cpu_peak(DType::f32), first);
  EXPECT_GT(measured_cpu_peak(DType::f64), 0.0);
}

// AMX's sustained tile dot products, the bf16 peak where the CPU has AMX (its kernels beat the
// GEMM library's bf16 rate): per thread, above twice the same thread's f32 FMA loop (a tile
// product does 1,024 FLOPs a cycle against two AVX-512 FMA ports' 64, so even an AMX unit
// shared with the other hyperthread stays far above it; both are measured here, so a busy
// machine slows both: a fixed lower bound failed under load, 667 GFLOP/s), below a 16 × 16 ×
// 32 product every 16 cycles at 5 GHz; and measured_cpu_peak(bf16) is at least that rate's
// order (the cached value comes from another moment of a shared machine).
TEST(CpuPeak, AmxTileRateIsTheBf16PeakWhereThereIsAmx) {
  if (!amx_usable()) {
    EXPECT_EQ(measure_amx_peak(0.01, 1), 0.0);
    GTEST_SKIP() << "no AMX here";
  }
  const double one = measure_amx_peak(0.05, 1);
  const double fma = measure_cpu_peak(DType::f32, 0.05, 1);
  EXPECT_GT(one, 2.0 * fma) << one << " FLOP/s on tiles, " << fma << " on FMA units";
  EXPECT_LT(one, 1024.0 * 5e9) << one << " FLOP/s";
  EXPECT_GT(measured_cpu_peak(DType::bf16), 0.25 * one);
}

}  // namespace
// The GEMM rate measured_cpu_peak() takes the larger of with the FMA loops (a tuned GEMM can
// beat the FMA loop: an MFU against a peak below it would read above 100%) is plausible:
// above a tenth of one core's computed peak, below twice the machine's.
TEST(CpuPeak, GemmRateIsPlausible) {
  const double gemm = measure_gemm_rate(DType::f32, 512);
  EXPECT_GT(gemm, 0.1 * cpu_peak(DType::f32) / cpu_info().cores) << gemm << " FLOP/s";
  EXPECT_LT(gemm, 2.0 * cpu_peak(DType::f32)) << gemm << " FLOP/s";
  EXPECT_GT(measure_gemm_rate(DType::f64, 256), 0.0);
}

}  // namespace ein
