// Runs each CPU case of bench/compare_cpu.py a number of times after a warm-up and prints one
// JSON line per case: its median and minimum wall time, the bytes it moves (read + written) and
// the floating-point operations it does. It measures; it does not compare: compare_cpu.py runs
// PyTorch and numpy on the same cases in the same run and prints the ratios. Cases marked
// "diagnostic" are not ein ops: they take one op apart (the kernel into a preallocated output,
// another loop order, hand-written AVX2 loops, another GEMM threading) to show where time goes.
//
//   build-bench/bin/ein_cpu_timings [--reps N] [--warmup N] [--only GROUP] | --dump-mlir
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <sys/mman.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <ein/ein.h>
#include <fmt/format.h>

#include "compiler/emit/emit_mlir.h"
#include "compiler/kernel/prepare.h"
#include "compiler/pipeline.h"
#include "exec/cpu_executor.h"
#include "exec/run_kernel.h"
#include "exec/fused_ops.h"
#include "compiler/kernel/kernel_ir.h"
#include "exec/tensor_kernels.h"
#include "runtime/blas/gemm.h"
#include "runtime/jit/cpu_jit.h"
#include "runtime/parallel.h"

// OpenBLAS's thread control (cblas.h stays inside runtime/blas; these two are all we need).
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace ein {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int reps = 20;
  int warmup = 3;
  std::string only;
};

/// Keeps the optimiser from dropping a result.
void keep(const Tensor& t) {
  const void* p = t.data_ptr();
  asm volatile("" : : "g"(p) : "memory");
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Prints one result line; `seconds` are per call (one entry per repetition).
void report(const std::string& name, const std::string& what, std::vector<double> seconds,
            double bytes, double flops, const std::string& note = "") {
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  std::printf("%s\n",
              fmt::format(R"({{"case": "{}", "what": "{}", "median_s": {:.9g}, )"
                          R"("min_s": {:.9g}, "reps": {}, "bytes": {:.0f}, "flops": {:.0f}, )"
                          R"("note": "{}"}})",
                          name, what, median, seconds.front(), n, bytes, flops, note)
                  .c_str());
  std::fflush(stdout);
}

/// `reps` timings of `f` (each call once) after `warmup` untimed calls.
std::vector<double> time_calls(const Options& o, const std::function<void()>& f) {
  for (int i = 0; i < o.warmup; ++i)
    f();
  std::vector<double> out;
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = Clock::now();
    f();
    out.push_back(seconds_since(t0));
  }
  return out;
}

/// Like time_calls, but each repetition runs `batch` calls and records the time per call.
std::vector<double> time_batched(const Options& o, int batch, const std::function<void()>& f) {
  for (int i = 0; i < batch; ++i)
    f();
  std::vector<double> out;
  for (int i = 0; i < o.reps; ++i) {
    const auto t0 = Clock::now();
    for (int j = 0; j < batch; ++j)
      f();
    out.push_back(seconds_since(t0) / batch);
  }
  return out;
}

// Hand-written AVX2 loops for the diagnostic rows: what the generated code could reach.
#if defined(__x86_64__)
/// `n` floats (a multiple of 8, 32-byte aligned) copied with AVX2 non-temporal stores.
__attribute__((target("avx2"))) void copy_streaming(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 8)
    _mm256_stream_ps(dst + i, _mm256_load_ps(src + i));
  _mm_sfence();
}

/// Row means of a (rows, cols) f32 matrix (cols a multiple of 8·Acc) with `Acc` independent
/// 8-lane accumulators: Acc = 2 is one 16-lane chain, like the generated reduction's single
/// vector<16xf32>; Acc = 8 is four such chains.
template <int Acc>
__attribute__((target("avx2"))) void row_sums(const float* x, float* out, int64_t rows,
                                              int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    __m256 acc[Acc];
    for (__m256& a : acc)
      a = _mm256_setzero_ps();
    const float* row = x + r * cols;
    for (int64_t i = 0; i < cols; i += 8 * Acc)
      for (int j = 0; j < Acc; ++j)
        acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(row + i + 8 * j));
    for (int j = 1; j < Acc; ++j)
      acc[0] = _mm256_add_ps(acc[0], acc[j]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[0]);
    float sum = 0;
    for (float v : lanes)
      sum += v;
    out[r] = sum / static_cast<float>(cols);
  }
}

