// The tensor-core attention kernels through sm_90a's warpgroup MMA (attention_cuda_mma.h,
// attention_wgmma_*): the PTX kernels' bodies (attention_forward_kernel, attention_dq_kernel,
// attention_dkv_kernel) with their products as wgmma.mma_async, the tiles staged in the
// 128-byte swizzled layout wgmma reads from shared memory.
#include <string>

#include <fmt/format.h>

#include "exec/attention_cuda_mma.h"

namespace ein::detail {

namespace {

/// ein_wgmma<n, trans_b>(d, a, b, accumulate): d[N / 8][4] (+)= a · b for the warpgroup's 64 × N ×
/// 16 product, f32 accumulators, A (64 × 16) as this thread's 4 registers of two 16-bit values,
/// B from the shared-memory descriptor b, K-major (trans_b 0) or N-major (1); d = a · b when
/// accumulate is 0.
std::string wgmma_function(int n, int trans_b) {
  std::string d, outputs;
  for (int i = 0; i < n / 2; ++i) {
    d += fmt::format("{}%{}", i ? ", " : "", i);
    outputs += fmt::format("{}\"+f\"(d[{}][{}])", i ? ", " : "", i / 4, i % 4);
  }
  const int a = n / 2;
  return fmt::format(R"(
template <>
__device__ __forceinline__ void ein_wgmma<{0}, {8}>(float (*d)[4], const unsigned* a,
                                                 ein_desc_t b, int accumulate) {{
  asm volatile(
      "{{\n.reg .pred p;\nsetp.ne.b32 p, %{6}, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n{0}k16.f32." EIN_MMA_TYPE "." EIN_MMA_TYPE " "
      "{{{1}}}, {{%{2}, %{3}, %{4}, %{5}}}, %{7}, p, 1, 1, {8};\n}}\n"
      : {9}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(accumulate), "l"(b));
}}
)",
                     n, d, a, a + 1, a + 2, a + 3, a + 4, a + 5, trans_b, outputs);
}

// Rows (queries or keys) a block takes: two warpgroups
int rows() { return attention_block_rows(AttentionCores::wgmma); }

}  // namespace

int attention_wgmma_key_tile(int64_t e, int64_t f) {
  // 128 (FlashAttention-3's) where the scores' 64 registers a thread fit beside narrow heads
  return e + f <= 128 ? 128 : 64;
}

