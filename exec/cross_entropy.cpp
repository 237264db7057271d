// Linear + cross-entropy on tiles (cross_entropy.h). Both passes split the classes over the
// threads in blocks of kClasses (so each thread owns its columns of dw, and the forward's
// per-row logsumexp is merged from one partial per thread), copy each block of w into a dense
// (D × kClasses) buffer once, and walk all rows against it in tiles of kRows: a 256 × 1024 f32
// tile is 1 MiB and stays in L2 between the GEMM that makes it and the pass that reads it. The
// copy matters: read in place, a block of w has rows a whole vocabulary apart, and oneDNN's
// sgemm packing it again for every row tile ran the logits GEMM at 41-90 GFLOP/s on one core
// against 66-145 from the dense copy, over both tile shapes and two runs
// (bench/attention/lm_head_tiles.c; BENCHMARKS.md, "Both again on the Intel AMX machine").
// The forward that also makes the gradients (linear_cross_entropy_with_grads) walks chunks of
// whole rows instead, each product over every thread (its logsumexps need all the classes of a
// row before any gradient).
#include "exec/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ein/errors.h>

#include "exec/cross_entropy_cuda.h"
#include "exec/vector_math.h"
#include "runtime/blas/gemm.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

constexpr int64_t kRows = 256;
constexpr int64_t kClasses = 1024;

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

/// A matrix as the BLAS sees it: element (i, j) at p[i·rs + j·cs], one of the strides 1.
template <class T>
struct View {
  const T* p = nullptr;
  int64_t rs = 0, cs = 1;
  View block(int64_t i, int64_t j) const { return {p + i * rs + j * cs, rs, cs}; }
  View t() const { return {p, cs, rs}; }
};

/// C (m × n, row stride ldc) = alpha · A (m × k) · B (k × n) + beta · C, on this thread. A
/// view has one unit stride (matrix() makes sure): along its rows, or along its columns (then
/// it is the transpose of a row-major matrix).
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, double alpha, View<T> a, View<T> b, double beta, T* c,
          int64_t ldc) {
  gemm_tile(dtype_of<T>(), a.cs != 1, b.cs != 1, m, n, k, alpha, a.p, a.cs != 1 ? a.cs : a.rs,
            b.p, b.cs != 1 ? b.cs : b.rs, beta, c, ldc);
}

/// A CPU tensor of T with one unit stride (itself when it is one), and its view.
template <class T>
std::pair<Tensor, View<T>> matrix(const Tensor& x) {
  Tensor y = x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
  if (y.dtype() != dtype_of<T>()) y = y.to(dtype_of<T>());
  const bool rows = y.size(1) <= 1 || y.stride(1) == 1, cols = y.size(0) <= 1 || y.stride(0) == 1;
  if (!rows && !cols) y = y.contiguous();
  View<T> v;
  v.p = y.numel() > 0 ? y.template data<T>() : nullptr;
  v.rs = y.stride(0);
  v.cs = y.stride(1);
  if (y.size(1) <= 1) v.cs = 1;
  if (y.size(0) <= 1 && v.cs != 1) v.rs = 1;
  return {y, v};
}

/// Columns [c0, c0 + cols) of w as a dense matrix in `buffer`: row-major (d × cols) when w's
/// columns are adjacent, else (a tied embedding read transposed, rows adjacent) its transpose
/// stored row-major (cols × d), seen through a transposed view.
template <class T>
View<T> dense_block(View<T> w, int64_t d, int64_t c0, int64_t cols, std::vector<T>& buffer) {
  buffer.resize(static_cast<size_t>(d * cols));
  if (w.cs == 1) {
    for (int64_t i = 0; i < d; ++i)
      std::copy_n(w.p + i * w.rs + c0, cols, buffer.data() + i * cols);
    return {buffer.data(), cols, 1};
  }
  for (int64_t j = 0; j < cols; ++j)  // w.rs == 1: column c0 + j is contiguous
    std::copy_n(w.p + (c0 + j) * w.cs, d, buffer.data() + j * d);
  return View<T>{buffer.data(), d, 1}.t();
}

/// Splits `blocks` class blocks over the threads: part p takes [blocks·p/parts, blocks·(p+1)/parts).
int64_t parts_for(int64_t blocks) {
  return std::max<int64_t>(1, std::min<int64_t>(num_threads(), blocks));
}

std::vector<int64_t> targets_of(const Tensor& t) {
  return t.to(cpu()).to(DType::i64).contiguous().to_vector<int64_t>();
}