/// The same loop with ordinary stores (each destination line is read before it is written).
__attribute__((target("avx2"))) void copy_plain(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 8)
    _mm256_store_ps(dst + i, _mm256_load_ps(src + i));
  asm volatile("" : : "g"(dst) : "memory");
}
#endif

void bandwidth_cases(const Options& o) {
  // 32 MiB of f32: (b s (h d)) = (8 1024 (8 128)).
  const int64_t b = 8, s = 1024, h = 8, d = 128, n = b * s * h * d;
  const double bytes = 2.0 * static_cast<double>(n) * 4;  // read + written
  // 64-byte aligned (the CPU backend's alignment), as the streaming stores need.
  const Tensor src_t = full({n}, 1.0), dst_t = zeros({n});
  float* const src = static_cast<float*>(src_t.data_ptr());
  float* const dst = static_cast<float*>(dst_t.data_ptr());
  report("memcpy", "std::memcpy 32 MiB, one thread, preallocated destination",
         time_calls(o, [&] { std::memcpy(dst, src, n * 4); }), bytes, 0);
  report("memcpy_2t", "std::memcpy 32 MiB split over 2 threads, preallocated destination",
         time_calls(o,
                    [&] {
                      parallel_for(0, n, n / 2, [&](int64_t lo, int64_t hi) {
                        std::memcpy(dst + lo, src + lo, (hi - lo) * 4);
                      });
                    }),
         bytes, 0);
  report("memcpy_fresh", "std::memcpy 32 MiB into a fresh allocation (page faults included)",
         time_calls(o,
                    [&] {
                      Tensor out = empty({n});
                      std::memcpy(out.data_ptr(), src, n * 4);
                      keep(out);
                    }),
         bytes, 0);

  // What a 2 MiB-aligned allocation with MADV_HUGEPAGE (numpy does this for large arrays)
  // would save: 16 page faults instead of 8192 where transparent huge pages are "madvise".
  report("memcpy_fresh_thp", "std::memcpy 32 MiB into fresh 2 MiB-aligned MADV_HUGEPAGE memory",
         time_calls(o,
                    [&] {
                      const size_t nbytes = static_cast<size_t>(n) * 4;
                      void* p = std::aligned_alloc(size_t{2} << 20, nbytes);
                      madvise(p, nbytes, MADV_HUGEPAGE);
                      std::memcpy(p, src, nbytes);
                      asm volatile("" : : "g"(p) : "memory");
                      std::free(p);
                    }),
         bytes, 0, "a diagnostic for the allocator, not an ein op");
#if defined(__x86_64__)
  report("copy_stream_stores", "AVX2 copy loop of 32 MiB, non-temporal stores, 2 threads",
         time_calls(o,
                    [&] {
                      parallel_for(0, n, n / 2, [&](int64_t lo, int64_t hi) {
                        copy_streaming(dst + lo, src + lo, hi - lo);
                      });
                    }),
         bytes, 0, "a diagnostic for the emitter's stores, not an ein op");
  report("copy_plain_stores", "AVX2 copy loop of 32 MiB, ordinary stores, 2 threads",
         time_calls(o,
                    [&] {
                      parallel_for(0, n, n / 2, [&](int64_t lo, int64_t hi) {
                        copy_plain(dst + lo, src + lo, hi - lo);
                      });
                    }),
         bytes, 0, "what the generated kernels do (vector.store)");
#endif
  const Tensor x = randn({b, s, h * d}, DType::f32, cpu(), 1);
  report("rearrange_copy", "rearrange 'b s (h d) -> b h (s d)' h=8 on (8,1024,1024): JIT copy",
         time_calls(o,
                    [&] {
                      keep(rearrange(x, "b s (h d) -> b h (s d)", {{"h", h}}));
                    }),
         bytes, 0, "allocates its 32 MiB output each call, like torch");
  // The same copy kernel into a preallocated output: the kernel alone, without page faults.
  const Tensor permuted = x.view({b, s, h, d}).permute({0, 2, 1, 3});
  const Tensor into = empty({b, h, s, d});
  report("rearrange_copy_into", "the same JIT copy kernel into a preallocated output",
         time_calls(o, [&] { copy_into(into, permuted); }), bytes, 0);
  // The same bytes moved with the loop nest in the input's order (b s h d): reads stream
  // through whole 4 KiB rows, writes go to h streams of d floats (numpy's order).
  const Tensor into_input_order = into.permute({0, 2, 1, 3});
  const Tensor x4 = x.view({b, s, h, d});
  report("rearrange_copy_into_input_order",
         "the same copy into a preallocated output, loop nest in the input's order",
         time_calls(o, [&] { copy_into(into_input_order, x4); }), bytes, 0,
         "a diagnostic for the loop order, not what rearrange runs");
  report("rearrange_view_contiguous",
         "rearrange 'b s (h d) -> b h s d' (a view) then .contiguous(): runtime generic copy",
         time_calls(o,
                    [&] {
                      keep(rearrange(x, "b s (h d) -> b h s d", {{"h", h}}).contiguous());
                    }),
         bytes, 0);
  report("mean", "reduce 'b s d -> b s' mean on (8,1024,1024) f32",
         time_calls(o, [&] { keep(reduce(x, "b s d -> b s", "mean")); }),
         static_cast<double>(n) * 4 + static_cast<double>(b * s) * 4, 0);
#if defined(__x86_64__)
  // The mean by hand, 2 threads over rows: the generated kernel's single accumulator chain
  // against four independent ones (what LLVM would do given reassociation).
  const Tensor means = empty({b, s});
  const auto hand_mean = [&](auto sums) {
    return time_calls(o, [&] {
      parallel_for(0, b * s, 256, [&](int64_t lo, int64_t hi) {
        sums(static_cast<const float*>(x.data_ptr()) + lo * h * d,
             static_cast<float*>(means.data_ptr()) + lo, hi - lo, h * d);
      });
    });
  };
  report("mean_by_hand_1chain", "AVX2 row means, one 16-lane accumulator (as generated)",
         hand_mean(row_sums<2>), static_cast<double>(n) * 4, 0,
         "a diagnostic for the reduction emitter, not an ein op");
  report("mean_by_hand_4chains", "AVX2 row means, four 16-lane accumulators",
         hand_mean(row_sums<8>), static_cast<double>(n) * 4, 0,
         "a diagnostic for the reduction emitter, not an ein op");
#endif
}

