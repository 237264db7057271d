// FlashAttention-2 on CUDA tensors (attention_cuda.h). Layouts the kernels read: q [N, T, E],
// k [N_kv, S, E], v [N_kv, S, F] contiguous in the compute type; the packed result and its
// cotangent [N, T, F + 1]; the bias through a per-batch-row offset table (bias_off[n], in
// elements from the bias's first element) and its row and column strides, in its own dtype.
// Query batch row n reads k/v row (n / H)·(H / R) + (n % H) / R (H heads, R = kv_repeat).
#include "exec/attention_cuda.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/attention_cuda_mma.h"
#include "exec/cuda_executor.h"
#include "exec/memo_cache.h"
#include "runtime/cuda/execution.h"
#include "runtime/cuda/nvrtc.h"

namespace ein {
namespace {

constexpr int64_t kSharedBudget = 40 * 1024;  // bytes of static shared memory per block

/// Threads (= rows) per block for kernels staging `words` values of `bytes` per row: the
/// largest power of two up to 64 that fits the budget (0: none does).
int tile_rows(int64_t words, int64_t bytes) {
  for (int b = 64; b >= 8; b /= 2)
    if (b * words * bytes <= kSharedBudget) return b;
  return 0;
}

/// Shared words per row: forward q, acc, k, v; dQ k, v, dq; dK/dV q, dO, dk, dv (+ lse, delta).
int64_t shared_words(int64_t e, int64_t f) {
  return std::max({2 * (e + f), 2 * e + f, 2 * (e + f) + 2});
}

struct Types {
  const char* real;       // the compute type
  std::string exp, log;   // its exp and log
  std::string neg_inf;    // -inf of it
  const char* bias;       // the bias's element type
  std::string read_bias;  // converting one bias element, "{}" the element
};

Types types_for(DType compute, DType bias) {
  const bool f = compute == DType::f32;
  Types t{f ? "float" : "double", f ? "expf" : "exp", f ? "logf" : "log",
          f ? "(-__int_as_float(0x7f800000))" : "(-__longlong_as_double(0x7ff0000000000000LL))",
          "float", "(real)({})"};
  switch (bias) {
    case DType::f64: t.bias = "double"; break;
    case DType::bf16: t.bias = "__nv_bfloat16"; t.read_bias = "(real)__bfloat162float({})"; break;
    case DType::f16: t.bias = "__half"; t.read_bias = "(real)__half2float({})"; break;
    default: break;
  }
  return t;
}

/// What every kernel starts with: the types, sizes and the bias read. The heavy kernels
/// declare __launch_bounds__(B, 1): with no minimum of resident blocks, ptxas capped them near
/// 56 registers and spilled a few bytes to local memory (seen on sm_80 and sm_90).
std::string prelude(const Types& t, int64_t e, int64_t f, int b) {
  return fmt::format(
      "{9}// FlashAttention-2 (exec/attention_cuda.cpp), compute {10}\n"
      "typedef {0} real;\n typedef {1} bias_t;\n"
      "#define EIN_E {2}\n#define EIN_F {3}\n#define EIN_B {4}\n#define EIN_NEG_INF {5}\n"
      "#define EIN_EXP {6}\n#define EIN_LOG {7}\n#define EIN_ABS {11}\n"
      "__device__ __forceinline__ real ein_bias(const bias_t* b) {{ return {8}; }}\n"
      "// The bias at b (0 without one), read before q · k: a -inf bias masks the logit whatever\n"
      "// q · k is, and a masked key costs no dot product.\n"
      "__device__ __forceinline__ real ein_bias_at(const bias_t* b) {{\n"
      "  return b == 0 ? (real)0 : ein_bias(b);\n"
      "}}\n",
      t.real, t.bias, e, f, b, t.neg_inf, t.exp, t.log, fmt::format(fmt::runtime(t.read_bias), "*b"),
      std::string(t.bias) == "__nv_bfloat16" ? "#include <cuda_bf16.h>\n"
      : std::string(t.bias) == "__half"      ? "#include <cuda_fp16.h>\n"
                                             : "",
      std::string(t.real) == "float" ? "f32" : "f64", std::string(t.real) == "float" ? "fabsf" : "fabs");
}

// The sizes every kernel takes as params: N N_kv T S H R scale bias_row bias_col has_bias. Each
// kernel walks its work items (B rows of one batch row) with a block-stride loop.
constexpr const char* kSizes =
    "  const long long N = (long long)n_, NKV = (long long)nkv_;\n"
    "  (void)N;\n  (void)NKV;\n"
    "  const long long T = (long long)t_, S = (long long)s_, H = (long long)h_, R = (long long)r_;\n"
    "  const real scale = (real)scale_;\n"
    "  const long long brow = (long long)brow_, bcol = (long long)bcol_;\n"
    "  const bool has_bias = has_bias_ != 0, has_limits = has_limits_ != 0;\n";
constexpr const char* kSizeParams =
    "double n_, double nkv_, double t_, double s_, double h_, double r_, double scale_, double brow_, double bcol_, "
    "double has_bias_, double has_limits_";

// The keys the block's query rows [i0, i0 + B) need (kend, shared): all of S, or, with per-row
// key limits (a mask shared by the batch: "zeros, then -inf", limit -1 where a row is not),
// up to their largest limit. The forward's and dQ's tile loops end there.
constexpr const char* kKeyEnd = R"(  __syncthreads();  // the previous item is done with kend
  if (tid == 0) {
    long long end = has_limits ? 0 : S;
    for (long long x = i0; has_limits && x < i0 + EIN_B && x < T; ++x)
      end = limits[x] < 0 ? S : (limits[x] > end ? limits[x] : end);
    kend = end;
  }
  __syncthreads();
)";

// Stages keys [j0, j0 + B) of k/v row `kv` in shared memory (zeros past S): the forward's and
// dQ's tile loop.
constexpr const char* kLoadKeyTile = R"(    for (int x = tid; x < EIN_B * EIN_E; x += EIN_B) {
      const long long j = j0 + x / EIN_E;
      ks[x / EIN_E][x % EIN_E] = j < S ? k[(kv * S + j) * EIN_E + x % EIN_E] : (real)0;
    }
    for (int x = tid; x < EIN_B * EIN_F; x += EIN_B) {
      const long long j = j0 + x / EIN_F;
      vs[x / EIN_F][x % EIN_F] = j < S ? v[(kv * S + j) * EIN_F + x % EIN_F] : (real)0;
    }
)";

