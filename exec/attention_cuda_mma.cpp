// The tensor-core attention kernels' CUDA C++ (attention_cuda_mma.h): the forward, dQ, dK/dV
// and the per-row key limits of a shared mask.
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

}  // namespace

std::string attention_bias_prelude(DType bias) {
  const auto [type, read] = bias_type(bias);
  return fmt::format(
             "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n"
             "typedef {0} bias_t;\n"
             "#define EIN_NEG_INF (-__int_as_float(0x7f800000))\n"
             "__device__ __forceinline__ float ein_bias(const bias_t* b) {{ return {1}; }}\n",
             type, read) +
         R"(
// Thread 0 writes to *kend the keys that query rows [i0, i0 + rows) need: all of S or, with
// per-row key limits, up to their largest (a row of limit -1 needs all).
__device__ __forceinline__ void ein_key_end(long long* kend, const int* limits, bool has_limits,
                                            long long i0, int rows, long long T, long long S) {
  if (threadIdx.x != 0) return;
  long long end = has_limits ? 0 : S;
  for (long long x = i0; has_limits && x < i0 + rows && x < T; ++x)
    end = limits[x] < 0 ? S : (limits[x] > end ? limits[x] : end);
  *kend = end;
}

// The first query row that sees one of the keys from j0 on: with per-row key limits, the first
// row of limit -1 or past j0 (T when there is none), else 0. Every thread of the block calls
// it (WARPS warps); `firsts` holds a slot per warp in shared memory.
template <int WARPS>
__device__ __forceinline__ long long ein_first_query(const int* limits, bool has_limits,
                                                     long long j0, long long T,
                                                     long long* firsts) {
  long long first = has_limits ? T : 0;
  for (long long i = threadIdx.x; has_limits && i < T; i += blockDim.x)
    if (limits[i] < 0 || limits[i] > j0) {
      first = i;
      break;
    }
  for (int d = 16; d > 0; d /= 2) {
    const long long other = __shfl_xor_sync(0xffffffffu, first, d);
    first = other < first ? other : first;
  }
  if (threadIdx.x % 32 == 0) firsts[threadIdx.x / 32] = first;
  __syncthreads();
#pragma unroll
  for (int x = 0; x < WARPS; ++x) first = firsts[x] < first ? firsts[x] : first;
  return first;
}
)";
}

int attention_mma_key_tile(int64_t e, int64_t f, bool backward) {
  if (e <= 0 || f <= 0 || e % 16 != 0 || f % 16 != 0 || e > 128 || f > 128) return 0;
  // At e + f = 256 the backward kernels spill registers on sm_80 with tiles of 32 (ptxas); with
  // this rule no kernel at any e, f multiple of 16 up to 128 spills on sm_80 or sm_90
  // (checked once for all of them; AttentionTensorCoreKernels keeps checking the widest).
  if (backward && e + f > 224) return 16;
  for (int bk : {64, 32}) {
    // the backward's f32 probabilities per warp, dK/dV's per-query lse, delta and limit, and
    // its per-warp first query
    const int64_t extra = backward ? 4 * kWarps * 16 * (bk + 4) + 12 * bk + 8 * kWarps : 0;
    if (shared_bytes(e, f, bk) + extra <= kSharedBudget) return bk;
  }
  return 0;
}

bool attention_mma_split_dkv(int64_t e, int64_t f) { return e + f > 128; }

