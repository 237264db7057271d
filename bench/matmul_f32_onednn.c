// oneDNN's f32 matmul primitive (brgemm on AVX-512) against dnnl_sgemm, each thread taking
// half of C's rows on one OpenMP thread as ein's gemm_batched splits a GEMM (runtime/blas/
// gemm.cpp), for BENCHMARKS.md ("Column sums in panels"): whether the primitive would lift the
// GPT step's f32 GEMMs. Row-major; TA/TB are N or T.
//   cc -O2 -fopenmp bench/matmul_f32_onednn.c -o /tmp/matmul_f32 -ldnnl
//   OMP_WAIT_POLICY=passive /tmp/matmul_f32 N N 1024 3072 768
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t s_=(x); if(s_!=dnnl_success){printf("fail %s %d\n",#x,s_);exit(1);}}while(0)
int main(int argc,char**argv){char ta=argv[1][0],tb=argv[2][0];int M=atoi(argv[3]),N=atoi(argv[4]),K=atoi(argv[5]);int split=argc>6?atoi(argv[6]):0;
float*a=malloc(4L*M*K),*b=malloc(4L*K*N),*c=malloc(4L*M*N);
for(long i=0;i<(long)M*K;i++)a[i]=(i%7)*0.1f;for(long i=0;i<(long)K*N;i++)b[i]=(i%5)*0.1f;
int lda=ta=='N'?K:M, ldb=tb=='N'?N:K;
dnnl_engine_t eng; CK(dnnl_engine_create(&eng,dnnl_cpu,0)); dnnl_stream_t st; CK(dnnl_stream_create(&st,eng,dnnl_stream_default_flags));
int h=M/2; dnnl_primitive_t prim[2]; dnnl_memory_t ma[2],mb[2],mc[2]; const char*impl=0;
for(int t=0;t<2;t++){int m=t?M-h:h; int r0=t?h:0;
 dnnl_memory_desc_t ad,bd,cd; dnnl_dims_t adim={m,K},bdim={K,N},cdim={m,N};
 dnnl_dims_t as={ta=='N'?lda:1, ta=='N'?1:lda}, bs={tb=='N'?ldb:1, tb=='N'?1:ldb}, cs={N,1};
 CK(dnnl_memory_desc_init_by_strides(&ad,2,adim,dnnl_f32,as));CK(dnnl_memory_desc_init_by_strides(&bd,2,bdim,dnnl_f32,bs));CK(dnnl_memory_desc_init_by_strides(&cd,2,cdim,dnnl_f32,cs));
 dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&ad,&bd,NULL,&cd)); dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
 dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
 CK(dnnl_primitive_create(&prim[t],pd));
 CK(dnnl_memory_create(&ma[t],&ad,eng,a+(ta=='N'?(long)r0*lda:r0)));CK(dnnl_memory_create(&mb[t],&bd,eng,b));CK(dnnl_memory_create(&mc[t],&cd,eng,c+(long)r0*N));}
printf("impl %s\n",impl);
for(int mode=0;mode<2;mode++){double tot=0;int R=20;for(int r=0;r<R+3;r++){double t0=now();
#pragma omp parallel num_threads(2)
{int t=omp_get_thread_num();omp_set_num_threads(1);int m=t?M-h:h;int r0=t?h:0;
 if(mode==0)dnnl_sgemm(ta,tb,m,N,K,1,a+(ta=='N'?(long)r0*lda:r0),lda,b,ldb,0,c+(long)r0*N,N);
 else {dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma[t]},{DNNL_ARG_WEIGHTS,mb[t]},{DNNL_ARG_DST,mc[t]}};dnnl_stream_t s2; dnnl_stream_create(&s2,eng,dnnl_stream_default_flags); dnnl_primitive_execute(prim[t],s2,3,args); dnnl_stream_wait(s2); dnnl_stream_destroy(s2);}}
double dt=now()-t0;if(r>=3)tot+=dt;}
double avg=tot/R;printf("%s %c%c %dx%dx%d: %.2f ms %.1f GFLOP/s\n",mode?"matmul":"sgemm ",ta,tb,M,N,K,avg*1e3,2.0*M*N*K/avg/1e9);}}