std::string forward_source(const Types& t, int64_t e, int64_t f, int b) {
  return prelude(t, e, f, b) + fmt::format(R"(
extern "C" __global__ void __launch_bounds__(EIN_B, 1) ein_attention_forward(
    const real* q, const real* k, const real* v, const bias_t* bias, const long long* bias_off,
    const int* limits, real* out, {0}) {{
{1}
  const long long qblocks = (T + EIN_B - 1) / EIN_B, items = N * qblocks;
  const int tid = threadIdx.x;
  __shared__ real qs[EIN_B][EIN_E], acc[EIN_B][EIN_F], ks[EIN_B][EIN_E], vs[EIN_B][EIN_F];
  __shared__ long long kend;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {{  // uniform over the block
  const long long n = w / qblocks, i0 = (w % qblocks) * EIN_B;
  const long long kv = (n / H) * (H / R) + (n % H) / R;
  const long long i = i0 + tid;
{3}
  for (int x = tid; x < EIN_B * EIN_E; x += EIN_B) {{
    const long long row = i0 + x / EIN_E;
    qs[x / EIN_E][x % EIN_E] = row < T ? q[(n * T + row) * EIN_E + x % EIN_E] : (real)0;
  }}
  for (int c = 0; c < EIN_F; ++c) acc[tid][c] = 0;
  real m = EIN_NEG_INF, l = 0;
  const int limit = has_limits && i < T ? limits[i] : -1;  // -1: read the bias
  const bias_t* brow_at = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;
  for (long long j0 = 0; j0 < kend; j0 += EIN_B) {{
    __syncthreads();  // the previous tile is consumed (and qs is written, the first time)
{2}    __syncthreads();
    if (i < T) {{
      const int jn = S - j0 < EIN_B ? (int)(S - j0) : EIN_B;
      for (int jj = 0; jj < jn; ++jj) {{
        if (limit >= 0 && j0 + jj >= limit) break;  // the rest of the row is masked
        const real bias_ij = ein_bias_at(brow_at ? brow_at + (j0 + jj) * bcol : 0);
        if (bias_ij == EIN_NEG_INF) continue;
        real dot = 0;
        for (int c = 0; c < EIN_E; ++c) dot += qs[tid][c] * ks[jj][c];
        const real s = scale * dot + bias_ij;
        if (s == EIN_NEG_INF) continue;
        // One exp per key: exp(-|s - m|) is the rescale of what was summed when s is a new
        // running max (then p = 1), else p itself.
        const real x = EIN_EXP(-EIN_ABS(s - m));
        real p = x;
        if (s > m) {{
          l *= x;
          for (int c = 0; c < EIN_F; ++c) acc[tid][c] *= x;
          m = s;
          p = 1;
        }}
        l += p;
        for (int c = 0; c < EIN_F; ++c) acc[tid][c] += p * vs[jj][c];
      }}
    }}
  }}
  if (i < T) {{
    real* o = out + (n * T + i) * (EIN_F + 1);
    if (l == 0) {{  // every logit masked: o = 0, lse = -inf (as the CPU kernel)
      for (int c = 0; c < EIN_F; ++c) o[c] = 0;
      o[EIN_F] = EIN_NEG_INF;
    }} else {{
      const real inv = (real)1 / l;
      for (int c = 0; c < EIN_F; ++c) o[c] = acc[tid][c] * inv;
      o[EIN_F] = m + EIN_LOG(l);
    }}
  }}
  }}
}}
)",
                                          kSizeParams, kSizes, kLoadKeyTile, kKeyEnd);
}