template <class T>
Tensor forward(const Tensor& h_in, const Tensor& w_in, const Tensor& t_in) {
  const auto [h_t, h] = matrix<T>(h_in);
  const auto [w_t, w] = matrix<T>(w_in);
  const std::vector<int64_t> target = targets_of(t_in);
  const int64_t n = h_in.size(0), d = h_in.size(1), v = w_in.size(1);
  Tensor out = empty({n, 2}, dtype_of<T>(), cpu());
  T* o = out.template data<T>();
  constexpr T inf = std::numeric_limits<T>::infinity();
  // Per part (a range of class blocks): each row's running max and sum of exp over its
  // classes. A row's target lies in one block, so one part writes its picked logit.
  const int64_t blocks = (v + kClasses - 1) / kClasses, parts = parts_for(blocks);
  std::vector<std::vector<T>> m(parts, std::vector<T>(n, -inf)), l(parts, std::vector<T>(n, 0));
  std::vector<T> picked(n, T(0));
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> tile(kRows * kClasses), block;
    for (int64_t part = lo; part < hi; ++part) {
      T* const pm = m[part].data();
      T* const pl = l[part].data();
      for (int64_t blk = blocks * part / parts; blk < blocks * (part + 1) / parts; ++blk) {
        const int64_t c0 = blk * kClasses, c1 = std::min(v, c0 + kClasses), cols = c1 - c0;
        const View<T> wb = dense_block(w, d, c0, cols, block);
        for (int64_t r0 = 0; r0 < n; r0 += kRows) {
          const int64_t rows = std::min(n, r0 + kRows) - r0;
          gemm<T>(rows, cols, d, 1, h.block(r0, 0), wb, 0, tile.data(), kClasses);
          for (int64_t r = 0; r < rows; ++r) {
            T* x = tile.data() + r * kClasses;
            const int64_t row = r0 + r, at = target[row];
            if (at >= c0 && at < c1) picked[row] = x[at - c0];  // before exp overwrites it
            const T mx = row_max(x, cols, pm[row]);
            const T shift = mx == -inf ? T(0) : mx;
            const T sum = exp_shift_sum(x, cols, shift);
            pl[row] = pl[row] * std::exp(pm[row] - shift) + sum;
            pm[row] = mx;
          }
        }
      }
    }
  });
  for (int64_t r = 0; r < n; ++r) {
    // The parts' (max, sum) merged as the blocks within a part were: rescaled to the new max.
    T mx = -inf, sum = 0;
    for (int64_t p = 0; p < parts; ++p) {
      const T next = std::isnan(m[p][r]) || std::isnan(mx) ? m[p][r] + mx : std::max(mx, m[p][r]);
      const T shift = next == -inf ? T(0) : next;
      sum = sum * std::exp(mx - shift) + l[p][r] * std::exp(m[p][r] - shift);
      mx = next;
    }
    const T lse = mx + std::log(sum);
    o[r * 2] = lse - picked[r];
    o[r * 2 + 1] = lse;
  }
  return out;
}

