// oneDNN's sgemm on one core for C = Aᵀ·B taller than wide (the weight gradient Hᵀ·dY of a
// GPT MLP's down-projection at the 128 4 8 256 16 config: C 1024×256, 2048 rows of H and dY)
// against the transposed problem Cᵀ = dYᵀ·H (256×1024), which is what runtime/blas/gemm.cpp's
// run_transposed() computes before a transposing copy, and OpenBLAS's sgemm on C = Aᵀ·B (what
// ein runs where oneDNN has AVX2 kernels only: F32Blas in runtime/blas/gemm.h). Best of 10
// after 3 warm-ups.
//   cc -O2 bench/sgemm_transposed_a.c -o /tmp/sgemm_ta -ldnnl -lopenblas &&
//     OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /tmp/sgemm_ta
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/// Best time of C[m, n] = A[k, m]ᵀ·B[k, n] (row-major, dense) on oneDNN or OpenBLAS.
static double best_tn(long m, long n, long k, int openblas) {
  float *a = malloc(sizeof(float) * k * m), *b = malloc(sizeof(float) * k * n),
        *c = malloc(sizeof(float) * m * n);
  for (long i = 0; i < k * m; i++) a[i] = (float)(i % 7) * 0.1f;
  for (long i = 0; i < k * n; i++) b[i] = (float)(i % 5) * 0.1f;
  double best = 1e9;
  for (int r = 0; r < 13; r++) {
    const double t0 = now();
    if (openblas)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1, a, m, b, n, 0, c, n);
    else
      dnnl_sgemm('T', 'N', m, n, k, 1, a, m, b, n, 0, c, n);
    const double dt = now() - t0;
    if (r >= 3 && dt < best) best = dt;
  }
  free(a), free(b), free(c);
  return best;
}

int main(void) {
  // The last: the fused LM head's weight gradient over a chunk of 128 rows, one thread's half.
  const long shapes[][3] = {{1024, 256, 2048}, {256, 1024, 2048}, {256, 256, 2048},
                            {2048, 512, 2048}, {2048, 768, 1024}, {768, 12564, 128}};
  for (int s = 0; s < 6; s++) {
    const long m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    const double tall = best_tn(m, n, k, 0), wide = best_tn(n, m, k, 0),
                 openblas = best_tn(m, n, k, 1), f = 2.0 * m * n * k / 1e9;
    printf("A^T B, C %ldx%ld, k %ld: oneDNN %.2f ms (%.0f GFLOP/s); oneDNN as C^T %ldx%ld: %.2f ms "
           "(%.0f GFLOP/s); OpenBLAS %.2f ms (%.0f GFLOP/s)\n",
           m, n, k, tall * 1e3, f / tall, n, m, wide * 1e3, f / wide, openblas * 1e3, f / openblas);
  }
  return 0;
}