std::string delta_source(const Types& t, int64_t e, int64_t f, int b) {
  return prelude(t, e, f, b) + R"(
// delta_i = dO_i · O_i over the F output columns of each packed row.
extern "C" __global__ void __launch_bounds__(EIN_B) ein_attention_delta(
    const real* out, const real* d_out, real* delta, double rows_) {
  const long long rows = (long long)rows_;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
       i += (long long)gridDim.x * blockDim.x) {
    real acc = 0;
    for (int c = 0; c < EIN_F; ++c) acc += d_out[i * (EIN_F + 1) + c] * out[i * (EIN_F + 1) + c];
    delta[i] = acc;
  }
}
)";
}

std::string dq_source(const Types& t, int64_t e, int64_t f, int b) {
  return prelude(t, e, f, b) + fmt::format(R"(
extern "C" __global__ void __launch_bounds__(EIN_B, 1) ein_attention_dq(
    const real* q, const real* k, const real* v, const bias_t* bias, const long long* bias_off,
    const int* limits, const real* out, const real* d_out, const real* delta, real* dq, {0}) {{
{1}
  const long long qblocks = (T + EIN_B - 1) / EIN_B, items = N * qblocks;
  const int tid = threadIdx.x;
  __shared__ real ks[EIN_B][EIN_E], vs[EIN_B][EIN_F], dqs[EIN_B][EIN_E];
  __shared__ long long kend;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {{  // uniform over the block
  const long long n = w / qblocks, i0 = (w % qblocks) * EIN_B;
  const long long kv = (n / H) * (H / R) + (n % H) / R;
  const long long i = i0 + tid;
{3}
  for (int c = 0; c < EIN_E; ++c) dqs[tid][c] = 0;
  const real lse = i < T ? out[(n * T + i) * (EIN_F + 1) + EIN_F] : EIN_NEG_INF;
  const real di = i < T ? delta[n * T + i] : (real)0;
  const real* qi = q + (n * T + (i < T ? i : 0)) * EIN_E;
  const real* doi = d_out + (n * T + (i < T ? i : 0)) * (EIN_F + 1);
  const int limit = has_limits && i < T ? limits[i] : -1;
  const bias_t* brow_at = has_bias && limit < 0 && i < T ? bias + bias_off[n] + i * brow : 0;
  for (long long j0 = 0; j0 < kend; j0 += EIN_B) {{
    __syncthreads();
{2}    __syncthreads();
    if (i < T && lse != EIN_NEG_INF) {{
      const int jn = S - j0 < EIN_B ? (int)(S - j0) : EIN_B;
      for (int jj = 0; jj < jn; ++jj) {{
        if (limit >= 0 && j0 + jj >= limit) break;
        const real bias_ij = ein_bias_at(brow_at ? brow_at + (j0 + jj) * bcol : 0);
        if (bias_ij == EIN_NEG_INF) continue;
        real dot = 0;
        for (int c = 0; c < EIN_E; ++c) dot += qi[c] * ks[jj][c];
        const real s = scale * dot + bias_ij;
        if (s == EIN_NEG_INF) continue;
        const real p = EIN_EXP(s - lse);
        real dp = 0;
        for (int c = 0; c < EIN_F; ++c) dp += doi[c] * vs[jj][c];
        const real ds = scale * p * (dp - di);
        for (int c = 0; c < EIN_E; ++c) dqs[tid][c] += ds * ks[jj][c];
      }}
    }}
  }}
  if (i < T)
    for (int c = 0; c < EIN_E; ++c) dq[(n * T + i) * EIN_E + c] = dqs[tid][c];
  }}
}}
)",
                                          kSizeParams, kSizes, kLoadKeyTile, kKeyEnd);
}