std::string attention_limits_source(DType bias) {
  return "// Per-row key limits of an attention mask (exec/attention_cuda_mma.h)\n" +
         attention_bias_prelude(bias) + R"(
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

namespace {

/// What every tensor-core kernel starts with: the types, sizes, fragments and the device
/// helpers they share. EIN_BK is the tile: keys per tile (forward, dQ) or queries (dK/dV).
std::string mma_prelude(DType in, DType bias, int64_t e, int64_t f, int tile) {
  const bool bf16 = in == DType::bf16;
  const std::string defines = fmt::format(
      "typedef {0} in_t;\n#define EIN_TO_IN {1}\n"
      "#define EIN_E {2}\n#define EIN_F {3}\n#define EIN_BK {4}\n#define EIN_PAD {5}\n"
      "#define EIN_EP (EIN_E + EIN_PAD)\n#define EIN_FP (EIN_F + EIN_PAD)\n"
      "#define EIN_BKP (EIN_BK + EIN_PAD)\n#define EIN_BKS (EIN_BK + 4)\n#define EIN_WARPS {6}\n",
      bf16 ? "__nv_bfloat16" : "__half", bf16 ? "__float2bfloat16" : "__float2half", e, f, tile,
      kPad, kWarps);
  return "// FlashAttention-2 on tensor cores (exec/attention_cuda_mma.h)\n"
         "#ifndef EIN_EMULATED_CUDA\n#include <mma.h>\n#endif\n" +
         attention_bias_prelude(bias) + defines + R"(
using namespace nvcuda;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, in_t, wmma::row_major> a_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, in_t, wmma::col_major> bt_t;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, in_t, wmma::row_major> b_t;

// The sizes every kernel takes.
#define EIN_SIZES                                                                              \
  const long long N = (long long)n_, T = (long long)t_, S = (long long)s_, H = (long long)h_,  \
                  R = (long long)r_, brow = (long long)brow_, bcol = (long long)bcol_;         \
  (void)N;                                                                                     \
  const float scale = (float)scale_;                                                           \
  const bool has_bias = has_bias_ != 0, has_limits = has_limits_ != 0;                         \
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;                                  \
  const int rr = lane / 2, half = lane % 2; /* this lane's row of the warp's 16, its half */

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

// Rows [r0, r0 + 16) of a [rows, W] matrix as W / 16 A fragments, staged 16 columns at a time
// through the warp's `stage` (256 elements; zeros past `rows`).
template <int W>
__device__ __forceinline__ void ein_rows_as_a(a_t* frags, const in_t* src, long long r0,
                                              long long rows, in_t* stage, int lane) {
#pragma unroll
  for (int c = 0; c < W / 16; ++c) {
    for (int x = lane; x < 256; x += 32) {
      const long long row = r0 + x / 16;
      stage[x] = row < rows ? src[row * W + 16 * c + x % 16] : EIN_TO_IN(0.0f);
    }
    __syncwarp();
    wmma::load_matrix_sync(frags[c], stage, 16);
    __syncwarp();
  }
}

// Writes W / 16 accumulators (16 × W) to rows [r0, r0 + 16) of dst, `ld` floats apart, the
// rows below `rows` only, staged through the warp's `stage` (256 floats).
template <int W>
__device__ __forceinline__ void ein_store_rows(float* dst, long long ld, const acc_t* frags,
                                               long long r0, long long rows, float* stage,
                                               int lane) {
#pragma unroll
  for (int c = 0; c < W / 16; ++c) {
    wmma::store_matrix_sync(stage, frags[c], 16, wmma::mem_row_major);
    __syncwarp();
    for (int x = lane; x < 256; x += 32) {
      const long long row = r0 + x / 16;
      if (row < rows) dst[row * ld + 16 * c + x % 16] = stage[x];
    }
    __syncwarp();
  }
}

// Which row of a 16 × 16 tile each accumulator element of this lane holds, read back from a
// tile whose element (r, c) is r (the fragment layout is the implementation's).
__device__ __forceinline__ void ein_rows_of(int* row_of, float* stage, int lane) {
  for (int x = lane; x < 256; x += 32) stage[x] = (float)(x / 16);
  __syncwarp();
  acc_t rows;
  wmma::load_matrix_sync(rows, stage, 16, wmma::mem_row_major);
#pragma unroll
  for (int x = 0; x < acc_t::num_elements; ++x) row_of[x] = (int)rows.x[x];
  __syncwarp();
}

// acc[16 × EIN_BK] = a[16 × W] · bᵀ, b's rows [0, EIN_BK) staged `ld` elements apart.
template <int W>
__device__ __forceinline__ void ein_times_rows(acc_t* acc, const a_t* a, const in_t* b, int ld) {
#pragma unroll
  for (int jt = 0; jt < EIN_BK / 16; ++jt) wmma::fill_fragment(acc[jt], 0.0f);
#pragma unroll
  for (int c = 0; c < W / 16; ++c)
#pragma unroll
    for (int jt = 0; jt < EIN_BK / 16; ++jt) {
      bt_t bf;  // b's rows as the columns of bᵀ
      wmma::load_matrix_sync(bf, b + 16 * jt * ld + 16 * c, ld);
      wmma::mma_sync(acc[jt], a[c], bf, acc[jt]);
    }
}

// acc[16 × W] += p[16 × EIN_BK] · b[EIN_BK × W]: p the warp's 16-bit tile (EIN_BKP apart), b
// staged `ld` elements apart.
template <int W>
__device__ __forceinline__ void ein_add_times(acc_t* acc, const in_t* p, const in_t* b, int ld) {
#pragma unroll
  for (int jt = 0; jt < EIN_BK / 16; ++jt) {
    a_t pf;
    wmma::load_matrix_sync(pf, p + 16 * jt, EIN_BKP);
#pragma unroll
    for (int c = 0; c < W / 16; ++c) {
      b_t bf;
      wmma::load_matrix_sync(bf, b + 16 * jt * ld + 16 * c, ld);
      wmma::mma_sync(acc[c], pf, bf, acc[c]);
    }
  }
}

// dS = scale · P ∘ (dP - delta) for this lane's half row (columns 2c + half), rounded to in_t
// for the next product: P from `p` and dP from `dp` (the warp's f32 rows, EIN_BKS apart), delta
// per column from `col_delta` when given, else `row_delta`.
__device__ __forceinline__ void ein_ds(in_t* ds, const float* dp, const float* p, int rr,
                                       int half, float scale, float row_delta,
                                       const float* col_delta) {
#pragma unroll
  for (int c = 0; c < EIN_BK / 2; ++c) {
    const int x = rr * EIN_BKS + 2 * c + half;
    const float delta = col_delta ? col_delta[2 * c + half] : row_delta;
    ds[rr * EIN_BKP + 2 * c + half] =
        EIN_TO_IN(p[x] == 0.0f ? 0.0f : scale * p[x] * (dp[x] - delta));
  }
}

// Stores a warp's EIN_BK / 16 score accumulators to its shared rows (EIN_BKS apart).
__device__ __forceinline__ void ein_store_scores(float* dst, const acc_t* acc) {
#pragma unroll
  for (int jt = 0; jt < EIN_BK / 16; ++jt)
    wmma::store_matrix_sync(dst + 16 * jt, acc[jt], EIN_BKS, wmma::mem_row_major);
}

// The forward's and dQ's key tile: k and v rows [j0, j0 + EIN_BK) staged in ks and vs (after
// the previous tile is consumed), and the warp's 16 × EIN_BK scores q kᵀ in its shared rows.
__device__ __forceinline__ void ein_key_tile_scores(in_t* ks, in_t* vs, float* scores,
                                                    const a_t* qf, const in_t* k, const in_t* v,
                                                    long long j0, long long S) {
  __syncthreads();  // the previous tile is consumed
  ein_stage<EIN_E>(ks, k, j0, S);
  ein_stage<EIN_F>(vs, v, j0, S);
  __syncthreads();
  acc_t sf[EIN_BK / 16];
  ein_times_rows<EIN_E>(sf, qf, ks, EIN_EP);
  ein_store_scores(scores, sf);
  __syncwarp();
}
)";
}

}  // namespace

