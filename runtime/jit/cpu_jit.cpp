// CpuJit: the memory and disk caches in front of llvm_jit.h's compile and load. get() goes
//   1. memory: key -> shared_future of the function (concurrent callers of one key wait on the
//      first caller's compile instead of compiling again);
//   2. disk: <dir>/<key hex>.o, checked and loaded into its own JITDylib;
//   3. compile, load, and write the object back to disk.
// It holds no MLIR or LLVM type; failed compiles are not cached.
#include "runtime/jit/cpu_jit.h"

#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <mutex>
#include <unordered_map>

#include "runtime/cache_dir.h"
#include "runtime/jit/disk_cache.h"
#include "runtime/jit/llvm_jit.h"

namespace ein {
namespace {

struct KeyHash {
  size_t operator()(const detail::JitCacheKey& key) const {
    return key.low ^ (key.high * 0x9e3779b97f4a7c15ULL);
  }
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::filesystem::path default_disk_cache_dir() {
  const std::filesystem::path root = cache_root();
  return root.empty() || cache_root_is_explicit() ? root : root / "cpu";
}

}  // namespace

std::string mlir_buffer_prologue(std::span<const std::string_view> element_types) {
  const std::string descriptor = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>";
  std::string out =
      "  %buf_zero = llvm.mlir.constant(0 : i64) : i64\n"
      "  %buf_one = llvm.mlir.constant(1 : i64) : i64\n"
      "  %buf_size = llvm.mlir.constant(" +
      std::to_string(kMlirUnknownBufferSize) + " : i64) : i64\n";
  for (size_t i = 0; i < element_types.size(); ++i) {
    const std::string n = std::to_string(i);
    const std::string d = "%buf_d" + n + "_";
    out += "  %buf_a" + n + " = llvm.getelementptr %buffers[" + n +
           "] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n";
    out += "  %buf_p" + n + " = llvm.load %buf_a" + n + " : !llvm.ptr -> !llvm.ptr\n";
    out += "  " + d + "0 = llvm.mlir.undef : " + descriptor + "\n";
    out += "  " + d + "1 = llvm.insertvalue %buf_p" + n + ", " + d + "0[0] : " + descriptor + "\n";
    out += "  " + d + "2 = llvm.insertvalue %buf_p" + n + ", " + d + "1[1] : " + descriptor + "\n";
    out += "  " + d + "3 = llvm.insertvalue %buf_zero, " + d + "2[2] : " + descriptor + "\n";
    out += "  " + d + "4 = llvm.insertvalue %buf_size, " + d + "3[3, 0] : " + descriptor + "\n";
    out += "  " + d + "5 = llvm.insertvalue %buf_one, " + d + "4[4, 0] : " + descriptor + "\n";
    out += "  %b" + n + " = builtin.unrealized_conversion_cast " + d + "5 : " + descriptor +
           " to memref<?x" + std::string(element_types[i]) + ">\n";
  }
  return out;
}

struct CpuJit::Impl {
  mutable std::mutex mutex;
  std::unordered_map<detail::JitCacheKey, std::shared_future<CpuKernelFn>, KeyHash> kernels;
  CpuJitStats stats;
  std::filesystem::path disk_dir = default_disk_cache_dir();
  bool disk_disabled = false;  // set after a failed write, until set_disk_cache_dir
  uint64_t next_dylib = 0;

  std::string dylib_name(const detail::JitCacheKey& key) {
    std::lock_guard lock(mutex);
    return "ein_" + key.hex() + "_" + std::to_string(next_dylib++);
  }

  CpuKernelFn from_disk(const std::filesystem::path& dir, const detail::JitCacheKey& key,
                        std::string_view symbol) {
    const auto start = std::chrono::steady_clock::now();
    auto entry = detail::read_jit_cache(dir, key);
    if (entry.status == detail::JitCacheRead::Status::kMissing) return nullptr;
    std::string error = entry.reason;
    if (entry.status == detail::JitCacheRead::Status::kLoaded) {
      if (CpuKernelFn fn = detail::load_object(entry.payload, symbol, dylib_name(key), &error)) {
        std::lock_guard lock(mutex);
        ++stats.disk_hits;
        stats.last_disk_load_ms = ms_since(start);
        return fn;
      }
    }
    std::lock_guard lock(mutex);
    ++stats.disk_rejected;
    return nullptr;
  }

  CpuKernelFn compile(std::string_view source, std::string_view symbol,
                      const std::filesystem::path& dir, const detail::JitCacheKey& key) {
    const auto start = std::chrono::steady_clock::now();
    const std::string object = detail::compile_mlir_to_object(source, symbol);
    std::string error;
    CpuKernelFn fn = detail::load_object(object, symbol, dylib_name(key), &error);
    if (!fn)
      throw DeviceError("CPU JIT: the LLJIT refused the object of kernel '" + std::string(symbol) +
                        "': " + error);
    {
      std::lock_guard lock(mutex);
      ++stats.compiled;
      stats.last_compile_ms = ms_since(start);
    }
    if (!dir.empty()) {
      if (auto failure = detail::write_jit_cache(dir, key, object)) {
        std::lock_guard lock(mutex);
        if (!disk_disabled && disk_dir == dir) {
          disk_disabled = true;
          std::cerr << "ein: warning: CPU JIT disk cache disabled: " << *failure << "\n";
        }
      }
    }
    return fn;
  }
};

CpuJit::CpuJit() : impl_(std::make_unique<Impl>()) {}
CpuJit::~CpuJit() = default;

CpuJit& CpuJit::instance() {
  static CpuJit jit;
  return jit;
}

CpuKernelFn CpuJit::get(std::string_view mlir_source, std::string_view symbol) {
  const auto key = detail::jit_cache_key(mlir_source, symbol, target(), detail::llvm_version());
  std::promise<CpuKernelFn> promise;
  std::shared_future<CpuKernelFn> pending;
  std::filesystem::path dir;
  {
    std::lock_guard lock(impl_->mutex);
    if (auto it = impl_->kernels.find(key); it != impl_->kernels.end()) {
      ++impl_->stats.memory_hits;
      pending = it->second;
    } else {
      impl_->kernels.emplace(key, promise.get_future().share());
      if (!impl_->disk_disabled) dir = impl_->disk_dir;
    }
  }
  if (pending.valid()) return pending.get();  // waits if another thread is still compiling it
  try {
    CpuKernelFn fn = dir.empty() ? nullptr : impl_->from_disk(dir, key, symbol);
    if (!fn) fn = impl_->compile(mlir_source, symbol, dir, key);
    promise.set_value(fn);
    return fn;
  } catch (...) {
    {
      std::lock_guard lock(impl_->mutex);
      impl_->kernels.erase(key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

const std::string& CpuJit::target() const {
  return detail::llvm_host_target();
}

CpuJitStats CpuJit::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

void CpuJit::set_disk_cache_dir(std::filesystem::path dir) {
  std::lock_guard lock(impl_->mutex);
  impl_->disk_dir = std::move(dir);
  impl_->disk_disabled = false;
}

const std::filesystem::path& CpuJit::disk_cache_dir() const {
  return impl_->disk_dir;
}

void CpuJit::clear_memory_cache() {
  std::lock_guard lock(impl_->mutex);
  impl_->kernels.clear();
}

}  // namespace ein