std::string dkv_source(const Types& t, int64_t e, int64_t f, int b) {
  return prelude(t, e, f, b) + fmt::format(R"(
extern "C" __global__ void __launch_bounds__(EIN_B, 1) ein_attention_dkv(
    const real* q, const real* k, const real* v, const bias_t* bias, const long long* bias_off,
    const int* limits, const real* out, const real* d_out, const real* delta, real* dk, real* dv,
    {0}) {{
{1}
  const long long kblocks = (S + EIN_B - 1) / EIN_B, items = NKV * kblocks;
  const int tid = threadIdx.x;
  const long long groups = H / R;
  __shared__ real qs[EIN_B][EIN_E], dos[EIN_B][EIN_F], dks[EIN_B][EIN_E], dvs[EIN_B][EIN_F];
  __shared__ real lses[EIN_B], deltas[EIN_B];
  __shared__ int lims[EIN_B], skip;
  __shared__ long long first_tile;
  for (long long w = blockIdx.x; w < items; w += gridDim.x) {{  // uniform over the block
  const long long m = w / kblocks, j0 = (w % kblocks) * EIN_B;
  const long long j = j0 + tid;
  // With key limits, the query tiles before the first query that sees one of the block's keys
  // (limit -1 or past j0) are all skipped below: start at that query's tile instead of paying
  // three barriers for each (under a causal mask, every tile above the diagonal).
  __syncthreads();  // the previous item is done with lims and first_tile
  {{
    long long first = has_limits ? T : 0;
    for (long long i = tid; has_limits && i < T; i += EIN_B)
      if (limits[i] < 0 || limits[i] > j0) {{
        first = i;
        break;
      }}
    lims[tid] = (int)first;  // T fits an int: the limits are ints
  }}
  __syncthreads();
  if (tid == 0) {{
    long long first = lims[0];
    for (int x = 1; x < EIN_B; ++x) first = lims[x] < first ? lims[x] : first;
    first_tile = first / EIN_B * EIN_B;
  }}
  __syncthreads();
  const long long i_start = first_tile;
  for (int c = 0; c < EIN_E; ++c) dks[tid][c] = 0;
  for (int c = 0; c < EIN_F; ++c) dvs[tid][c] = 0;
  const real* kj = k + (m * S + (j < S ? j : 0)) * EIN_E;
  const real* vj = v + (m * S + (j < S ? j : 0)) * EIN_F;
  for (long long g = 0; g < R; ++g) {{  // the query heads that read this k/v head
    const long long n = (m / groups) * H + (m % groups) * R + g;
    const bias_t* bcol_at = has_bias && j < S ? bias + bias_off[n] + j * bcol : 0;
    for (long long i0 = i_start; i0 < T; i0 += EIN_B) {{
      __syncthreads();
      {{
        const long long i = i0 + tid;
        lses[tid] = i < T ? out[(n * T + i) * (EIN_F + 1) + EIN_F] : EIN_NEG_INF;
        deltas[tid] = i < T ? delta[n * T + i] : (real)0;
        lims[tid] = has_limits && i < T ? limits[i] : -1;
      }}
      __syncthreads();
      if (tid == 0) {{  // skip a tile whose query rows all stop before the block's keys
        int all = has_limits;
        for (int x = 0; all && x < EIN_B && i0 + x < T; ++x) all = lims[x] >= 0 && lims[x] <= j0;
        skip = all;
      }}
      __syncthreads();
      if (skip) continue;  // uniform over the block
      for (int x = tid; x < EIN_B * EIN_E; x += EIN_B) {{
        const long long i = i0 + x / EIN_E;
        qs[x / EIN_E][x % EIN_E] = i < T ? q[(n * T + i) * EIN_E + x % EIN_E] : (real)0;
      }}
      for (int x = tid; x < EIN_B * EIN_F; x += EIN_B) {{
        const long long i = i0 + x / EIN_F;
        dos[x / EIN_F][x % EIN_F] = i < T ? d_out[(n * T + i) * (EIN_F + 1) + x % EIN_F] : (real)0;
      }}
      __syncthreads();
      if (j < S) {{
        const int in = T - i0 < EIN_B ? (int)(T - i0) : EIN_B;
        for (int ii = 0; ii < in; ++ii) {{
          if (lses[ii] == EIN_NEG_INF) continue;  // a fully masked row has no gradient
          if (lims[ii] >= 0 && j >= lims[ii]) continue;  // past the row's key limit
          const real bias_ij =
              ein_bias_at(bcol_at && lims[ii] < 0 ? bcol_at + (i0 + ii) * brow : 0);
          if (bias_ij == EIN_NEG_INF) continue;
          real dot = 0;
          for (int c = 0; c < EIN_E; ++c) dot += qs[ii][c] * kj[c];
          const real s = scale * dot + bias_ij;
          if (s == EIN_NEG_INF) continue;
          const real p = EIN_EXP(s - lses[ii]);
          real dp = 0;
          for (int c = 0; c < EIN_F; ++c) {{
            dvs[tid][c] += p * dos[ii][c];
            dp += dos[ii][c] * vj[c];
          }}
          const real ds = scale * p * (dp - deltas[ii]);
          for (int c = 0; c < EIN_E; ++c) dks[tid][c] += ds * qs[ii][c];
        }}
      }}
    }}
  }}
  if (j < S) {{
    for (int c = 0; c < EIN_E; ++c) dk[(m * S + j) * EIN_E + c] = dks[tid][c];
    for (int c = 0; c < EIN_F; ++c) dv[(m * S + j) * EIN_F + c] = dvs[tid][c];
  }}
  }}
}}
)",
                                          kSizeParams, kSizes);
}

/// The per-batch-row bias offsets on `dev`, copied there once per table and device: a table
/// copied on every call would wait for the device's stream (a copy from pageable memory does).
Tensor offsets_on(const std::vector<int64_t>& offsets, Device dev) {
  static MemoCache<Tensor> tables(256);
  std::string key(reinterpret_cast<const char*>(offsets.data()), offsets.size() * sizeof(int64_t));
  key += fmt::format(" on {} of {}", dev.str(), static_cast<const void*>(&backend_for(dev)));
  return *tables.get(key, [&] {
    return std::make_shared<const Tensor>(
        from_data(offsets, {static_cast<int64_t>(offsets.size())}, dev));
  });
}

/// Blocks for `items` work items: one each, up to 2^20 (the block-stride loops do the rest).
int64_t grid(int64_t items) {
  return std::min<int64_t>(items, int64_t{1} << 20);
}