/// The fused chain of map_chain as Kernel IR by hand, plus a distinct constant so that each
/// `salt` gives new MLIR text (a new JIT key): (x - m)**2 * w + c + salt.
Kernel fused_kernel(int salt, int64_t b = 4, int64_t s = 8, int64_t d = 16) {
  Kernel k;
  k.name = "bench_fused";
  k.origin = "bench: (x - m)**2 * w + c + salt";
  k.domain = {b, s, d};
  k.add_buffer(DType::f32, {s * d, d, 1});  // x: (b s d)
  k.add_buffer(DType::f32, {s, 1, 0});      // m: (b s)
  k.add_buffer(DType::f32, {0, 0, 1});      // w: (d)
  k.add_buffer(DType::f32, {0, 0, 1});      // c: (d)
  k.add_buffer(DType::f32, {s * d, d, 1}, true);
  const int diff = k.apply(ScalarOp::sub, k.load(0), k.load(1));
  const int scaled = k.apply(ScalarOp::mul, k.apply(ScalarOp::square, diff), k.load(2));
  const int shifted = k.apply(ScalarOp::add, scaled, k.load(3));
  k.body = k.apply(ScalarOp::add, shifted, k.constant(salt + 0.5));
  k.result = k.body;
  return k;
}

void map_case(const Options& o) {
  // 64 MiB of f32 x: (b s d) = (16 1024 1024).
  const int64_t b = 16, s = 1024, d = 1024, n = b * s * d;
  const Tensor x = randn({b, s, d}, DType::f32, cpu(), 2);
  const Tensor m = randn({b, s}, DType::f32, cpu(), 3);
  const Tensor w = randn({d}, DType::f32, cpu(), 4);
  const Tensor c = randn({d}, DType::f32, cpu(), 5);
  const double bytes = 4.0 * (2.0 * n + b * s + 2.0 * d);
  report("map_chain", "map 'x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c', x 64 MiB",
         time_calls(
             o,
             [&] {
               keep(ein::map("x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c", {x, m, w, c}));
             }),
         bytes, 4.0 * n, "allocates its 64 MiB output each call, like torch");
  // The same loop (plus one add) run by the executor into a preallocated output.
  const Tensor out = empty({b, s, d});
  const Kernel k = fused_kernel(0, b, s, d);
  const std::vector<Tensor> buffers = {x, m, w, c, out};
  report("map_chain_into", "the same fused kernel (Kernel IR by hand) into a preallocated output",
         time_calls(o, [&] { run_kernel(k, buffers); }), bytes, 5.0 * n);
}