std::string attention_wgmma_prelude(DType in, DType bias, int64_t e, int64_t f, int tile,
                                    int rows) {
  // the products' shapes: q kᵀ-like ones N = EIN_TILE (K-major), p v-like ones N = e or f
  std::string instructions = wgmma_function(tile, 0) + wgmma_function(static_cast<int>(e), 1);
  if (f != e) instructions += wgmma_function(static_cast<int>(f), 1);
  return attention_ptx_prelude(in, bias, e, f, tile, rows) + R"(
// wgmma (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): each 128 threads
// of the block are a warpgroup, issuing its own products; its warp w % 4 holds rows 16(w % 4)
// to 16(w % 4) + 15 of a 64-row A or D operand, in mma.sync m16n8k16's layout for those rows,
// so the PTX kernels' fragments and softmax hold as they are. A tile is EIN_TILE rows in the
// 128-byte swizzled layout: a row's 16-byte chunk c of each 64 elements sits at chunk
// c ^ (row % 8) of its 128 bytes, 8 rows make a 1024-byte group, the groups follow each other
// (SBO 1024), and the next 64 elements of every row follow all EIN_TILE rows
// (EIN_SWIZZLED_ROWS bytes on).
#define EIN_SWIZZLED_ROWS (EIN_TILE * 128)  // bytes of a tile's 64-element column block

#define EIN_TILE_ELEMENTS(W) (EIN_TILE * (W))
#define EIN_TILE_ALIGN 1024
#define EIN_BLOCK_UNIFORM_SKIP 1  // dK/dV: a warpgroup's products take all four warps

#ifndef EIN_EMULATED_CUDA
typedef unsigned long long ein_desc_t;
template <int N, int TRANS_B>
__device__ __forceinline__ void ein_wgmma(float (*d)[4], const unsigned* a, ein_desc_t b,
                                          int accumulate);
// The matrix descriptor of a 128-byte swizzled operand at `offset` bytes into `tile`: its
// shared address, the leading and stride byte offsets (each >> 4) and the swizzle mode 1.
__device__ __forceinline__ ein_desc_t ein_desc(const void* tile, unsigned offset, unsigned lbo,
                                               unsigned sbo) {
  const unsigned address = (unsigned)__cvta_generic_to_shared(tile) + offset;
  return (ein_desc_t)((address & 0x3FFFF) >> 4) | (ein_desc_t)(lbo >> 4) << 16 |
         (ein_desc_t)(sbo >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void ein_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void ein_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>  // at most N of the last groups committed still run
__device__ __forceinline__ void ein_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// What cp.async wrote (the generic proxy) is seen by wgmma's reads (the async proxy) once the
// writing thread fences and a barrier follows.
__device__ __forceinline__ void ein_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// wgmma reads its registers and writes its accumulators asynchronously, until the wait: these
// make each register a new value after the wait, so that the compiler neither reuses an
// operand's register nor reads an accumulator before it.
__device__ __forceinline__ void ein_keep(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void ein_keep(unsigned& x) { asm volatile("" : "+r"(x)::"memory"); }
)" + instructions + R"(
#else
template <class T>
__device__ __forceinline__ void ein_keep(T&) {}
template <int N, int TRANS_B>
__device__ __forceinline__ void ein_wgmma(float (*d)[4], const unsigned* a, ein_desc_t b,
                                          int accumulate) {
  ein_emulated_wgmma<in_t, N, TRANS_B != 0>(d, a, b, accumulate);
}
#endif
// ein_keep on each register of x[ROWS][4]
template <int ROWS, class T>
__device__ __forceinline__ void ein_keep_all(T (*x)[4]) {
#pragma unroll
  for (int c = 0; c < ROWS; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) ein_keep(x[c][i]);
}

// Starts the copies of rows [j0, j0 + EIN_TILE) of a [rows, W] matrix into `dst` in the
// swizzled layout, zeros past `rows`; consecutive threads take consecutive chunks of a row.
template <int W>
__device__ __forceinline__ void ein_stage_rows(in_t* dst, const in_t* src, long long j0,
                                               long long rows) {
  for (int x = threadIdx.x; x < EIN_TILE * (W / 8); x += blockDim.x) {
    const int r = x / (W / 8), c = x % (W / 8);
    const bool inside = j0 + r < rows;
    char* at = (char*)dst + (c / 8) * EIN_SWIZZLED_ROWS + (r / 8) * 1024 + (r % 8) * 128 +
               ((c % 8) ^ (r % 8)) * 16;
    ein_cp_async_16(at, inside ? src + (j0 + r) * W + 8 * c : src, inside);
  }
}
__device__ __forceinline__ void ein_landed() {
  ein_cp_async_wait_all();
  ein_fence_proxy_async();
}

// Each product is one commit group of the warpgroup's wgmmas; it lands at the wait that leaves
// fewer groups running than were committed after it.
template <int N>
__device__ __forceinline__ void ein_products_wait() {
  ein_wgmma_wait<N>();
}

// Starts acc[EIN_TILE / 8] = a · bᵀ: a the warpgroup's 64 rows as W / 16 A fragments a thread,
// b's rows B's columns (K-major, W contiguous); step kk takes columns 16kk.., 32 bytes a step
// into the 128-byte rows of column block kk / 4.
template <int W>
__device__ __forceinline__ void ein_start_times_rows(float (*acc)[4], const unsigned (*a)[4],
                                                     const in_t* b, int) {
  ein_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk)
    ein_wgmma<EIN_TILE, 0>(
        acc, a[kk], ein_desc(b, (kk / 4) * EIN_SWIZZLED_ROWS + (kk % 4) * 32, 16, 1024), kk > 0);
  ein_wgmma_commit();
}

// Starts acc[W / 8] += pa · b: pa the warpgroup's 64 × EIN_TILE tile as A fragments (as it
// stands in the accumulator's layout: ein_as_a); b's rows are B's rows (N-major: W
// contiguous), step kk takes rows 16kk.. (two 1024-byte groups), and the next 64 columns lie
// EIN_SWIZZLED_ROWS on (the leading byte offset).
template <int W>
__device__ __forceinline__ void ein_start_add_times(float (*acc)[4], const unsigned (*pa)[4],
                                                    const in_t* b, int) {
  ein_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < EIN_TILE / 16; ++kk)
    ein_wgmma<W, 1>(acc, pa[kk], ein_desc(b, kk * 2048, EIN_SWIZZLED_ROWS, 1024), 1);
  ein_wgmma_commit();
}
)";
}

std::string attention_wgmma_forward_source(DType in, DType bias, int64_t e, int64_t f) {
  return fmt::format("#define EIN_SHARED_BYTES {}\n",
                     attention_forward_shared_bytes(AttentionCores::wgmma, e, f)) +
         attention_wgmma_prelude(in, bias, e, f, attention_wgmma_key_tile(e, f), rows()) +
         attention_forward_kernel("ein_attention_forward_wgmma");
}

std::string attention_wgmma_dq_source(DType in, DType bias, int64_t e, int64_t f) {
  return attention_wgmma_prelude(in, bias, e, f, 32, rows()) +
         attention_dq_kernel("ein_attention_dq_wgmma");
}

std::string attention_wgmma_dkv_source(DType in, DType bias, int64_t e, int64_t f, int part) {
  return attention_wgmma_prelude(in, bias, e, f, 32, rows()) +
         attention_dkv_kernel("ein_attention_dkv_wgmma", part);
}

}  // namespace ein::detail
