// The CPU JIT: MLIR text (func/scf/arith/math/memref/vector) -> LLVM IR -> O3 native code for
// the host CPU, loaded into one process-wide ORC LLJIT and cached in memory and on disk. It
// compiles kernels; it does not decide how to split them across threads or what they compute.
//
// ## The kernel ABI (the contract every emitter follows)
//
// Every kernel is `void kernel(void* const* buffers, int64_t begin, int64_t end)`: buffers[i]
// points at element 0 of buffer i, and the kernel runs iterations [begin, end) of its outermost
// (parallel) loop, so the caller may split that range across threads. In MLIR it is a public
// `func.func @symbol(%buffers: !llvm.ptr, %begin: index, %end: index)` (index is i64 on x86-64).
// A buffer becomes a 1-D memref by loading its pointer and building a memref descriptor whose
// allocated and aligned pointers are that pointer, offset 0, stride 1 and size
// kMlirUnknownBufferSize; `builtin.unrealized_conversion_cast` turns the descriptor into a
// `memref<?xT>` and reconcile-unrealized-casts folds the cast away once finalize-memref-to-llvm
// has lowered the memref ops. mlir_buffer_prologue() prints exactly this text. A complete
// kernel, y[i] = exp(x[i]) * 2 + 1 over f32, 8 lanes at a time plus a scalar tail
// (buffer 0 = x, buffer 1 = y; tests/runtime/jit compiles and runs this very text):
//
// clang-format off
//   func.func @ein_kernel_example(%buffers: !llvm.ptr, %begin: index, %end: index) {
//     %buf_zero = llvm.mlir.constant(0 : i64) : i64
//     %buf_one = llvm.mlir.constant(1 : i64) : i64
//     %buf_size = llvm.mlir.constant(1152921504606846976 : i64) : i64
//     %buf_a0 = llvm.getelementptr %buffers[0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
//     %buf_p0 = llvm.load %buf_a0 : !llvm.ptr -> !llvm.ptr
//     %buf_d0_0 = llvm.mlir.undef : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d0_1 = llvm.insertvalue %buf_p0, %buf_d0_0[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d0_2 = llvm.insertvalue %buf_p0, %buf_d0_1[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d0_3 = llvm.insertvalue %buf_zero, %buf_d0_2[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d0_4 = llvm.insertvalue %buf_size, %buf_d0_3[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d0_5 = llvm.insertvalue %buf_one, %buf_d0_4[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %b0 = builtin.unrealized_conversion_cast %buf_d0_5 : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> to memref<?xf32>
//     %buf_a1 = llvm.getelementptr %buffers[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
//     %buf_p1 = llvm.load %buf_a1 : !llvm.ptr -> !llvm.ptr
//     %buf_d1_0 = llvm.mlir.undef : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d1_1 = llvm.insertvalue %buf_p1, %buf_d1_0[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d1_2 = llvm.insertvalue %buf_p1, %buf_d1_1[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d1_3 = llvm.insertvalue %buf_zero, %buf_d1_2[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d1_4 = llvm.insertvalue %buf_size, %buf_d1_3[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %buf_d1_5 = llvm.insertvalue %buf_one, %buf_d1_4[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
//     %b1 = builtin.unrealized_conversion_cast %buf_d1_5 : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> to memref<?xf32>
//     %c1 = arith.constant 1 : index
//     %c8 = arith.constant 8 : index
//     %two = arith.constant dense<2.0> : vector<8xf32>
//     %onev = arith.constant dense<1.0> : vector<8xf32>
//     %two_s = arith.constant 2.0 : f32
//     %one_s = arith.constant 1.0 : f32
//     %n = arith.subi %end, %begin : index
//     %rem = arith.remui %n, %c8 : index
//     %vend = arith.subi %end, %rem : index
//     scf.for %i = %begin to %vend step %c8 {
//       %x = vector.load %b0[%i] : memref<?xf32>, vector<8xf32>
//       %e = math.exp %x : vector<8xf32>
//       %m = arith.mulf %e, %two : vector<8xf32>
//       %y = arith.addf %m, %onev : vector<8xf32>
//       vector.store %y, %b1[%i] : memref<?xf32>, vector<8xf32>
//     }
//     scf.for %i = %vend to %end step %c1 {
//       %x = memref.load %b0[%i] : memref<?xf32>
//       %e = math.exp %x : f32
//       %m = arith.mulf %e, %two_s : f32
//       %y = arith.addf %m, %one_s : f32
//       memref.store %y, %b1[%i] : memref<?xf32>
//     }
//     return
//   }
// clang-format on
//
// Rules: the function must stay public (private ones get internal linkage and cannot be looked
// up); the prologue names are `%buf_*` (emitters must not use that prefix) and `%b<i>`; with
// the large size, memref.dim is meaningless and vector.transfer_read must be in_bounds (or masked
// by the emitter), because a transfer's bounds check compares against that size. f32 exp, log,
// sin and cos call SLEEF's 1-ulp vector functions, f32 tanh and erf become MLIR's rational
// approximations (all stay vectorized; docs/numerics.md); f64 math calls libm. Kernels may be
// parsed with the dialects func, arith, math, memref, vector, scf, cf, llvm, index and ub; the
// lowering pipeline is listed in llvm_jit.cpp.
//
// ## Caching and symbols
//
// The key of a kernel is XXH3-128 of (source, symbol, target(), LLVM version, file format
// version). Each key is loaded into its own JITDylib, so two sources may use the same symbol
// name without clashing; the caller still names kernels by a hash of their source. On disk an
// entry is `<key hex>.o`: a header (magic, format version, key, payload size, payload XXH3-64)
// and the object file; any mismatch is counted in disk_rejected, recompiled and rewritten.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <ein/errors.h>