template <class T>
std::pair<Tensor, Tensor> backward(const Tensor& h_in, const Tensor& w_in, const Tensor& t_in,
                                   const Tensor& out_in, const Tensor& d_in) {
  const auto [h_t, h] = matrix<T>(h_in);
  const auto [w_t, w] = matrix<T>(w_in);
  const std::vector<int64_t> target = targets_of(t_in);
  const int64_t n = h_in.size(0), d = h_in.size(1), v = w_in.size(1);
  const Tensor out = out_in.to(cpu()).to(dtype_of<T>()).contiguous();
  const Tensor d_out = d_in.to(cpu()).to(dtype_of<T>()).contiguous();
  const T* lse = out.template data<T>();
  const T* g = d_out.template data<T>();
  Tensor dh_t = zeros({n, d}, dtype_of<T>(), cpu()), dw_t = zeros({d, v}, dtype_of<T>(), cpu());
  T* dh = dh_t.numel() > 0 ? dh_t.template data<T>() : nullptr;
  T* dw = dw_t.numel() > 0 ? dw_t.template data<T>() : nullptr;
  // Each part owns a contiguous range of class blocks (its columns of dw) and a partial dh.
  const int64_t blocks = (v + kClasses - 1) / kClasses, parts = parts_for(blocks);
  std::vector<std::vector<T>> partial(parts - 1);
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> tile(kRows * kClasses), block;
    for (int64_t part = lo; part < hi; ++part) {
      T* dh_part = dh;
      if (part > 0) {
        partial[part - 1].assign(n * d, T(0));
        dh_part = partial[part - 1].data();
      }
      const int64_t b0 = blocks * part / parts, b1 = blocks * (part + 1) / parts;
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t c0 = blk * kClasses, c1 = std::min(v, c0 + kClasses), cols = c1 - c0;
        const View<T> wb = dense_block(w, d, c0, cols, block);
        for (int64_t r0 = 0; r0 < n; r0 += kRows) {
          const int64_t r1 = std::min(n, r0 + kRows), rows = r1 - r0;
          gemm<T>(rows, cols, d, 1, h.block(r0, 0), wb, 0, tile.data(), kClasses);
          for (int64_t r = 0; r < rows; ++r) {
            T* x = tile.data() + r * kClasses;
            const T row_lse = lse[(r0 + r) * 2 + 1], gr = g[(r0 + r) * 2];
            const T shift = row_lse == -std::numeric_limits<T>::infinity() ? T(0) : row_lse;
            exp_shift_sum(x, cols, shift);
            for (int64_t j = 0; j < cols; ++j) x[j] *= gr;
            const int64_t at = target[r0 + r];
            if (at >= c0 && at < c1) x[at - c0] -= gr;
          }
          // dh[r0:r1] += dL · w[:, c0:c1]ᵀ;  dw[:, c0:c1] += h[r0:r1]ᵀ · dL.
          gemm<T>(rows, d, cols, 1, View<T>{tile.data(), kClasses, 1}, wb.t(), 1,
                  dh_part + r0 * d, d);
          gemm<T>(d, cols, rows, 1, h.block(r0, 0).t(), View<T>{tile.data(), kClasses, 1}, 1,
                  dw + c0, v);
        }
      }
    }
  });
  for (const std::vector<T>& p : partial)
    for (int64_t i = 0; i < n * d; ++i) dh[i] += p[i];
  return {dh_t, dw_t};
}

/// C = alpha · A · B + beta · C over every thread (runtime/blas/gemm.h splits a large one).
template <class T>
void gemm_threads(int64_t m, int64_t n, int64_t k, View<T> a, View<T> b, double beta, T* c,
                  int64_t ldc) {
  GemmBatch g;
  g.dtype = dtype_of<T>();
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = a.cs != 1;
  g.a = a.p;
  g.lda = a.cs != 1 ? a.cs : a.rs;
  g.trans_b = b.cs != 1;
  g.b = b.p;
  g.ldb = b.cs != 1 ? b.cs : b.rs;
  g.c = c;
  g.ldc = ldc;
  g.beta = beta;
  gemm_batched(g);
}

/// Rows per chunk of linear_cross_entropy_with_grads: as many as fit the larger of a sixth of
/// dw's elements (D × V) and 2^21 elements (8 MiB of f32) — the chunk's logits are rows × V —
/// in multiples of 16, and at least 128: each chunk reads and writes all of dw, so fewer rows
/// stream dw through memory for too little work (at 4096 × 768 × 50257 f32 the dw products
/// took 2.2 s in chunks of 64 rows, 2.0 s of 96, 1.5 s of 128), and a small vocabulary's
/// chunks would be GEMMs too small to run well.
int64_t chunk_rows(int64_t n, int64_t d, int64_t v) {
  const int64_t budget = std::max<int64_t>(d * v / 6, int64_t{1} << 21);
  const int64_t rows = budget / std::max<int64_t>(1, v) / 16 * 16;
  return std::max<int64_t>(1, std::min(n, std::max<int64_t>(128, rows)));
}

/// Pieces of the classes that dh_rows() sums separately: 512 classes or more each, at most 8,
/// fixed by V (not by the thread count), so dh has the same bits on any number of threads.
int64_t dh_parts(int64_t v) { return std::clamp<int64_t>(v / 512, 1, 8); }

