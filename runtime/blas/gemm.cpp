// gemm_batched on OpenBLAS's cblas_sgemm/cblas_dgemm and, where it is built in, oneDNN's
// dnnl_sgemm, with the batch loop and its threading.
#include "runtime/blas/gemm.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if __has_include(<cblas-openblas.h>)
#include <cblas-openblas.h>
#else
#include <cblas.h>
#endif

#if EIN_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include <ein/errors.h>
#include <ein/scalar_convert.h>

#include "runtime/counters.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

// Below this many FLOPs per GEMM, OpenBLAS's own threading does not pay (it stays on one
// thread for small sizes anyway), so the batch is what gets parallelised.
constexpr double kSmallGemmFlops = 1 << 20;
// Up to this size a GEMM still runs better on one core when the batch has one per thread
// (b h q d, b h k d -> b h q k at 256×256×64: 1.4× faster than threading each GEMM).
constexpr double kBatchParallelFlops = 32 << 20;

blasint to_blas(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    throw RuntimeError(std::string("gemm_batched: ") + what + " = " + std::to_string(v) +
                       " is outside OpenBLAS's 32-bit integer range");
  }
  return static_cast<blasint>(v);
}

void check_ld(int64_t ld, int64_t cols, const char* what) {
  if (ld < std::max<int64_t>(1, cols)) {
    throw RuntimeError(std::string("gemm_batched: ") + what + " = " + std::to_string(ld) +
                       " is smaller than the stored row length " + std::to_string(cols));
  }
}

/// C[i] = beta·C[i] for the k = 0 case, which BLAS leaves to us.
template <class T>
void scale_c(const GemmBatch& g) {
  for (int64_t i = 0; i < g.batch; ++i) {
    T* c = static_cast<T*>(g.c) + i * g.stride_c;
    for (int64_t r = 0; r < g.m; ++r) {
      for (int64_t col = 0; col < g.n; ++col) {
        T& x = c[r * g.ldc + col];
        x = g.beta == 0 ? T(0) : static_cast<T>(g.beta) * x;
      }
    }
  }
}

/// Serialises changes of OpenBLAS's global thread count.
std::mutex& blas_threads_mutex() {
  static std::mutex mutex;
  return mutex;
}

/// OpenBLAS held to one thread for the guard's life, for work that ein splits over TBB's
/// threads itself (no OpenBLAS threads next to TBB's); changes of the count are serialised.
class OneOpenBlasThread {
 public:
  OneOpenBlasThread() : lock_(blas_threads_mutex()), saved_(openblas_get_num_threads()) {
    openblas_set_num_threads(1);
  }
  ~OneOpenBlasThread() { openblas_set_num_threads(saved_); }
  OneOpenBlasThread(const OneOpenBlasThread&) = delete;
  OneOpenBlasThread& operator=(const OneOpenBlasThread&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
  int saved_;
};

/// The f32 library choice: EIN_BLAS's (unset: automatic), until a test overrides it. oneDNN,
/// as in PyTorch's CPU matmul, selects its kernels for the CPU at run time; OpenBLAS follows
/// OPENBLAS_CORETYPE when the environment sets one, and this project's build machines set it
/// to the AVX2 Haswell kernels on AVX-512 CPUs, where oneDNN's sgemm is about 1.9x faster
/// (bench/gemm_backends.sh).
std::atomic<F32Blas>& f32_blas_choice() {
  static std::atomic<F32Blas> choice = [] {
    const char* env = std::getenv("EIN_BLAS");
    const std::string v = env == nullptr ? "" : env;
    return v == "openblas" ? F32Blas::openblas
           : v == "onednn" ? F32Blas::onednn
                           : F32Blas::automatic;
  }();
  return choice;
}

/// The pointers to A, B and C of the tile of GEMM i at row r0 and column c0 of C.
template <class T>
std::tuple<const T*, const T*, T*> tile_operands(const GemmBatch& g, int64_t i, int64_t r0,
                                                 int64_t c0) {
  return {static_cast<const T*>(g.a) + i * g.stride_a + (g.trans_a ? r0 : r0 * g.lda),
          static_cast<const T*>(g.b) + i * g.stride_b + (g.trans_b ? c0 * g.ldb : c0),
          static_cast<T*>(g.c) + i * g.stride_c + r0 * g.ldc + c0};
}

#if EIN_HAVE_ONEDNN
/// One f32 GEMM tile on OpenBLAS on the calling thread (a OneOpenBlasThread held around it).
void openblas_tile(const GemmBatch& g, int64_t i, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const auto [a, b, c] = tile_operands<float>(g, i, r0, c0);
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(r1 - r0),
              static_cast<blasint>(c1 - c0), static_cast<blasint>(g.k), static_cast<float>(g.alpha),
              a, static_cast<blasint>(g.lda), b, static_cast<blasint>(g.ldb),
              static_cast<float>(g.beta), c, static_cast<blasint>(g.ldc));
}

