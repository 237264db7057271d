// The tensor-core attention forward through PTX (attention_cuda_mma.h,
// attention_ptx_forward_source): mma.sync m16n8k16, ldmatrix and cp.async, with the scores,
// probabilities and output in registers.
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "exec/attention_cuda_mma.h"

namespace ein::detail {

bool attention_forward_uses_ptx(int arch) {
  if (const char* env = std::getenv("EIN_CUDA_ATTENTION"); env && std::string(env) == "wmma")
    return false;
  return arch >= 80;  // mma.sync m16n8k16 for bf16 and f16, and cp.async
}

std::string attention_ptx_forward_source(DType in, DType bias, int64_t e, int64_t f) {
  const bool bf16 = in == DType::bf16;
  const std::string defines = fmt::format(
      "typedef {0} in_t;\ntypedef {1} in2_t;\n#define EIN_TO_IN2 {2}\n#define EIN_MMA_TYPE \"{3}\"\n"
      "#define EIN_E {4}\n#define EIN_F {5}\n",
      bf16 ? "__nv_bfloat16" : "__half", bf16 ? "__nv_bfloat162" : "__half2",
      bf16 ? "__floats2bfloat162_rn" : "__floats2half2_rn", bf16 ? "bf16" : "f16", e, f);
  return "// FlashAttention-2's forward through PTX (exec/attention_cuda_mma.h)\n" +
         attention_bias_prelude(bias) + defines + R"(
#define EIN_BM 64  // query rows a block: 16 a warp
#define EIN_BK 64  // keys a tile
// Staged rows are padded by 8 elements (16 bytes): the 8 rows an ldmatrix reads start in 8
// different groups of four banks.
#define EIN_EP (EIN_E + 8)
#define EIN_FP (EIN_F + 8)
#define EIN_LOG2E 1.4426950408889634f
#define EIN_LN2 0.6931471805599453f

#ifndef EIN_EMULATED_CUDA
// d += a·b for one 16 × 8 × 16 tile, f32 accumulators, in the fragment layouts of the PTX ISA
// ("Matrix Fragments for mma.m16n8k16"): lane = 4 · group + t holds A's rows group and group + 8
// at columns 2t, 2t + 1 (and + 8), B's column group at rows 2t, 2t + 1 (and + 8), and C's rows
// group and group + 8 at columns 2t, 2t + 1. (The host emulation defines these four itself.)
template <class T>
__device__ __forceinline__ void ein_mma_16816(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." EIN_MMA_TYPE "." EIN_MMA_TYPE ".f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// Four 8 × 8 matrices of 16-bit elements from shared memory: lanes 8m..8m+7 give the addresses
// of matrix m's rows; r[m] gets (row lane / 4, columns 2 (lane % 4) and + 1) of matrix m, or
// with `trans` that of its transpose.
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
#endif

// Two floats as one register of the operands' dtype: `lo` in the low half.
__device__ __forceinline__ unsigned ein_pack(float lo, float hi) {
  const in2_t v = EIN_TO_IN2(lo, hi);
  unsigned u;
  memcpy(&u, &v, 4);
  return u;
}

// Starts the copies of rows [j0, j0 + EIN_BK) of a [rows, W] matrix into shared rows of W + 8
// elements, 16 bytes each, zeros past `rows`.
template <int W>
__device__ __forceinline__ void ein_stage_async(in_t* dst, const in_t* src, long long j0,
                                                long long rows) {
  for (int x = threadIdx.x; x < EIN_BK * (W / 8); x += blockDim.x) {
    const int r = x / (W / 8), c = (x % (W / 8)) * 8;
    const bool inside = j0 + r < rows;
    ein_cp_async_16(dst + r * (W + 8) + c, inside ? src + (j0 + r) * W + c : src, inside);
  }
}

extern "C" __global__ void __launch_bounds__(128, 2) ein_attention_forward_ptx(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, float* out, double n_, double t_, double s_, double h_, double r_,
    double scale_, double brow_, double bcol_, double has_bias_, double has_limits_) {
  const long long N = (long long)n_, T = (long long)t_, S = (long long)s_, H = (long long)h_,
                  R = (long long)r_, brow = (long long)brow_, bcol = (long long)bcol_;
  const float scale2 = (float)scale_ * EIN_LOG2E;  // the softmax runs in base 2
  const bool has_bias = has_bias_ != 0, has_limits = has_limits_ != 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, t4 = lane % 4;
  __shared__ __align__(16) in_t ks[EIN_BK * EIN_EP];
  __shared__ __align__(16) in_t vs[EIN_BK * EIN_FP];
  __shared__ long long kend;  // keys the block reads

  const long long qblocks = (T + EIN_BM - 1) / EIN_BM, items = N * qblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    // the last block of rows first: under a causal mask the longest rows start first
    const long long n = w / qblocks, i0 = (qblocks - 1 - w % qblocks) * EIN_BM;
    const long long kv = (n / H) * (H / R) + (n % H) / R;
    const in_t* kn = k + kv * S * EIN_E;
    const in_t* vn = v + kv * S * EIN_F;
    const long long r0 = i0 + 16 * warp;
    // This lane's rows r0 + group + 8h: the keys they see (j < lim) and their bias row, read
    // when the row is not "zeros, then -inf" under a shared mask.
    long long lim[2];
    const bias_t* brow_at[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long i = r0 + group + 8 * h;
      const int limit = has_limits && i < T ? limits[i] : -1;
      lim[h] = limit < 0 || limit > S ? S : limit;
      brow_at[h] = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;
    }
    __syncthreads();  // the previous item is done with kend and the tiles
    ein_key_end(&kend, limits, has_limits, i0, EIN_BM, T, S);
    __syncthreads();
    const long long end = kend;
    if (end > 0) ein_stage_async<EIN_E>(ks, kn, 0, S);

    // q's A fragments: rows group (+ 8) at columns 16c + 2 t4 (+ 8), read once
    unsigned qa[EIN_E / 16][4];
#pragma unroll
    for (int c = 0; c < EIN_E / 16; ++c)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const long long i = r0 + group + 8 * (x % 2);
        qa[c][x] = i < T ? *reinterpret_cast<const unsigned*>(q + (n * T + i) * EIN_E + 16 * c +
                                                              2 * t4 + 8 * (x / 2))
                         : 0u;
      }
    float o[EIN_F / 8][4];  // the output tile: rows group, group + 8; columns 8c + 2 t4 (+ 1)
#pragma unroll
    for (int c = 0; c < EIN_F / 8; ++c)
#pragma unroll
      for (int x = 0; x < 4; ++x) o[c][x] = 0.0f;
    // each row's running max (base 2) and this lane's part of its running sum
    float m[2] = {EIN_NEG_INF, EIN_NEG_INF}, l[2] = {0.0f, 0.0f};

    for (long long j0 = 0; j0 < end; j0 += EIN_BK) {
      ein_cp_async_wait_all();
      __syncthreads();  // k's tile is in, and every warp is done with the last v tile
      ein_stage_async<EIN_F>(vs, vn, j0, S);

      // s = q kᵀ: the 16 × 8 tiles of keys 8c..8c+7; k's rows are B's columns (ldmatrix gives
      // keys 16c.. + 0-7 then + 8-15, each at e columns 16d + 0-7 and + 8-15)
      float s[EIN_BK / 8][4];
#pragma unroll
      for (int c = 0; c < EIN_BK / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) s[c][x] = 0.0f;
#pragma unroll
      for (int c = 0; c < EIN_BK / 16; ++c)
#pragma unroll
        for (int d = 0; d < EIN_E / 16; ++d) {
          unsigned b[4];
          ein_ldmatrix_x4(b, ks + (16 * c + lane % 8 + 8 * (lane / 16)) * EIN_EP + 16 * d +
                                 8 * (lane / 8 % 2));
          ein_mma_16816<in_t>(s[2 * c], qa[d], b);
          ein_mma_16816<in_t>(s[2 * c + 1], qa[d], b + 2);
        }

      // scale and mask: keys past a row's limit are -inf, and a -inf bias masks even a NaN
      // score; tiles every row sees whole, without a bias, skip the checks
      const bool whole = j0 + EIN_BK <= lim[0] && j0 + EIN_BK <= lim[1] && !brow_at[0] &&
                         !brow_at[1];
#pragma unroll
      for (int c = 0; c < EIN_BK / 8; ++c)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          float value = s[c][x] * scale2;
          if (!whole) {
            const int h = x / 2;
            const long long j = j0 + 8 * c + 2 * t4 + x % 2;
            if (j >= lim[h]) {
              value = EIN_NEG_INF;
            } else if (brow_at[h]) {
              const float b = ein_bias(brow_at[h] + j * bcol);
              value = b == EIN_NEG_INF ? EIN_NEG_INF : value + b * EIN_LOG2E;
            }
          }
          s[c][x] = value;
        }

      // the online softmax: a row's 64 keys lie in the four lanes of its group
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[h];
#pragma unroll
        for (int c = 0; c < EIN_BK / 8; ++c) mx = fmaxf(mx, fmaxf(s[c][2 * h], s[c][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == EIN_NEG_INF ? 0.0f : mx;  // a row masked so far stays at 0
        const float alpha = exp2f(m[h] - base);
        m[h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < EIN_BK / 8; ++c)
#pragma unroll
          for (int x = 2 * h; x < 2 * h + 2; ++x) {
            s[c][x] = exp2f(s[c][x] - base);
            sum += s[c][x];
          }
        l[h] = l[h] * alpha + sum;
#pragma unroll
        for (int c = 0; c < EIN_F / 8; ++c) {
          o[c][2 * h] *= alpha;
          o[c][2 * h + 1] *= alpha;
        }
      }

      ein_cp_async_wait_all();
      __syncthreads();  // v's tile is in, and every warp is done with k's
      if (j0 + EIN_BK < end) ein_stage_async<EIN_E>(ks, kn, j0 + EIN_BK, S);

      // o += p v: p, rounded to the operands' dtype as FlashAttention-2 rounds it, is the A
      // fragment of keys 16c..16c+15 as it stands (C's layout is A's); v's rows are B's rows,
      // so ldmatrix transposes (keys + 0-7 then + 8-15, at f columns 16d + 0-7 and + 8-15)
#pragma unroll
      for (int c = 0; c < EIN_BK / 16; ++c) {
        const unsigned pa[4] = {ein_pack(s[2 * c][0], s[2 * c][1]),
                                ein_pack(s[2 * c][2], s[2 * c][3]),
                                ein_pack(s[2 * c + 1][0], s[2 * c + 1][1]),
                                ein_pack(s[2 * c + 1][2], s[2 * c + 1][3])};
#pragma unroll
        for (int d = 0; d < EIN_F / 16; ++d) {
          unsigned b[4];
          ein_ldmatrix_x4_trans(b, vs + (16 * c + lane % 8 + 8 * (lane / 8 % 2)) * EIN_FP +
                                       16 * d + 8 * (lane / 16));
          ein_mma_16816<in_t>(o[2 * d], pa, b);
          ein_mma_16816<in_t>(o[2 * d + 1], pa, b + 2);
        }
      }
    }

    // o = O / l and lse = m + log2 l (in base e); a row with every key masked gets o = 0 and
    // lse = -inf
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const long long i = r0 + group + 8 * h;
      if (i >= T) continue;
      const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
      float* row = out + (n * T + i) * (EIN_F + 1);
#pragma unroll
      for (int c = 0; c < EIN_F / 8; ++c) {
        row[8 * c + 2 * t4] = o[c][2 * h] * inv;
        row[8 * c + 2 * t4 + 1] = o[c][2 * h + 1] * inv;
      }
      if (t4 == 0) row[EIN_F] = sum == 0.0f ? EIN_NEG_INF : (m[h] + log2f(sum)) * EIN_LN2;
    }
  }
}
)";
}

}  // namespace ein::detail