/// dh (rows × d, row stride d) = dL (rows × v) · wᵀ, split over the classes: each piece one
/// GEMM on one thread into a partial of its own, the partials added in order. With w [D, V]
/// row-major the pieces compute dhᵀ = w · dLᵀ, whose operands the BLAS reads as stored; a tied
/// weight (w = Eᵀ, E [V, D] row-major) gives dh = dL · E directly. dL · wᵀ from an untied w
/// ran at ~65 GFLOP/s per core for 128 rows against ~90 for dhᵀ (oneDNN's sgemm, K 6282 and
/// 50257: bench/attention/dh_layouts.c), and split over the threads by rows or columns it made
/// every thread pack a whole vocabulary's width of one operand.
template <class T>
void dh_rows(int64_t rows, int64_t d, int64_t v, View<T> dl, View<T> w, T* dh,
             std::vector<T>& partials) {
  const int64_t parts = dh_parts(v), size = rows * d;
  const bool transposed = w.cs == 1;
  partials.resize(static_cast<size_t>(parts * size));
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t c0 = v * p / parts, k = v * (p + 1) / parts - c0;
      T* c = partials.data() + p * size;
      if (transposed)
        gemm<T>(d, rows, k, 1, w.block(0, c0), dl.block(0, c0).t(), 0, c, rows);
      else
        gemm<T>(rows, d, k, 1, dl.block(0, c0), w.block(0, c0).t(), 0, c, d);
    }
  });
  // The partials summed in order, 16 rows × 64 columns of dh at a time: dhᵀ partials read
  // along their rows, not a whole chunk apart.
  parallel_for(0, rows, 16, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kTileRows = 16, kCols = 64;
    T tile[kTileRows * kCols];
    for (int64_t r0 = lo; r0 < hi; r0 += kTileRows) {
      const int64_t r1 = std::min(hi, r0 + kTileRows);
      for (int64_t j0 = 0; j0 < d; j0 += kCols) {
        const int64_t j1 = std::min(d, j0 + kCols);
        for (int64_t p = 0; p < parts; ++p) {
          const T* part = partials.data() + p * size;
          for (int64_t j = j0; j < j1; ++j)
            for (int64_t r = r0; r < r1; ++r) {
              const T x = part[transposed ? j * rows + r : r * d + j];
              T& t = tile[(r - r0) * kCols + (j - j0)];
              t = p == 0 ? x : t + x;
            }
        }
        for (int64_t r = r0; r < r1; ++r)
          std::copy_n(tile + (r - r0) * kCols, j1 - j0, dh + r * d + j0);
      }
    }
  });
}

template <class T>
CrossEntropyWithGrads with_grads(const Tensor& h_in, const Tensor& w_in, const Tensor& t_in) {
  const auto [h_t, h] = matrix<T>(h_in);
  const auto [w_t, w] = matrix<T>(w_in);
  const std::vector<int64_t> target = targets_of(t_in);
  const int64_t n = h_in.size(0), d = h_in.size(1), v = w_in.size(1);
  const DType dt = dtype_of<T>();
  CrossEntropyWithGrads r{empty({n, 2}, dt, cpu()), empty({n, d}, dt, cpu()),
                          n > 0 ? empty({d, v}, dt, cpu()) : zeros({d, v}, dt, cpu())};
  T* o = r.out.numel() > 0 ? r.out.template data<T>() : nullptr;
  T* dh = r.dh.numel() > 0 ? r.dh.template data<T>() : nullptr;
  T* dw = r.dw.numel() > 0 ? r.dw.template data<T>() : nullptr;
  constexpr T inf = std::numeric_limits<T>::infinity();
  const int64_t rows_per_chunk = chunk_rows(n, d, v);
  const Tensor chunk = empty({rows_per_chunk, v}, dtype_of<T>(), cpu());  // the allocator's
  T* logits = chunk.numel() > 0 ? chunk.template data<T>() : nullptr;
  std::vector<T> partials;
  for (int64_t r0 = 0; r0 < n; r0 += rows_per_chunk) {
    const int64_t rows = std::min(n, r0 + rows_per_chunk) - r0;
    gemm_threads<T>(rows, v, d, h.block(r0, 0), w, 0, logits, v);
    // Each row: its loss and logsumexp, then its logits become softmax − one-hot.
    parallel_for(0, rows, 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T* x = logits + i * v;
        const int64_t row = r0 + i, at = target[row];
        const bool picks = at >= 0 && at < v;
        const T picked = picks ? x[at] : T(0);
        const T mx = row_max(x, v, -inf);
        const T shift = mx == -inf ? T(0) : mx;
        const T sum = exp_shift_sum(x, v, shift);
        const T lse = shift + std::log(sum);
        o[row * 2] = lse - picked;
        o[row * 2 + 1] = lse;
        const T inv = sum > 0 ? T(1) / sum : T(0);  // every logit -inf: no probability anywhere
        for (int64_t j = 0; j < v; ++j) x[j] *= inv;
        if (picks) x[at] -= T(1);
      }
    });
    // dh[r0:r0+rows] = dL · wᵀ;  dw (+)= h[r0:r0+rows]ᵀ · dL.
    const View<T> dl{logits, v, 1};
    dh_rows<T>(rows, d, v, dl, w, dh + r0 * d, partials);
    gemm_threads<T>(d, v, rows, h.block(r0, 0).t(), dl, r0 == 0 ? 0 : 1, dw, v);
  }
  return r;
}