/// Whether oneDNN runs AVX-512 kernels on this CPU. With them its sgemm multiplies a transposed
/// A at about its other layouts' rate (a tall C through run_transposed); with AVX2 kernels only
/// it does not, and OpenBLAS takes those GEMMs (F32Blas in gemm.h).
bool onednn_has_avx512() {
  static const bool avx512 =
      (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  return avx512;
}

/// One f32 GEMM on the calling thread: C = alpha·op(A)·op(B) + beta·C over rows [r0, r1) and
/// columns [c0, c1) of C. oneDNN's OpenMP team is never started (OpenMP is held to one thread
/// for the call, and the caller's setting restored after it) and ein splits GEMMs over TBB
/// itself: idle OpenMP workers spin, and next to TBB's workers on the same cores they made
/// steps up to 10x slower on a loaded machine.
void onednn_tile(const GemmBatch& g, int64_t i, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  struct OneOpenMPThread {
    int saved = omp_get_max_threads();
    OneOpenMPThread() { omp_set_num_threads(1); }
    ~OneOpenMPThread() { omp_set_num_threads(saved); }
  } one_thread;
  const auto [a, b, c] = tile_operands<float>(g, i, r0, c0);
  const dnnl_status_t status =
      dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', r1 - r0, c1 - c0, g.k,
                 static_cast<float>(g.alpha), a, g.lda, b, g.ldb, static_cast<float>(g.beta), c, g.ldc);
  if (status != dnnl_success)
    throw RuntimeError("gemm_batched: oneDNN's sgemm failed with status " + std::to_string(status));
}

/// bf16 GEMMs: oneDNN's matmul primitive (bf16 operands, f32 accumulation and result), on
/// AVX512_BF16/AMX where the CPU has them (about twice the f32 rate on Zen 4). Primitives are
/// made once per tile shape and layout; a tile runs on the calling thread (OpenMP held to one
/// thread, as for sgemm).
struct Bf16Key {
  int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb;
  bool bf16_c;  ///< C is bf16 (else f32)
  auto operator<=>(const Bf16Key&) const = default;
};

dnnl_engine_t bf16_engine() {
  static dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success)
      throw RuntimeError("gemm_batched: oneDNN's CPU engine could not be created");
    return e;
  }();
  return engine;
}

/// The matmul primitive of one tile layout, and the name of the kernel oneDNN chose for it.
std::pair<dnnl_primitive_t, std::string> make_bf16_primitive(const Bf16Key& key) {
  const auto check = [](dnnl_status_t s, const char* what) {
    if (s != dnnl_success)
      throw RuntimeError(std::string("gemm_batched: oneDNN's bf16 matmul failed in ") + what +
                         " (status " + std::to_string(s) + ")");
  };
  dnnl_memory_desc_t a, b, c;
  const dnnl_dims_t ad{key.m, key.k}, bd{key.k, key.n}, cd{key.m, key.n};
  const dnnl_dims_t as{key.ta ? 1 : key.lda, key.ta ? key.lda : 1};
  const dnnl_dims_t bs{key.tb ? 1 : key.ldb, key.tb ? key.ldb : 1};
  const dnnl_dims_t cs{key.ldc, 1};
  check(dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as), "the A descriptor");
  check(dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_bf16, bs), "the B descriptor");
  check(dnnl_memory_desc_init_by_strides(&c, 2, cd, key.bf16_c ? dnnl_bf16 : dnnl_f32, cs),
        "the C descriptor");
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &a, &b, nullptr, &c), "the matmul descriptor");
  // The scratchpad is the caller's (one per call): oneDNN's own is shared by every thread
  // unless the library was built for concurrent execution, and tiles run concurrently.
  dnnl_primitive_attr_t attr = nullptr;
  check(dnnl_primitive_attr_create(&attr), "the attributes");
  check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "the scratchpad");
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t described = dnnl_primitive_desc_create(&pd, &desc, attr, bf16_engine(), nullptr);
  dnnl_primitive_attr_destroy(attr);
  check(described, "the primitive descriptor");
  const char* impl = nullptr;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  std::string kernel = impl ? impl : "";
  dnnl_primitive_t prim = nullptr;
  const dnnl_status_t made = dnnl_primitive_create(&prim, pd);
  dnnl_primitive_desc_destroy(pd);
  check(made, "the primitive");
  return {prim, std::move(kernel)};
}