/// The operands in the kernels' layouts, and the sizes they take.
struct Operands {
  Tensor q, k, v, bias, bias_off;
  DType compute;
  int64_t n = 1, n_kv = 1, t = 0, s = 0, e = 0, f = 0, heads = 1, repeat = 1;
  int64_t brow = 0, bcol = 0;
  int block = 0;

  bool shared_bias = true;  // the bias is the same for every batch row (all offsets 0)

  /// The operands, q, k and v contiguous in `storage` (the compute type unless given).
  Operands(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in,
           DType dtype, int64_t kv_repeat, std::optional<DType> storage = std::nullopt)
      : compute(dtype == DType::f64 ? DType::f64 : DType::f32) {
    const int64_t r = q_in.dim();
    for (int64_t d = 0; d + 2 < r; ++d) n *= q_in.size(d);
    repeat = std::max<int64_t>(1, kv_repeat);
    heads = r > 2 ? q_in.size(r - 3) : 1;
    n_kv = n / repeat;
    t = q_in.size(r - 2);
    e = q_in.size(r - 1);
    s = k_in.size(r - 2);
    f = v_in.size(r - 1);
    block = tile_rows(shared_words(e, f), static_cast<int64_t>(element_size(compute)));
    const auto dense = [&](const Tensor& x) {
      const Tensor d = x.to(storage.value_or(compute)).contiguous();
      // 16-byte aligned, for the vector loads of the kernels (a view may start anywhere)
      return reinterpret_cast<uintptr_t>(d.device_ptr()) % 16 == 0 ? d : d.clone();
    };
    q = dense(q_in.detach());
    k = dense(k_in.detach());
    v = dense(v_in.detach());
    const Device dev = q_in.device();
    std::vector<int64_t> offsets(static_cast<size_t>(n), 0);
    if (bias_in.defined()) {
      bias = bias_in.detach();
      if (bias.dtype() != DType::f32 && bias.dtype() != DType::f64 && bias.dtype() != DType::bf16 &&
          bias.dtype() != DType::f16)
        bias = bias.to(compute);
      brow = bias.stride(r - 2);
      bcol = bias.stride(r - 1);
      for (int64_t index = 0; index < n; ++index) {  // broadcast batch dims have size 1
        int64_t rest = index, off = 0;
        for (int64_t d = r - 3; d >= 0; --d) {
          const int64_t size = q_in.size(d);
          off += (bias.size(d) == 1 ? 0 : rest % size) * bias.stride(d);
          rest /= size;
        }
        offsets[static_cast<size_t>(index)] = off;
        shared_bias = shared_bias && off == 0;
      }
    }
    bias_off = offsets_on(offsets, dev);
  }

  Types types() const { return types_for(compute, bias.defined() ? bias.dtype() : DType::f32); }
  std::string key(const char* kernel) const {
    return fmt::format("attention {} {} {} {} {} {}", kernel, dtype_name(compute),
                       bias.defined() ? dtype_name(bias.dtype()) : "none", e, f, block);
  }
  std::vector<double> sizes(double scale, bool limited) const {
    return {static_cast<double>(n), static_cast<double>(n_kv), static_cast<double>(t),
            static_cast<double>(s), static_cast<double>(heads),
            static_cast<double>(repeat), scale, static_cast<double>(brow),
            static_cast<double>(bcol), bias.defined() ? 1.0 : 0.0, limited ? 1.0 : 0.0};
  }
  void* bias_ptr() const { return bias.defined() ? bias.device_ptr() : q.device_ptr(); }
};

/// delta_i = dO_i · O_i for every row of the packed result and cotangent (in o.compute).
Tensor row_deltas(const Operands& o, const Tensor& out, const Tensor& d_out) {
  const int64_t rows = o.n * o.t;
  const Tensor delta = empty({rows}, o.compute, out.device());
  const Types ty = o.types();
  void* buffers[] = {out.device_ptr(), d_out.device_ptr(), delta.device_ptr()};
  const double params[] = {static_cast<double>(rows)};
  launch_cuda_source(
      o.key("delta"), out.device().index,
      [&] {
        return CudaSource{delta_source(ty, o.e, o.f, o.block), std::string("ein_attention_delta")};
      },
      grid((rows + o.block - 1) / o.block), o.block, buffers, params);
  return delta;
}

/// Per-row key limits of a bias the batch rows share (ein_attention_limits: a row's leading
/// zeros where the rest of it is -inf, else -1), or none (`limited` false; the tensor is then a
/// placeholder the kernels do not read).
struct KeyLimits {
  bool limited = false;
  Tensor limits;
};

KeyLimits key_limits(const Operands& o, Device dev) {
  KeyLimits k;
  k.limited = o.bias.defined() && o.shared_bias && o.t > 0;
  k.limits = empty({k.limited ? o.t : 1}, DType::i32, dev);
  if (!k.limited) return k;
  const DType bias_dtype = o.bias.dtype();
  void* buffers[] = {o.bias.device_ptr(), k.limits.device_ptr()};
  const double params[] = {static_cast<double>(o.t), static_cast<double>(o.s),
                           static_cast<double>(o.brow), static_cast<double>(o.bcol)};
  launch_cuda_source(
      fmt::format("attention limits {}", dtype_name(bias_dtype)), dev.index,
      [&] {
        return CudaSource{detail::attention_limits_source(bias_dtype),
                          std::string("ein_attention_limits")};
      },
      grid((o.t + 3) / 4), 128, buffers, params);
  return k;
}

}  // namespace

