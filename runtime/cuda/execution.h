// What tensor execution asks of a CUDA device, behind one interface: prepare a kernel from
// CUDA C++ source (compiled by NVRTC for the device's architecture, cached, loaded once),
// launch it on the device's current stream, and run a strided batched GEMM (cuBLASLt).
// The driver's implementation is the default. Tests install another (tests/support/
// fake_cuda.h runs the same sources on the host under an emulation of the CUDA execution
// model, with "device" memory in host memory), so the whole path from a graph node to a kernel
// launch is exercised where no GPU exists.
//
// The compiler (exec/cuda_executor.h) writes the sources and keeps one prepared kernel per
// Kernel IR key; this file knows nothing of Kernel IR.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/blas/gemm.h"
#include "runtime/cuda/cublaslt.h"

namespace ein {

/// A kernel ready to launch on one device (what prepare() returns; opaque to callers).
class CudaFunction {
 public:
  virtual ~CudaFunction() = default;
  /// The extern "C" entry's name, for messages.
  virtual const std::string& entry() const = 0;
};

/// A kernel's CUDA C++ as prepare() takes it.
struct CudaSource {
  std::string source;  ///< one translation unit defining `entry` (compiler/emit/emit_cuda.h's ABI)
  std::string entry;
  /// Compiled for the architecture-specific target (sm_90a: wgmma, setmaxnreg), whose code runs
  /// on that architecture alone; else for sm_XX.
  bool arch_specific = false;
};

/// The operations tensor execution needs from CUDA devices.
class CudaExecution {
 public:
  virtual ~CudaExecution() = default;
  /// `kernel` compiled and loaded for cuda:`device`. DeviceError with NVRTC's log when it does
  /// not compile, with the driver's message when it does not load.
  virtual std::shared_ptr<const CudaFunction> prepare(int device, const CudaSource& kernel) = 0;
  /// Queues `grid` blocks of `block` threads of `function` on cuda:`device`'s current stream
  /// (grid 0: nothing), each with `shared_bytes` of dynamic shared memory (its extern
  /// __shared__ array). `buffers` are device addresses, `params` run-time scalars.
  virtual void launch(int device, const CudaFunction& function, int64_t grid, int block,
                      std::span<void* const> buffers, std::span<const double> params,
                      int shared_bytes) = 0;
  /// Queues `g` (device addresses of cuda:`device`) on its current stream.
  virtual void gemm(int device, const GemmBatch& g, GemmMath math) = 0;
  /// cuda:`device`'s compute capability × 10 (sm_90 → 90): what its kernels may use.
  virtual int arch(int device) = 0;
};

/// The installed implementation: the driver's unless a test installed another.
CudaExecution& cuda_execution();

/// Installs `execution` for every later call (nullptr: the driver's again). For tests.
void set_cuda_execution(std::shared_ptr<CudaExecution> execution);

/// Counts set_cuda_execution() calls: what prepare() returned under an earlier value belongs
/// to another implementation (callers keying caches of functions include it).
uint64_t cuda_execution_generation();

/// How f32 GEMMs on CUDA compute: exact f32 unless EIN_CUDA_TF32=1 (or set_cuda_gemm_math)
/// asks for TF32 tensor cores, like torch.backends.cuda.matmul.allow_tf32.
GemmMath cuda_gemm_math();
/// Sets how f32 GEMMs on CUDA compute from now on.
void set_cuda_gemm_math(GemmMath math);

}  // namespace ein