/// How a tile layout runs: its primitive, and whether A (and B) are first copied into dense
/// buffers. oneDNN 2.6's bf16 kernels for AVX512_BF16 and AMX ("brg:...") take no operand
/// whose rows lie further apart than their length (a slice of the fused q|k|v projection, or
/// a row tile of a transposed A); for those it falls back to its "gemm:jit" kernels (one AMX
/// core, 512×768×768 with A's rows 2304 apart: 2.2 ms against 0.5-1.6 ms dense,
/// bench/matmul_bf16_layouts.c). Copying the rows dense is one memcpy each, so it is done where
/// it turns a fallback into a brgemm kernel. That includes a transposed A's row tile, a band
/// of the stored k × m's columns (k rows of the tile's width): a weight gradient Xᵀ·dY split
/// over two threads ran each half on "gemm:jit" (AMX's brgemm only for the whole A). The
/// operand itself is never transposed: that made the weight-gradient GEMMs slower.
struct Bf16Plan {
  dnnl_primitive_t prim = nullptr;
  std::string kernel;
  bool pack_a = false, pack_b = false;
};

bool is_brgemm(const std::string& kernel) { return kernel.rfind("brg", 0) == 0; }

/// The plan of one tile layout (made once, kept for the process). The cache is never
/// destroyed: its primitives live as long as the process, reachable from a global pointer (a
/// static map's destructor would leave them unreachable at exit, which LeakSanitizer reports
/// as leaks in every process that ran a bf16 GEMM).
const Bf16Plan& bf16_plan(const Bf16Key& key) {
  static std::mutex mutex;
  static auto* const plans = new std::map<Bf16Key, Bf16Plan>();
  std::map<Bf16Key, Bf16Plan>& cache = *plans;
  std::lock_guard lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Bf16Plan plan;
  std::tie(plan.prim, plan.kernel) = make_bf16_primitive(key);
  const bool dense_a = key.lda == (key.ta ? key.m : key.k);
  const bool dense_b = key.ldb == (key.tb ? key.k : key.n);
  if (!is_brgemm(plan.kernel) && !(dense_a && dense_b)) {
    Bf16Key packed = key;
    packed.lda = key.ta ? key.m : key.k;
    packed.ldb = key.tb ? key.k : key.n;
    auto [prim, kernel] = make_bf16_primitive(packed);
    if (is_brgemm(kernel)) {
      dnnl_primitive_destroy(plan.prim);
      plan = Bf16Plan{prim, std::move(kernel), !dense_a, !dense_b};
    } else {
      dnnl_primitive_destroy(prim);
    }
  }
  return cache.emplace(key, std::move(plan)).first->second;
}

/// Rows [r0, r1) of a row-major matrix (row stride ld, `cols` per row) as a dense one in `out`.
void pack_bf16_rows(const uint16_t* a, int64_t ld, int64_t r0, int64_t r1, int64_t cols,
                    uint16_t* out) {
  for (int64_t r = r0; r < r1; ++r)
    std::memcpy(out + (r - r0) * cols, a + r * ld, static_cast<size_t>(cols) * sizeof(uint16_t));
}

