// The tensor-core attention forward's CUDA C++ (attention_cuda_mma.h).
#include "exec/attention_cuda_mma.h"

#include <fmt/format.h>

namespace ein::detail {
namespace {

constexpr int kWarps = 4;                  // 16 query rows each: 64 rows a block
constexpr int64_t kPad = 8;                // 16-bit elements after each staged row (banks)
constexpr int64_t kSharedBudget = 48 * 1024;  // static shared memory of a block

int64_t shared_bytes(int64_t e, int64_t f, int64_t bk) {
  return 2 * bk * (e + kPad) + 2 * bk * (f + kPad)  // k and v tiles
         + 4 * kWarps * 16 * (bk + 4)                // each warp's f32 scores
         + 2 * kWarps * 16 * (bk + kPad)             // each warp's 16-bit probabilities
         + 4 * kWarps * 16;                          // each warp's row factors
}

/// The bias's C type and the expression reading one element `*b` as float.
std::pair<const char*, const char*> bias_type(DType bias) {
  switch (bias) {
    case DType::f64: return {"double", "(float)*b"};
    case DType::bf16: return {"__nv_bfloat16", "__bfloat162float(*b)"};
    case DType::f16: return {"__half", "__half2float(*b)"};
    default: return {"float", "*b"};
  }
}

std::string bias_prelude(DType bias) {
  const auto [type, read] = bias_type(bias);
  return fmt::format(
      "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
      "typedef {0} bias_t;\n"
      "#define EIN_NEG_INF (-__int_as_float(0x7f800000))\n"
      "__device__ __forceinline__ float ein_bias(const bias_t* b) {{ return {1}; }}\n",
      type, read);
}

}  // namespace

int attention_mma_key_tile(int64_t e, int64_t f) {
  if (e <= 0 || f <= 0 || e % 16 != 0 || f % 16 != 0 || e > 128 || f > 128) return 0;
  for (int bk : {64, 32})
    if (shared_bytes(e, f, bk) <= kSharedBudget) return bk;
  return 0;
}

std::string attention_limits_source(DType bias) {
  return "// Per-row key limits of an attention mask (exec/attention_cuda_mma.h)\n" +
         bias_prelude(bias) + R"(
extern "C" __global__ void __launch_bounds__(128) ein_attention_limits(
    const bias_t* bias, int* limits, double t_, double s_, double brow_, double bcol_) {
  const long long T = (long long)t_, S = (long long)s_, brow = (long long)brow_,
                  bcol = (long long)bcol_;
  const int lane = threadIdx.x % 32;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32);
  // One warp per row (uniform over the warp, as the shuffles need).
  for (long long i = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < T;
       i += warps) {
    long long last_zero = -1, first_masked = S;
    int other = 0;
    for (long long j = lane; j < S; j += 32) {
      const float b = ein_bias(bias + i * brow + j * bcol);
      if (b == 0.0f) last_zero = j;
      else if (b == EIN_NEG_INF) first_masked = first_masked < j ? first_masked : j;
      else other = 1;
    }
    for (int d = 16; d > 0; d /= 2) {
      const long long z = __shfl_xor_sync(0xffffffffu, last_zero, d);
      const long long m = __shfl_xor_sync(0xffffffffu, first_masked, d);
      other |= __shfl_xor_sync(0xffffffffu, other, d);
      last_zero = z > last_zero ? z : last_zero;
      first_masked = m < first_masked ? m : first_masked;
    }
    if (lane == 0) limits[i] = other || last_zero >= first_masked ? -1 : (int)(last_zero + 1);
  }
}
)";
}