/// x *= s elementwise, x a CPU tensor of T of its own (contiguous).
template <class T>
void scale(Tensor& x, T s) {
  T* p = x.numel() > 0 ? x.template data<T>() : nullptr;
  parallel_for(0, x.numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] *= s;
  });
}

/// Whether column 0 of the cotangent `d` [N, 2] holds one value in every row (the same bits);
/// sets `s` to it (1 when N = 0).
template <class T>
bool uniform_rows(const Tensor& d_in, T& s) {
  const Tensor d = d_in.to(cpu()).to(dtype_of<T>()).contiguous();
  const int64_t n = d.size(0);
  const T* g = n > 0 ? d.template data<T>() : nullptr;
  s = n > 0 ? g[0] : T(1);
  for (int64_t r = 1; r < n; ++r)
    if (std::memcmp(&g[r * 2], &s, sizeof(T)) != 0) return false;
  return true;
}

/// Whether h and w live on a CUDA device (the kernels of cross_entropy_cuda.h run there).
bool on_cuda(const Tensor& h, const Tensor& w) {
  return h.device().kind == DeviceKind::cuda && w.device().kind == DeviceKind::cuda;
}

/// `r` as `dtype` on `like`'s device.
Tensor placed(Tensor r, const Tensor& like, DType dtype) {
  if (r.dtype() != dtype) r = r.to(dtype);
  return like.device().kind == DeviceKind::cpu ? r : r.to(like.device());
}

}  // namespace

Tensor linear_cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor& targets,
                                    DType dtype) {
  if (on_cuda(h, w)) return linear_cross_entropy_forward_cuda(h, w, targets, dtype);
  return placed(dtype == DType::f64 ? forward<double>(h, w, targets) : forward<float>(h, w, targets),
                h, dtype);
}

std::pair<Tensor, Tensor> linear_cross_entropy_backward(const Tensor& h, const Tensor& w,
                                                        const Tensor& targets, const Tensor& out,
                                                        const Tensor& d_out, DType dtype) {
  if (on_cuda(h, w)) return linear_cross_entropy_backward_cuda(h, w, targets, out, d_out, dtype);
  auto [dh, dw] = dtype == DType::f64 ? backward<double>(h, w, targets, out, d_out)
                                      : backward<float>(h, w, targets, out, d_out);
  return {placed(std::move(dh), h, dtype), placed(std::move(dw), h, dtype)};
}

CrossEntropyWithGrads linear_cross_entropy_with_grads(const Tensor& h, const Tensor& w,
                                                      const Tensor& targets, DType dtype) {
  if (on_cuda(h, w)) return linear_cross_entropy_with_grads_cuda(h, w, targets, dtype);
  CrossEntropyWithGrads r = dtype == DType::f64 ? with_grads<double>(h, w, targets)
                                                : with_grads<float>(h, w, targets);
  return {placed(std::move(r.out), h, dtype), placed(std::move(r.dh), h, dtype),
          placed(std::move(r.dw), h, dtype)};
}

std::pair<Tensor, Tensor> linear_cross_entropy_backward(const Tensor& h, const Tensor& w,
                                                        const Tensor& targets, const Tensor& out,
                                                        const Tensor& d_out, Tensor dh_unit,
                                                        Tensor dw_unit, DType dtype) {
  const auto scaled = [&](auto s) {
    using T = decltype(s);
    if (s != T(1))
      for (Tensor* x : {&dh_unit, &dw_unit}) {
        if (x->device().kind == DeviceKind::cuda && x->dtype() == dtype_of<T>() &&
            x->is_contiguous()) {
          scale_cuda(*x, static_cast<double>(s));
          continue;
        }
        // In place where the unit gradient is a CPU tensor of T of its own, as the forward made it.
        Tensor own = x->device().kind == DeviceKind::cpu && x->dtype() == dtype_of<T>() &&
                             x->is_contiguous()
                         ? *x
                         : x->to(cpu()).to(dtype_of<T>()).contiguous();
        scale(own, s);
        *x = placed(std::move(own), h, dtype);
      }
    return std::pair<Tensor, Tensor>{std::move(dh_unit), std::move(dw_unit)};
  };
  if (dtype == DType::f64) {
    if (double s; uniform_rows(d_out, s)) return scaled(s);
  } else if (float s; uniform_rows(d_out, s)) {
    return scaled(s);
  }
  return linear_cross_entropy_backward(h, w, targets, out, d_out, dtype);
}

}  // namespace ein