/// Rows [r0, r1) of GEMM i of a bf16 batch on the calling thread: C = op(A)·op(B).
void bf16_tile(const GemmBatch& g, int64_t i, int64_t r0, int64_t r1) {
  struct OneOpenMPThread {
    int saved = omp_get_max_threads();
    OneOpenMPThread() { omp_set_num_threads(1); }
    ~OneOpenMPThread() { omp_set_num_threads(saved); }
  } one_thread;
  const int64_t m = r1 - r0;
  const Bf16Plan& plan =
      bf16_plan(Bf16Key{m, g.n, g.k, g.lda, g.ldb, g.ldc, g.trans_a, g.trans_b, g.bf16_c});
  const auto* a = static_cast<const uint16_t*>(g.a) + i * g.stride_a;
  const auto* b = static_cast<const uint16_t*>(g.b) + i * g.stride_b;
  thread_local std::vector<uint16_t> packed_a, packed_b;
  if (plan.pack_a) {
    packed_a.resize(static_cast<size_t>(m * g.k));
    if (g.trans_a)  // the tile's columns of every stored row
      pack_bf16_rows(a + r0, g.lda, 0, g.k, m, packed_a.data());
    else
      pack_bf16_rows(a, g.lda, r0, r1, g.k, packed_a.data());
    a = packed_a.data();
  } else {
    a += g.trans_a ? r0 : r0 * g.lda;
  }
  if (plan.pack_b) {
    const int64_t rows = g.trans_b ? g.n : g.k, cols = g.trans_b ? g.k : g.n;
    packed_b.resize(static_cast<size_t>(rows * cols));
    pack_bf16_rows(b, g.ldb, 0, rows, cols, packed_b.data());
    b = packed_b.data();
  }
  const auto c_bytes = static_cast<int64_t>(g.bf16_c ? sizeof(uint16_t) : sizeof(float));
  void* c = static_cast<char*>(g.c) + (i * g.stride_c + r0 * g.ldc) * c_bytes;
  dnnl_primitive_t prim = plan.prim;
  const_dnnl_primitive_desc_t pd = nullptr;
  dnnl_primitive_get_primitive_desc(prim, &pd);
  const dnnl_memory_desc_t* ad = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t* bd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t* cd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const dnnl_memory_desc_t* sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  thread_local std::vector<unsigned char> scratch;
  const size_t scratch_bytes = sd ? dnnl_memory_desc_get_size(sd) : 0;
  if (scratch.size() < scratch_bytes) scratch.resize(scratch_bytes);
  dnnl_memory_t ma = nullptr, mb = nullptr, mc = nullptr, ms = nullptr;
  dnnl_stream_t stream = nullptr;
  dnnl_status_t s = dnnl_memory_create(&ma, ad, bf16_engine(), const_cast<uint16_t*>(a));
  if (s == dnnl_success) s = dnnl_memory_create(&mb, bd, bf16_engine(), const_cast<uint16_t*>(b));
  if (s == dnnl_success) s = dnnl_memory_create(&mc, cd, bf16_engine(), c);
  if (s == dnnl_success && scratch_bytes > 0)
    s = dnnl_memory_create(&ms, sd, bf16_engine(), scratch.data());
  if (s == dnnl_success) s = dnnl_stream_create(&stream, bf16_engine(), dnnl_stream_default_flags);
  if (s == dnnl_success) {
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                                    {DNNL_ARG_SCRATCHPAD, ms}};
    s = dnnl_primitive_execute(prim, stream, ms ? 4 : 3, args);
    if (s == dnnl_success) s = dnnl_stream_wait(stream);
  }
  if (stream) dnnl_stream_destroy(stream);
  for (dnnl_memory_t mem : {ma, mb, mc, ms})
    if (mem) dnnl_memory_destroy(mem);
  if (s != dnnl_success)
    throw RuntimeError("gemm_batched: oneDNN's bf16 matmul failed (status " + std::to_string(s) + ")");
}

/// A bf16 batch: small GEMMs in parallel over the batch, larger ones split by rows over the
/// threads, one after another.
void run_bf16(const GemmBatch& g) {
  const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  const int threads = num_threads();
  if (g.batch > 1 && threads > 1 && (flops < kSmallGemmFlops || (g.batch >= threads && flops < kBatchParallelFlops))) {
    const auto grain = static_cast<int64_t>(std::max(1.0, kSmallGemmFlops / flops));
    parallel_for(0, g.batch, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) bf16_tile(g, i, 0, g.m);
    });
    return;
  }
  for (int64_t i = 0; i < g.batch; ++i) {
    if (threads == 1 || flops < kSmallGemmFlops || g.m < 32) {
      bf16_tile(g, i, 0, g.m);
      continue;
    }
    // At most two tile heights per GEMM (threads equal blocks, the last one shorter), so
    // the primitive cache stays small.
    const int64_t block = std::max<int64_t>(16, (g.m / threads + 15) / 16 * 16);
    parallel_for(0, (g.m + block - 1) / block, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) bf16_tile(g, i, t * block, std::min(g.m, (t + 1) * block));
    });
  }
}

