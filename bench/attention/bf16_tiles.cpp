// One tile GEMM of the fused attention (exec/attention.cpp) at its shapes, on one thread: oneDNN's
// sgemm (what the kernel runs) against a bf16 GEMM through gemm_batched (oneDNN's bf16 matmul
// primitive, AMX here), mean of 3000 calls after two warm-up passes (BENCHMARKS.md, "bf16
// attention tiles on AMX").
//   g++ -O2 -std=c++20 -I. -Iinclude bench/attention/bf16_tiles.cpp -o /tmp/bf16_tiles \
//       build/lib/libein_runtime.a build/lib/libein_core.a -ldnnl -lopenblas -ltbb -lfmt -fopenmp
//   /tmp/bf16_tiles
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdint>
#include <dnnl.h>
#include <omp.h>
#include <tbb/global_control.h>
#include "runtime/blas/gemm.h"
using namespace ein;
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main() {
  omp_set_num_threads(1);
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  struct S { const char* what; bool ta, tb; int64_t m, n, k; };
  const S shapes[] = {{"logits 64x128x64 NT", false, true, 64, 128, 64},
                      {"PV 64x64x128 NN", false, false, 64, 64, 128},
                      {"dV 128x64x64 TN", true, false, 128, 64, 64},
                      {"dQ 64x64x128 NN", false, false, 64, 64, 128}};
  std::vector<float> a(1 << 20, 0.01f), b(1 << 20, 0.02f), c(1 << 20);
  std::vector<uint16_t> ah(1 << 20, 0x3c23), bh(1 << 20, 0x3ca3);
  for (const S& s : shapes) {
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    const int reps = 3000;
    double tf = 0, tt = 0, tg = 0;
    for (int pass = 0; pass < 3; ++pass) {
      double t0 = now();
      for (int r = 0; r < reps; ++r)
        gemm_tile(DType::f32, s.ta, s.tb, s.m, s.n, s.k, 1, a.data(), lda, b.data(), ldb, 1, c.data(), s.n);
      tf = (now() - t0) / reps;
      t0 = now();
      for (int r = 0; r < reps; ++r)
      {
        GemmBatch g;  // one GEMM: gemm_batched runs it on this thread (TBB held to one above)
        g.dtype = DType::bf16;
        g.m = s.m, g.n = s.n, g.k = s.k, g.trans_a = s.ta, g.trans_b = s.tb;
        g.a = ah.data(), g.lda = lda, g.b = bh.data(), g.ldb = ldb, g.c = c.data(), g.ldc = s.n;
        gemm_batched(g);
      }
      tt = (now() - t0) / reps;

    }
    const double fl = 2.0 * s.m * s.n * s.k;
    std::printf("%-22s sgemm %6.2f us %5.0f GF/s | bf16 matmul %6.2f us %5.0f\n",
                s.what, tf * 1e6, fl / tf / 1e9, tt * 1e6, fl / tt / 1e9);
  }
}