namespace ein {

/// Signature of every JIT-compiled CPU kernel (see the ABI above).
using CpuKernelFn = void (*)(void* const* buffers, int64_t begin, int64_t end);

/// The size given to a buffer's memref descriptor when the prologue is not told one (2^60).
inline constexpr int64_t kMlirUnknownBufferSize = int64_t{1} << 60;

/// MLIR text binding `%b<i>: memref<?x<element_types[i]>>` to buffers[i] of `%buffers`, for
/// every i (element types as MLIR spells them: "f32", "f64", "i64", "i1" ...), with size
/// kMlirUnknownBufferSize. Paste it at the top of the kernel function's body.
std::string mlir_buffer_prologue(std::span<const std::string_view> element_types);

/// Counters of the CPU JIT since process start.
struct CpuJitStats {
  int64_t compiled = 0, memory_hits = 0, disk_hits = 0, disk_rejected = 0;
  double last_compile_ms = 0, last_disk_load_ms = 0;
};

/// The process-wide JIT: compiles MLIR kernels once, caches them in memory and on disk.
class CpuJit {
 public:
  static CpuJit& instance();  ///< the process-wide JIT (thread-safe)
  ~CpuJit();
  CpuJit(const CpuJit&) = delete;
  CpuJit& operator=(const CpuJit&) = delete;

  /// Returns the native function `symbol` of `mlir_source`, compiling it on first use. Throws
  /// DeviceError with MLIR's diagnostics and the numbered source if it does not compile.
  CpuKernelFn get(std::string_view mlir_source, std::string_view symbol);
  const std::string& target() const;  ///< triple, CPU name and features used
  CpuJitStats stats() const;          ///< a snapshot of the counters
  /// Sets the disk cache folder (created on first write); an empty path disables the disk cache.
  void set_disk_cache_dir(std::filesystem::path dir);
  /// The disk cache folder, or empty; not synchronised with a concurrent set_disk_cache_dir.
  const std::filesystem::path& disk_cache_dir() const;
  void clear_memory_cache();  ///< for tests: the next get() goes to disk (old pointers stay valid)

 private:
  CpuJit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ein