void run_onednn(const GemmBatch& g, double flops, bool batch_parallel);

/// Whether one large GEMM C = Aᵀ·B runs faster as Cᵀ = Bᵀ·A and a transposing copy. oneDNN
/// 2.6's sgemm multiplies a transposed A more slowly when C is four times taller than wide
/// than in the transposed problem (Hᵀ·dY of a GPT MLP down-projection's weight gradient,
/// 1024×256 from 2048 rows: 80-109 against 142-153 GFLOP/s on one core; at 2048×768 the two
/// are even: bench/sgemm_transposed_a.c). The copy costs one pass over C.
bool transposed_is_faster(const GemmBatch& g, double flops) {
  return g.batch == 1 && g.trans_a && !g.trans_b && g.m >= 4 * g.n && flops >= kSmallGemmFlops;
}

/// C[i0 .. i0+rows, j0 .. j0+cols] = Tᵀ + beta·C for T stored cols × m (row j at t + j·m),
/// through an 8 × 8 tile: reading T's rows and writing C's both run along memory, and the
/// compiler vectorises the fixed-size loops (a third of the time of an element-by-element
/// transposing loop on a Zen 4 core, for the 3072 × 768 weight gradient of a GPT MLP).
void transpose_block(const float* t, int64_t m, float* c, int64_t ldc, int64_t i0, int64_t j0,
                     int64_t rows, int64_t cols, float beta) {
  constexpr int64_t kTile = 8;
  if (rows < kTile || cols < kTile) {
    for (int64_t i = i0; i < i0 + rows; ++i)
      for (int64_t j = j0; j < j0 + cols; ++j) {
        float& out = c[i * ldc + j];
        out = beta == 0 ? t[j * m + i] : t[j * m + i] + beta * out;
      }
    return;
  }
  alignas(32) float tile[kTile][kTile];
  for (int64_t jj = 0; jj < kTile; ++jj)
    for (int64_t ii = 0; ii < kTile; ++ii)
      tile[ii][jj] = t[(j0 + jj) * m + i0 + ii];
  for (int64_t ii = 0; ii < kTile; ++ii) {
    float* out = c + (i0 + ii) * ldc + j0;
    if (beta == 0) {
      for (int64_t jj = 0; jj < kTile; ++jj) out[jj] = tile[ii][jj];
    } else {
      for (int64_t jj = 0; jj < kTile; ++jj) out[jj] = tile[ii][jj] + beta * out[jj];
    }
  }
}

/// C = alpha·Aᵀ·B + beta·C as Cᵀ = alpha·Bᵀ·A into a scratch matrix, then C = Cᵀᵀ + beta·C
/// (beta 0 ignores C's old values, NaNs included), in 8 × 8 tiles over the threads.
void run_transposed(const GemmBatch& g, double flops) {
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(g.m * g.n));
  GemmBatch t = g;
  t.m = g.n, t.n = g.m;
  t.a = g.b, t.lda = g.ldb, t.trans_a = true;
  t.b = g.a, t.ldb = g.lda, t.trans_b = false;
  t.c = scratch.data(), t.ldc = g.m, t.beta = 0;
  run_onednn(t, flops, false);
  const float* ct = scratch.data();
  float* c = static_cast<float*>(g.c);
  const auto beta = static_cast<float>(g.beta);
  constexpr int64_t kBlock = 8;
  parallel_for(0, (g.m + kBlock - 1) / kBlock, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i0 = lo * kBlock; i0 < std::min(g.m, hi * kBlock); i0 += kBlock)
      for (int64_t j0 = 0; j0 < g.n; j0 += kBlock)
        transpose_block(ct, g.m, c, g.ldc, i0, j0, std::min(kBlock, g.m - i0),
                        std::min(kBlock, g.n - j0), beta);
  });
}

