// Hand-written kernels in the CPU JIT's ABI (runtime/jit/cpu_jit.h) and a fixture that gives
// every test its own disk cache folder. Kernels take a `nonce` that goes into a comment, so a
// test can force a fresh compile of the same code.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "runtime/jit/cpu_jit.h"

namespace ein::testing {

inline std::string kernel_head(std::string_view symbol, std::vector<std::string_view> types,
                               std::string_view nonce) {
  return "// nonce " + std::string(nonce) + "\nfunc.func @" + std::string(symbol) +
         "(%buffers: !llvm.ptr, %begin: index, %end: index) {\n" + mlir_buffer_prologue(types);
}

/// y = exp(x) * 2 + 1 over f32: 8 lanes at a time, then a scalar tail. x: buffer 0, y: buffer 1.
inline std::string exp_kernel(std::string_view symbol, std::string_view nonce = "") {
  return kernel_head(symbol, {"f32", "f32"}, nonce) + R"(
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %two = arith.constant dense<2.0> : vector<8xf32>
  %onev = arith.constant dense<1.0> : vector<8xf32>
  %two_s = arith.constant 2.0 : f32
  %one_s = arith.constant 1.0 : f32
  %n = arith.subi %end, %begin : index
  %rem = arith.remui %n, %c8 : index
  %vend = arith.subi %end, %rem : index
  scf.for %i = %begin to %vend step %c8 {
    %x = vector.load %b0[%i] : memref<?xf32>, vector<8xf32>
    %e = math.exp %x : vector<8xf32>
    %m = arith.mulf %e, %two : vector<8xf32>
    %y = arith.addf %m, %onev : vector<8xf32>
    vector.store %y, %b1[%i] : memref<?xf32>, vector<8xf32>
  }
  scf.for %i = %vend to %end step %c1 {
    %x = memref.load %b0[%i] : memref<?xf32>
    %e = math.exp %x : f32
    %m = arith.mulf %e, %two_s : f32
    %y = arith.addf %m, %one_s : f32
    memref.store %y, %b1[%i] : memref<?xf32>
  }
  return
}
)";
}

/// Rows of 100 f32: out[r] = sum_j x[r*100 + j]^2, with vector.transfer_read, an 8-lane
/// accumulator, vector.reduction and a scalar tail of 4. x: buffer 0, out: buffer 1.
inline constexpr int kRowLength = 100;
inline std::string row_sum_of_squares_kernel(std::string_view symbol, std::string_view nonce = "") {
  return kernel_head(symbol, {"f32", "f32"}, nonce) + R"(
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c96 = arith.constant 96 : index
  %c100 = arith.constant 100 : index
  %zero = arith.constant dense<0.0> : vector<8xf32>
  %pad = arith.constant 0.0 : f32
  scf.for %r = %begin to %end step %c1 {
    %base = arith.muli %r, %c100 : index
    %acc = scf.for %j = %c0 to %c96 step %c8 iter_args(%a = %zero) -> (vector<8xf32>) {
      %idx = arith.addi %base, %j : index
      %x = vector.transfer_read %b0[%idx], %pad {in_bounds = [true]} : memref<?xf32>, vector<8xf32>
      %sq = arith.mulf %x, %x : vector<8xf32>
      %a2 = arith.addf %a, %sq : vector<8xf32>
      scf.yield %a2 : vector<8xf32>
    }
    %s = vector.reduction <add>, %acc : vector<8xf32> into f32
    %t = scf.for %j = %c96 to %c100 step %c1 iter_args(%a = %s) -> (f32) {
      %idx = arith.addi %base, %j : index
      %x = memref.load %b0[%idx] : memref<?xf32>
      %sq = arith.mulf %x, %x : f32
      %a2 = arith.addf %a, %sq : f32
      scf.yield %a2 : f32
    }
    memref.store %t, %b1[%r] : memref<?xf32>
  }
  return
}
)";
}

/// f32, 8 lanes, [begin, end) a multiple of 8: buffers 1..4 = exp(x), log(x), tanh(x - 2),
/// erf(x - 2) of buffer 0 (SLEEF's vector functions).
inline std::string f32_math_kernel(std::string_view symbol) {
  return kernel_head(symbol, {"f32", "f32", "f32", "f32", "f32"}, "") + R"(
  %c8 = arith.constant 8 : index
  %twov = arith.constant dense<2.0> : vector<8xf32>
  scf.for %i = %begin to %end step %c8 {
    %x = vector.load %b0[%i] : memref<?xf32>, vector<8xf32>
    %e = math.exp %x : vector<8xf32>
    vector.store %e, %b1[%i] : memref<?xf32>, vector<8xf32>
    %l = math.log %x : vector<8xf32>
    vector.store %l, %b2[%i] : memref<?xf32>, vector<8xf32>
    %s = arith.subf %x, %twov : vector<8xf32>
    %t = math.tanh %s : vector<8xf32>
    vector.store %t, %b3[%i] : memref<?xf32>, vector<8xf32>
    %r = math.erf %s : vector<8xf32>
    vector.store %r, %b4[%i] : memref<?xf32>, vector<8xf32>
  }
  return
}
)";
}

/// f64 scalar y = tanh(x) + erf(x) + sqrt(|x|): libm calls resolved from the process.
inline std::string f64_libm_kernel(std::string_view symbol) {
  return kernel_head(symbol, {"f64", "f64"}, "") + R"(
  %c1 = arith.constant 1 : index
  scf.for %i = %begin to %end step %c1 {
    %x = memref.load %b0[%i] : memref<?xf64>
    %t = math.tanh %x : f64
    %e = math.erf %x : f64
    %a = math.absf %x : f64
    %q = math.sqrt %a : f64
    %s = arith.addf %t, %e : f64
    %y = arith.addf %s, %q : f64
    memref.store %y, %b1[%i] : memref<?xf64>
  }
  return
}
)";
}

/// Gives each test an empty disk cache folder of its own and an empty memory cache.
class JitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("ein_jit_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    jit().set_disk_cache_dir(dir_);
    jit().clear_memory_cache();
  }
  void TearDown() override {
    jit().clear_memory_cache();
    std::filesystem::remove_all(dir_);
  }
  static CpuJit& jit() { return CpuJit::instance(); }
  std::filesystem::path dir_;
};

}  // namespace ein::testing