std::string attention_mma_forward_source(DType in, DType bias, int64_t e, int64_t f,
                                         int key_tile) {
  const bool bf16 = in == DType::bf16;
  const std::string defines = fmt::format(
      "typedef {0} in_t;\n#define EIN_TO_IN {1}\n"
      "#define EIN_E {2}\n#define EIN_F {3}\n#define EIN_BK {4}\n#define EIN_PAD {5}\n"
      "#define EIN_EP (EIN_E + EIN_PAD)\n#define EIN_FP (EIN_F + EIN_PAD)\n"
      "#define EIN_BKP (EIN_BK + EIN_PAD)\n#define EIN_BKS (EIN_BK + 4)\n#define EIN_WARPS {6}\n",
      bf16 ? "__nv_bfloat16" : "__half", bf16 ? "__float2bfloat16" : "__float2half", e, f,
      key_tile, kPad, kWarps);
  return "// FlashAttention-2 forward on tensor cores (exec/attention_cuda_mma.h)\n"
         "#ifndef EIN_EMULATED_CUDA\n#include <mma.h>\n#endif\n" +
         bias_prelude(bias) + defines + R"(
using namespace nvcuda;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, in_t, wmma::row_major> a_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, in_t, wmma::col_major> bt_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, in_t, wmma::row_major> b_t;

// Stages rows [j0, j0 + EIN_BK) of a [rows, W] matrix into shared rows of W + EIN_PAD,
// 16 bytes a load, zeros past `rows`.
template <int W>
__device__ __forceinline__ void ein_stage(in_t* dst, const in_t* src, long long j0,
                                          long long rows) {
  for (int x = threadIdx.x; x < EIN_BK * (W / 8); x += blockDim.x) {
    const int r = x / (W / 8), c = (x % (W / 8)) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (j0 + r < rows) value = *reinterpret_cast<const uint4*>(src + (j0 + r) * W + c);
    *reinterpret_cast<uint4*>(dst + r * (W + EIN_PAD) + c) = value;
  }
}

extern "C" __global__ void __launch_bounds__(32 * EIN_WARPS, 1) ein_attention_forward_mma(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, float* out, double n_, double t_, double s_, double h_, double r_,
    double scale_, double brow_, double bcol_, double has_bias_, double has_limits_) {
  const long long N = (long long)n_, T = (long long)t_, S = (long long)s_, H = (long long)h_,
                  R = (long long)r_, brow = (long long)brow_, bcol = (long long)bcol_;
  const float scale = (float)scale_;
  const bool has_bias = has_bias_ != 0, has_limits = has_limits_ != 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rr = lane / 2, half = lane % 2;  // this lane's row of the warp's 16, and its half
  __shared__ __align__(32) in_t ks[EIN_BK * EIN_EP];
  __shared__ __align__(32) in_t vs[EIN_BK * EIN_FP];
  __shared__ __align__(32) float ss[EIN_WARPS][16 * EIN_BKS];  // scores (and staging)
  __shared__ __align__(32) in_t ps[EIN_WARPS][16 * EIN_BKP];   // probabilities
  __shared__ float rowf[EIN_WARPS][16];                         // a factor per row
  __shared__ long long kend;                                    // keys the block reads

  // Which row of a 16 × 16 tile each accumulator element of this lane holds.
  int row_of[acc_t::num_elements];
  {
    float* tile = ss[warp];
    for (int x = lane; x < 256; x += 32) tile[x] = (float)(x / 16);
    __syncwarp();
    acc_t rows;
    wmma::load_matrix_sync(rows, tile, 16, wmma::mem_row_major);
#pragma unroll
    for (int x = 0; x < acc_t::num_elements; ++x) row_of[x] = (int)rows.x[x];
    __syncwarp();
  }

  const long long qblocks = (T + 16 * EIN_WARPS - 1) / (16 * EIN_WARPS), items = N * qblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    const long long n = w / qblocks, i0 = (w % qblocks) * (16 * EIN_WARPS);
    const long long kv = (n / H) * (H / R) + (n % H) / R;
    const long long r0 = i0 + 16 * warp, i = r0 + rr;
    const int limit = has_limits && i < T ? limits[i] : -1;  // -1: read the bias
    const bias_t* brow_at = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;
    __syncthreads();  // the previous item is done with kend and the tiles
    if (threadIdx.x == 0) {
      long long end = has_limits ? 0 : S;
      for (long long x = i0; has_limits && x < i0 + 16 * EIN_WARPS && x < T; ++x)
        end = limits[x] < 0 ? S : (limits[x] > end ? limits[x] : end);
      kend = end;
    }

    // This warp's 16 rows of q as A fragments (staged 16 columns at a time, zeros past T).
    a_t qf[EIN_E / 16];
    {
      in_t* stage = reinterpret_cast<in_t*>(ss[warp]);
#pragma unroll
      for (int c = 0; c < EIN_E / 16; ++c) {
        for (int x = lane; x < 256; x += 32) {
          const long long row = r0 + x / 16;
          stage[x] = row < T ? q[(n * T + row) * EIN_E + 16 * c + x % 16] : EIN_TO_IN(0.0f);
        }
        __syncwarp();
        wmma::load_matrix_sync(qf[c], stage, 16);
        __syncwarp();
      }
    }
    acc_t of[EIN_F / 16];
#pragma unroll
    for (int c = 0; c < EIN_F / 16; ++c) wmma::fill_fragment(of[c], 0.0f);
    float m = EIN_NEG_INF, l = 0;  // the row's running max and sum (both lanes of a row)
    __syncthreads();               // kend is written

    for (long long j0 = 0; j0 < kend; j0 += EIN_BK) {
      __syncthreads();  // the previous tile is consumed
      ein_stage<EIN_E>(ks, k + kv * S * EIN_E, j0, S);
      ein_stage<EIN_F>(vs, v + kv * S * EIN_F, j0, S);
      __syncthreads();

      // Scores: 16 rows × EIN_BK keys.
      acc_t sf[EIN_BK / 16];
#pragma unroll
      for (int jt = 0; jt < EIN_BK / 16; ++jt) wmma::fill_fragment(sf[jt], 0.0f);
#pragma unroll
      for (int c = 0; c < EIN_E / 16; ++c)
#pragma unroll
        for (int jt = 0; jt < EIN_BK / 16; ++jt) {
          bt_t kf;  // k's rows as the columns of B = kᵀ
          wmma::load_matrix_sync(kf, ks + 16 * jt * EIN_EP + 16 * c, EIN_EP);
          wmma::mma_sync(sf[jt], qf[c], kf, sf[jt]);
        }
#pragma unroll
      for (int jt = 0; jt < EIN_BK / 16; ++jt)
        wmma::store_matrix_sync(ss[warp] + 16 * jt, sf[jt], EIN_BKS, wmma::mem_row_major);
      __syncwarp();

      // The online softmax of this lane's half row: its keys 2c + half (rows EIN_BKS apart and
      // interleaved halves keep the lanes' shared reads to two per bank).
      {
        const float* srow = ss[warp] + rr * EIN_BKS + half;
        in_t* prow = ps[warp] + rr * EIN_BKP + half;
        float x[EIN_BK / 2];
        float mx = EIN_NEG_INF;
#pragma unroll
        for (int c = 0; c < EIN_BK / 2; ++c) {
          const long long j = j0 + 2 * c + half;
          float s = EIN_NEG_INF;
          if (j < S && (limit < 0 || j < limit)) {
            const float b = brow_at ? ein_bias(brow_at + j * bcol) : 0.0f;
            if (b != EIN_NEG_INF) s = scale * srow[2 * c] + b;  // -inf bias masks a NaN score
          }
          x[c] = s;
          mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m, mx);
        const float alpha = m_new == EIN_NEG_INF ? 1.0f : expf(m - m_new);
        float sum = 0;
#pragma unroll
        for (int c = 0; c < EIN_BK / 2; ++c) {
          const float p = x[c] == EIN_NEG_INF ? 0.0f : expf(x[c] - m_new);
          prow[2 * c] = EIN_TO_IN(p);
          sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * alpha + sum;
        m = m_new;
        if (half == 0) rowf[warp][rr] = alpha;
      }
      __syncwarp();

      // O = O · alpha (per row) + P · V.
#pragma unroll
      for (int c = 0; c < EIN_F / 16; ++c)
#pragma unroll
        for (int x = 0; x < acc_t::num_elements; ++x) of[c].x[x] *= rowf[warp][row_of[x]];
#pragma unroll
      for (int jt = 0; jt < EIN_BK / 16; ++jt) {
        a_t pf;
        wmma::load_matrix_sync(pf, ps[warp] + 16 * jt, EIN_BKP);
#pragma unroll
        for (int c = 0; c < EIN_F / 16; ++c) {
          b_t vf;
          wmma::load_matrix_sync(vf, vs + 16 * jt * EIN_FP + 16 * c, EIN_FP);
          wmma::mma_sync(of[c], pf, vf, of[c]);
        }
      }
      __syncwarp();  // rowf is read before the next tile writes it
    }

    // o = O / l and lse = m + log l; a row with every key masked gets o = 0, lse = -inf.
    if (half == 0) rowf[warp][rr] = l == 0 ? 0.0f : 1.0f / l;
    if (half == 0 && i < T)
      out[(n * T + i) * (EIN_F + 1) + EIN_F] = l == 0 ? EIN_NEG_INF : m + logf(l);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < EIN_F / 16; ++c) {
#pragma unroll
      for (int x = 0; x < acc_t::num_elements; ++x) of[c].x[x] *= rowf[warp][row_of[x]];
      wmma::store_matrix_sync(ss[warp], of[c], 16, wmma::mem_row_major);
      __syncwarp();
      for (int x = lane; x < 256; x += 32) {
        const long long row = r0 + x / 16;
        if (row < T) out[(n * T + row) * (EIN_F + 1) + 16 * c + x % 16] = ss[warp][x];
      }
      __syncwarp();
    }
  }
}
)";
}

}  // namespace ein::detail
