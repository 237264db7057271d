// The three ways to walk a map that also sums its values down the rows (mode B in one pass),
// written out in C with AVX-512 for 7 inputs and 4 outputs over (rows, columns) f32: register
// strips of 64 columns down every row, panels of each thread's share of the columns walked
// row by row, and blocks of whole rows (each thread half the rows, all columns, partial sums
// added at the end). Warm (the buffers in the cache) and cold (96 MB written between calls).
// BENCHMARKS.md, "Column sums in row blocks":
//   cc -O3 -march=native -fopenmp bench/column_sum_walks.c -o /tmp/column_sum_walks
//   OMP_NUM_THREADS=2 /tmp/column_sum_walks 2048 256
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
enum {NI=7, NO=4};
static float *in[NI], *out[NO], *sums;
static long R, C;
static inline void point(long r, long c, __m512* acc){
  long o=r*C+c;
  __m512 a=_mm512_loadu_ps(in[0]+o), b=_mm512_loadu_ps(in[1]+o), d=_mm512_loadu_ps(in[2]+o);
  __m512 e=_mm512_loadu_ps(in[3]+o), f=_mm512_loadu_ps(in[4]+o), g=_mm512_loadu_ps(in[5]+o), h=_mm512_loadu_ps(in[6]+o);
  __m512 s=_mm512_add_ps(_mm512_add_ps(b,d),e);
  _mm512_storeu_ps(out[0]+o,_mm512_mul_ps(a,s));
  _mm512_storeu_ps(out[1]+o,_mm512_mul_ps(f,s));
  _mm512_storeu_ps(out[2]+o,_mm512_sub_ps(g,s));
  _mm512_storeu_ps(out[3]+o,_mm512_add_ps(h,s));
  *acc=_mm512_add_ps(*acc,_mm512_mul_ps(s,a));
}
static void strips(void){
  #pragma omp parallel for schedule(static)
  for(long c0=0;c0<C;c0+=64){
    __m512 acc[4]={0};
    for(long r=0;r<R;++r) for(int k=0;k<4;++k) point(r,c0+16*k,&acc[k]);
    for(int k=0;k<4;++k) _mm512_storeu_ps(sums+c0+16*k,acc[k]);
  }
}
static void panels(void){
  #pragma omp parallel
  { int t=omp_get_thread_num(), n=omp_get_num_threads(); long w=C/n, c0=t*w;
    __m512 acc[256]; for(long k=0;k<w/16;++k) acc[k]=_mm512_setzero_ps();
    for(long r=0;r<R;++r) for(long k=0;k<w/16;++k) point(r,c0+16*k,&acc[k]);
    for(long k=0;k<w/16;++k) _mm512_storeu_ps(sums+c0+16*k,acc[k]); }
}
static float part[2][65536];
static void rowsplit(void){
  #pragma omp parallel
  { int t=omp_get_thread_num(), n=omp_get_num_threads(); long h=R/n, r0=t*h;
    __m512 acc[256]; for(long k=0;k<C/16;++k) acc[k]=_mm512_setzero_ps();
    for(long r=r0;r<r0+h;++r) for(long k=0;k<C/16;++k) point(r,16*k,&acc[k]);
    for(long k=0;k<C/16;++k) _mm512_storeu_ps(part[t]+16*k,acc[k]); }
  for(long c=0;c<C;++c) sums[c]=part[0][c]+part[1][c];
}
int main(int argc,char**argv){
  R=atol(argv[1]); C=atol(argv[2]);
  for(int i=0;i<NI;++i){in[i]=aligned_alloc(64,R*C*4); for(long j=0;j<R*C;++j) in[i][j]=j%7;}
  for(int i=0;i<NO;++i){out[i]=aligned_alloc(64,R*C*4); memset(out[i],0,R*C*4);}
  sums=aligned_alloc(64,C*4);
  long F=96<<20; char* flush=malloc(F);
  void (*fs[3])(void)={strips,panels,rowsplit}; const char* names[3]={"strips","panels","rowsplit"};
  double best[3][2]; 
  for(int cold=0;cold<2;++cold) for(int s=0;s<3;++s){ double ts[15];
    for(int rep=0;rep<15;++rep){ if(cold) memset(flush,rep,F); double t=now(); fs[s](); ts[rep]=now()-t; }
    // median
    for(int i=0;i<15;++i) for(int j=i+1;j<15;++j) if(ts[j]<ts[i]){double x=ts[i];ts[i]=ts[j];ts[j]=x;}
    best[s][cold]=ts[7];
  }
  double bytes=(NI+NO)*R*C*4.0;
  for(int s=0;s<3;++s) printf("%ldx%ld %-9s warm %.3f ms (%.1f GB/s)  cold %.3f ms (%.1f GB/s)\n",R,C,names[s],best[s][0]*1e3,bytes/best[s][0]/1e9,best[s][1]*1e3,bytes/best[s][1]/1e9);
}
