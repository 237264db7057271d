// The tensor-core attention kernels through PTX (attention_cuda_mma.h, attention_ptx_*): the
// forward, dQ and dK/dV with mma.sync m16n8k16, ldmatrix and cp.async, the scores,
// probabilities and accumulators in registers. Their bodies (attention_*_kernel) take the tiles
// and products from the set's tile contract, so the wgmma set (attention_cuda_wgmma.cpp) runs
// them too.
#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "exec/attention_cuda_mma.h"
#include "runtime/cuda/nvrtc.h"

namespace ein::detail {

AttentionCores attention_cores(int arch, int64_t e, int64_t f) {
  // Opt-in until a GPU has run them: the WMMA kernels have passed their tests on an H200, these
  // only against the host emulation of the PTX layouts.
  const char* env = std::getenv("EIN_CUDA_ATTENTION");
  const std::string set = env ? env : "";
  // wgmma: sm_90a's code runs on sm_90 alone, and NVRTC compiles it from 12.0 on (the fake
  // device without NVRTC emulates it); its tiles are rows of 64 elements (128 bytes)
  const NvrtcInfo& nvrtc = nvrtc_info();
  const bool sm_90a =
      !nvrtc.available ||
      (nvrtc.major >= 12 && std::binary_search(nvrtc.archs.begin(), nvrtc.archs.end(), 90));
  if (set == "wgmma" && arch == 90 && sm_90a && (e == 64 || e == 128) && (f == 64 || f == 128))
    return AttentionCores::wgmma;
  if ((set == "ptx" || set == "wgmma") &&
      arch >= 80)  // mma.sync m16n8k16 for bf16 and f16, and cp.async
    return AttentionCores::ptx;
  return AttentionCores::wmma;
}

int attention_block_rows(AttentionCores cores) {
  return cores == AttentionCores::wgmma ? 128 : 64;
}

int attention_forward_shared_bytes(AttentionCores cores, int64_t e, int64_t f) {
  // two tiles of k and two of v (EIN_TILE_ELEMENTS of each set), 16-bit, and the alignment
  const auto bytes = [e, f](int64_t tile, int64_t pad, int64_t align) {
    return static_cast<int>(2 * 2 * tile * (e + pad + f + pad) + align);
  };
  switch (cores) {
    case AttentionCores::ptx: return bytes(64, 8, 16);
    case AttentionCores::wgmma: return bytes(attention_wgmma_key_tile(e, f), 0, 1024);
    case AttentionCores::wmma: break;
  }
  return 0;
}

std::string attention_ptx_prelude(DType in, DType bias, int64_t e, int64_t f, int tile, int rows) {
  const bool bf16 = in == DType::bf16;
  const std::string defines = fmt::format(
      "typedef {0} in_t;\ntypedef {1} in2_t;\n#define EIN_TO_IN2 {2}\n#define EIN_MMA_TYPE \"{3}\"\n"
      "#define EIN_E {4}\n#define EIN_F {5}\n#define EIN_TILE {6}\n#define EIN_ROWS {7}\n",
      bf16 ? "__nv_bfloat16" : "__half", bf16 ? "__nv_bfloat162" : "__half2",
      bf16 ? "__floats2bfloat162_rn" : "__floats2half2_rn", bf16 ? "bf16" : "f16", e, f, tile,
      rows);
  return "// FlashAttention-2 through PTX (exec/attention_cuda_mma.h)\n" +
         attention_bias_prelude(bias) + defines + R"(
#define EIN_LOG2E 1.4426950408889634f
#define EIN_LN2 0.6931471805599453f

// The sizes every kernel takes; the softmax runs in base 2 (scale2 = scale · log2 e).
#define EIN_SIZES                                                                              \
  const long long N = (long long)n_, T = (long long)t_, S = (long long)s_, H = (long long)h_,  \
                  R = (long long)r_, brow = (long long)brow_, bcol = (long long)bcol_;         \
  (void)N;                                                                                     \
  const float scale = (float)scale_, scale2 = scale * EIN_LOG2E;                               \
  (void)scale;                                                                                 \
  const bool has_bias = has_bias_ != 0, has_limits = has_limits_ != 0;                         \
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, t4 = lane % 4;

// A block takes EIN_ROWS query rows (forward, dQ) or keys (dK/dV), 16 a warp: 2 · EIN_ROWS
// threads, two blocks an SM at 64 rows.
#define EIN_ROWS_BOUNDS __launch_bounds__(2 * EIN_ROWS, 128 / EIN_ROWS)

// The forward's and dQ's work item w of blocks of EIN_ROWS query rows: the batch row n and its k/v
// head kv (kn, vn), the block's first row i0 (the last block first: under a causal mask the
// longest rows start first), the warp's r0, and for this lane's rows r0 + group + 8h the keys
// they see (j < lim[h]) and their bias row, read when the row is not "zeros, then -inf" under
// a shared mask.
#define EIN_QUERY_ROWS                                                                         \
  const long long n = w / qblocks, i0 = (qblocks - 1 - w % qblocks) * EIN_ROWS;                \
  const long long kv = (n / H) * (H / R) + (n % H) / R;                                        \
  const in_t* kn = k + kv * S * EIN_E;                                                         \
  const in_t* vn = v + kv * S * EIN_F;                                                         \
  const long long r0 = i0 + 16 * warp;                                                         \
  long long lim[2];                                                                            \
  const bias_t* brow_at[2];                                                                    \
  for (int h = 0; h < 2; ++h) {                                                                \
    const long long i = r0 + group + 8 * h;                                                    \
    const int limit = has_limits && i < T ? limits[i] : -1;                                    \
    lim[h] = limit < 0 || limit > S ? S : limit;                                               \
    brow_at[h] = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;           \
  }

// Whether a tile of keys from j0 lies inside both of this lane's rows' limits, with no bias:
// then every score's additive term is 0.
__device__ __forceinline__ bool ein_whole_tile(long long j0, const long long* lim,
                                               const bias_t* const* brow_at) {
  return j0 + EIN_TILE <= lim[0] && j0 + EIN_TILE <= lim[1] && !brow_at[0] && !brow_at[1];
}

// The additive term (base 2) of a row's score at key j: -inf past the row's limit `lim` or
// where its bias row (when it has one) is -inf, else the bias times log2 e, or 0.
__device__ __forceinline__ float ein_row_term(bool whole, long long j, long long lim,
                                              const bias_t* brow_at, long long bcol) {
  if (whole) return 0.0f;
  if (j >= lim) return EIN_NEG_INF;
  return brow_at ? ein_bias(brow_at + j * bcol) * EIN_LOG2E : 0.0f;
}

#ifndef EIN_EMULATED_CUDA
// d += a·b for one 16 × 8 × 16 tile, f32 accumulators, in the fragment layouts of the PTX ISA
// ("Matrix Fragments for mma.m16n8k16"): lane = 4 · group + t4 holds A's rows group and
// group + 8 at columns 2 t4, 2 t4 + 1 (and + 8), B's column group at rows 2 t4, 2 t4 + 1 (and
// + 8), and C's rows group and group + 8 at columns 2 t4, 2 t4 + 1.
template <class T>
__device__ __forceinline__ void ein_mma_16816(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." EIN_MMA_TYPE "." EIN_MMA_TYPE ".f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Four 8 × 8 matrices of 16-bit elements from shared memory: lanes 8m..8m+7 give the addresses
// of matrix m's rows; r[m] gets (row lane / 4, columns 2 (lane % 4) and + 1) of matrix m, or
// with .trans that of its transpose.
__device__ __forceinline__ void ein_ldmatrix_x4(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void ein_ldmatrix_x4_trans(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((unsigned)__cvta_generic_to_shared(p)));
}
// 16 bytes from global to shared memory without passing through registers (zeros when !copy);
// they are there after this thread's ein_cp_async_wait_all().
__device__ __forceinline__ void ein_cp_async_16(void* dst, const void* src, bool copy) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(copy ? 16 : 0));
}
__device__ __forceinline__ void ein_cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// A shared variable's address in the shared window (whose multiples of 1024 the swizzled tiles
// start at).
__device__ __forceinline__ unsigned ein_shared_address(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// The kernel's dynamic shared memory (the launch's bytes).
#define EIN_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#else
__device__ __forceinline__ unsigned ein_shared_address(const void* p) {
  return (unsigned)(unsigned long long)p;
}
#endif

// Two floats as one register of the operands' dtype: `lo` in the low half.
__device__ __forceinline__ unsigned ein_pack(float lo, float hi) {
  const in2_t v = EIN_TO_IN2(lo, hi);
  unsigned u;
  memcpy(&u, &v, 4);
  return u;
}

// Two 16 × 8 accumulator tiles p[0], p[1] (columns 0-7, 8-15) as one 16 × 16 A fragment,
// rounded to the operands' dtype: the accumulator's layout is A's.
__device__ __forceinline__ void ein_as_a(unsigned* a, const float (*p)[4]) {
  a[0] = ein_pack(p[0][0], p[0][1]);
  a[1] = ein_pack(p[0][2], p[0][3]);
  a[2] = ein_pack(p[1][0], p[1][1]);
  a[3] = ein_pack(p[1][2], p[1][3]);
}

// a[W / 16]: rows r0 + group and r0 + group + 8 of a [rows, W] matrix in global memory as A
// fragments (columns 16c + 2 t4 (+ 8)), zeros past `rows`.
template <int W>
__device__ __forceinline__ void ein_rows_as_a(unsigned (*a)[4], const in_t* src, long long r0,
                                              long long rows, int lane) {
#pragma unroll
  for (int c = 0; c < W / 16; ++c)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const long long r = r0 + lane / 4 + 8 * (x % 2);
      a[c][x] = r < rows ? *reinterpret_cast<const unsigned*>(src + r * W + 16 * c +
                                                              2 * (lane % 4) + 8 * (x / 2))
                         : 0u;
    }
}

template <int COLS>
__device__ __forceinline__ void ein_zero(float (*acc)[4]) {
#pragma unroll
  for (int c = 0; c < COLS / 8; ++c)
#pragma unroll
    for (int x = 0; x < 4; ++x) acc[c][x] = 0.0f;
}

// Rows r0 + group and r0 + group + 8 (those below `rows`) of acc[W / 8] to dst, `ld` floats
// apart, row h times factor[h].
template <int W>
__device__ __forceinline__ void ein_store_rows(float* dst, long long ld, const float (*acc)[4],
                                               long long r0, long long rows, int lane,
                                               const float* factor) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long r = r0 + lane / 4 + 8 * h;
    if (r >= rows) continue;
    float* row = dst + r * ld + 2 * (lane % 4);
#pragma unroll
    for (int c = 0; c < W / 8; ++c) {
      row[8 * c] = acc[c][2 * h] * factor[h];
      row[8 * c + 1] = acc[c][2 * h + 1] * factor[h];
    }
  }
}

