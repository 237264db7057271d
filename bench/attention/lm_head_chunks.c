// Would Liger's way (the gradients computed in the forward pass) make the fused LM head faster
// than the unfused one on this CPU? A prototype of its work on oneDNN's sgemm: per chunk of R
// rows, the logits of all V classes (R × V, held in memory: at R = 128 and V = 50257 that is
// 25.7 MB, within the memory target's room), each row's logsumexp and loss, the logits turned
// into their gradient (softmax − one-hot) in place, then dh[chunk] = dL·wᵀ and dw += hᵀ·dL:
// three GEMMs of 2·N·D·V where exec/cross_entropy.cpp's forward + backward run four. Prints
// the seconds for the whole head and its rate (BENCHMARKS.md, "The LM head: gradients in the
// forward?").
//   cc -O3 -march=native -fopenmp bench/attention/lm_head_chunks.c -o /tmp/lm_head_chunks -ldnnl -lm
//   OMP_NUM_THREADS=2 /tmp/lm_head_chunks 4096 768 50257 128
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/// Deterministic values of spread `scale` (a cheap stand-in for randn).
static void fill(float* x, long n, float scale, unsigned seed) {
  for (long i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f) * 3.4641f;
  }
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s ROWS D V CHUNK\n", argv[0]);
    return 2;
  }
  const long N = atol(argv[1]), D = atol(argv[2]), V = atol(argv[3]), R = atol(argv[4]);
  float *h = malloc(4 * N * D), *w = malloc(4 * D * V), *logits = malloc(4 * R * V);
  float *dh = malloc(4 * N * D), *dw = malloc(4 * D * V);
  fill(h, N * D, 1.0f, 1);
  fill(w, D * V, 0.02f, 2);  // GPT-2's initialisation: logits of std 0.55, no subnormals
  for (int round = 0; round < 3; round++) {
    const double t0 = now();
    double loss = 0;
    for (long i = 0; i < D * V; i++) dw[i] = 0;
    for (long r0 = 0; r0 < N; r0 += R) {
      const long rows = N - r0 < R ? N - r0 : R;
      dnnl_sgemm('N', 'N', rows, V, D, 1, h + r0 * D, D, w, V, 0, logits, V);
#pragma omp parallel for reduction(+ : loss)
      for (long r = 0; r < rows; r++) {
        float* x = logits + r * V;
        const long target = ((r0 + r) * 7919) % V;
        float m = -INFINITY;
        for (long j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (long j = 0; j < V; j++) {
          x[j] = expf(x[j] - m);
          s += x[j];
        }
        loss += log(s) + m - (logf(x[target]) + m);
        const float inv = 1.0f / s;
#pragma omp simd
        for (long j = 0; j < V; j++) x[j] *= inv;
        x[target] -= 1;
      }
      dnnl_sgemm('N', 'T', rows, D, V, 1, logits, V, w, V, 0, dh + r0 * D, D);
      dnnl_sgemm('T', 'N', D, V, rows, 1, h + r0 * D, D, logits, V, 1, dw, V);
    }
    const double t = now() - t0;
    printf("rows %ld d %ld v %ld chunk %ld: %.3f s, %.1f GFLOP/s over 3 GEMMs, loss %.6f\n", N, D, V,
           R, t, 6.0 * N * D * V / t / 1e9, loss / N);
  }
  return 0;
}