void gemm_cases(const Options& o) {
  {
    const int64_t b = 8, s = 128, d = 1024, f = 1024;
    const Tensor x = randn({b, s, d}, DType::f32, cpu(), 6);
    const Tensor w = randn({d, f}, DType::f32, cpu(), 7);
    report("gemm", "einsum 'b s d, d f -> b s f' (8,128,1024)x(1024,1024) f32",
           time_calls(o, [&] { keep(einsum("b s d, d f -> b s f", x, w)); }), 0,
           2.0 * b * s * d * f);
  }
  {
    const int64_t b = 4, h = 8, q = 256, k = 256, d = 64;
    const Tensor qt = randn({b, h, q, d}, DType::f32, cpu(), 8);
    const Tensor kt = randn({b, h, k, d}, DType::f32, cpu(), 9);
    report("attn_scores", "einsum 'b h q d, b h k d -> b h q k' (4,8,256,64) f32",
           time_calls(o, [&] { keep(einsum("b h q d, b h k d -> b h q k", qt, kt)); }), 0,
           2.0 * b * h * q * k * d);
    // The same 32 GEMMs with OpenBLAS held to one thread and TBB across the batch (what
    // gemm_batched does below its 1 MFLOP threshold; these are 8.4 MFLOP each).
    const GemmBatch one = {.dtype = DType::f32,
                           .batch = 1,
                           .m = q,
                           .n = k,
                           .k = d,
                           .trans_a = false,
                           .trans_b = true,
                           .a = qt.data_ptr(),
                           .lda = d,
                           .stride_a = 0,
                           .b = kt.data_ptr(),
                           .ldb = d,
                           .stride_b = 0,
                           .c = nullptr,
                           .ldc = k,
                           .stride_c = 0,
                           .alpha = 1,
                           .beta = 0};
    const int saved = openblas_get_num_threads();
    openblas_set_num_threads(1);
    report("attn_scores_batch_parallel",
           "the same 32 GEMMs, one OpenBLAS thread each, TBB across the batch",
           time_calls(o,
                      [&] {
                        const Tensor out = empty({b, h, q, k});
                        parallel_for(0, b * h, 1, [&](int64_t lo, int64_t hi) {
                          for (int64_t i = lo; i < hi; ++i) {
                            GemmBatch g = one;
                            g.a = static_cast<const float*>(qt.data_ptr()) + i * q * d;
                            g.b = static_cast<const float*>(kt.data_ptr()) + i * k * d;
                            g.c = static_cast<float*>(out.data_ptr()) + i * q * k;
                            gemm_batched(g);
                          }
                        });
                        keep(out);
                      }),
           0, 2.0 * b * h * q * k * d, "a diagnostic for gemm.cpp's threading, not an ein op");
    openblas_set_num_threads(saved);
  }
}

void overhead_cases(const Options& o) {
  const Tensor x = randn({2, 16, 64}, DType::f32, cpu(), 10);
  const Op split = compile("b s (h d) -> b h s d", {{"h", 8}});
  report("view_call", "compiled op 'b s (h d) -> b h s d' h=8 returning a view (per call)",
         time_batched(o, 20000, [&] { keep(split(x)); }), 0, 0);
  report("rearrange_view_call", "ein::rearrange of the same view pattern, uncompiled (per call)",
         time_batched(o, 20000,
                      [&] {
                        keep(rearrange(x, "b s (h d) -> b h s d", {{"h", 8}}));
                      }),
         0, 0);
  const Tensor small = randn({16}, DType::f32, cpu(), 11);
  report("small_map", "map 'x[i] -> x * 2 + 1' over 16 f32 (per call, output allocated)",
         time_batched(o, 20000, [&] { keep(ein::map("x[i] -> x * 2 + 1", {small})); }), 0, 0);
}