// The products of a set's tile contract (attention_cuda_mma.h): ein_start_times_rows<W>
// (acc = a · bᵀ) and ein_start_add_times<W> (acc += pa · b, pa the A fragments of a 64 ×
// EIN_TILE tile) start a product, which has landed in acc once ein_products_wait<N>() has let
// at most N later-started ones run on; until then neither acc nor the operand registers may be
// touched. ein_keep_all<ROWS>(x) tells the compiler that x[ROWS][4] changed there.
template <int W>
__device__ __forceinline__ void ein_start_times_rows(float (*acc)[4], const unsigned (*a)[4],
                                                     const in_t* b, int lane);
template <int W>
__device__ __forceinline__ void ein_start_add_times(float (*acc)[4], const unsigned (*pa)[4],
                                                    const in_t* b, int lane);
template <int N>
__device__ __forceinline__ void ein_products_wait();
template <int ROWS, class T>
__device__ __forceinline__ void ein_keep_all(T (*x)[4]);

// The same, landed before they return: acc[EIN_TILE / 8] = a · bᵀ, and acc[W / 8] += p · b
// with p rounded to the operands' dtype (as FlashAttention-2 rounds it) as A fragments.
template <int W>
__device__ __forceinline__ void ein_times_rows(float (*acc)[4], const unsigned (*a)[4],
                                               const in_t* b, int lane) {
  ein_start_times_rows<W>(acc, a, b, lane);
  ein_products_wait<0>();
  ein_keep_all<EIN_TILE / 8>(acc);
}
template <int W>
__device__ __forceinline__ void ein_add_times(float (*acc)[4], const float (*p)[4],
                                              const in_t* b, int lane) {
  unsigned pa[EIN_TILE / 16][4];
#pragma unroll
  for (int c = 0; c < EIN_TILE / 16; ++c) ein_as_a(pa[c], p + 2 * c);
  ein_start_add_times<W>(acc, pa, b, lane);
  ein_products_wait<0>();
  ein_keep_all<W / 8>(acc);
  ein_keep_all<EIN_TILE / 16>(pa);
}
)";
}

