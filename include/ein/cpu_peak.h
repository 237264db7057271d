// The peak FLOP/s of the CPU this process runs on, for MFU on CPUs: computed from the core
// count, SIMD width, FMA units and clock (the CPU's "datasheet" number, like the GPU rows of
// include/ein/hardware.h), and measured with a short FMA micro-benchmark on every core, cached per
// machine; MFU uses the larger (this_cpu()).
// It reads /proc/cpuinfo and sysfs; it does not pin threads or change clocks.
#pragma once

#include <string>

#include <ein/dtype.h>

#include <ein/hardware.h>

namespace ein {

/// What the peak of this CPU is computed from.
struct CpuInfo {
  std::string model;         ///< /proc/cpuinfo's "model name"
  int cores = 1;             ///< physical cores this process may run on (SMT siblings once)
  int simd_bits = 128;       ///< widest float SIMD: 512 (avx512f), 256 (avx/avx2) or 128
  bool fma = false;          ///< fused multiply-add instructions (fma / avx512f)
  int fma_units = 1;         ///< SIMD FMA pipes per core (assumed: see docs/cost_model.md)
  double clock_hz = 0;       ///< the clock the peak assumes
  std::string clock_source;  ///< where clock_hz came from (sysfs max, /proc/cpuinfo, ...)

  /// FLOPs per cycle per core for `dtype`: lanes × FMA units × 2 (no FMA: a multiply and an
  /// add pipe, also 2 per lane per cycle).
  double flops_per_cycle(DType dtype) const;
};

/// The CPU this process runs on (read once, then cached).
const CpuInfo& cpu_info();

/// Computed dense peak FLOP/s of this CPU for arithmetic on `dtype`: cores × SIMD lanes ×
/// FMA units × 2 × clock. f64 has half the f32 lanes; f16, bf16 and f8 count as f32 because
/// ein computes them in f32 on CPUs; integer dtypes get the f32 figure as a stand-in.
double cpu_peak(DType dtype);

/// A hardware profile for this CPU ("this CPU"; key "cpu"): per math mode (no tf32 or fp8: 0)
/// the larger of cpu_peak() and measured_cpu_peak() (bf16: measured_cpu_peak(bf16), at least
/// f32's figure), so an MFU against it stays at or below
/// 100% when the cores run above the nominal clock; $EIN_CPU_PEAK (f32 FLOP/s; f64 half)
/// replaces both. The machine's memory; no bandwidth figure (0).
const HardwareProfile& this_cpu();

/// "" or why this_cpu()'s peaks may be low, for the lines that print an MFU against them: they
/// were measured while other processes took more than a tenth of the cores
/// (measured_cpu_peak_others_share()); "" under $EIN_CPU_PEAK.
std::string this_cpu_peak_note();

/// The measured peak for `dtype` (f64, bf16, else f32; bf16: the largest of f32's, a bf16
/// GEMM's where bf16_gemm_available(), and AMX's sustained tile dot products where the CPU
/// has AMX, runtime/amx.h — the AMX kernels beat the GEMM library's rate, and a peak below
/// what runs would put an MFU above 100%): the larger of the sustained FMA rate of
/// every core (the better of two measure_cpu_peak() runs) and the best rate of a large GEMM
/// through the BLAS ein uses (measure_gemm_rate(): a tuned GEMM can beat a plain FMA loop,
/// and a peak below what a GEMM reaches would put an MFU above 100%). Measured once per
/// machine and kept in the cache folder (runtime/cache_dir.h: cpu_peak/<model>-<cores>c-
/// <simd>b) — on a busy machine, until a process finds it quiet (runtime/cpu_measure.h's
/// CpuPeakRecord); 0 where neither runs.
double measured_cpu_peak(DType dtype);

/// The share of this process's CPUs that other processes (or a VM's host) took while the
/// rates measured_cpu_peak() returns were measured: above 0.1 the GEMM rates, timed on the
/// wall clock, may be low and an MFU read high; such a measurement is made again, and the
/// better rates kept, by the first process that finds the machine quiet.
double measured_cpu_peak_others_share();

/// FLOP/s of one size × size × size GEMM of `dtype` (f64; bf16 operands with an f32 result,
/// where the BLAS takes them; else f32) through the BLAS every
/// contraction uses, threaded as ein threads it: the best of three timed calls after one.
double measure_gemm_rate(DType dtype, int64_t size = 1536);

/// Measures FMA throughput: `threads` threads (0: cpu_info().cores) each run independent FMA
/// chains on the widest SIMD for about `seconds`; returns FLOP/s summed over the threads, each
/// over the CPU time its thread ran (time the scheduler gave other processes does not lower
/// it; a sibling hyperthread's work, which shares the FMA pipes, still does). f64 measures f64
/// FMAs, every other dtype f32 ones.
double measure_cpu_peak(DType dtype, double seconds = 0.2, int threads = 0);

}  // namespace ein
