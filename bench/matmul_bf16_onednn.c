// One square matmul through oneDNN's matmul primitive, bf16 or f32 operands (f32 result), on
// N OpenMP threads: the bf16 against f32 rate quoted in BENCHMARKS.md ("bf16 GEMMs at bf16
// speed"). Build and run:
//   gcc -O2 bench/matmul_bf16_onednn.c -o /tmp/mm -ldnnl -fopenmp
//   /tmp/mm 1536 0 2   # f32, 2 threads;   /tmp/mm 1536 1 2   # bf16
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>
#define CHECK(x) do { dnnl_status_t s = (x); if (s != dnnl_success) { printf("fail %d at %s\n", s, #x); exit(1);} } while(0)
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char** argv){
  int64_t M=atoi(argv[1]),N=M,K=M; int bf = atoi(argv[2]);
  omp_set_num_threads(atoi(argv[3]));
  dnnl_engine_t eng; CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  dnnl_stream_t st; CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t a,b,c; dnnl_dims_t ad={M,K}, as={K,1}, bd={K,N}, bs={N,1}, cd={M,N}, cs={N,1};
  dnnl_data_type_t t = bf? dnnl_bf16: dnnl_f32;
  CHECK(dnnl_memory_desc_init_by_strides(&a,2,ad,t,as));
  CHECK(dnnl_memory_desc_init_by_strides(&b,2,bd,t,bs));
  CHECK(dnnl_memory_desc_init_by_strides(&c,2,cd,dnnl_f32,cs));
  dnnl_matmul_desc_t md; CHECK(dnnl_matmul_desc_init(&md,&a,&b,NULL,&c));
  dnnl_primitive_desc_t pd; CHECK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  const char* impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl); printf("impl %s\n", impl);
  dnnl_primitive_t p; CHECK(dnnl_primitive_create(&p,pd));
  size_t es = bf?2:4; void* A=calloc(M*K,es); void* B=calloc(K*N,es); float* C=calloc(M*N,4);
  dnnl_memory_t ma,mb,mc; CHECK(dnnl_memory_create(&ma,&a,eng,A)); CHECK(dnnl_memory_create(&mb,&b,eng,B)); CHECK(dnnl_memory_create(&mc,&c,eng,C));
  dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma},{DNNL_ARG_WEIGHTS,mb},{DNNL_ARG_DST,mc}};
  double best=1e9; for(int r=0;r<5;r++){double t0=now(); CHECK(dnnl_primitive_execute(p,st,3,args)); CHECK(dnnl_stream_wait(st)); double d=now()-t0; if(r>0&&d<best)best=d;}
  printf("%s M=%ld: %.1f GFLOP/s\n", bf?"bf16":"f32", (long)M, 2.0*M*N*K/best/1e9);
  return 0;
}
