// Raw oneDNN sgemm at the same shape as bench/sgemm_openblas.c (1024x128 @ 128x384, row-major),
// for BENCHMARKS.md ("Byte-level GPT training"): the kernels ein's f32 GEMMs run on where
// oneDNN is installed. Its threads are OpenMP's (OMP_NUM_THREADS). Run by bench/gemm_backends.sh.
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(){int M=1024,K=128,N=384; float*a=malloc(4*M*K),*b=malloc(4*K*N),*c=malloc(4*M*N);
for(int i=0;i<M*K;i++)a[i]=1;for(int i=0;i<K*N;i++)b[i]=1;
for(int r=0;r<10;r++)dnnl_sgemm('N','N',M,N,K,1,a,K,b,N,0,c,N);
struct timespec t0,t1;clock_gettime(CLOCK_MONOTONIC,&t0);int R=200;
for(int r=0;r<R;r++)dnnl_sgemm('N','N',M,N,K,1,a,K,b,N,0,c,N);
clock_gettime(CLOCK_MONOTONIC,&t1);double dt=((t1.tv_sec-t0.tv_sec)+(t1.tv_nsec-t0.tv_nsec)*1e-9)/R;
printf("%.3f ms %.1f GFLOP/s\n",dt*1e3,2.0*M*N*K/dt/1e9);}