void compile_cases(const Options& o) {
  CpuJit& jit = CpuJit::instance();
  const std::filesystem::path saved = jit.disk_cache_dir();
  const auto stamp = std::chrono::system_clock::now().time_since_epoch().count();
  const int first_salt = 1;  // salts are unique within this process; the disk cache is fresh
  // 1. MLIR text -> native code for one fused kernel, disk cache off.
  jit.set_disk_cache_dir({});
  std::vector<double> compile_s, llvm_ms;
  for (int i = 0; i < o.reps; ++i) {
    const std::string src = emit_kernel(fused_kernel(first_salt + i), Target::mlir);
    const auto t0 = Clock::now();
    jit.get(src, "ein_bench_fused");
    compile_s.push_back(seconds_since(t0));
    llvm_ms.push_back(jit.stats().last_compile_ms);
  }
  std::sort(llvm_ms.begin(), llvm_ms.end());
  report("compile_fused", "CpuJit::get of a new fused kernel's MLIR (disk cache off)", compile_s, 0,
         0, fmt::format("JIT's own last_compile_ms median {:.1f}", llvm_ms[llvm_ms.size() / 2]));
  // 2. The whole first call of a map expression never seen before: parse, lower, emit, compile,
  //    run (on 512 elements).
  const Tensor x = randn({4, 8, 16}, DType::f32, cpu(), 12);
  const Tensor m = randn({4, 8}, DType::f32, cpu(), 13);
  const Tensor w = randn({16}, DType::f32, cpu(), 14);
  std::vector<double> first_call;
  for (int i = 0; i < o.reps; ++i) {
    const std::string expr =
        fmt::format("x[b s d], m[b s], w[d] -> (x - m)**2 * w + {}.5", first_salt + i);
    const auto t0 = Clock::now();
    keep(ein::map(expr, {x, m, w}));
    first_call.push_back(seconds_since(t0));
  }
  report("compile_map_e2e", "first ein::map call of a new expression (disk cache off)", first_call,
         0, 0);
  // 3. A disk-cache hit: compile once (written to disk), forget the memory cache, get again.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("ein_bench_cache_{}", stamp);
  jit.set_disk_cache_dir(dir);
  std::vector<double> hit_s;
  const int64_t hits_before = jit.stats().disk_hits;
  for (int i = 0; i < o.reps; ++i) {
    const std::string src = emit_kernel(fused_kernel(first_salt + o.reps + i), Target::mlir);
    jit.get(src, "ein_bench_fused");
    jit.clear_memory_cache();
    const auto t0 = Clock::now();
    jit.get(src, "ein_bench_fused");
    hit_s.push_back(seconds_since(t0));
  }
  const int64_t hits = jit.stats().disk_hits - hits_before;
  report("disk_hit", "CpuJit::get of a fused kernel after clear_memory_cache (on disk)", hit_s, 0,
         0, fmt::format("{} of {} were disk hits", hits, o.reps));
  std::filesystem::remove_all(dir);
  jit.set_disk_cache_dir(saved);
}

/// The fused kernels of exec/fused_ops.h at the sizes of the autograd issue's targets:
/// softmax over the last dim of (64, 1024, 512) f32 into a fresh output (read + write), and
/// one AdamW step over 16M f32 parameters (read param, grad, exp_avg, exp_avg_sq; write three).
void fused_cases(const Options& o) {
  {
    const Tensor x = randn({64, 1024, 512}, DType::f32, cpu(), 21);
    const double bytes = 2.0 * static_cast<double>(x.nbytes());
    report("softmax", "softmax_rows(x), x: (64 1024 512) f32, one row kernel, fresh output",
           time_calls(o, [&] { keep(softmax_rows(x)); }), bytes, 0);
  }
  {
    const int64_t n = int64_t{16} << 20;
    const Tensor param = randn({n}, DType::f32, cpu(), 22),
                 grad = randn({n}, DType::f32, cpu(), 23);
    const Tensor m = zeros({n}, DType::f32, cpu()), v = zeros({n}, DType::f32, cpu());
    int64_t step = 0;
    const double bytes = 7.0 * static_cast<double>(param.nbytes());
    report("adamw", "adamw_update on 16M f32 parameters, in place, one pass",
           time_calls(o, [&] { adamw_update(param, grad, m, v, AdamWConfig{}, ++step); }), bytes,
           0);
  }
}

