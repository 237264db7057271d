// Does the way ein splits an f32 GEMM over two threads (runtime/blas/gemm.cpp: one block of C's
// rows, or columns for a wide C, per thread, oneDNN's sgemm on one thread each) lose anything
// against oneDNN's own rate? For one shape of the GPT step: one thread on the whole GEMM (its
// rate doubled: what two cores could give), C split by rows, C split by columns, and oneDNN's
// sgemm on two OpenMP threads. Mean and best GFLOP/s over 15 calls after 2 (BENCHMARKS.md,
// "Where the 256 2 12 768 4 step's time goes").
//   cc -O2 -fopenmp bench/gemm_split_f32.c -o /tmp/gemm_split -ldnnl
//   OMP_WAIT_POLICY=passive /tmp/gemm_split N N 1024 3072 768     (TA TB M N K, row-major)
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s TA TB M N K\n", argv[0]);
    return 2;
  }
  const char ta = argv[1][0], tb = argv[2][0];
  const long m = atol(argv[3]), n = atol(argv[4]), k = atol(argv[5]);
  float *a = malloc(4L * m * k), *b = malloc(4L * k * n), *c = malloc(4L * m * n);
  for (long i = 0; i < m * k; i++) a[i] = (i % 7) * 0.1f;
  for (long i = 0; i < k * n; i++) b[i] = (i % 5) * 0.1f;
  const long lda = ta == 'N' ? k : m, ldb = tb == 'N' ? n : k;
  const double flops = 2.0 * m * n * k;
  const int reps = 15;
  const char* names[] = {"1 thread x2", "rows/2", "cols/2", "onednn omp2"};
  for (int mode = 0; mode < 4; mode++) {
    double best = 1e9, total = 0;
    for (int r = 0; r < reps + 2; r++) {
      const double t0 = now();
      if (mode == 0 || mode == 3) {
        omp_set_num_threads(mode == 0 ? 1 : 2);
        dnnl_sgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n);
      } else {
#pragma omp parallel num_threads(2)
        {
          const int t = omp_get_thread_num();
          omp_set_num_threads(1);
          if (mode == 1) {  // rows: A's rows (columns when A is stored transposed)
            const long h = (m / 2 + 15) / 16 * 16, rows = t ? m - h : h, r0 = t ? h : 0;
            dnnl_sgemm(ta, tb, rows, n, k, 1, a + (ta == 'N' ? r0 * lda : r0), lda, b, ldb, 0,
                       c + r0 * n, n);
          } else {
            const long h = (n / 2 + 15) / 16 * 16, cols = t ? n - h : h, c0 = t ? h : 0;
            dnnl_sgemm(ta, tb, m, cols, k, 1, a, lda, b + (tb == 'N' ? c0 : c0 * ldb), ldb, 0,
                       c + c0, n);
          }
        }
      }
      const double dt = now() - t0;
      if (r >= 2) {
        total += dt;
        if (dt < best) best = dt;
      }
    }
    const double scale = mode == 0 ? 2 : 1;
    printf("%c%c %ldx%ldx%ld %-12s mean %.1f best %.1f GFLOP/s\n", ta, tb, m, n, k, names[mode],
           scale * flops / (total / reps) / 1e9, scale * flops / best / 1e9);
  }
  free(a);
  free(b);
  free(c);
  return 0;
}
