// contract(): axis classification, layout folding and the call into gemm_batched.
#include "runtime/blas/contract.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <type_traits>

#include <ein/errors.h>

#include "runtime/blas/gemm.h"
#include "runtime/cuda/execution.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

std::atomic<int64_t> g_operand_copies{0};
std::atomic<int64_t> g_gemm_calls{0};
std::atomic<int64_t> g_permuted_outputs{0};
std::atomic<int64_t> g_written_in_place{0};

/// One GEMM batch on `device`: BLAS on the CPU, cuBLASLt (or the installed CudaExecution) on
/// a GPU.
void run_gemm(Device device, const GemmBatch& g) {
  if (device.kind == DeviceKind::cpu)
    gemm_batched(g);
  else
    cuda_execution().gemm(device.index, g, cuda_gemm_math());
}

/// A tensor with one distinct axis id per dimension.
struct Operand {
  Tensor t;
  std::vector<int> axes;

  int dim_of(int axis) const {
    const auto it = std::find(axes.begin(), axes.end(), axis);
    return it == axes.end() ? -1 : static_cast<int>(it - axes.begin());
  }
  bool has(int axis) const { return dim_of(axis) >= 0; }
  int64_t size_of(int axis) const { return t.shape()[static_cast<size_t>(dim_of(axis))]; }
};

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// `t` labelled by `axes`, with repeated ids merged into their diagonal (a view).
Operand take_diagonals(const Tensor& t, const std::vector<int>& axes, const char* name) {
  if (static_cast<int64_t>(axes.size()) != t.dim()) {
    throw RuntimeError(std::string("contract: ") + name + " has " + std::to_string(t.dim()) +
                       " dims but " + std::to_string(axes.size()) + " axis ids " + list_str(axes));
  }
  Operand out;
  Shape sizes, strides;
  for (size_t d = 0; d < axes.size(); ++d) {
    const int seen = out.dim_of(axes[d]);
    if (seen < 0) {
      out.axes.push_back(axes[d]);
      sizes.push_back(t.shape()[d]);
      strides.push_back(t.strides()[d]);
    } else if (sizes[static_cast<size_t>(seen)] != t.shape()[d]) {
      throw RuntimeError(std::string("contract: ") + name + " repeats axis " +
                         std::to_string(axes[d]) + " with sizes " +
                         std::to_string(sizes[static_cast<size_t>(seen)]) + " and " +
                         std::to_string(t.shape()[d]) + "; a diagonal needs equal sizes");
    } else {
      strides[static_cast<size_t>(seen)] += t.strides()[d];
    }
  }
  out.t = out.axes.size() == axes.size() ? t : t.as_strided(sizes, strides, t.offset());
  return out;
}

/// `x` permuted to `order` (axis ids) as a contiguous tensor of dtype `dtype` (one copy).
Operand copy_to(const Operand& x, const std::vector<int>& order, DType dtype) {
  std::vector<int64_t> perm;
  for (int axis : order)
    perm.push_back(x.dim_of(axis));
  const Tensor p = x.t.permute(perm);
  Tensor c = p.dtype() == dtype ? p.contiguous() : p.to(dtype).contiguous();
  ++g_operand_copies;
  return {c, order};
}