/// The batch split over the threads, each tile run by `tile` on its thread: small GEMMs in
/// parallel over the batch, larger ones one after another, each split into one block of rows
/// (or columns, for a wide C) per thread.
template <class Tile>
void run_split(const GemmBatch& g, double flops, bool batch_parallel, Tile tile) {
  const int threads = num_threads();
  if (batch_parallel && g.batch > 1 && threads > 1) {
    const auto grain = static_cast<int64_t>(std::max(1.0, kSmallGemmFlops / flops));
    parallel_for(0, g.batch, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        tile(g, i, 0, g.m, 0, g.n);
    });
    return;
  }
  for (int64_t i = 0; i < g.batch; ++i) {
    if (threads == 1 || flops < kSmallGemmFlops) {
      tile(g, i, 0, g.m, 0, g.n);
      continue;
    }
    const bool rows = g.m >= g.n;
    const int64_t extent = rows ? g.m : g.n;
    const int64_t block = std::max<int64_t>(16, (extent / threads + 15) / 16 * 16);
    parallel_for(0, (extent + block - 1) / block, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t from = t * block, to = std::min(extent, from + block);
        if (rows)
          tile(g, i, from, to, 0, g.n);
        else
          tile(g, i, 0, g.m, from, to);
      }
    });
  }
}

void run_onednn(const GemmBatch& g, double flops, bool batch_parallel) {
  if (transposed_is_faster(g, flops)) return run_transposed(g, flops);
  run_split(g, flops, batch_parallel, onednn_tile);
}
#endif

template <class T>
void run_one(const GemmBatch& g, int64_t i) {
  const T* a = static_cast<const T*>(g.a) + i * g.stride_a;
  const T* b = static_cast<const T*>(g.b) + i * g.stride_b;
  T* c = static_cast<T*>(g.c) + i * g.stride_c;
  const auto ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = g.trans_b ? CblasTrans : CblasNoTrans;
  const blasint m = static_cast<blasint>(g.m), n = static_cast<blasint>(g.n),
                k = static_cast<blasint>(g.k), lda = static_cast<blasint>(g.lda),
                ldb = static_cast<blasint>(g.ldb), ldc = static_cast<blasint>(g.ldc);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(g.alpha), a, lda, b, ldb,
                static_cast<float>(g.beta), c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, g.alpha, a, lda, b, ldb, g.beta, c, ldc);
  }
}

/// bf16 operands where oneDNN has no bf16 kernels for the CPU (no AVX-512: a Zen 3, a
/// Haswell): C in blocks of kBf16Block × kBf16Block, each the f32 sgemm of f32 copies of its
/// rows of A and columns of B, a panel of kBf16Block of the depth at a time, accumulated in f32
/// and stored once (a bf16 C rounded to nearest even, as oneDNN's). The copies are per-thread
/// scratch of at most 768 KiB, so no f32 copy of a whole operand (an LM head's weight) is
/// made, and the allocator's peak is the one ein report predicts. OpenBLAS runs one thread
/// per block; TBB splits the blocks.
constexpr int64_t kBf16Block = 256;

float bf16_value(uint16_t bits) {
  return to_float(BFloat16{bits});
}

