// One bf16 matmul through oneDNN's matmul primitive on one thread, with the operand layouts
// ein's GEMM tiles have: A transposed or not, and the row strides of A, B and C (f32 C). Prints
// the kernel oneDNN picked and the best of 7 timed runs: the figures of BENCHMARKS.md's "bf16 on
// an AMX machine" (which layouts fall back to gemm:jit, and what a dense copy buys).
//   gcc -O2 bench/matmul_bf16_layouts.c -o /tmp/mml -ldnnl -fopenmp
//   /tmp/mml M N K TA LDA LDB LDC
//   /tmp/mml 512 768 768 0 2304 768 768    # A's rows 2304 apart: gemm:jit
//   /tmp/mml 512 768 768 0 768 768 768     # dense: brg (AMX where present)
//   /tmp/mml 1536 768 1024 1 3072 768 768  # a row tile of a transposed A: gemm:jit
//   /tmp/mml 1536 768 1024 0 1024 768 768  # the same, A copied dense first: brg
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>
#define CHECK(x) do { dnnl_status_t s = (x); if (s != dnnl_success) { printf("fail %d at %s\n", s, #x); exit(1);} } while(0)
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
// M N K ta lda
int main(int argc, char** argv){
  int64_t M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]); int ta=atoi(argv[4]); int64_t lda=atoi(argv[5]); int64_t ldb=atoi(argv[6]), ldc=atoi(argv[7]);
  omp_set_num_threads(1);
  dnnl_engine_t eng; CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  dnnl_stream_t st; CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t a,b,c; dnnl_dims_t ad={M,K}, as={ta?1:lda, ta?lda:1}, bd={K,N}, bs={ldb,1}, cd={M,N}, cs={ldc,1};
  CHECK(dnnl_memory_desc_init_by_strides(&a,2,ad,dnnl_bf16,as));
  CHECK(dnnl_memory_desc_init_by_strides(&b,2,bd,dnnl_bf16,bs));
  CHECK(dnnl_memory_desc_init_by_strides(&c,2,cd,dnnl_f32,cs));
  dnnl_matmul_desc_t md; CHECK(dnnl_matmul_desc_init(&md,&a,&b,NULL,&c));
  dnnl_primitive_desc_t pd; CHECK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  const char* impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_t p; CHECK(dnnl_primitive_create(&p,pd));
  size_t asz = ta ? K*lda : M*lda;
  void* A=calloc(asz,2); void* B=calloc(K*ldb,2); float* C=calloc(M*ldc,4);
  dnnl_memory_t ma,mb,mc; CHECK(dnnl_memory_create(&ma,&a,eng,A)); CHECK(dnnl_memory_create(&mb,&b,eng,B)); CHECK(dnnl_memory_create(&mc,&c,eng,C));
  dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma},{DNNL_ARG_WEIGHTS,mb},{DNNL_ARG_DST,mc}};
  double best=1e9; for(int r=0;r<8;r++){double t0=now(); CHECK(dnnl_primitive_execute(p,st,3,args)); CHECK(dnnl_stream_wait(st)); double d=now()-t0; if(r>0&&d<best)best=d;}
  printf("%s %ldx%ldx%ld ta=%d lda=%ld: %.3f ms %.1f GFLOP/s\n", impl, (long)M,(long)N,(long)K, ta,(long)lda, best*1e3, 2.0*M*N*K/best/1e9);
  return 0;
}