/// `x` with the axes in `lone` summed out, as a contiguous tensor of `dtype`; the sum is
/// accumulated in double.
Operand sum_out(const Operand& x, const std::vector<int>& lone, DType dtype) {
  std::vector<int> kept, order;
  for (int axis : x.axes) {
    if (std::find(lone.begin(), lone.end(), axis) == lone.end()) kept.push_back(axis);
  }
  order = kept;
  order.insert(order.end(), lone.begin(), lone.end());
  const Operand src = copy_to(x, order, dtype);
  Shape kept_sizes;
  int64_t rows = 1, cols = 1;
  for (int axis : kept)
    kept_sizes.push_back(src.size_of(axis)), rows *= src.size_of(axis);
  for (int axis : lone)
    cols *= src.size_of(axis);
  const Device device = x.t.device();
  Tensor out = empty(kept_sizes, dtype, device);
  if (device.kind != DeviceKind::cpu) {  // no loops on a GPU: out = src · ones
    if (rows == 0) return {out, kept};
    const Tensor ones = full({cols}, 1.0, dtype, device);
    GemmBatch g;
    g.dtype = dtype, g.m = rows, g.n = 1, g.k = cols;
    g.a = src.t.device_ptr(), g.lda = std::max<int64_t>(1, cols);
    g.b = ones.device_ptr(), g.ldb = 1;
    g.c = out.device_ptr(), g.ldc = 1;
    if (cols == 0)
      out.fill_(0);
    else
      run_gemm(device, g);
    return {out, kept};
  }
  auto run = [&](auto* in, auto* result) {
    parallel_for(0, rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, cols)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t r = lo; r < hi; ++r) {
                     double s = 0;
                     for (int64_t c = 0; c < cols; ++c)
                       s += static_cast<double>(in[r * cols + c]);
                     result[r] = static_cast<std::remove_pointer_t<decltype(result)>>(s);
                   }
                 });
  };
  if (dtype == DType::f64) {
    run(src.t.data<double>(), out.data<double>());
  } else {
    run(src.t.data<float>(), out.data<float>());
  }
  return {out, kept};
}

/// One axis group merged into a single strided dimension: size and stride in elements.
/// A group of total size ≤ 1 has no meaningful stride (0 here).
struct Merged {
  int64_t size = 1;
  int64_t stride = 0;
  bool ok = true;  ///< false when the group's axes are not nested in memory in this order
};

Merged merge(const Operand& x, const std::vector<int>& group) {
  Merged m;
  bool first = true;
  for (int axis : group) {
    const auto d = static_cast<size_t>(x.dim_of(axis));
    const int64_t size = x.t.shape()[d], stride = x.t.strides()[d];
    m.size *= size;
    if (size == 1) continue;
    if (!first && m.stride != stride * size) m.ok = false;
    m.stride = stride, first = false;
  }
  if (m.size <= 1) m.stride = 0;
  return m;
}

/// A batch of matrices: element (i, r, c) at data + i·batch_stride + r·rs + c·cs (elements).
struct MatrixBatch {
  const void* data = nullptr;
  int64_t batch_stride = 0, rows = 1, cols = 1, rs = 0, cs = 0;
  bool ok = true;

  MatrixBatch transposed() const {
    MatrixBatch t = *this;
    std::swap(t.rows, t.cols), std::swap(t.rs, t.cs);
    return t;
  }
};

MatrixBatch fold(const Operand& x, const std::vector<int>& batch, const std::vector<int>& rows,
                 const std::vector<int>& cols) {
  const Merged b = merge(x, batch), r = merge(x, rows), c = merge(x, cols);
  MatrixBatch m;
  m.data = x.t.device_ptr();
  m.batch_stride = b.stride, m.rows = r.size, m.cols = c.size, m.rs = r.stride, m.cs = c.stride;
  m.ok = b.ok && r.ok && c.ok;
  return m;
}

/// How BLAS reads a stored matrix: transposed or not, and its leading dimension.
struct BlasLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

BlasLayout blas_layout(const MatrixBatch& m) {
  if (!m.ok) return {};
  if (m.cols <= 1 || m.cs == 1) {  // row-major: rows at stride rs
    const int64_t ld = m.rows <= 1 ? std::max<int64_t>(1, m.cols) : m.rs;
    if (ld >= std::max<int64_t>(1, m.cols)) return {true, false, ld};
  }
  if (m.rows <= 1 || m.rs == 1) {  // column-major: stored transposed, columns at stride cs
    const int64_t ld = m.cols <= 1 ? std::max<int64_t>(1, m.rows) : m.cs;
    if (ld >= std::max<int64_t>(1, m.rows)) return {true, true, ld};
  }
  return {};
}