namespace {

/// `kernel` (spelt with the entry `name`) with the entry `entry` and the sizes spelt out.
std::string with_entry(std::string kernel, const std::string& name, const std::string& entry) {
  kernel.replace(kernel.find(name), name.size(), entry);
  return attention_with_sizes(kernel);
}

/// The ldmatrix set's tiles and products (attention_cuda_mma.h's "tile contract").
const std::string kLdmatrixProducts = R"(
// The tiles of the ldmatrix set: staged rows padded by 8 elements (16 bytes), so that the 8
// rows an ldmatrix reads start in 8 different groups of four banks.
#define EIN_TILE_ELEMENTS(W) (EIN_TILE * ((W) + 8))
#define EIN_TILE_ALIGN 16
#define EIN_BLOCK_UNIFORM_SKIP 0  // dK/dV: a warp skips the query tiles its keys are not seen by
__device__ __forceinline__ void ein_landed() { ein_cp_async_wait_all(); }

// Starts the copies of rows [j0, j0 + EIN_TILE) of a [rows, W] matrix into shared rows of
// W + 8 elements, 16 bytes each, zeros past `rows`.
template <int W>
__device__ __forceinline__ void ein_stage_rows(in_t* dst, const in_t* src, long long j0,
                                               long long rows) {
  for (int x = threadIdx.x; x < EIN_TILE * (W / 8); x += blockDim.x) {
    const int r = x / (W / 8), c = (x % (W / 8)) * 8;
    const bool inside = j0 + r < rows;
    ein_cp_async_16(dst + r * (W + 8) + c, inside ? src + (j0 + r) * W + c : src, inside);
  }
}

// mma.sync is synchronous: a product "started" is done, and there is nothing to wait for.
template <int N>
__device__ __forceinline__ void ein_products_wait() {}
template <int ROWS, class T>
__device__ __forceinline__ void ein_keep_all(T (*)[4]) {}

// acc[EIN_TILE / 8] = a · bᵀ: a the warp's 16 rows as W / 16 A fragments, b the tile's staged
// rows (W + 8 apart) as B's columns (ldmatrix gives rows 16c + 0-7 then + 8-15, each at
// columns 16d + 0-7 and + 8-15).
template <int W>
__device__ __forceinline__ void ein_start_times_rows(float (*acc)[4], const unsigned (*a)[4],
                                                     const in_t* b, int lane) {
  ein_zero<EIN_TILE>(acc);
#pragma unroll
  for (int c = 0; c < EIN_TILE / 16; ++c)
#pragma unroll
    for (int d = 0; d < W / 16; ++d) {
      unsigned r[4];
      ein_ldmatrix_x4(r, b + (16 * c + lane % 8 + 8 * (lane / 16)) * (W + 8) + 16 * d +
                             8 * (lane / 8 % 2));
      ein_mma_16816<in_t>(acc[2 * c], a[d], r);
      ein_mma_16816<in_t>(acc[2 * c + 1], a[d], r + 2);
    }
}

// acc[W / 8] += pa · b: pa the warp's 16 × EIN_TILE tile as A fragments (the accumulator's
// layout is the A operand's: ein_as_a), b the tile's staged rows (W + 8 apart) as B's rows, so
// ldmatrix transposes.
template <int W>
__device__ __forceinline__ void ein_start_add_times(float (*acc)[4], const unsigned (*pa)[4],
                                                    const in_t* b, int lane) {
#pragma unroll
  for (int c = 0; c < EIN_TILE / 16; ++c)
#pragma unroll
    for (int d = 0; d < W / 16; ++d) {
      unsigned r[4];
      ein_ldmatrix_x4_trans(r, b + (16 * c + lane % 8 + 8 * (lane / 8 % 2)) * (W + 8) + 16 * d +
                                   8 * (lane / 16));
      ein_mma_16816<in_t>(acc[2 * d], pa[c], r);
      ein_mma_16816<in_t>(acc[2 * d + 1], pa[c], r + 2);
    }
}
)";

}  // namespace