/// `k` run as the executor runs it, but on the schedules mode B had before row blocks: the
/// register strips (64 points walked down every row, their sums in registers) or, with
/// `panels`, a panel of each thread's share of the points walked row by row (the sums in an
/// 8 KB stack array per stage). Diagnostic baselines for the column cases; compiled once per
/// kernel and schedule.
std::function<void()> register_schedule(const Kernel& k, const std::vector<Tensor>& buffers,
                                        bool panels = false) {
  const Kernel prepared = prepare_kernel(to_general_form(k));
  CpuSchedule s = schedule_cpu(prepared, num_threads());
  const int p = prepared.parallel_dims();
  int64_t rows = 1;
  for (size_t d = static_cast<size_t>(p); d < prepared.domain.size(); ++d)
    rows *= prepared.domain[d];
  const int64_t n = prepared.domain[static_cast<size_t>(p - 1)], whole = s.vector_width * s.group;
  s.row_block = 0;
  s.panel = panels ? 8192 / static_cast<int64_t>(element_size(prepared.compute)) : 0;
  if (panels) {
    const int64_t share = (n + num_threads() - 1) / num_threads();
    s.chunk = std::min(s.panel, (share + s.vector_width - 1) / s.vector_width * s.vector_width);
  } else {
    s.chunk = std::min(n, (std::max<int64_t>(1, 16384 / rows) + whole - 1) / whole * whole);
  }
  s.outer_iterations = (n + s.chunk - 1) / s.chunk;
  for (int d = 0; d < p - 1; ++d)
    s.outer_iterations *= prepared.domain[static_cast<size_t>(d)];
  s.work_per_iteration = s.chunk * rows;
  const std::string symbol =
      std::string(panels ? "bench_panel_schedule_" : "bench_register_schedule_") + prepared.name;
  const CpuKernelFn fn =
      CpuJit::instance().get(emit_mlir(prepared, s, symbol), symbol);
  auto params = std::make_shared<std::vector<int64_t>>(kernel_parameters(prepared, s));
  auto ptrs = std::make_shared<std::vector<void*>>();
  for (const Tensor& t : buffers)
    ptrs->push_back(t.data_ptr());
  ptrs->push_back(params->data());
  ptrs->push_back(nullptr);
  const int64_t outer = s.outer_iterations;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.work_per_iteration));
  return [fn, params, ptrs, outer, grain] {
    parallel_for(0, outer, grain, [&](int64_t lo, int64_t hi) { fn(ptrs->data(), lo, hi); });
  };
}

