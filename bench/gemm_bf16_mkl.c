// bf16 (f32 result) and f32 GEMMs of any M × N × K through MKL from PyPI (cblas_gemm_bf16bf16f32,
// cblas_sgemm), random operands, best and median of 20 calls: the MKL rates of BENCHMARKS.md
// ("bf16 attention on AMX tiles, weight gradients in f32").
//   pip download mkl mkl-include --no-deps -d /tmp/w
//   mkdir /tmp/mk && cd /tmp/mk && for w in /tmp/w/mkl*.whl; do unzip -q -o $w; done
//   L=/tmp/mk/mkl-*.data/data/lib I=/tmp/mk/mkl_include-*.data/data/include
//   gcc -O2 bench/gemm_bf16_mkl.c -o /tmp/mkl -I$I -L$L -Wl,-rpath,$L -l:libmkl_rt.so.3
//   MKL_THREADING_LAYER=GNU /tmp/mkl 2048 512 2048 2 0   # M N K threads f32? [transposed A]
#include <mkl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char** argv){
  int64_t M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]); int T=atoi(argv[4]); int f32=atoi(argv[5]); int ta=argc>6?atoi(argv[6]):0;
  mkl_set_num_threads(T);
  void* A=malloc(M*K*4); void* B=malloc(K*N*4); float* C=malloc(M*N*4);
  for (long i=0;i<M*K;i++) { ((float*)A)[i]=rand()/(float)RAND_MAX; ((uint16_t*)A)[i]=0x3f80+(rand()&0x7f);} 
  for (long i=0;i<K*N;i++) { ((float*)B)[i]=rand()/(float)RAND_MAX; }
  if (!f32) for (long i=0;i<K*N;i++) ((uint16_t*)B)[i]=0x3f00+(rand()&0x7f);
  double ts[21];
  for(int r=0;r<21;r++){double t0=now();
    if (f32) cblas_sgemm(CblasRowMajor, ta?CblasTrans:CblasNoTrans, CblasNoTrans, M,N,K,1.f,(float*)A,ta?M:K,(float*)B,N,0.f,C,N);
    else cblas_gemm_bf16bf16f32(CblasRowMajor, ta?CblasTrans:CblasNoTrans, CblasNoTrans, M,N,K,1.f,(MKL_BF16*)A,ta?M:K,(MKL_BF16*)B,N,0.f,C,N);
    ts[r]=now()-t0;}
  double best=1e9; for(int r=1;r<21;r++) if(ts[r]<best) best=ts[r];
  double s[20]; for(int r=0;r<20;r++) s[r]=ts[r+1];
  for(int i=0;i<20;i++) for(int j=i+1;j<20;j++) if(s[j]<s[i]){double x=s[i];s[i]=s[j];s[j]=x;}
  printf("mkl %s %ldx%ldx%ld T=%d ta=%d: best %.3f ms %.1f GFLOP/s median %.3f ms\n", f32?"f32":"bf16", (long)M,(long)N,(long)K, T, ta, best*1e3, 2.0*M*N*K/best/1e9, s[10]*1e3);
  return 0;
}
