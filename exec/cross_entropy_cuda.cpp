// The fused linear + cross-entropy on CUDA tensors (cross_entropy_cuda.h). Per chunk of rows:
// logits = h[chunk] · w (cuBLASLt), the rows kernel (loss and logsumexp; the gradient in place
// when asked), then dh[chunk] = dL · wᵀ and dw (+)= h[chunk]ᵀ · dL (cuBLASLt). w is read as it
// is stored: [D, V] with rows adjacent, or a tied embedding [V, D] seen transposed.
#include "exec/cross_entropy_cuda.h"

#include <algorithm>
#include <limits>
#include <string>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/cuda_executor.h"
#include "runtime/blas/gemm.h"
#include "runtime/cuda/execution.h"

namespace ein {
namespace {

constexpr int kThreads = 256;  // per block of the rows kernel: one block per row

/// What the rows kernel does to each row of a chunk of logits.
enum class Rows : int {
  loss = 0,      ///< writes the row's loss and logsumexp
  unit = 1,      ///< and turns the logits into softmax − one-hot
  gradient = 2,  ///< turns them into (softmax − one-hot) · d_out[row], from out's logsumexp
};

std::string rows_source(DType compute) {
  const bool f = compute == DType::f32;
  return fmt::format(
      R"(// linear + cross-entropy rows (exec/cross_entropy_cuda.cpp), compute {0}
typedef {1} real;
#define EIN_EXP {2}
#define EIN_LOG {3}
#define EIN_NEG_INF {4}
// The larger of a and b, NaN when either is (as the CPU's row_max).
__device__ __forceinline__ real ein_max(real a, real b) {{ return (b > a || b != b) ? b : a; }}
// The block's max (or sum) of v, in every thread: warp shuffles, then one value per warp.
__device__ __forceinline__ real ein_block(real v, bool max, real* warps) {{
  for (int o = 16; o > 0; o /= 2) {{
    const real u = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? ein_max(v, u) : v + u;
  }}
  __syncthreads();  // every thread has read warps[] of the last reduction
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  v = warps[0];
  for (int w = 1; w < {5} / 32; ++w) v = max ? ein_max(v, warps[w]) : v + warps[w];
  return v;
}}
extern "C" __global__ void __launch_bounds__({5}) ein_linear_cross_entropy_rows(
    real* logits, const long long* target, real* out, const real* d_out, double rows_,
    double v_, double r0_, double mode_) {{
  const long long rows = (long long)rows_, V = (long long)v_, r0 = (long long)r0_;
  const int mode = (int)mode_;  // 0 loss and lse, 1 and the gradient, 2 the gradient only
  __shared__ real warps[{5} / 32];
  for (long long i = blockIdx.x; i < rows; i += gridDim.x) {{
    real* x = logits + i * V;
    const long long row = r0 + i, at = target[row];
    const bool picks = at >= 0 && at < V;
    real lse;
    if (mode == 2) {{
      lse = out[row * 2 + 1];
    }} else {{
      real m = EIN_NEG_INF;
      for (long long j = threadIdx.x; j < V; j += {5}) m = ein_max(m, x[j]);
      m = ein_block(m, true, warps);
      const real shift = m == EIN_NEG_INF ? (real)0 : m;
      real s = 0;
      for (long long j = threadIdx.x; j < V; j += {5}) s += EIN_EXP(x[j] - shift);
      s = ein_block(s, false, warps);
      lse = shift + EIN_LOG(s);
      if (threadIdx.x == 0) {{
        out[row * 2] = lse - (picks ? x[at] : (real)0);
        out[row * 2 + 1] = lse;
      }}
      __syncthreads();  // the target's logit read before it is overwritten
    }}
    if (mode >= 1) {{
      const real g = mode == 2 ? d_out[row * 2] : (real)1;
      const real shift = lse == EIN_NEG_INF ? (real)0 : lse;  // a row of -inf: no probability
      for (long long j = threadIdx.x; j < V; j += {5}) x[j] = EIN_EXP(x[j] - shift) * g;
      __syncthreads();
      if (threadIdx.x == 0 && picks) x[at] -= g;
    }}
  }}
}}
)",
      f ? "f32" : "f64", f ? "float" : "double", f ? "expf" : "exp", f ? "logf" : "log",
      f ? "(-__int_as_float(0x7f800000))" : "(-__longlong_as_double(0x7ff0000000000000LL))",
      kThreads);
}

std::string scale_source(DType compute) {
  return fmt::format(
      R"(// x *= s (exec/cross_entropy_cuda.cpp)
extern "C" __global__ void __launch_bounds__(256) ein_scale({0}* x, double n_, double s_) {{
  const long long n = (long long)n_;
  const {0} s = ({0})s_;
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n;
       i += (long long)gridDim.x * 256)
    x[i] *= s;
}}
)",
      compute == DType::f32 ? "float" : "double");
}