bool cuda_attention_fits(int64_t e, int64_t f, DType compute) {
  return e > 0 && f > 0 &&
         tile_rows(shared_words(e, f), static_cast<int64_t>(element_size(compute))) > 0;
}

bool cuda_attention_uses_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v,
                                      DType dtype) {
  const DType in = q.dtype();
  if (dtype == DType::f64 || (in != DType::bf16 && in != DType::f16) || k.dtype() != in ||
      v.dtype() != in || q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    return false;
  if (const char* env = std::getenv("EIN_CUDA_ATTENTION"); env && std::string(env) == "simt")
    return false;
  const int arch = cuda_execution().arch(q.device().index);
  if (detail::attention_mma_key_tile(q.size(-1), v.size(-1)) <= 0 ||
      arch < (in == DType::bf16 ? 80 : 70))
    return false;
  // NVRTC whose headers lack mma.h's crt/mma.h (pip's) cannot compile the WMMA kernels; the
  // PTX ones need no mma.h. (The fake device without NVRTC emulates both and needs no headers.)
  const NvrtcInfo& nvrtc = nvrtc_info();
  if (!nvrtc.available || nvrtc.mma_headers ||
      detail::attention_cores(arch, q.size(-1), v.size(-1)) != detail::AttentionCores::wmma)
    return true;
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "ein: the CUDA headers NVRTC uses (%s) have no crt/mma.h, so bf16/f16 "
                 "attention runs on the scalar CUDA kernels, not on WMMA's tensor cores; set "
                 "CUDA_HOME to a CUDA toolkit for them\n",
                 nvrtc.include_dir.empty() ? "none found" : nvrtc.include_dir.c_str());
  });
  return false;
}

const char* cuda_attention_kernel_set(const Tensor& q, const Tensor& k, const Tensor& v,
                                      DType dtype) {
  if (!cuda_attention_uses_tensor_cores(q, k, v, dtype)) return "simt";
  switch (
      detail::attention_cores(cuda_execution().arch(q.device().index), q.size(-1), v.size(-1))) {
    case detail::AttentionCores::wmma:
      return "wmma";
    case detail::AttentionCores::ptx:
      return "ptx";
    case detail::AttentionCores::wgmma:
      return "wgmma";
  }
  return "simt";
}

namespace {

/// What the tensor-core kernels (attention_cuda_mma.h) share: the operands in their 16-bit
/// dtype, the tile, and the key limits of a mask the batch rows share.
struct MmaLaunch {
  Operands o;
  int tile;  // keys (queries) a tile
  DType bias_dtype;
  int device;
  KeyLimits keys;

  MmaLaunch(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, DType dtype,
            int64_t kv_repeat, bool backward)
      : o(q, k, v, bias, dtype, kv_repeat, q.dtype()),
        tile(detail::attention_mma_key_tile(o.e, o.f, backward)),
        bias_dtype(o.bias.defined() ? o.bias.dtype() : DType::f32),
        device(q.device().index),
        keys(key_limits(o, q.device())) {}

  /// The sizes every tensor-core kernel takes after its buffers.
  std::vector<double> params(double scale) const {
    return {static_cast<double>(o.n),      static_cast<double>(o.t),
            static_cast<double>(o.s),      static_cast<double>(o.heads),
            static_cast<double>(o.repeat), scale,
            static_cast<double>(o.brow),   static_cast<double>(o.bcol),
            o.bias.defined() ? 1.0 : 0.0,  keys.limited ? 1.0 : 0.0};
  }

  /// Launches `items` blocks' work of ein_attention_<kernel>_<flavour> (mma: WMMA, ptx: PTX's
  /// mma.sync), whose source `source` writes (from the 16-bit dtype, the bias dtype, e, f and
  /// the tile), in blocks of `threads` with `shared_bytes` of dynamic shared memory; `variant`
  /// tells sources of one kernel apart.
  template <class Source>
  void launch(const std::string& kernel, int variant, const Source& source, int64_t items,
              std::span<void* const> buffers, double scale, const std::string& flavour = "mma",
              bool arch_specific = false, int threads = 128, int shared_bytes = 0) const {
    const std::string key =
        fmt::format("attention {} {} {} {} {} {} {} {}", kernel, variant, flavour,
                    dtype_name(o.q.dtype()), dtype_name(bias_dtype), o.e, o.f, tile);
    launch_cuda_source(
        key, device,
        [&] {
          return CudaSource{source(o.q.dtype(), bias_dtype, o.e, o.f, tile),
                            "ein_attention_" + kernel + "_" + flavour, arch_specific};
        },
        grid(items), threads, buffers, params(scale), shared_bytes);
  }

