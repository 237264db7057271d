// The two steps of the CPU JIT that need MLIR and LLVM, behind a std-only interface: compile
// MLIR text to a host object file, and load an object file into the process-wide ORC LLJIT.
// Caching, keys and counters live in cpu_jit.cpp; this file knows nothing about them.
#pragma once

#include <string>
#include <string_view>

#include "runtime/jit/cpu_jit.h"

namespace ein::detail {

/// "<triple> <cpu> <sorted +feature list>": what generated code is specialised for.
const std::string& llvm_host_target();

/// The LLVM version the JIT was built against ("19.1.x"); part of every cache key.
std::string_view llvm_version();

/// Compiles `source` (MLIR, see cpu_jit.h for the ABI) to an ELF object for the host at O3.
/// Throws DeviceError with MLIR's diagnostics and the numbered source on parse, verify or
/// lowering failure, or if `symbol` is not a function of the module.
std::string compile_mlir_to_object(std::string_view source, std::string_view symbol);

/// Loads `object` into a new JITDylib named `dylib` (unique per call) and returns the address
/// of `symbol`. On any failure returns nullptr, removes the JITDylib and sets `*error`.
CpuKernelFn load_object(std::string_view object, std::string_view symbol, const std::string& dylib,
                        std::string* error);

}  // namespace ein::detail