/// The operand as a (batch, rows, cols) matrix batch BLAS can read, copying it when its
/// layout cannot be folded (or its dtype is not `dtype`). The copy puts innermost the group
/// that holds the operand's smallest stride, so it reads memory as sequentially as it can.
MatrixBatch gemm_operand(Operand& x, const std::vector<int>& batch, const std::vector<int>& rows,
                         const std::vector<int>& cols, DType dtype) {
  if (x.t.dtype() == dtype) {
    const MatrixBatch m = fold(x, batch, rows, cols);
    if (blas_layout(m).ok) return m;
  }
  int64_t best = std::numeric_limits<int64_t>::max();
  bool rows_inner = false;
  for (size_t d = 0; d < x.axes.size(); ++d) {
    const int64_t stride = x.t.strides()[d];
    if (x.t.shape()[d] > 1 && stride > 0 && stride < best) {
      best = stride;
      rows_inner = std::find(rows.begin(), rows.end(), x.axes[d]) != rows.end();
    }
  }
  std::vector<int> order = batch;
  const auto& outer = rows_inner ? cols : rows;
  const auto& inner = rows_inner ? rows : cols;
  order.insert(order.end(), outer.begin(), outer.end());
  order.insert(order.end(), inner.begin(), inner.end());
  x = copy_to(x, order, dtype);
  return fold(x, batch, rows, cols);
}

}  // namespace

// 1. Check the axis lists, take diagonals of repeated ids, check sizes and dtypes.
// 2. Sum lone axes (in one operand only, not in out) out of their operand.
// 3. Classify: batch (a, b, out), m (a, out), n (b, out), k (a, b); order batch, m and n as
//    out_axes does, k as a's strides do (outermost first).
// 4. Allocate the result contiguous in out_axes order; if that does not fold into
//    (batch, m, n) or (batch, n, m), allocate (batch, m, n) and return a permuted view.
// 5. Fold a into (batch, m, k) and b into (batch, k, n), copying whichever cannot be.
// 6. If the result folds with unit stride along m, compute Cᵀ = Bᵀ·Aᵀ instead.
// 7. One gemm_batched (bf16 operands as they are where oneDNN's matmul takes them, else f32
//    copies); round back to f16/bf16 when that was the input dtype.
namespace {

/// An integer contraction, exactly: int64 loops over every axis on the host (BLAS has no
/// integer GEMM; wrap-around on overflow as torch's). Axes repeated within an operand take
/// its diagonal; an axis only in the output is not allowed (contract never makes one). The
/// result has the operands' dtype, on their device.
Tensor integer_contract(const Tensor& a_in, const std::vector<int>& a_axes, const Tensor& b_in,
                        const std::vector<int>& b_axes, const std::vector<int>& out_axes) {
  const Tensor a = a_in.to(cpu()).to(DType::i64).contiguous();
  const Tensor b = b_in.to(cpu()).to(DType::i64).contiguous();
  std::vector<int> axes;  // every distinct axis id
  std::vector<int64_t> size;
  auto see = [&](const std::vector<int>& ids, const Tensor& t) {
    for (size_t d = 0; d < ids.size(); ++d) {
      const auto it = std::find(axes.begin(), axes.end(), ids[d]);
      const int64_t n = t.size(static_cast<int64_t>(d));
      if (it == axes.end()) {
        axes.push_back(ids[d]);
        size.push_back(n);
      } else if (size[static_cast<size_t>(it - axes.begin())] != n) {
        throw RuntimeError("contract: axis " + std::to_string(ids[d]) + " has two lengths");
      }
    }
  };
  see(a_axes, a);
  see(b_axes, b);
  const auto slot = [&](int id) {
    const auto it = std::find(axes.begin(), axes.end(), id);
    if (it == axes.end()) throw RuntimeError("contract: output axis " + std::to_string(id) + " is in no operand");
    return static_cast<size_t>(it - axes.begin());
  };
  // Element strides of a, b and the output per axis (summed for repeated axes: diagonals).
  std::vector<int64_t> sa(axes.size(), 0), sb(axes.size(), 0), so(axes.size(), 0);
  for (size_t d = 0; d < a_axes.size(); ++d) sa[slot(a_axes[d])] += a.stride(static_cast<int64_t>(d));
  for (size_t d = 0; d < b_axes.size(); ++d) sb[slot(b_axes[d])] += b.stride(static_cast<int64_t>(d));
  Shape out_shape;
  for (int id : out_axes) out_shape.push_back(size[slot(id)]);
  Tensor out = zeros(out_shape, DType::i64, cpu());
  for (size_t d = 0; d < out_axes.size(); ++d) so[slot(out_axes[d])] = out.stride(static_cast<int64_t>(d));
  int64_t total = 1;
  for (int64_t n : size) total *= n;
  const int64_t *pa = a.data<int64_t>(), *pb = b.data<int64_t>();
  int64_t* po = out.data<int64_t>();
  std::vector<int64_t> index(axes.size(), 0);
  int64_t ia = 0, ib = 0, io = 0;
  for (int64_t step = 0; step < total; ++step) {
    po[io] = static_cast<int64_t>(static_cast<uint64_t>(po[io]) +
                                  static_cast<uint64_t>(pa[ia]) * static_cast<uint64_t>(pb[ib]));
    for (size_t d = axes.size(); d-- > 0;) {  // the next index, last axis fastest
      ia += sa[d];
      ib += sb[d];
      io += so[d];
      if (++index[d] < size[d]) break;
      ia -= sa[d] * size[d];
      ib -= sb[d] * size[d];
      io -= so[d] * size[d];
      index[d] = 0;
    }
  }
  return out.to(a_in.dtype()).to(a_in.device());
}

/// Whether `t` holds each of its elements at a distinct place (no dim of size > 1 at stride 0),
/// so that a GEMM may write it.
bool writes_each_once(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) == 0) return false;
  return true;
}