std::string attention_with_sizes(std::string kernel) {
  const std::string mark = "EIN_SIZE_PARAMS";
  const size_t at = kernel.find(mark);
  return kernel.replace(at, mark.size(),
                        "double n_, double t_, double s_, double h_, double r_, double scale_,\n"
                        "    double brow_, double bcol_, double has_bias_, double has_limits_");
}

std::string attention_mma_forward_source(DType in, DType bias, int64_t e, int64_t f,
                                         int key_tile) {
  return mma_prelude(in, bias, e, f, key_tile) + attention_with_sizes(R"(
extern "C" __global__ void __launch_bounds__(32 * EIN_WARPS, 1) ein_attention_forward_mma(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, float* out, EIN_SIZE_PARAMS) {
  EIN_SIZES
  __shared__ __align__(32) in_t ks[EIN_BK * EIN_EP];
  __shared__ __align__(32) in_t vs[EIN_BK * EIN_FP];
  __shared__ __align__(32) float ss[EIN_WARPS][16 * EIN_BKS];  // scores (and staging)
  __shared__ __align__(32) in_t ps[EIN_WARPS][16 * EIN_BKP];   // probabilities
  __shared__ float rowf[EIN_WARPS][16];                         // a factor per row
  __shared__ long long kend;                                    // keys the block reads
  int row_of[acc_t::num_elements];
  ein_rows_of(row_of, ss[warp], lane);

  const long long qblocks = (T + 16 * EIN_WARPS - 1) / (16 * EIN_WARPS), items = N * qblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    const long long n = w / qblocks, i0 = (w % qblocks) * (16 * EIN_WARPS);
    const long long kv = (n / H) * (H / R) + (n % H) / R;
    const long long r0 = i0 + 16 * warp, i = r0 + rr;
    const int limit = has_limits && i < T ? limits[i] : -1;  // -1: read the bias
    const bias_t* brow_at = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;
    __syncthreads();  // the previous item is done with kend and the tiles
    ein_key_end(&kend, limits, has_limits, i0, 16 * EIN_WARPS, T, S);
    a_t qf[EIN_E / 16];
    ein_rows_as_a<EIN_E>(qf, q + n * T * EIN_E, r0, T, reinterpret_cast<in_t*>(ss[warp]), lane);
    acc_t of[EIN_F / 16];
#pragma unroll
    for (int c = 0; c < EIN_F / 16; ++c) wmma::fill_fragment(of[c], 0.0f);
    float m = EIN_NEG_INF, l = 0;  // the row's running max and sum (both lanes of a row)
    __syncthreads();               // kend is written

    for (long long j0 = 0; j0 < kend; j0 += EIN_BK) {
      ein_key_tile_scores(ks, vs, ss[warp], qf, k + kv * S * EIN_E, v + kv * S * EIN_F, j0, S);

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
      ein_add_times<EIN_F>(of, ps[warp], vs, EIN_FP);
      __syncwarp();  // rowf is read before the next tile writes it
    }

    // o = O / l and lse = m + log l; a row with every key masked gets o = 0, lse = -inf.
    if (half == 0) rowf[warp][rr] = l == 0 ? 0.0f : 1.0f / l;
    if (half == 0 && i < T)
      out[(n * T + i) * (EIN_F + 1) + EIN_F] = l == 0 ? EIN_NEG_INF : m + logf(l);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < EIN_F / 16; ++c)
#pragma unroll
      for (int x = 0; x < acc_t::num_elements; ++x) of[c].x[x] *= rowf[warp][row_of[x]];
    ein_store_rows<EIN_F>(out + n * T * (EIN_F + 1), EIN_F + 1, of, r0, T, ss[warp], lane);
  }
}
)");
}