  /// The kernel set the device takes (attention_cores).
  detail::AttentionCores cores() const {
    return detail::attention_cores(cuda_execution().arch(device), o.e, o.f);
  }

  /// launch() of the kernel of the set the device takes: PTX's (`ptx_source`, from the dtypes,
  /// e and f), wgmma's (`wgmma_source`, the same; compiled for sm_90a) or WMMA's (`mma_source`,
  /// which also takes the tile), in blocks of two threads a row of block_rows(); the forward's
  /// with its dynamic shared memory (attention_forward_shared_bytes).
  template <class PtxSource, class WgmmaSource, class MmaSource>
  void launch_set(const std::string& kernel, int variant, const PtxSource& ptx_source,
                  const WgmmaSource& wgmma_source, const MmaSource& mma_source, int64_t items,
                  std::span<void* const> buffers, double scale) const {
    const int threads = 2 * block_rows();
    const int shared =
        kernel == "forward" ? detail::attention_forward_shared_bytes(cores(), o.e, o.f) : 0;
    const auto ignoring_tile = [](const auto& source) {
      return [&source](DType in, DType bias, int64_t e, int64_t f, int) {
        return source(in, bias, e, f);
      };
    };
    switch (cores()) {
      case detail::AttentionCores::wmma:
        return launch(kernel, variant, mma_source, items, buffers, scale, "mma", false, threads);
      case detail::AttentionCores::ptx:
        return launch(kernel, variant, ignoring_tile(ptx_source), items, buffers, scale, "ptx",
                      false, threads, shared);
      case detail::AttentionCores::wgmma:
        return launch(kernel, variant, ignoring_tile(wgmma_source), items, buffers, scale, "wgmma",
                      /*arch_specific=*/true, threads, shared);
    }
  }

  /// Query rows (forward, dQ) or keys (dK/dV) a block takes (attention_block_rows).
  int block_rows() const { return detail::attention_block_rows(cores()); }
};

Tensor forward_mma(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                   const Tensor& bias_in, double scale, DType dtype, int64_t kv_repeat) {
  const MmaLaunch m(q_in, k_in, v_in, bias_in, dtype, kv_repeat, false);
  const Operands& o = m.o;
  Shape shape = q_in.shape();
  shape.back() = o.f + 1;
  Tensor out = empty(shape, DType::f32, q_in.device());
  if (o.n > 0 && o.t > 0) {
    void* buffers[] = {o.q.device_ptr(), o.k.device_ptr(),        o.v.device_ptr(),
                       o.bias_ptr(),     o.bias_off.device_ptr(), m.keys.limits.device_ptr(),
                       out.device_ptr()};
    const int64_t rows = m.block_rows();
    m.launch_set("forward", 0, detail::attention_ptx_forward_source,
                 detail::attention_wgmma_forward_source, detail::attention_mma_forward_source,
                 o.n * ((o.t + rows - 1) / rows), buffers, scale);
  }
  return out.dtype() == dtype ? out : out.to(dtype);
}

Tensor backward_mma(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                    const Tensor& bias_in, const Tensor& out_in, const Tensor& d_out_in,
                    double scale, DType dtype, int64_t kv_repeat) {
  const MmaLaunch m(q_in, k_in, v_in, bias_in, dtype, kv_repeat, true);
  const Operands& o = m.o;
  const Device dev = q_in.device();
  const int64_t nq = q_in.numel(), nk = k_in.numel(), nv = v_in.numel();
  Tensor grads = zeros({nq + nk + nv}, DType::f32, dev);
  if (o.n > 0 && o.t > 0 && o.s > 0) {
    const Tensor out = out_in.detach().to(DType::f32).contiguous();
    const Tensor d_out = d_out_in.detach().to(DType::f32).contiguous();
    const Tensor delta = row_deltas(o, out, d_out);
    Tensor d_o = d_out.slice(d_out.dim() - 1, 0, o.f).to(o.q.dtype()).contiguous();
    if (reinterpret_cast<uintptr_t>(d_o.device_ptr()) % 16 != 0) d_o = d_o.clone();
    const Tensor dq = grads.slice(0, 0, nq), dk = grads.slice(0, nq, nq + nk),
                 dv = grads.slice(0, nq + nk, nq + nk + nv);
    void* common[] = {o.q.device_ptr(),       o.k.device_ptr(),     o.v.device_ptr(),
                      o.bias_ptr(),           o.bias_off.device_ptr(), m.keys.limits.device_ptr(),
                      out.device_ptr(),       d_o.device_ptr(),     delta.device_ptr()};
    std::vector<void*> buffers(std::begin(common), std::end(common));
    buffers.push_back(dq.device_ptr());
    const int64_t rows = m.block_rows();
    m.launch_set("dq", 0, detail::attention_ptx_dq_source, detail::attention_wgmma_dq_source,
                 detail::attention_mma_dq_source, o.n * ((o.t + rows - 1) / rows), buffers, scale);
    buffers.back() = dk.device_ptr();
    buffers.push_back(dv.device_ptr());
    // dK and dV in one kernel, or (wide heads) dV then dK
    const bool split = detail::attention_mma_split_dkv(o.e, o.f);
    for (int part : split ? std::vector<int>{1, 2} : std::vector<int>{0})
      m.launch_set(
          "dkv", part,
          [part](DType in, DType bias, int64_t e, int64_t f) {
            return detail::attention_ptx_dkv_source(in, bias, e, f, part);
          },
          [part](DType in, DType bias, int64_t e, int64_t f) {
            return detail::attention_wgmma_dkv_source(in, bias, e, f, part);
          },
          [part](DType in, DType bias, int64_t e, int64_t f, int tile) {
            return detail::attention_mma_dkv_source(in, bias, e, f, tile, part);
          },
          o.n_kv * ((o.s + rows - 1) / rows), buffers, scale);
  }
  return grads.dtype() == dtype ? grads : grads.to(dtype);
}

}  // namespace