/// contract(), or contract_into() when `into` is given: the result written there (the
/// returned tensor is then `into` if the GEMM wrote it directly, else the result to copy in).
Tensor contract_impl(const Tensor& a_in, const std::vector<int>& a_axes, const Tensor& b_in,
                     const std::vector<int>& b_axes, const std::vector<int>& out_axes,
                     std::optional<DType> result_dtype, const Tensor* into) {
  if (!a_in.defined() || !b_in.defined()) throw RuntimeError("contract: undefined operand");
  const Device device = a_in.device();
  if (b_in.device() != device) {
    throw RuntimeError("contract: the operands are on different devices: " + device.str() +
                       " and " + b_in.device().str());
  }
  if (a_in.dtype() != b_in.dtype()) {
    throw RuntimeError("contract: operand dtypes differ: " + std::string(dtype_name(a_in.dtype())) +
                       " and " + std::string(dtype_name(b_in.dtype())));
  }
  const DType dtype = a_in.dtype();
  // The dtype returned: the operands', or f32 for 16-bit operands (their sums unrounded).
  const DType wanted = result_dtype.value_or(dtype);
  if (wanted != dtype && !(wanted == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16)))
    throw RuntimeError("contract: a " + std::string(dtype_name(wanted)) + " result of " +
                       std::string(dtype_name(dtype)) + " operands (only f32 of bf16 or f16)");
  if (dtype == DType::i64 || dtype == DType::i32 || dtype == DType::i8 || dtype == DType::u8)
    return integer_contract(a_in, a_axes, b_in, b_axes, out_axes);
  if (dtype != DType::f64 && dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) {
    throw RuntimeError("contract: dtype " + std::string(dtype_name(dtype)) +
                       " is not f64, f32, f16 or bf16");
  }
  // cuBLASLt multiplies 16-bit operands as they are (f32 accumulation); on CPUs gemm_batched
  // takes bf16 operands into an f32 result (oneDNN's matmul, or f32 blocks where oneDNN has no
  // bf16 kernels for the CPU); f16 needs f32 copies. `compute` is the result's dtype before
  // rounding back, `operands` what A and B are given to the GEMM as.
  const bool native_16bit = device.kind == DeviceKind::cuda;
  const DType compute = dtype == DType::f64 ? DType::f64 : native_16bit ? dtype : DType::f32;
  const DType operands =
      device.kind == DeviceKind::cpu && dtype == DType::bf16 ? DType::bf16 : compute;
  // gemm_batched writes a bf16 result of bf16 operands itself (one rounding of the f32 sums,
  // as torch's bf16 matmul): no f32 result and no second pass to round it; or, wanted so, the
  // f32 sums.
  const DType result_type =
      operands == DType::bf16 && dtype == DType::bf16 && wanted == DType::bf16 ? dtype : compute;
  Operand a = take_diagonals(a_in, a_axes, "a");
  Operand b = take_diagonals(b_in, b_axes, "b");
  for (int axis : a.axes) {
    if (b.has(axis) && a.size_of(axis) != b.size_of(axis)) {
      throw RuntimeError("contract: axis " + std::to_string(axis) + " has size " +
                         std::to_string(a.size_of(axis)) + " in a but " +
                         std::to_string(b.size_of(axis)) + " in b (no broadcasting here)");
    }
  }
  Shape out_shape;
  for (size_t i = 0; i < out_axes.size(); ++i) {
    const int axis = out_axes[i];
    if (std::find(out_axes.begin(), out_axes.begin() + static_cast<long>(i), axis) !=
        out_axes.begin() + static_cast<long>(i)) {
      throw RuntimeError("contract: out_axes " + list_str(out_axes) + " repeats axis " +
                         std::to_string(axis));
    }
    if (!a.has(axis) && !b.has(axis)) {
      throw RuntimeError("contract: output axis " + std::to_string(axis) + " is in neither a " +
                         list_str(a_axes) + " nor b " + list_str(b_axes));
    }
    out_shape.push_back(a.has(axis) ? a.size_of(axis) : b.size_of(axis));
  }
  auto in_out = [&](int axis) {
    return std::find(out_axes.begin(), out_axes.end(), axis) != out_axes.end();
  };

  std::vector<int> lone_a, lone_b;
  for (int axis : a.axes) {
    if (!b.has(axis) && !in_out(axis)) lone_a.push_back(axis);
  }
  for (int axis : b.axes) {
    if (!a.has(axis) && !in_out(axis)) lone_b.push_back(axis);
  }
  if (!lone_a.empty()) a = sum_out(a, lone_a, compute);
  if (!lone_b.empty()) b = sum_out(b, lone_b, compute);

  std::vector<int> batch, m_axes, n_axes, k_axes;
  for (int axis : out_axes) {
    (a.has(axis) && b.has(axis) ? batch : a.has(axis) ? m_axes : n_axes).push_back(axis);
  }
  for (int axis : a.axes) {
    if (b.has(axis) && !in_out(axis)) k_axes.push_back(axis);
  }
  std::stable_sort(k_axes.begin(), k_axes.end(), [&](int x, int y) {
    return a.t.strides()[static_cast<size_t>(a.dim_of(x))] >
           a.t.strides()[static_cast<size_t>(a.dim_of(y))];
  });

  int64_t k_size = 1;
  for (int axis : k_axes)
    k_size *= a.size_of(axis);
  if (checked_numel(out_shape) == 0 || k_size == 0) return zeros(out_shape, wanted, device);

  // The result: the caller's `into` when the GEMM can write it; else contiguous in out order
  // when that folds, else (batch, m, n) and a view.
  const auto folds = [](const MatrixBatch& m) {
    return m.ok && (blas_layout(m).ok || blas_layout(m.transposed()).ok);
  };
  Operand c;
  MatrixBatch cm;
  if (into && into->dtype() == result_type && wanted == result_type &&
      into->shape() == out_shape && into->device() == device && writes_each_once(*into)) {
    c = {*into, out_axes};
    cm = fold(c, batch, m_axes, n_axes);
  }
  if (!c.t.defined() || !folds(cm)) {
    c = {empty(out_shape, result_type, device), out_axes};
    cm = fold(c, batch, m_axes, n_axes);
  } else {
    ++g_written_in_place;
  }
  const bool c_folds = folds(cm);
  Tensor result = c.t;
  if (!c_folds) {
    std::vector<int> order = batch;
    order.insert(order.end(), m_axes.begin(), m_axes.end());
    order.insert(order.end(), n_axes.begin(), n_axes.end());
    Shape sizes;
    for (int axis : order) {
      sizes.push_back(out_shape[static_cast<size_t>(
          std::find(out_axes.begin(), out_axes.end(), axis) - out_axes.begin())]);
    }
    c = {empty(sizes, result_type, device), order};
    cm = fold(c, batch, m_axes, n_axes);
    std::vector<int64_t> perm;
    for (int axis : out_axes)
      perm.push_back(c.dim_of(axis));
    result = c.t.permute(perm);
    ++g_permuted_outputs;
  }

  MatrixBatch am = gemm_operand(a, batch, m_axes, k_axes, operands);
  MatrixBatch bm = gemm_operand(b, batch, k_axes, n_axes, operands);
  // BLAS writes C row-major; a C with unit stride along m is Cᵀ = Bᵀ·Aᵀ written row-major.
  if (const BlasLayout l = blas_layout(cm); !l.ok || l.trans) {
    std::swap(am, bm);
    am = am.transposed(), bm = bm.transposed(), cm = cm.transposed();
  }
  const BlasLayout la = blas_layout(am), lb = blas_layout(bm), lc = blas_layout(cm);
  if (!la.ok || !lb.ok || !lc.ok || lc.trans) {
    throw RuntimeError("contract: internal error: operand layouts did not fold");
  }
  int64_t batch_size = 1;
  for (int axis : batch)
    batch_size *= a.size_of(axis);

  GemmBatch g;
  g.dtype = operands;
  g.batch = batch_size, g.m = cm.rows, g.n = cm.cols, g.k = k_size;
  g.a = am.data, g.trans_a = la.trans, g.lda = la.ld, g.stride_a = am.batch_stride;
  g.b = bm.data, g.trans_b = lb.trans, g.ldb = lb.ld, g.stride_b = bm.batch_stride;
  g.c = const_cast<void*>(cm.data), g.ldc = lc.ld, g.stride_c = cm.batch_stride;
  g.bf16_c = result_type == DType::bf16;
  run_gemm(device, g);
  ++g_gemm_calls;
  return wanted == result_type ? result : result.to(wanted);
}

}  // namespace