std::string attention_forward_kernel(const std::string& entry) {
  const std::string body = R"(
// A block of EIN_ROWS / 16 warps takes EIN_ROWS query rows (16 a warp), over tiles of EIN_TILE
// keys, through the set's tiles and products (attention_forward_kernel). Step t starts the
// scores of tile t, then p v of tile t - 1 (FlashAttention-3's overlap within a warpgroup: on
// wgmma the softmax of tile t runs while the tensor cores do p v), and the copies of k's tile
// t + 1 and v's tile t, each double-buffered, run under a whole step.
extern "C" __global__ void EIN_ROWS_BOUNDS ein_attention_forward_ptx(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, float* out, EIN_SIZE_PARAMS) {
  EIN_SIZES
  // k's two tiles, then v's two, in the dynamic shared memory from its first multiple of
  // EIN_TILE_ALIGN bytes (the host gives EIN_SHARED_BYTES: that much more than the tiles)
  EIN_DYNAMIC_SHARED(shared);
  constexpr int kTile = EIN_TILE_ELEMENTS(EIN_E), vTile = EIN_TILE_ELEMENTS(EIN_F);
  static_assert(kTile * sizeof(in_t) % EIN_TILE_ALIGN == 0 &&
                    vTile * sizeof(in_t) % EIN_TILE_ALIGN == 0 &&
                    2 * (kTile + vTile) * sizeof(in_t) + EIN_TILE_ALIGN <= EIN_SHARED_BYTES,
                "the tiles fit the host's EIN_SHARED_BYTES, attention_forward_shared_bytes");
  in_t* const tiles = (in_t*)(shared + (EIN_TILE_ALIGN - ein_shared_address(shared) %
                                        EIN_TILE_ALIGN) % EIN_TILE_ALIGN);
  in_t* const ks = tiles;               // buffer b at ks + b * kTile
  in_t* const vs = tiles + 2 * kTile;  // buffer b at vs + b * vTile
  __shared__ long long kend;  // keys the block reads

  const long long qblocks = (T + EIN_ROWS - 1) / EIN_ROWS, items = N * qblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    EIN_QUERY_ROWS
    __syncthreads();  // the previous item is done with kend and the tiles
    ein_key_end(&kend, limits, has_limits, i0, EIN_ROWS, T, S);
    __syncthreads();
    const long long end = kend, tiles_end = (end + EIN_TILE - 1) / EIN_TILE;
    if (end > 0) ein_stage_rows<EIN_E>(ks, kn, 0, S);

    unsigned qa[EIN_E / 16][4];
    ein_rows_as_a<EIN_E>(qa, q + n * T * EIN_E, r0, T, lane);
    float o[EIN_F / 8][4];
    ein_zero<EIN_F>(o);
    // each row's running max (base 2) and this lane's part of its running sum
    float m[2] = {EIN_NEG_INF, EIN_NEG_INF}, l[2] = {0.0f, 0.0f};

    // Tile j0's scores s (landed) scaled, masked (a -inf term masks even a NaN score) and
    // turned into probabilities by the online softmax (a row's keys lie in the four lanes of its
    // group), m and l moved on; alpha[h] is the factor of row h's earlier sums.
    auto softmax = [&](float (*s)[4], long long j0, float* alpha) {
      const bool whole = ein_whole_tile(j0, lim, brow_at);
#pragma unroll
      for (int c = 0; c < EIN_TILE / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const float b = ein_row_term(whole, j0 + 8 * c + 2 * t4 + x % 2, lim[x / 2],
                                       brow_at[x / 2], bcol);
          s[c][x] = b == EIN_NEG_INF ? EIN_NEG_INF : s[c][x] * scale2 + b;
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int c = 0; c < EIN_TILE / 8; ++c)
          mx = fmaxf(mx, fmaxf(s[c][2 * h], s[c][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == EIN_NEG_INF ? 0.0f : mx;  // a row masked so far stays at 0
        alpha[h] = exp2f(m[h] - base);
        m[h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < EIN_TILE / 8; ++c)
#pragma unroll
          for (int x = 2 * h; x < 2 * h + 2; ++x) {
            s[c][x] = exp2f(s[c][x] - base);
            sum += s[c][x];
          }
        l[h] = l[h] * alpha[h] + sum;
      }
    };

    // Step t: k's tile t and v's tile t - 1 are in, and every warp is done with k's tile t - 1
    // and v's tile t - 2, whose buffers the copies of k's tile t + 1 and v's tile t take.
    auto step = [&](long long t) {
      ein_landed();
      __syncthreads();
      const int buf = (int)(t % 2);
      if (t + 1 < tiles_end)
        ein_stage_rows<EIN_E>(ks + (buf ^ 1) * kTile, kn, (t + 1) * EIN_TILE, S);
      if (t < tiles_end) ein_stage_rows<EIN_F>(vs + buf * vTile, vn, t * EIN_TILE, S);
      return buf;
    };

    // Tile 0's scores alone, then per tile t its scores and tile t - 1's p v (pa: tile t - 1's
    // probabilities as A fragments), then the last p v alone; straight-line between the waits,
    // so that ptxas sees which products each wait lands.
    unsigned pa[EIN_TILE / 16][4];
    float alpha[2];
    if (end > 0) {
      float s[EIN_TILE / 8][4];
      ein_start_times_rows<EIN_E>(s, qa, ks + step(0) * kTile, lane);
      ein_products_wait<0>();
      ein_keep_all<EIN_TILE / 8>(s);
      softmax(s, 0, alpha);
#pragma unroll
      for (int c = 0; c < EIN_TILE / 16; ++c) ein_as_a(pa[c], s + 2 * c);
    }
    for (long long t = 1; t < tiles_end; ++t) {
      const int buf = step(t);
      float s[EIN_TILE / 8][4];
      ein_start_times_rows<EIN_E>(s, qa, ks + buf * kTile, lane);
      ein_start_add_times<EIN_F>(o, pa, vs + (buf ^ 1) * vTile, lane);
      ein_products_wait<1>();  // the scores; p v may still run
      ein_keep_all<EIN_TILE / 8>(s);
      softmax(s, t * EIN_TILE, alpha);
      ein_products_wait<0>();  // p v: o to the new maxima, and pa the new probabilities
      ein_keep_all<EIN_F / 8>(o);
      ein_keep_all<EIN_TILE / 16>(pa);
#pragma unroll
      for (int c = 0; c < EIN_F / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) o[c][x] *= alpha[x / 2];
#pragma unroll
      for (int c = 0; c < EIN_TILE / 16; ++c) ein_as_a(pa[c], s + 2 * c);
    }
    if (end > 0) {
      const int buf = step(tiles_end);
      ein_start_add_times<EIN_F>(o, pa, vs + (buf ^ 1) * vTile, lane);
      ein_products_wait<0>();
      ein_keep_all<EIN_F / 8>(o);
      ein_keep_all<EIN_TILE / 16>(pa);  // read by the product until its wait
    }

    // o = O / l and lse = m + log2 l (in base e); a row with every key masked gets o = 0 and
    // lse = -inf
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      inv[h] = sum == 0.0f ? 0.0f : 1.0f / sum;
      const long long i = r0 + group + 8 * h;
      if (t4 == 0 && i < T)
        out[(n * T + i) * (EIN_F + 1) + EIN_F] =
            sum == 0.0f ? EIN_NEG_INF : (m[h] + log2f(sum)) * EIN_LN2;
    }
    ein_store_rows<EIN_F>(out + n * T * (EIN_F + 1), EIN_F + 1, o, r0, T, lane, inv);
  }
}
)";
  return with_entry(body, "ein_attention_forward_ptx", entry);
}

