// The fused LM head's dh product for one chunk of rows, three ways, on oneDNN's sgemm (one
// thread: exec/cross_entropy.cpp runs one piece of the classes per thread): dL (M × K) · wᵀ
// with w [768, K] row-major as the head stores it, dhᵀ = w · dLᵀ (what the kernel runs), and
// dL · w' with a transposed copy w' [K, 768] (fastest, but a second copy of w). GFLOP/s of
// each, three repetitions (BENCHMARKS.md, "The LM head's gradients in the forward, built").
//   cc -O2 bench/attention/dh_layouts.c -o /tmp/dh_layouts -ldnnl
//   OMP_NUM_THREADS=1 /tmp/dh_layouts 128 6282; OMP_NUM_THREADS=1 /tmp/dh_layouts 128 50257
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s ROWS CLASSES\n", argv[0]);
    return 2;
  }
  const long m = atol(argv[1]), n = 768, k = atol(argv[2]);
  float *dl = malloc(4 * m * k), *w = malloc(4 * n * k), *wt = malloc(4 * n * k);
  float* c = malloc(4 * m * n);
  for (long i = 0; i < m * k; i++) dl[i] = (i % 7) * 0.01f;
  for (long i = 0; i < n * k; i++) w[i] = (i % 5) * 0.01f;
  for (long i = 0; i < n; i++)
    for (long j = 0; j < k; j++) wt[j * n + i] = w[i * k + j];
  const double flops = 2.0 * m * n * k;
  for (int rep = 0; rep < 3; rep++) {
    double t = now();
    dnnl_sgemm('N', 'T', m, n, k, 1, dl, k, w, k, 0, c, n);  // dh = dL · wᵀ
    const double nt = now() - t;
    t = now();
    dnnl_sgemm('N', 'T', n, m, k, 1, w, k, dl, k, 0, c, m);  // dhᵀ = w · dLᵀ
    const double tn = now() - t;
    t = now();
    dnnl_sgemm('N', 'N', m, n, k, 1, dl, k, wt, n, 0, c, n);  // dh = dL · w'
    const double nn = now() - t;
    printf("rows %ld classes %ld: dL·wT %.1f  (w·dLT)T %.1f  dL·w' %.1f GFLOP/s\n", m, k,
           flops / nt / 1e9, flops / tn / 1e9, flops / nn / 1e9);
  }
  free(dl);
  free(w);
  free(wt);
  free(c);
  return 0;
}