/// Column sums beside the values they sum (mode B in one pass), as the fusion pass builds them
/// for a GPT's backward at T L H D B = 256 2 12 768 4 (rows = b·t = 1024): GELU's backward with
/// its bias gradient over (1024, 3072), and LayerNorm's mean gradient added to the residual's
/// with its column sum over (1024, 768). Domains are (columns, rows) with the rows reduced.
void column_cases(const Options& o) {
  // GELU's backward over (rows, columns): the GPT's MLP at 256 2 12 768 4 (1024, 3072) and at
  // 128 4 8 256 16 (2048, 1024), and rows 8 KB or more apart or less (the schedule's limit).
  const std::pair<int64_t, int64_t> shapes[] = {{1024, 3072}, {1536, 2048}, {768, 4096},
                                                 {2048, 1024}, {3072, 1024}, {4096, 512}};
  for (const auto& [rows, cols] : shapes) {
    Kernel k;
    k.name = "bench_gelu_grad_sum";
    k.origin = "bench: h = gelu(x), g = dy * gelu(x) stored, sum over rows of g";
    k.domain = {cols, rows};
    k.reduced = 1;
    k.add_buffer(DType::f32, {1, cols});        // x
    k.add_buffer(DType::f32, {1, cols});        // dy
    k.add_buffer(DType::f32, {1, cols}, true);  // gelu(x)
    k.add_buffer(DType::f32, {1, cols}, true);  // dy · gelu(x)
    k.add_buffer(DType::f32, {1, 0}, true);     // the column sums
    const int h = k.apply(ScalarOp::gelu_tanh, k.load(0));
    const int g = k.apply(ScalarOp::mul, k.load(1), h);
    k.store(2, h);
    k.store(3, g);
    k.store(4, k.reduce(Combine::sum, g));
    const Tensor x = randn({rows, cols}, DType::f32, cpu(), 31),
                 dy = randn({rows, cols}, DType::f32, cpu(), 32);
    const Tensor h_out = empty({rows, cols}), g_out = empty({rows, cols}), sums = empty({cols});
    const std::vector<Tensor> buffers = {x, dy, h_out, g_out, sums};
    const std::string shape = fmt::format("({}, {})", rows, cols);
    const double bytes = 4.0 * 4 * static_cast<double>(rows * cols);
    report(fmt::format("columns_gelu_grad_{}x{}", rows, cols),
           "mode B in one pass: " + shape + " f32, two in, two out, sums",
           time_calls(o, [&] { run_kernel(k, buffers); }), bytes, 0,
           "a diagnostic for the column-reduction schedule");
    report(fmt::format("columns_gelu_grad_{}x{}_registers", rows, cols),
           "the same kernel on mode B's register schedule",
           time_calls(o, register_schedule(k, buffers)), bytes, 0,
           "the schedule before panels, for comparison");
    report(fmt::format("columns_gelu_grad_{}x{}_panels", rows, cols),
           "the same kernel in panels of a thread's share of the points",
           time_calls(o, register_schedule(k, buffers, true)), bytes, 0,
           "the schedule before row blocks (for rows 8 KB or more apart), for comparison");
  }
  const int64_t rows = 1024;
  {
    const int64_t cols = 768;
    Kernel k;
    k.name = "bench_mean_grad_sum";
    k.origin = "bench: y = x + m / 768 stored, sum over rows of y";
    k.domain = {cols, rows};
    k.reduced = 1;
    k.add_buffer(DType::f32, {0, 1});           // m: one value per row
    k.add_buffer(DType::f32, {1, cols});        // x
    k.add_buffer(DType::f32, {1, cols}, true);  // y
    k.add_buffer(DType::f32, {1, 0}, true);     // the column sums
    const int y = k.apply(ScalarOp::add, k.load(1),
                          k.apply(ScalarOp::mul, k.load(0), k.constant(1.0 / 768)));
    k.store(2, y);
    k.store(3, k.reduce(Combine::sum, y));
    const Tensor m = randn({rows}, DType::f32, cpu(), 33),
                 x = randn({rows, cols}, DType::f32, cpu(), 34);
    const Tensor y_out = empty({rows, cols}), sums = empty({cols});
    const std::vector<Tensor> buffers = {m, x, y_out, sums};
    report("columns_mean_grad", "mode B in one pass: (1024, 768) f32, one in, one out, sums",
           time_calls(o, [&] { run_kernel(k, buffers); }), 2.0 * 4 * rows * cols, 0,
           "a diagnostic for the column-reduction schedule");
    report("columns_mean_grad_registers", "the same kernel on mode B's register schedule",
           time_calls(o, register_schedule(k, buffers)), 2.0 * 4 * rows * cols, 0,
           "the schedule before panels, for comparison");
  }
  // LayerNorm's backward as the 128 4 8 256 16 step fuses it over (2048, 256): the forward's
  // output recomputed from x, the row mean and 1/σ, w and b; the three incoming gradients of
  // q, k and v summed; four column sums (two biases, LayerNorm's bias and weight) and three
  // row-wise terms stored. Seven inputs and four outputs over the rows.
  for (const auto& [r, c] : {std::pair<int64_t, int64_t>{2048, 256}, {1024, 768}}) {
    Kernel k;
    k.name = "bench_layernorm_grad_sums";
    k.origin = "bench: LayerNorm's backward beside q, k and v's, with four column sums";
    k.domain = {c, r};
    k.reduced = 1;
    const Shape full{1, c}, per_row{0, 1}, per_col{1, 0};
    const int x = k.load(k.add_buffer(DType::f32, full)),
              mean = k.load(k.add_buffer(DType::f32, per_row)),
              rstd = k.load(k.add_buffer(DType::f32, per_row)),
              w = k.load(k.add_buffer(DType::f32, per_col)),
              b = k.load(k.add_buffer(DType::f32, per_col));
    int d[6];
    for (int& di : d) di = k.load(k.add_buffer(DType::f32, full));
    const int centred = k.apply(ScalarOp::sub, x, mean);
    const int normed = k.apply(ScalarOp::mul, centred, rstd);
    const int dx = k.apply(ScalarOp::add, k.apply(ScalarOp::add, d[1], d[2]), d[4]);
    const int dn = k.apply(ScalarOp::mul, dx, w);
    const int scaled = k.apply(ScalarOp::mul, dn, rstd);
    k.store(k.add_output(DType::f32, full),
            k.apply(ScalarOp::add, k.apply(ScalarOp::mul, normed, w), b));
    k.store(k.add_output(DType::f32, per_col), k.reduce(Combine::sum, d[0]));
    k.store(k.add_output(DType::f32, per_col), k.reduce(Combine::sum, d[3]));
    k.store(k.add_output(DType::f32, per_col), k.reduce(Combine::sum, dx));
    k.store(k.add_output(DType::f32, per_col),
            k.reduce(Combine::sum, k.apply(ScalarOp::mul, dx, normed)));
    k.store(k.add_output(DType::f32, full), k.apply(ScalarOp::mul, dn, centred));
    k.store(k.add_output(DType::f32, full), k.apply(ScalarOp::neg, scaled));
    k.store(k.add_output(DType::f32, full), k.apply(ScalarOp::add, d[5], scaled));
    std::vector<Tensor> buffers = {randn({r, c}, DType::f32, cpu(), 40),
                                   randn({r}, DType::f32, cpu(), 41),
                                   randn({r}, DType::f32, cpu(), 42),
                                   randn({c}, DType::f32, cpu(), 43),
                                   randn({c}, DType::f32, cpu(), 44)};
    for (int i = 0; i < 6; ++i)
      buffers.push_back(randn({r, c}, DType::f32, cpu(), 45 + i));
    buffers.push_back(empty({r, c}));
    for (int i = 0; i < 4; ++i)
      buffers.push_back(empty({c}));
    for (int i = 0; i < 3; ++i)
      buffers.push_back(empty({r, c}));
    const double bytes = 11.0 * 4 * static_cast<double>(r * c);
    const std::string name = fmt::format("columns_layernorm_grad_{}x{}", r, c);
    report(name, fmt::format("mode B in one pass: ({}, {}) f32, seven in, four out, four sums",
                             r, c),
           time_calls(o, [&] { run_kernel(k, buffers); }), bytes, 0,
           "a diagnostic for the column-reduction schedule");
    report(name + "_registers", "the same kernel on mode B's register schedule",
           time_calls(o, register_schedule(k, buffers)), bytes, 0,
           "the schedule before row blocks (r under 8 KB apart), for comparison");
  }
}