Tensor attention_forward_cuda(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                              const Tensor& bias_in, double scale, DType dtype,
                              int64_t kv_repeat) {
  if (cuda_attention_uses_tensor_cores(q_in, k_in, v_in, dtype))
    return forward_mma(q_in, k_in, v_in, bias_in, scale, dtype, kv_repeat);
  const Operands o(q_in, k_in, v_in, bias_in, dtype, kv_repeat);
  Shape shape = q_in.shape();
  shape.back() = o.f + 1;
  Tensor out = empty(shape, o.compute, q_in.device());
  if (o.n > 0 && o.t > 0) {
    const Types ty = o.types();
    const KeyLimits keys = key_limits(o, q_in.device());
    void* buffers[] = {o.q.device_ptr(),        o.k.device_ptr(),         o.v.device_ptr(),
                       o.bias_ptr(),            o.bias_off.device_ptr(), keys.limits.device_ptr(),
                       out.device_ptr()};
    const std::vector<double> params = o.sizes(scale, keys.limited);
    launch_cuda_source(
        o.key("forward"), q_in.device().index,
        [&] {
          return CudaSource{forward_source(ty, o.e, o.f, o.block),
                            std::string("ein_attention_forward")};
        },
        grid(o.n * ((o.t + o.block - 1) / o.block)), o.block, buffers, params);
  }
  return out.dtype() == dtype ? out : out.to(dtype);
}

Tensor attention_backward_cuda(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                               const Tensor& bias_in, const Tensor& out_in, const Tensor& d_out_in,
                               double scale, DType dtype, int64_t kv_repeat) {
  if (cuda_attention_uses_tensor_cores(q_in, k_in, v_in, dtype))
    return backward_mma(q_in, k_in, v_in, bias_in, out_in, d_out_in, scale, dtype, kv_repeat);
  const Operands o(q_in, k_in, v_in, bias_in, dtype, kv_repeat);
  const Device dev = q_in.device();
  const int64_t nq = q_in.numel(), nk = k_in.numel(), nv = v_in.numel();
  Tensor grads = zeros({nq + nk + nv}, o.compute, dev);
  if (o.n > 0 && o.t > 0 && o.s > 0) {
    const Types ty = o.types();
    const Tensor out = out_in.detach().to(o.compute).contiguous();
    const Tensor d_out = d_out_in.detach().to(o.compute).contiguous();
    const Tensor delta = row_deltas(o, out, d_out);
    const Tensor dq = grads.slice(0, 0, nq), dk = grads.slice(0, nq, nq + nk),
                 dv = grads.slice(0, nq + nk, nq + nk + nv);
    const int device = dev.index;
    const KeyLimits keys = key_limits(o, dev);
    const std::vector<double> params = o.sizes(scale, keys.limited);
    {
      void* buffers[] = {o.q.device_ptr(), o.k.device_ptr(),        o.v.device_ptr(),
                         o.bias_ptr(),     o.bias_off.device_ptr(), keys.limits.device_ptr(),
                         out.device_ptr(), d_out.device_ptr(),      delta.device_ptr(),
                         dq.device_ptr()};
      launch_cuda_source(
          o.key("dq"), device,
          [&] {
            return CudaSource{dq_source(ty, o.e, o.f, o.block), std::string("ein_attention_dq")};
          },
          grid(o.n * ((o.t + o.block - 1) / o.block)), o.block, buffers, params);
    }
    {
      void* buffers[] = {o.q.device_ptr(), o.k.device_ptr(),        o.v.device_ptr(),
                         o.bias_ptr(),     o.bias_off.device_ptr(), keys.limits.device_ptr(),
                         out.device_ptr(), d_out.device_ptr(),      delta.device_ptr(),
                         dk.device_ptr(),  dv.device_ptr()};
      launch_cuda_source(
          o.key("dkv"), device,
          [&] {
            return CudaSource{dkv_source(ty, o.e, o.f, o.block), std::string("ein_attention_dkv")};
          },
          grid(o.n_kv * ((o.s + o.block - 1) / o.block)), o.block, buffers, params);
    }
  }
  return grads.dtype() == dtype ? grads : grads.to(dtype);
}

}  // namespace ein
