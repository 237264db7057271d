// A CUDA device for tests on machines without one. While a FakeCudaDevice lives:
//  - cuda:N memory is host memory (a DeviceBackend registered for DeviceKind::cuda), so tensors
//    `.to(ein::cuda())` work, kept from the host outside the fake's own operations and guarded
//    at both ends (tests/support/fake_device_memory.h): host code reading a device pointer, or
//    a kernel reaching outside its buffers, stops with a message as a GPU would fault;
//  - kernels are the real CUDA C++ ein emits, compiled for the host against the emulation of
//    tests/compiler/emit/host_emulation.h (tests/support/host_cuda.h) and run with at most two
//    blocks, so every grid-stride loop wraps; each is also compiled by NVRTC for sm_80 and sm_90
//    (where NVRTC loads) and refused on a compile error or any local memory (f64 kernels:
//    counted, see fake_cuda.cpp); a launch beyond the kernel's __launch_bounds__, or asking for
//    more shared memory than an sm_90 block has (its __shared__ arrays counted), is refused;
//  - GEMMs go through cuBLASLt's plan (plan_cublaslt_gemm, the same row-major → column-major
//    mapping the GPU gets) and a naive column-major interpreter of cuBLASLt's semantics, in
//    f64 arithmetic with f32 rounding of 16-bit products' sums as cuBLASLt's f32 accumulation
//    (products beyond 2^26 multiply-adds: the plan's operands gathered in f64 and multiplied
//    by the host's f64 GEMM, the same sums in another order).
//  - asynchronous copies happen as late as a GPU may do them (fake_cuda.cpp's FakeStream): one
//    to the host lands when the host waits (synchronize(), a blocking copy), reading as NaN
//    until then; one to the device reads its source when the next operation needs it.
// So the whole path from a graph node to a launch (device placement, allocation, memoised
// emission, the kernel ABI, total stores, copies, GEMM layouts, gathers) runs in CI. What it
// cannot check: the GPU's own arithmetic, several streams, and timing.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace ein::testing {

/// Installs the fake for its lifetime (one at a time); restores the real backend after.
class FakeCudaDevice {
 public:
  /// Whether the fake can run here; `why` says what is missing when not.
  static bool available(std::string* why = nullptr);

  /// What a launch or GEMM does: `run` computes (tests); `count` checks and counts it as `run`
  /// does but computes nothing, but for kernels of one buffer (fills: a device check's flags
  /// must read as clear), so device values are meaningless (fresh memory reads as zero) while
  /// the host takes the path it takes with `run`: for benches of ein's host time, which would
  /// otherwise spend seconds a step in the emulated kernels.
  enum class Work { run, count };

  explicit FakeCudaDevice(Work work = Work::run);
  ~FakeCudaDevice();
  FakeCudaDevice(const FakeCudaDevice&) = delete;
  FakeCudaDevice& operator=(const FakeCudaDevice&) = delete;

  int64_t kernels_prepared() const;  ///< sources compiled for the host (or found cached)
  int64_t launches() const;          ///< kernel launches
  int64_t gemms() const;             ///< GEMM batches
  int64_t bytes_in_use() const;      ///< fake device memory allocated now
  int64_t pinned_bytes() const;      ///< pinned host memory allocated now
  int64_t async_copies() const;      ///< non-blocking host<->device copies
  int64_t bytes_to_device() const;   ///< bytes copied from the host, blocking or not
  int64_t bytes_to_host() const;     ///< bytes copied to the host, blocking or not
  int64_t f64_kernels_spilling() const;  ///< f64 kernels with local memory (fake_cuda.cpp)
  /// The calling thread's CPU time: in all, and in the fake's operations (allocations, copies,
  /// launches, GEMMs, preparing kernels: what a GPU and its driver would do). The first less the
  /// second is the thread's own host work, as a GPU machine would do it but for the driver's
  /// calls, whatever the emulated kernels' threads take from the machine meanwhile.
  static double thread_cpu_seconds();
  static double thread_cpu_seconds_in_operations();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

/// Why the tensor-core attention kernels (WMMA) cannot compile here, or "" when they can: NVRTC
/// is loaded but its CUDA headers lack mma.h's crt/mma.h (NVRTC from pip), so
/// cuda_attention_uses_tensor_cores() is false and their tests skip with this.
std::string wmma_unavailable_reason();

}  // namespace ein::testing
