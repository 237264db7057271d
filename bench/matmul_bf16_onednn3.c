// bench/matmul_bf16_shapes.c on oneDNN 3.x's C API, for PyPI's onednn-cpu-gomp 2023.2 (oneDNN
// 3.2, GNU OpenMP): whether a newer oneDNN than Debian's 2.6 multiplies bf16 faster here
// (BENCHMARKS.md, "bf16 attention on AMX tiles, weight gradients in f32").
//   pip download onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 --no-deps -d /tmp/w
//   mkdir /tmp/od && cd /tmp/od && for w in /tmp/w/*.whl; do unzip -q -o $w; done
//   D=/tmp/od/onednn_devel_cpu_gomp-2023.2.0.data/data L=/tmp/od/onednn_cpu_gomp-2023.2.0.data/data/lib
//   gcc -O2 bench/matmul_bf16_onednn3.c -o /tmp/mm3 -I$D/include -L$L -Wl,-rpath,$L -ldnnl -fopenmp
//   /tmp/mm3 2048 512 2048 2     # M N K threads [transposed B] [f32 instead of bf16]
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>
#define CHECK(x) do { dnnl_status_t s = (x); if (s != dnnl_success) { printf("fail %d at %s\n", s, #x); exit(1);} } while(0)
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char** argv){
  int64_t M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]); int T=atoi(argv[4]); int tb=argc>5?atoi(argv[5]):0; int f32=argc>6?atoi(argv[6]):0;
  omp_set_num_threads(T);
  dnnl_data_type_t dt = f32 ? dnnl_f32 : dnnl_bf16; size_t es = f32?4:2;
  dnnl_engine_t eng; CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  dnnl_stream_t st; CHECK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t a,b,c; dnnl_dims_t ad={M,K}, as={K,1}, bd={K,N}, bs={tb?1:N,tb?K:1}, cd={M,N}, cs={N,1};
  CHECK(dnnl_memory_desc_create_with_strides(&a,2,ad,dt,as));
  CHECK(dnnl_memory_desc_create_with_strides(&b,2,bd,dt,bs));
  CHECK(dnnl_memory_desc_create_with_strides(&c,2,cd,dt,cs));
  dnnl_primitive_desc_t pd; CHECK(dnnl_matmul_primitive_desc_create(&pd,eng,a,b,NULL,c,NULL));
  const char* impl; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_t p; CHECK(dnnl_primitive_create(&p,pd));
  char* A=malloc(M*K*es); char* B=malloc(K*N*es); char* C=malloc(M*N*es);
  if (f32) { for (long i=0;i<M*K;i++) ((float*)A)[i]=rand()/(float)RAND_MAX; for (long i=0;i<K*N;i++) ((float*)B)[i]=rand()/(float)RAND_MAX; }
  else { for (long i=0;i<M*K;i++) ((uint16_t*)A)[i]=0x3f80 + (rand()&0x7f); for (long i=0;i<K*N;i++) ((uint16_t*)B)[i]=0x3f00+(rand()&0x7f); }
  dnnl_memory_t ma,mb,mc; CHECK(dnnl_memory_create(&ma,a,eng,A)); CHECK(dnnl_memory_create(&mb,b,eng,B)); CHECK(dnnl_memory_create(&mc,c,eng,C));
  dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma},{DNNL_ARG_WEIGHTS,mb},{DNNL_ARG_DST,mc}};
  double ts[21]; for(int r=0;r<21;r++){double t0=now(); CHECK(dnnl_primitive_execute(p,st,3,args)); CHECK(dnnl_stream_wait(st)); ts[r]=now()-t0;}
  double best=1e9; for(int r=1;r<21;r++) if(ts[r]<best) best=ts[r];
  printf("%s %ldx%ldx%ld T=%d tb=%d f32=%d: %.3f ms %.1f GFLOP/s\n", impl, (long)M,(long)N,(long)K, T, tb, f32, best*1e3, 2.0*M*N*K/best/1e9);
  return 0;
}