/// Block (i, r0, c0) of a bf16 batch through f32 sgemm on the calling thread.
void bf16_block_through_f32(const GemmBatch& g, int64_t i, int64_t r0, int64_t c0) {
  const int64_t rows = std::min(kBf16Block, g.m - r0), cols = std::min(kBf16Block, g.n - c0);
  thread_local std::vector<float> a, b, c;
  c.assign(static_cast<size_t>(rows * cols), 0.0f);
  const auto* ga = static_cast<const uint16_t*>(g.a) + i * g.stride_a;
  const auto* gb = static_cast<const uint16_t*>(g.b) + i * g.stride_b;
  for (int64_t k0 = 0; k0 < g.k; k0 += kBf16Block) {
    const int64_t depth = std::min(kBf16Block, g.k - k0);
    a.resize(static_cast<size_t>(rows * depth));
    b.resize(static_cast<size_t>(depth * cols));
    for (int64_t r = 0; r < rows; ++r)  // op(A)(r0 + r, k0 + l)
      for (int64_t l = 0; l < depth; ++l)
        a[r * depth + l] =
            bf16_value(g.trans_a ? ga[(k0 + l) * g.lda + r0 + r] : ga[(r0 + r) * g.lda + k0 + l]);
    for (int64_t l = 0; l < depth; ++l)  // op(B)(k0 + l, c0 + j)
      for (int64_t j = 0; j < cols; ++j)
        b[l * cols + j] =
            bf16_value(g.trans_b ? gb[(c0 + j) * g.ldb + k0 + l] : gb[(k0 + l) * g.ldb + c0 + j]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows),
                static_cast<blasint>(cols), static_cast<blasint>(depth), 1.0f, a.data(),
                static_cast<blasint>(depth), b.data(), static_cast<blasint>(cols), 1.0f, c.data(),
                static_cast<blasint>(cols));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = i * g.stride_c + (r0 + r) * g.ldc + c0;
    if (g.bf16_c) {
      auto* out = static_cast<uint16_t*>(g.c) + at;
      for (int64_t j = 0; j < cols; ++j)
        out[j] = round_to<BFloat16>(c[r * cols + j]).bits;
    } else {
      std::memcpy(static_cast<float*>(g.c) + at, c.data() + r * cols,
                  static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

void run_bf16_through_f32(const GemmBatch& g) {
  const int64_t row_blocks = (g.m + kBf16Block - 1) / kBf16Block;
  const int64_t col_blocks = (g.n + kBf16Block - 1) / kBf16Block;
  const OneOpenBlasThread one_thread;
  parallel_for(0, g.batch * row_blocks * col_blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      bf16_block_through_f32(g, t / (row_blocks * col_blocks),
                             (t / col_blocks % row_blocks) * kBf16Block,
                             t % col_blocks * kBf16Block);
  });
}

template <class T>
void run(const GemmBatch& g) {
  if (g.k == 0) return scale_c<T>(g);
  const double flops =
      2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  const bool batch_parallel =
      flops < kSmallGemmFlops || (g.batch >= num_threads() && flops < kBatchParallelFlops);
#if EIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (f32_blas_for(g) == F32Blas::onednn) return run_onednn(g, flops, batch_parallel);
    // On OpenBLAS (a deep Xᵀ·dY where oneDNN has AVX2 kernels only, or EIN_BLAS=openblas),
    // split as oneDNN's GEMMs are.
    const OneOpenBlasThread one_thread;
    return run_split(g, flops, batch_parallel, openblas_tile);
  }
#endif
  if (g.batch == 1 || !batch_parallel || num_threads() == 1) {
    for (int64_t i = 0; i < g.batch; ++i)
      run_one<T>(g, i);
    return;
  }
  // Many small GEMMs: one OpenBLAS thread each, TBB across the batch (no oversubscription).
  const OneOpenBlasThread one_thread;
  const auto grain = static_cast<int64_t>(std::max(1.0, kSmallGemmFlops / flops));  // ≥ 1 MFLOP
  parallel_for(0, g.batch, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      run_one<T>(g, i);
  });
}

/// The sizes and leading dimensions fit OpenBLAS's integers and the matrices.
void check_sizes(const GemmBatch& g) {
  to_blas(g.m, "m"), to_blas(g.n, "n"), to_blas(g.k, "k");
  to_blas(g.lda, "lda"), to_blas(g.ldb, "ldb"), to_blas(g.ldc, "ldc");
  if (g.k > 0) {  // with k = 0 neither A nor B is read
    check_ld(g.lda, g.trans_a ? g.m : g.k, "lda");
    check_ld(g.ldb, g.trans_b ? g.k : g.n, "ldb");
  }
  check_ld(g.ldc, g.n, "ldc");
}

}  // namespace

void choose_f32_blas(F32Blas choice) {
  f32_blas_choice().store(choice);
}

F32Blas f32_blas_for(const GemmBatch& g) {
#if EIN_HAVE_ONEDNN
  const F32Blas choice = f32_blas_choice().load();
  if (choice != F32Blas::automatic) return choice;
  const bool deep = g.k >= g.m && g.k >= g.n;  // a weight gradient over a batch's tokens
  return g.trans_a && !g.trans_b && deep && !onednn_has_avx512() ? F32Blas::openblas
                                                                 : F32Blas::onednn;
#else
  (void)g;
  return F32Blas::openblas;
#endif
}

bool bf16_gemm_available() {
#if EIN_HAVE_ONEDNN
  // oneDNN 2.6 has bf16 matmul kernels for AVX-512 CPUs only: on one without (a Zen 3, or a
  // Haswell) it refuses the primitive (status 3, unimplemented), and bf16 GEMMs run through
  // f32 blocks instead (run_bf16_through_f32). Asked once, with a small tile.
  static const bool available = [] {
    if (f32_blas_choice().load() == F32Blas::openblas) return false;
    try {
      const auto [prim, kernel] =
          make_bf16_primitive(Bf16Key{16, 16, 16, 16, 16, 16, false, false, false});
      dnnl_primitive_destroy(prim);
      return true;
    } catch (const RuntimeError&) {
      return false;
    }
  }();
  return available;
#else
  return false;
#endif
}

