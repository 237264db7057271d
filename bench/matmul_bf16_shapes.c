// One bf16 matmul (bf16 result) of any M × N × K through Debian's oneDNN 2.6 matmul primitive
// on T OpenMP threads, random operands, best of 20 calls: the oneDNN 2.6 rates of BENCHMARKS.md
// ("bf16 attention on AMX tiles, weight gradients in f32"), run interleaved with
// bench/torch_bf16_matmul.py (torch's bundled oneDNN 3.13) and bench/matmul_bf16_onednn3.c.
//   gcc -O2 bench/matmul_bf16_shapes.c -o /tmp/mm -ldnnl -fopenmp
//   /tmp/mm 2048 512 2048 2     # M N K threads
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>
#define CHECK(x) do { dnnl_status_t s = (x); if (s != dnnl_success) { printf("fail %d at %s\n", s, #x); exit(1);} } while(0)
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char** argv){
  int64_t M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]); int T=atoi(argv[4]); int tb=argc>5?atoi(argv[5]):0;
  omp_set_num_threads(T);
  dnnl_engine_t eng; CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  dnnl_stream_t st; CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t a,b,c; dnnl_dims_t ad={M,K}, as={K,1}, bd={K,N}, bs={tb?1:N,tb?K:1}, cd={M,N}, cs={N,1};
  CHECK(dnnl_memory_desc_init_by_strides(&a,2,ad,dnnl_bf16,as));
  CHECK(dnnl_memory_desc_init_by_strides(&b,2,bd,dnnl_bf16,bs));
  CHECK(dnnl_memory_desc_init_by_strides(&c,2,cd,dnnl_bf16,cs));
  dnnl_matmul_desc_t md; CHECK(dnnl_matmul_desc_init(&md,&a,&b,NULL,&c));
  dnnl_primitive_desc_t pd; CHECK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  const char* impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_t p; CHECK(dnnl_primitive_create(&p,pd));
  uint16_t* A=malloc(M*K*2); uint16_t* B=malloc(K*N*2); uint16_t* C=malloc(M*N*2);
  for (long i=0;i<M*K;i++) A[i]=0x3f80 + (rand()&0x7f); for (long i=0;i<K*N;i++) B[i]=0x3f00+(rand()&0x7f);
  dnnl_memory_t ma,mb,mc; CHECK(dnnl_memory_create(&ma,&a,eng,A)); CHECK(dnnl_memory_create(&mb,&b,eng,B)); CHECK(dnnl_memory_create(&mc,&c,eng,C));
  dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma},{DNNL_ARG_WEIGHTS,mb},{DNNL_ARG_DST,mc}};
  double ts[21]; for(int r=0;r<21;r++){double t0=now(); CHECK(dnnl_primitive_execute(p,st,3,args)); CHECK(dnnl_stream_wait(st)); ts[r]=now()-t0;}
  double best=1e9; for(int r=1;r<21;r++) if(ts[r]<best) best=ts[r];
  printf("%s %ldx%ldx%ld T=%d tb=%d: %.3f ms %.1f GFLOP/s\n", impl, (long)M,(long)N,(long)K, T, tb, best*1e3, 2.0*M*N*K/best/1e9);
  return 0;
}