Tensor contract(const Tensor& a, const std::vector<int>& a_axes, const Tensor& b,
                const std::vector<int>& b_axes, const std::vector<int>& out_axes,
                std::optional<DType> result_dtype) {
  return contract_impl(a, a_axes, b, b_axes, out_axes, result_dtype, nullptr);
}

void contract_into(const Tensor& out, const Tensor& a, const std::vector<int>& a_axes,
                   const Tensor& b, const std::vector<int>& b_axes,
                   const std::vector<int>& out_axes) {
  if (!out.defined()) throw RuntimeError("contract_into: undefined output");
  if (a.defined() && out.device() != a.device())
    throw RuntimeError("contract_into: the output is on " + out.device().str() +
                       ", the operands on " + a.device().str());
  // A 16-bit contraction into an f32 tensor returns the f32 sums (contract()'s `result`).
  const bool widened = a.defined() && out.dtype() == DType::f32 &&
                       (a.dtype() == DType::bf16 || a.dtype() == DType::f16);
  if (a.defined() && out.dtype() != a.dtype() && !widened)
    throw RuntimeError("contract_into: a " + std::string(dtype_name(out.dtype())) +
                       " output for " + std::string(dtype_name(a.dtype())) + " operands");
  const Tensor result = contract_impl(a, a_axes, b, b_axes, out_axes,
                                      widened ? std::optional<DType>(DType::f32) : std::nullopt,
                                      &out);
  if (result.shape() != out.shape())
    throw RuntimeError("contract_into: the result's shape differs from the output's");
  const bool written = result.same_storage(out) && result.offset() == out.offset() &&
                       result.strides() == out.strides();
  if (!written) out.copy_(result);
}

ContractStats contract_stats() {
  return {g_operand_copies.load(), g_gemm_calls.load(), g_permuted_outputs.load(),
          g_written_in_place.load()};
}

}  // namespace ein