/// Rows per chunk: 512, or more where a sixth of dw's bytes (D × V) holds more.
int64_t chunk_rows(int64_t n, int64_t d) {
  return std::max<int64_t>(1, std::min(n, std::max<int64_t>(512, d / 6 / 16 * 16)));
}

/// The operands in the compute type on their device: h dense [N, D], w with one unit stride.
struct Operands {
  DType compute;
  Tensor h, w, targets;
  int64_t n, d, v;
  int device;
  bool w_columns;  ///< w's columns adjacent ([D, V] row-major); else its rows (a tied [V, D])

  Operands(const Tensor& h_in, const Tensor& w_in, const Tensor& t_in, DType dtype)
      : compute(dtype == DType::f64 ? DType::f64 : DType::f32),
        n(h_in.size(0)),
        d(h_in.size(1)),
        v(w_in.size(1)),
        device(h_in.device().index) {
    if (w_in.device() != h_in.device())
      throw RuntimeError(fmt::format("linear_cross_entropy: h on {} and w on {}",
                                     h_in.device().str(), w_in.device().str()));
    h = h_in.detach().to(compute).contiguous();
    w = w_in.detach().to(compute);
    w_columns = w.size(1) <= 1 || w.stride(1) == 1;
    if (!w_columns && !(w.size(0) <= 1 || w.stride(0) == 1)) {
      w = w.contiguous();
      w_columns = true;
    }
    targets = t_in.detach().to(h_in.device()).to(DType::i64).contiguous();
  }

  int64_t bytes(int64_t elements) const {
    return elements * static_cast<int64_t>(element_size(compute));
  }
  /// The leading dimension of w as stored: [D, V] rows, or the tied table's [V, D] rows.
  int64_t w_ld() const {
    return std::max<int64_t>(1, w_columns ? (v > 1 ? w.stride(0) : v) : (d > 1 ? w.stride(1) : d));
  }

  void gemm(GemmBatch g) const {
    g.dtype = compute;
    if (g.m == 0 || g.n == 0 || g.k == 0) return;  // callers zero what k = 0 leaves
    cuda_execution().gemm(device, g, cuda_gemm_math());
  }

  /// logits (rows × V) = h[r0 : r0 + rows] · w.
  void logits(int64_t r0, int64_t rows, void* c) const {
    GemmBatch g;
    g.m = rows;
    g.n = v;
    g.k = d;
    g.a = static_cast<const char*>(h.device_ptr()) + bytes(r0 * d);
    g.lda = std::max<int64_t>(1, d);
    g.trans_b = !w_columns;  // a tied table [V, D] is wᵀ stored
    g.b = w.device_ptr();
    g.ldb = w_ld();
    g.c = c;
    g.ldc = std::max<int64_t>(1, v);
    gemm(g);
  }

  /// dh[r0 : r0 + rows] = dL · wᵀ, and dw (+)= h[r0 : r0 + rows]ᵀ · dL.
  void gradients(int64_t r0, int64_t rows, const void* dl, void* dh, void* dw) const {
    GemmBatch g;
    g.m = rows;
    g.n = d;
    g.k = v;
    g.a = dl;
    g.lda = std::max<int64_t>(1, v);
    g.trans_b = w_columns;
    g.b = w.device_ptr();
    g.ldb = w_ld();
    g.c = static_cast<char*>(dh) + bytes(r0 * d);
    g.ldc = std::max<int64_t>(1, d);
    gemm(g);
    GemmBatch u;
    u.m = d;
    u.n = v;
    u.k = rows;
    u.trans_a = true;
    u.a = static_cast<const char*>(h.device_ptr()) + bytes(r0 * d);
    u.lda = std::max<int64_t>(1, d);
    u.b = dl;
    u.ldb = std::max<int64_t>(1, v);
    u.c = dw;
    u.ldc = std::max<int64_t>(1, v);
    u.beta = r0 == 0 ? 0 : 1;
    gemm(u);
  }

  void rows_kernel(Rows mode, int64_t r0, int64_t rows, void* logits, const Tensor& out,
                   const Tensor& d_out) const {
    void* buffers[] = {logits, targets.device_ptr(), out.device_ptr(),
                       d_out.defined() ? d_out.device_ptr() : out.device_ptr()};
    const double params[] = {static_cast<double>(rows), static_cast<double>(v),
                             static_cast<double>(r0), static_cast<double>(mode)};
    launch_cuda_source(
        fmt::format("linear_cross_entropy rows {}", dtype_name(compute)), device,
        [&] {
          return CudaSource{rows_source(compute), std::string("ein_linear_cross_entropy_rows")};
        },
        std::min<int64_t>(rows, int64_t{1} << 20), kThreads, buffers, params);
  }

