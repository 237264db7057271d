// ein::FlopCounter: a scope that totals the FLOPs and bytes of what actually ran on this thread,
// like torch.utils.flop_counter.FlopCounterMode, and turns them into achieved FLOP/s and MFU.
// Every Graph IR node the executor runs is charged by the cost model (compiler/cost/cost_model.h:
// 2 FLOPs per multiply-add), a kernel or GEMM run outside any graph by its own Kernel IR or
// sizes; kernel launches and BLAS calls are counted where they happen.
// It counts; it does not time individual kernels or profile.
//
//   ein::FlopCounter counter;                             // starts counting and the clock
//   ein::Tensor h = ein::einsum("b d, d k -> b k", x, w);
//   std::cout << counter.report();                        // "FLOPs: 2 per multiply-add" ...
//   double mfu = counter.mfu(ein::this_cpu(), ein::DType::f32);
//   double mfu_h100 = counter.mfu(ein::hardware("h100"), ein::DType::bf16);
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <ein/dtype.h>

#include <ein/cpu_peak.h>
#include <ein/hardware.h>

namespace ein {

/// The convention every printed FLOP count states.
inline constexpr std::string_view kFlopConvention = "FLOPs: 2 per multiply-add";

/// Which part of a training step a node belongs to (the tape tells execute()).
enum class CostPhase : uint8_t {
  forward,      ///< the forward pass (and anything run outside autograd)
  recompute,    ///< forward values recomputed inside a backward graph (rematerialisation)
  input_grad,   ///< backward work that yields gradients of activations and inputs
  weight_grad,  ///< backward work that yields gradients of weights
};
/// Number of CostPhase values.
inline constexpr int kCostPhaseCount = 4;
/// "forward", "recompute", "input_grad" or "weight_grad".
std::string_view cost_phase_name(CostPhase phase);

/// Counts of one bucket of executed work. FLOPs follow kFlopConvention; matmul_flops are the
/// contractions' share (what torch's FlopCounterMode counts); bytes are what the nodes read and
/// wrote, each tensor once (views move nothing).
struct CostTotals {
  int64_t flops = 0;          ///< every FLOP: contractions, elementwise maps, reductions
  int64_t matmul_flops = 0;   ///< the contractions' FLOPs only
  int64_t bytes_read = 0;     ///< bytes read by the nodes
  int64_t bytes_written = 0;  ///< bytes written by the nodes
  int64_t kernels = 0;        ///< generated kernels launched plus BLAS calls

  /// Adds another bucket.
  CostTotals& operator+=(const CostTotals& other);
  /// Equal when every count is.
  bool operator==(const CostTotals&) const = default;
};

/// A counting scope on the calling thread, from construction to destruction. Scopes nest:
/// every scope alive on the thread counts what runs (like nested FlopCounterModes). Work run
/// on other threads by the caller is not counted. Not copyable or movable (it is registered
/// by address).
class FlopCounter {
 public:
  /// Starts counting and the wall clock.
  FlopCounter();
  /// Stops counting.
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  /// Everything counted so far.
  const CostTotals& totals() const { return totals_; }
  /// The counts of one phase.
  const CostTotals& phase(CostPhase p) const { return phases_[static_cast<int>(p)]; }
  /// The counts by origin: the pattern or expression text of each graph that ran; kernels run
  /// outside any graph go under the kernel's name ("softmax", "adamw"), BLAS calls under "gemm".
  const std::map<std::string, CostTotals, std::less<>>& by_origin() const { return origins_; }

  /// Wall-clock seconds since construction (or reset()).
  double seconds() const;
  /// Achieved FLOP/s: totals().flops / seconds().
  double flops_per_second() const;
  /// Model FLOPs utilisation: FLOPs of every phase but recompute, per second, over the dense
  /// peak of `hw` for `dtype` (PaLM's MFU, Chowdhery et al. 2022, App. B). 0 when the device
  /// has no such arithmetic.
  double mfu(const HardwareProfile& hw, DType dtype) const;
  /// Hardware FLOPs utilisation: like mfu() but recomputed FLOPs count too (PaLM's HFU).
  double hfu(const HardwareProfile& hw, DType dtype) const;

  /// Zeroes the counts and restarts the clock.
  void reset();
  /// A text table: totals, per phase, per origin, FLOP/s, with the convention on top.
  std::string report() const;

  /// Adds one node's counts (called by the executor; see runtime/counters.h).
  void add(std::string_view origin, CostPhase phase, const CostTotals& cost);

 private:
  CostTotals totals_;
  std::array<CostTotals, kCostPhaseCount> phases_{};
  std::map<std::string, CostTotals, std::less<>> origins_;
  std::chrono::steady_clock::time_point start_;
};

/// FLOP/s achieved over the dense peak: flops / seconds / hw.peak(math_mode_of(dtype)); 0 when
/// the device has no such arithmetic or no time passed. (nanoGPT's estimate_mfu and the
/// lecture's mfu = actual_flop_per_sec / promised_flop_per_sec.)
double utilization(double flops, double seconds, const HardwareProfile& hw, DType dtype);

/// The math mode whose peak applies to arithmetic on `dtype` (f32 → fp32, bf16 → bf16, ...;
/// integers → fp32 as a stand-in).
MathMode math_mode_of(DType dtype);

}  // namespace ein