std::string attention_ptx_forward_source(DType in, DType bias, int64_t e, int64_t f) {
  return fmt::format("#define EIN_SHARED_BYTES {}\n",
                     attention_forward_shared_bytes(AttentionCores::ptx, e, f)) +
         attention_ptx_prelude(in, bias, e, f, 64) + kLdmatrixProducts +
         attention_forward_kernel("ein_attention_forward_ptx");
}

std::string attention_dq_kernel(const std::string& entry) {
  return with_entry(R"(
// dQ = scale · Σ_j P ∘ (dP - delta) K: a block of EIN_ROWS / 16 warps takes EIN_ROWS query rows
// (16 a warp), over tiles of 32 keys, double-buffered (the next tile's copy runs under this
// one's products).
extern "C" __global__ void EIN_ROWS_BOUNDS ein_attention_dq_ptx(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, const float* out, const in_t* d_out, const float* delta, float* dq,
    EIN_SIZE_PARAMS) {
  EIN_SIZES
  __shared__ __align__(EIN_TILE_ALIGN) in_t ks[2][EIN_TILE_ELEMENTS(EIN_E)];
  __shared__ __align__(EIN_TILE_ALIGN) in_t vs[2][EIN_TILE_ELEMENTS(EIN_F)];
  __shared__ long long kend;

  const long long qblocks = (T + EIN_ROWS - 1) / EIN_ROWS, items = N * qblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    EIN_QUERY_ROWS
    float lse2[2], di[2];  // this lane's rows' logsumexp (base 2) and delta
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long i = r0 + group + 8 * h;
      lse2[h] = i < T ? out[(n * T + i) * (EIN_F + 1) + EIN_F] * EIN_LOG2E : EIN_NEG_INF;
      di[h] = i < T ? delta[n * T + i] : 0.0f;
    }
    __syncthreads();  // the previous item is done with kend and the tiles
    ein_key_end(&kend, limits, has_limits, i0, EIN_ROWS, T, S);
    __syncthreads();
    const long long end = kend;
    if (end > 0) {
      ein_stage_rows<EIN_E>(ks[0], kn, 0, S);
      ein_stage_rows<EIN_F>(vs[0], vn, 0, S);
    }
    unsigned qa[EIN_E / 16][4], da[EIN_F / 16][4];
    ein_rows_as_a<EIN_E>(qa, q + n * T * EIN_E, r0, T, lane);
    ein_rows_as_a<EIN_F>(da, d_out + n * T * EIN_F, r0, T, lane);
    float acc[EIN_E / 8][4];
    ein_zero<EIN_E>(acc);

    int buf = 0;
    for (long long j0 = 0; j0 < end; j0 += EIN_TILE, buf ^= 1) {
      ein_landed();
      __syncthreads();  // this tile is in, and every warp is done with the other buffer
      if (j0 + EIN_TILE < end) {
        ein_stage_rows<EIN_E>(ks[buf ^ 1], kn, j0 + EIN_TILE, S);
        ein_stage_rows<EIN_F>(vs[buf ^ 1], vn, j0 + EIN_TILE, S);
      }
      // the scores and dP = dO vᵀ, P from the scores while dP runs
      float p[EIN_TILE / 8][4], dp[EIN_TILE / 8][4];
      ein_start_times_rows<EIN_E>(p, qa, ks[buf], lane);
      ein_start_times_rows<EIN_F>(dp, da, vs[buf], lane);
      ein_products_wait<1>();
      ein_keep_all<EIN_TILE / 8>(p);
      const bool whole = ein_whole_tile(j0, lim, brow_at);
#pragma unroll
      for (int c = 0; c < EIN_TILE / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) {  // P from the logsumexp
          const int h = x / 2;
          const float b =
              ein_row_term(whole, j0 + 8 * c + 2 * t4 + x % 2, lim[h], brow_at[h], bcol);
          p[c][x] = lse2[h] == EIN_NEG_INF || b == EIN_NEG_INF
                        ? 0.0f
                        : exp2f(p[c][x] * scale2 + b - lse2[h]);
        }
      ein_products_wait<0>();
      ein_keep_all<EIN_TILE / 8>(dp);
#pragma unroll
      for (int c = 0; c < EIN_TILE / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x)  // dS, rounded to the operands' dtype by the product
          p[c][x] = p[c][x] == 0.0f ? 0.0f : scale * p[c][x] * (dp[c][x] - di[x / 2]);
      ein_add_times<EIN_E>(acc, p, ks[buf], lane);  // dQ += dS k
    }
    const float one[2] = {1.0f, 1.0f};
    ein_store_rows<EIN_E>(dq + n * T * EIN_E, EIN_E, acc, r0, T, lane, one);
  }
}
)", "ein_attention_dq_ptx", entry);
}