  /// Every chunk through the rows kernel in `mode`, with the gradients' GEMMs unless
  /// Rows::loss. `d_out` only for Rows::gradient; dh and dw only when gradients are made.
  void run(Rows mode, const Tensor& out, const Tensor& d_out, Tensor* dh, Tensor* dw) const {
    if (n == 0) return;
    const int64_t per_chunk = chunk_rows(n, d);
    // The chunk's logits: zeros stand for h · w when d = 0 (no GEMM runs).
    const Tensor chunk = zeros({per_chunk, v}, compute, h.device());
    for (int64_t r0 = 0; r0 < n; r0 += per_chunk) {
      const int64_t rows = std::min(n, r0 + per_chunk) - r0;
      if (d == 0 && r0 > 0 && mode != Rows::loss) chunk.fill_(0.0);  // the gradient overwrote
      logits(r0, rows, chunk.device_ptr());
      if (v > 0) rows_kernel(mode, r0, rows, chunk.device_ptr(), out, d_out);
      if (mode != Rows::loss) gradients(r0, rows, chunk.device_ptr(), dh->device_ptr(),
                                        dw->device_ptr());
    }
  }
};

Tensor placed(Tensor r, DType dtype) { return r.dtype() == dtype ? r : r.to(dtype); }

}  // namespace

Tensor linear_cross_entropy_forward_cuda(const Tensor& h, const Tensor& w, const Tensor& targets,
                                         DType dtype) {
  const Operands o(h, w, targets, dtype);
  // v = 0: no class, every row's logsumexp -inf (the rows kernel never runs).
  Tensor out = o.v == 0 ? full({o.n, 2}, -std::numeric_limits<double>::infinity(), o.compute,
                               h.device())
                        : empty({o.n, 2}, o.compute, h.device());
  o.run(Rows::loss, out, Tensor(), nullptr, nullptr);
  return placed(std::move(out), dtype);
}

CrossEntropyWithGrads linear_cross_entropy_with_grads_cuda(const Tensor& h, const Tensor& w,
                                                           const Tensor& targets, DType dtype) {
  const Operands o(h, w, targets, dtype);
  CrossEntropyWithGrads r;
  r.out = o.v == 0 ? full({o.n, 2}, -std::numeric_limits<double>::infinity(), o.compute,
                          h.device())
                   : empty({o.n, 2}, o.compute, h.device());
  // dh is every chunk's GEMM output unless v = 0 (k = 0: no GEMM), dw the first chunk's.
  r.dh = o.v > 0 ? empty({o.n, o.d}, o.compute, h.device())
                 : zeros({o.n, o.d}, o.compute, h.device());
  r.dw = zeros({o.d, o.v}, o.compute, h.device());
  o.run(Rows::unit, r.out, Tensor(), &r.dh, &r.dw);
  return {placed(std::move(r.out), dtype), placed(std::move(r.dh), dtype),
          placed(std::move(r.dw), dtype)};
}

std::pair<Tensor, Tensor> linear_cross_entropy_backward_cuda(const Tensor& h, const Tensor& w,
                                                             const Tensor& targets,
                                                             const Tensor& out_in,
                                                             const Tensor& d_out_in, DType dtype) {
  const Operands o(h, w, targets, dtype);
  const Tensor out = out_in.detach().to(h.device()).to(o.compute).contiguous();
  const Tensor d_out = d_out_in.detach().to(h.device()).to(o.compute).contiguous();
  Tensor dh = o.v > 0 ? empty({o.n, o.d}, o.compute, h.device())
                      : zeros({o.n, o.d}, o.compute, h.device());
  Tensor dw = zeros({o.d, o.v}, o.compute, h.device());
  o.run(Rows::gradient, out, d_out, &dh, &dw);
  return {placed(std::move(dh), dtype), placed(std::move(dw), dtype)};
}

void scale_cuda(Tensor& x, double s) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw RuntimeError("scale_cuda: f32 or f64 only");
  if (x.numel() == 0) return;
  void* buffers[] = {x.device_ptr()};
  const double params[] = {static_cast<double>(x.numel()), s};
  launch_cuda_source(
      fmt::format("linear_cross_entropy scale {}", dtype_name(x.dtype())), x.device().index,
      [&] {
        return CudaSource{scale_source(x.dtype()), std::string("ein_scale")};
      },
      std::min<int64_t>((x.numel() + 255) / 256, int64_t{1} << 20), 256, buffers, params);
}

}  // namespace ein