std::string attention_mma_dq_source(DType in, DType bias, int64_t e, int64_t f, int key_tile) {
  return mma_prelude(in, bias, e, f, key_tile) + attention_with_sizes(R"(
// dQ = scale · Σ_j P ∘ (dP - delta) K over key tiles, P from the logsumexp, dP = dO Vᵀ.
extern "C" __global__ void __launch_bounds__(32 * EIN_WARPS, 1) ein_attention_dq_mma(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, const float* out, const in_t* d_out, const float* delta, float* dq,
    EIN_SIZE_PARAMS) {
  EIN_SIZES
  __shared__ __align__(32) in_t ks[EIN_BK * EIN_EP];
  __shared__ __align__(32) in_t vs[EIN_BK * EIN_FP];
  __shared__ __align__(32) float ss[EIN_WARPS][16 * EIN_BKS];  // scores, then dP
  __shared__ __align__(32) in_t ps[EIN_WARPS][16 * EIN_BKP];   // dS
  __shared__ __align__(32) float pw[EIN_WARPS][16 * EIN_BKS];  // P (registers are short)
  __shared__ long long kend;

  const long long qblocks = (T + 16 * EIN_WARPS - 1) / (16 * EIN_WARPS), items = N * qblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    const long long n = w / qblocks, i0 = (w % qblocks) * (16 * EIN_WARPS);
    const long long kv = (n / H) * (H / R) + (n % H) / R;
    const long long r0 = i0 + 16 * warp, i = r0 + rr;
    const int limit = has_limits && i < T ? limits[i] : -1;
    const bias_t* brow_at = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;
    const float lse = i < T ? out[(n * T + i) * (EIN_F + 1) + EIN_F] : EIN_NEG_INF;
    const float di = i < T ? delta[n * T + i] : 0.0f;
    __syncthreads();
    ein_key_end(&kend, limits, has_limits, i0, 16 * EIN_WARPS, T, S);
    a_t qf[EIN_E / 16], df[EIN_F / 16];
    ein_rows_as_a<EIN_E>(qf, q + n * T * EIN_E, r0, T, reinterpret_cast<in_t*>(ss[warp]), lane);
    ein_rows_as_a<EIN_F>(df, d_out + n * T * EIN_F, r0, T, reinterpret_cast<in_t*>(ss[warp]),
                         lane);
    acc_t dqf[EIN_E / 16];
#pragma unroll
    for (int c = 0; c < EIN_E / 16; ++c) wmma::fill_fragment(dqf[c], 0.0f);
    __syncthreads();

    for (long long j0 = 0; j0 < kend; j0 += EIN_BK) {
      ein_key_tile_scores(ks, vs, ss[warp], qf, k + kv * S * EIN_E, v + kv * S * EIN_F, j0, S);
      {  // this lane's probabilities: keys 2c + half
        const float* srow = ss[warp] + rr * EIN_BKS + half;
        float* prow = pw[warp] + rr * EIN_BKS + half;
#pragma unroll
        for (int c = 0; c < EIN_BK / 2; ++c) {
          const long long j = j0 + 2 * c + half;
          float p = 0.0f;
          if (j < S && (limit < 0 || j < limit) && lse != EIN_NEG_INF) {
            const float b = brow_at ? ein_bias(brow_at + j * bcol) : 0.0f;
            if (b != EIN_NEG_INF) p = expf(scale * srow[2 * c] + b - lse);
          }
          prow[2 * c] = p;
        }
      }
      __syncwarp();  // the scores are read before dP overwrites them
      acc_t dpf[EIN_BK / 16];
      ein_times_rows<EIN_F>(dpf, df, vs, EIN_FP);
      ein_store_scores(ss[warp], dpf);
      __syncwarp();
      ein_ds(ps[warp], ss[warp], pw[warp], rr, half, scale, di, 0);
      __syncwarp();
      ein_add_times<EIN_E>(dqf, ps[warp], ks, EIN_EP);
      __syncwarp();
    }
    ein_store_rows<EIN_E>(dq + n * T * EIN_E, EIN_E, dqf, r0, T, ss[warp], lane);
  }
}
)");
}