std::string attention_ptx_dq_source(DType in, DType bias, int64_t e, int64_t f) {
  return attention_ptx_prelude(in, bias, e, f, 32) + kLdmatrixProducts +
         attention_dq_kernel("ein_attention_dq_ptx");
}

std::string attention_dkv_kernel(const std::string& entry, int part) {
  return fmt::format("#define EIN_PART {}\n", part) +
         with_entry(R"(
// A block of EIN_ROWS / 16 warps takes EIN_ROWS keys (16 a warp) of one k/v head, over tiles of
// 32 queries of every query head that reads it, double-buffered: dV = Σ Pᵀ dO and dK = scale ·
// Σ (Pᵀ ∘ (dPᵀ - delta)) Q with dPᵀ = v dOᵀ, each warp holding its keys' rows of the
// transposed tiles. EIN_PART 1 computes dV alone, 2 dK alone (wide heads: the registers of
// both do not fit one thread), 0 both.
extern "C" __global__ void EIN_ROWS_BOUNDS ein_attention_dkv_ptx(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, const float* out, const in_t* d_out, const float* delta, float* dk,
    float* dv, EIN_SIZE_PARAMS) {
  static_assert(EIN_TILE == 32, "the skip test: a tile's queries are the warp's lanes");
  EIN_SIZES
  __shared__ __align__(EIN_TILE_ALIGN) in_t qs[2][EIN_TILE_ELEMENTS(EIN_E)];
  __shared__ __align__(EIN_TILE_ALIGN) in_t dos[2][EIN_TILE_ELEMENTS(EIN_F)];
  __shared__ float lses[2][EIN_TILE], deltas[2][EIN_TILE];  // per query: lse in base 2, delta
  __shared__ int lims[2][EIN_TILE];                           // per query: its key limit
  __shared__ long long firsts[EIN_ROWS / 16];

  const long long groups = H / R, NKV = N / R;
  const long long kblocks = (S + EIN_ROWS - 1) / EIN_ROWS, items = NKV * kblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    // the first keys first: under a causal mask every query sees them
    const long long m = w / kblocks, j0 = (w % kblocks) * EIN_ROWS;
    const long long c0 = j0 + 16 * warp;  // this warp's first key
    unsigned ka[EIN_E / 16][4];
    ein_rows_as_a<EIN_E>(ka, k + m * S * EIN_E, c0, S, lane);
#if EIN_PART != 1
    unsigned va[EIN_F / 16][4];
    ein_rows_as_a<EIN_F>(va, v + m * S * EIN_F, c0, S, lane);
    float dk_acc[EIN_E / 8][4];
    ein_zero<EIN_E>(dk_acc);
#endif
#if EIN_PART != 2
    float dv_acc[EIN_F / 8][4];
    ein_zero<EIN_F>(dv_acc);
#endif
    __syncthreads();  // the previous item is done with the tiles and firsts
    // With key limits, the query tiles before the first query that sees one of the block's
    // keys are skipped: under a causal mask, every tile above the diagonal.
    const long long i_start =
        ein_first_query<EIN_ROWS / 16>(limits, has_limits, j0, T, firsts) / EIN_TILE * EIN_TILE;
    const long long tiles = i_start < T ? (T - i_start + EIN_TILE - 1) / EIN_TILE : 0;
    const long long total = R * tiles;  // tiles of every query head that reads this k/v head

    // Starts the copies of tile `it` (query head g, rows i0..) into buffer `b`; its queries'
    // logsumexp, delta and limit are stored plainly (seen after the next barrier).
    auto stage = [&](long long it, int b) {
      const long long g = it / tiles, i0 = i_start + (it % tiles) * EIN_TILE;
      const long long n = (m / groups) * H + (m % groups) * R + g;
      ein_stage_rows<EIN_E>(qs[b], q + n * T * EIN_E, i0, T);
      ein_stage_rows<EIN_F>(dos[b], d_out + n * T * EIN_F, i0, T);
      for (int x = threadIdx.x; x < EIN_TILE; x += blockDim.x) {
        const long long i = i0 + x;
        lses[b][x] = i < T ? out[(n * T + i) * (EIN_F + 1) + EIN_F] * EIN_LOG2E : EIN_NEG_INF;
        deltas[b][x] = i < T ? delta[n * T + i] : 0.0f;
        lims[b][x] = has_limits && i < T ? limits[i] : -1;
      }
    };
    if (total > 0) stage(0, 0);

    int buf = 0;
    for (long long it = 0; it < total; ++it, buf ^= 1) {
      ein_landed();
      __syncthreads();  // this tile is in, and every warp is done with the other buffer
      if (it + 1 < total) stage(it + 1, buf ^ 1);
      const long long g = it / tiles, i0 = i_start + (it % tiles) * EIN_TILE;
      const long long n = (m / groups) * H + (m % groups) * R + g;
      // a warp whose keys no query of the tile sees skips it (uniform over the warp: lane x
      // checks query x of the 32), or the block when none sees its keys (EIN_BLOCK_UNIFORM_SKIP:
      // a warpgroup's products take all four warps)
      const int lane_limit = lims[buf][lane];
      const long long seen_from = EIN_BLOCK_UNIFORM_SKIP ? j0 : c0;
      int skip = has_limits && (i0 + lane >= T || (lane_limit >= 0 && lane_limit <= seen_from));
      for (int d = 16; d > 0; d /= 2) skip &= __shfl_xor_sync(0xffffffffu, skip, d);
      if (skip) continue;
      const bias_t* bcol_at[2];  // this lane's keys' bias columns
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long j = c0 + group + 8 * h;
        bcol_at[h] = has_bias && j < S ? bias + bias_off[n] + j * bcol : 0;
      }
      // Sᵀ = k qᵀ and (for dK) dPᵀ = v dOᵀ started together, Pᵀ from Sᵀ while dPᵀ runs: this
      // lane's keys c0 + group (+ 8) × queries 8c + 2 t4 (+ 1)
      float p[EIN_TILE / 8][4];
      ein_start_times_rows<EIN_E>(p, ka, qs[buf], lane);
#if EIN_PART != 1
      float dp[EIN_TILE / 8][4];
      ein_start_times_rows<EIN_F>(dp, va, dos[buf], lane);
      ein_products_wait<1>();
#else
      ein_products_wait<0>();
#endif
      ein_keep_all<EIN_TILE / 8>(p);
#pragma unroll
      for (int c = 0; c < EIN_TILE / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int h = x / 2, xq = 8 * c + 2 * t4 + x % 2;
          const long long j = c0 + group + 8 * h, i = i0 + xq;
          const int lim = lims[buf][xq];
          const float l2 = lses[buf][xq];
          float value = 0.0f;
          if (j < S && i < T && l2 != EIN_NEG_INF && (lim < 0 || j < lim)) {
            const float b = lim < 0 && bcol_at[h] ? ein_bias(bcol_at[h] + i * brow) : 0.0f;
            if (b != EIN_NEG_INF) value = exp2f(p[c][x] * scale2 + b * EIN_LOG2E - l2);
          }
          p[c][x] = value;
        }
#if EIN_PART != 2
      unsigned pa[EIN_TILE / 16][4];  // dV += Pᵀ dO, running under dSᵀ
#pragma unroll
      for (int c = 0; c < EIN_TILE / 16; ++c) ein_as_a(pa[c], p + 2 * c);
      ein_start_add_times<EIN_F>(dv_acc, pa, dos[buf], lane);
#endif
#if EIN_PART != 1
      ein_products_wait<EIN_PART == 0 ? 1 : 0>();  // dPᵀ (dV's product may still run)
      ein_keep_all<EIN_TILE / 8>(dp);
#pragma unroll
      for (int c = 0; c < EIN_TILE / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) {  // dSᵀ, rounded to the operands' dtype by the product
          const float d = deltas[buf][8 * c + 2 * t4 + x % 2];
          p[c][x] = p[c][x] == 0.0f ? 0.0f : scale * p[c][x] * (dp[c][x] - d);
        }
      unsigned sa[EIN_TILE / 16][4];  // dK += dSᵀ q
#pragma unroll
      for (int c = 0; c < EIN_TILE / 16; ++c) ein_as_a(sa[c], p + 2 * c);
      ein_start_add_times<EIN_E>(dk_acc, sa, qs[buf], lane);
#endif
      ein_products_wait<0>();
#if EIN_PART != 2
      ein_keep_all<EIN_F / 8>(dv_acc);
      ein_keep_all<EIN_TILE / 16>(pa);
#endif
#if EIN_PART != 1
      ein_keep_all<EIN_E / 8>(dk_acc);
      ein_keep_all<EIN_TILE / 16>(sa);
#endif
    }
    const float one[2] = {1.0f, 1.0f};
#if EIN_PART != 1
    ein_store_rows<EIN_E>(dk + m * S * EIN_E, EIN_E, dk_acc, c0, S, lane, one);
#endif
#if EIN_PART != 2
    ein_store_rows<EIN_F>(dv + m * S * EIN_F, EIN_F, dv_acc, c0, S, lane, one);
#endif
  }
}
)", "ein_attention_dkv_ptx", entry);
}

std::string attention_ptx_dkv_source(DType in, DType bias, int64_t e, int64_t f, int part) {
  return attention_ptx_prelude(in, bias, e, f, 32) + kLdmatrixProducts +
         attention_dkv_kernel("ein_attention_dkv_ptx", part);
}

}  // namespace ein::detail