std::string bf16_gemm_kernel(const GemmBatch& g) {
#if EIN_HAVE_ONEDNN
  if (!bf16_gemm_available()) return "";
  const Bf16Plan& plan = bf16_plan(Bf16Key{g.m, g.n, g.k, std::max(g.lda, g.trans_a ? g.m : g.k),
                                           std::max(g.ldb, g.trans_b ? g.k : g.n),
                                           std::max(g.ldc, g.n), g.trans_a, g.trans_b, g.bf16_c});
  return plan.kernel + (plan.pack_a || plan.pack_b ? " (operands packed)" : "");
#else
  (void)g;
  return "";
#endif
}

void gemm_batched(const GemmBatch& g) {
  const bool bf16 = g.dtype == DType::bf16;
  if (g.dtype != DType::f32 && g.dtype != DType::f64 && !bf16) {
    throw RuntimeError("gemm_batched: dtype " + std::string(dtype_name(g.dtype)) +
                       " is not f32, f64 or bf16 (convert narrower floats to f32 first)");
  }
  if (bf16 && (g.alpha != 1 || g.beta != 0))
    throw std::logic_error("gemm_batched: bf16 GEMMs take alpha = 1 and beta = 0");
  if (g.bf16_c && g.dtype != DType::bf16)
    throw std::logic_error("gemm_batched: a bf16 C needs bf16 operands");
  if (g.batch < 0 || g.m < 0 || g.n < 0 || g.k < 0) {
    throw RuntimeError("gemm_batched: negative size");
  }
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  check_sizes(g);
  if (g.batch > 1 && g.stride_c == 0) {
    throw RuntimeError("gemm_batched: stride_c = 0 would make the " + std::to_string(g.batch) +
                       " results overwrite each other");
  }
  detail::count_gemm(g.batch, g.m, g.n, g.k, element_size(g.dtype));  // one launch per batch
  if (bf16) {
    if (g.k == 0) {  // C = 0 (+0 is all zero bits in f32 and bf16 alike)
      const size_t bytes = g.bf16_c ? sizeof(uint16_t) : sizeof(float);
      for (int64_t i = 0; i < g.batch; ++i)
        for (int64_t r = 0; r < g.m; ++r)
          std::memset(static_cast<char*>(g.c) +
                          (i * g.stride_c + r * g.ldc) * static_cast<int64_t>(bytes),
                      0, static_cast<size_t>(g.n) * bytes);
      return;
    }
#if EIN_HAVE_ONEDNN
    if (bf16_gemm_available()) return run_bf16(g);
#endif
    return run_bf16_through_f32(g);
  }
  if (g.dtype == DType::f32) {
    run<float>(g);
  } else {
    run<double>(g);
  }
}

void gemm_on_this_thread(const GemmBatch& g) {
  if (g.dtype != DType::f32 && g.dtype != DType::f64)
    throw RuntimeError("gemm_on_this_thread: dtype " + std::string(dtype_name(g.dtype)) +
                       " is not f32 or f64");
  if (g.m < 0 || g.n < 0 || g.k < 0) throw RuntimeError("gemm_on_this_thread: negative size");
  if (g.m == 0 || g.n == 0) return;
  check_sizes(g);
  if (g.dtype == DType::f32) {
    if (g.k == 0) return scale_c<float>(g);
#if EIN_HAVE_ONEDNN
    if (f32_blas_choice().load() != F32Blas::openblas) return onednn_tile(g, 0, 0, g.m, 0, g.n);
#endif
    return run_one<float>(g, 0);
  }
  if (g.k == 0) return scale_c<double>(g);
  run_one<double>(g, 0);
}

void gemm_tile(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               double alpha, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
               void* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  GemmBatch g;
  g.dtype = dtype;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.a = a;
  g.lda = std::max({int64_t{1}, lda, trans_a ? m : k});
  g.b = b;
  g.ldb = std::max({int64_t{1}, ldb, trans_b ? k : n});
  g.c = c;
  g.ldc = std::max({int64_t{1}, ldc, n});
  g.alpha = alpha;
  g.beta = beta;
  gemm_on_this_thread(g);
}

}  // namespace ein