std::string attention_mma_dkv_source(DType in, DType bias, int64_t e, int64_t f, int query_tile,
                                     int part) {
  return mma_prelude(in, bias, e, f, query_tile) + fmt::format("#define EIN_PART {}\n", part) +
         attention_with_sizes(R"(
// Per block 64 keys (16 a warp) of one k/v row, over the query tiles of every query head that
// reads it: dV = Σ Pᵀ dO, dK = scale · Σ (Pᵀ ∘ (dPᵀ - delta)) Q with dPᵀ = V dOᵀ; each warp
// computes the transposed tiles (its keys × EIN_BK queries). EIN_PART 1 computes dV alone, 2
// dK alone (wide heads: the registers of both do not fit one thread), 0 both.
extern "C" __global__ void __launch_bounds__(32 * EIN_WARPS, 1) ein_attention_dkv_mma(
    const in_t* q, const in_t* k, const in_t* v, const bias_t* bias, const long long* bias_off,
    const int* limits, const float* out, const in_t* d_out, const float* delta, float* dk,
    float* dv, EIN_SIZE_PARAMS) {
  EIN_SIZES
  __shared__ __align__(32) in_t qs[EIN_BK * EIN_EP];
  __shared__ __align__(32) in_t dos[EIN_BK * EIN_FP];
  __shared__ __align__(32) float ss[EIN_WARPS][16 * EIN_BKS];  // Sᵀ, then dPᵀ
  __shared__ __align__(32) in_t ps[EIN_WARPS][16 * EIN_BKP];   // Pᵀ, then dSᵀ
  __shared__ __align__(32) float pw[EIN_WARPS][16 * EIN_BKS];  // Pᵀ in f32
  __shared__ float lses[EIN_BK], deltas[EIN_BK];
  __shared__ int lims[EIN_BK];
  __shared__ int skip;
  __shared__ long long firsts[EIN_WARPS];  // each warp's first query that sees the block's keys

  const long long groups = H / R, NKV = N / R;
  const long long kblocks = (S + 16 * EIN_WARPS - 1) / (16 * EIN_WARPS), items = NKV * kblocks;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {  // uniform over the block
    const long long m = w / kblocks, j0 = (w % kblocks) * (16 * EIN_WARPS);
    const long long c0 = j0 + 16 * warp, j = c0 + rr;  // this warp's first key, this lane's key
    a_t kf[EIN_E / 16];
    __syncthreads();  // the previous item is done with the shared tiles
    ein_rows_as_a<EIN_E>(kf, k + m * S * EIN_E, c0, S, reinterpret_cast<in_t*>(ss[warp]), lane);
#if EIN_PART != 1
    a_t vf[EIN_F / 16];
    ein_rows_as_a<EIN_F>(vf, v + m * S * EIN_F, c0, S, reinterpret_cast<in_t*>(ss[warp]), lane);
    acc_t dkf[EIN_E / 16];
#pragma unroll
    for (int c = 0; c < EIN_E / 16; ++c) wmma::fill_fragment(dkf[c], 0.0f);
#endif
#if EIN_PART != 2
    acc_t dvf[EIN_F / 16];
#pragma unroll
    for (int c = 0; c < EIN_F / 16; ++c) wmma::fill_fragment(dvf[c], 0.0f);
#endif

    // With key limits, the query tiles before the first query that sees one of the block's
    // keys (limit -1 or past j0) are all skipped below: start at that query's tile instead of
    // paying three barriers for each (under a causal mask, every tile above the diagonal).
    const long long i_start =
        ein_first_query<EIN_WARPS>(limits, has_limits, j0, T, firsts) / EIN_BK * EIN_BK;

    for (long long g = 0; g < R; ++g) {  // the query heads that read this k/v head
      const long long n = (m / groups) * H + (m % groups) * R + g;
      const bias_t* bcol_at = has_bias && j < S ? bias + bias_off[n] + j * bcol : 0;
      for (long long i0 = i_start; i0 < T; i0 += EIN_BK) {
        __syncthreads();  // the previous tile is consumed
        for (int x = threadIdx.x; x < EIN_BK; x += blockDim.x) {
          const long long i = i0 + x;
          lses[x] = i < T ? out[(n * T + i) * (EIN_F + 1) + EIN_F] : EIN_NEG_INF;
          deltas[x] = i < T ? delta[n * T + i] : 0.0f;
          lims[x] = has_limits && i < T ? limits[i] : -1;
        }
        __syncthreads();
        if (threadIdx.x == 0) {  // skip a tile whose queries all stop before the block's keys
          int all = has_limits;
          for (int x = 0; all && x < EIN_BK && i0 + x < T; ++x)
            all = lims[x] >= 0 && lims[x] <= j0;
          skip = all;
        }
        __syncthreads();
        if (skip) continue;  // uniform over the block
        ein_stage<EIN_E>(qs, q + n * T * EIN_E, i0, T);
        ein_stage<EIN_F>(dos, d_out + n * T * EIN_F, i0, T);
        __syncthreads();
        acc_t sf[EIN_BK / 16];
        ein_times_rows<EIN_E>(sf, kf, qs, EIN_EP);  // Sᵀ: this warp's keys × the queries
        ein_store_scores(ss[warp], sf);
        __syncwarp();
        {  // this lane's Pᵀ: key j, queries 2c + half
          const float* srow = ss[warp] + rr * EIN_BKS + half;
          float* prow = pw[warp] + rr * EIN_BKS + half;
          in_t* p16 = ps[warp] + rr * EIN_BKP + half;
#pragma unroll
          for (int c = 0; c < EIN_BK / 2; ++c) {
            const int x = 2 * c + half;
            const long long i = i0 + x;
            const int lim = lims[x];
            float p = 0.0f;
            if (j < S && i < T && lses[x] != EIN_NEG_INF && (lim < 0 ? true : j < lim)) {
              const float b = lim < 0 && bcol_at ? ein_bias(bcol_at + i * brow) : 0.0f;
              if (b != EIN_NEG_INF) p = expf(scale * srow[2 * c] + b - lses[x]);
            }
            prow[2 * c] = p;
            p16[2 * c] = EIN_TO_IN(p);
          }
        }
        __syncwarp();
#if EIN_PART != 2
        ein_add_times<EIN_F>(dvf, ps[warp], dos, EIN_FP);  // dV += Pᵀ dO
#endif
#if EIN_PART != 1
        ein_times_rows<EIN_F>(sf, vf, dos, EIN_FP);  // dPᵀ = V dOᵀ
        __syncwarp();  // Pᵀ and Sᵀ are read before dSᵀ and dPᵀ overwrite them
        ein_store_scores(ss[warp], sf);
        __syncwarp();
        ein_ds(ps[warp], ss[warp], pw[warp], rr, half, scale, 0.0f, deltas);
        __syncwarp();
        ein_add_times<EIN_E>(dkf, ps[warp], qs, EIN_EP);  // dK += dSᵀ Q
#endif
        __syncwarp();
      }
    }
#if EIN_PART != 1
    ein_store_rows<EIN_E>(dk + m * S * EIN_E, EIN_E, dkf, c0, S, ss[warp], lane);
#endif
#if EIN_PART != 2
    ein_store_rows<EIN_F>(dv + m * S * EIN_F, EIN_F, dvf, c0, S, ss[warp], lane);
#endif
  }
}
)");
}

}  // namespace ein::detail
