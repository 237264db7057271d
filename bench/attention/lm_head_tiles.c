// The three GEMMs of one tile of the fused LM head's backward (exec/cross_entropy.cpp) on
// oneDNN's sgemm, one thread: the logits of R rows × C classes from h (R × 768) and a block of
// w (768 × C) read in place (rows V apart) or from a dense copy, then dh += dL·wᵀ and
// dw += hᵀ·dL. Mean of 20 calls each, in ms and GFLOP/s (BENCHMARKS.md, "Both again on the
// Intel AMX machine").
//   cc -O2 bench/attention/lm_head_tiles.c -o /tmp/lm_head_tiles -ldnnl
//   for rc in "64 2048" "256 1024"; do OMP_NUM_THREADS=1 /tmp/lm_head_tiles 50257 $rc; done
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
  if (argc != 4) {
    fprintf(stderr, "usage: %s V ROWS CLASSES\n", argv[0]);
    return 2;
  }
  const long V = atol(argv[1]);
  const int D = 768, R = atoi(argv[2]), C = atoi(argv[3]), reps = 20;
  float *h = malloc(4L * R * D), *w = malloc(4L * D * V), *tile = malloc(4L * R * C);
  float *dh = calloc((long)R * D, 4), *dw = calloc((long)D * V, 4), *wb = malloc(4L * D * C);
  for (long i = 0; i < (long)R * D; i++) h[i] = (i % 7) * 0.01f;
  for (long i = 0; i < (long)D * V; i++) w[i] = (i % 5) * 0.01f;
  for (long i = 0; i < (long)R * C; i++) tile[i] = 0.001f * (i % 3);
  for (long i = 0; i < (long)D * C; i++) wb[i] = w[(i / C) * V + i % C];
  const double flops = 2.0 * R * C * D;
// Runs `call` reps times and prints its mean time and rate.
#define TIME(what, call)                                                                  \
  do {                                                                                    \
    const double t0 = now();                                                              \
    for (int r = 0; r < reps; r++) call;                                                  \
    const double t = (now() - t0) / reps;                                                 \
    printf("R %d C %d %-24s %.3f ms %.1f GFLOP/s\n", R, C, what, t * 1e3, flops / t / 1e9); \
  } while (0)
  TIME("logits, w in place", dnnl_sgemm('N', 'N', R, C, D, 1, h, D, w, V, 0, tile, C));
  TIME("logits, dense block", dnnl_sgemm('N', 'N', R, C, D, 1, h, D, wb, C, 0, tile, C));
  TIME("dh += dL w^T", dnnl_sgemm('N', 'T', R, D, C, 1, tile, C, wb, C, 1, dh, D));
  TIME("dw += h^T dL", dnnl_sgemm('T', 'N', D, C, R, 1, h, D, tile, C, 1, dw, V));
  return 0;
}