/// The copy kernel of rearrange_copy as Kernel IR: out (b h s d) <- x (b s (h d)).
Kernel split_heads_copy() {
  const int64_t b = 8, s = 1024, h = 8, d = 128;
  Kernel k;
  k.name = "bench_copy";
  k.origin = "bench: b s (h d) -> b h (s d)";
  k.domain = {b, h, s, d};
  k.add_buffer(DType::f32, {s * h * d, d, h * d, 1});
  k.add_buffer(DType::f32, {h * s * d, s * d, d, 1}, true);
  k.body = k.load(0);
  k.result = k.body;
  return k;
}

/// The mean of the mean case as Kernel IR, as reduce_dims builds it: out (b s) <- x (b s d).
Kernel mean_last_dim() {
  const int64_t b = 8, s = 1024, d = 1024;
  Kernel k;
  k.name = "bench_mean";
  k.origin = "bench: b s d -> b s (mean)";
  k.domain = {b, s, d};
  k.reduced = 1;
  k.combine = Combine::sum;
  k.add_buffer(DType::f32, {s * d, d, 1});
  k.add_buffer(DType::f32, {s, 1, 0}, true);
  k.body = k.load(0);
  k.result = k.apply(ScalarOp::div, k.accumulator(), k.constant(static_cast<double>(d)));
  return k;
}

int run(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--dump-mlir") {  // for reading the generated code
    std::printf("%s\n%s\n%s\n", emit_kernel(split_heads_copy(), Target::mlir).c_str(),
                emit_kernel(fused_kernel(0), Target::mlir).c_str(), emit_kernel(mean_last_dim(), Target::mlir).c_str());
    return 0;
  }
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps")
      o.reps = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--warmup")
      o.warmup = std::max(0, std::atoi(argv[i + 1]));
    else if (flag == "--only")
      o.only = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--warmup N] [--only GROUP]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<std::pair<std::string, void (*)(const Options&)>> groups = {
      {"bandwidth", bandwidth_cases}, {"map", map_case},          {"gemm", gemm_cases},
      {"overhead", overhead_cases},   {"compile", compile_cases}, {"fused", fused_cases},
      {"columns", column_cases},
  };
  std::fprintf(stderr,
               "ein_cpu_timings: %d TBB threads, %d OpenBLAS threads, %d repetitions after %d "
               "warm-up\n",
               num_threads(), openblas_get_num_threads(), o.reps, o.warmup);
  for (const auto& [name, f] : groups)
    if (o.only.empty() || o.only == name) f(o);
  return 0;
}

}  // namespace
}  // namespace ein

int main(int argc, char** argv) {
  return ein::run(argc, argv);
}
