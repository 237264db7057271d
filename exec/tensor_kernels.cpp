// Kernels for materialising views, reductions and maps on CPU tensors.
//
// Reductions, per einops/torch semantics (x: the input, n: the reduced element count):
//   sum, prod, max, min   one kernel, combine = the reduction
//   mean                  sum, epilogue acc · (1/n)
//   any, all              max / min of (x != 0), stored as bool
//   logsumexp             m = max(x); then m' + log(Σ exp(x − m')), m' = 0 where m is ±inf
//                         (so all −inf rows give −inf, as torch.logsumexp)
//   var, std              μ = mean(x); then Σ (x − μ)² / (n − ddof), std takes the sqrt
// Reductions over zero elements follow torch: sum 0, prod 1, mean/var/std NaN, any false,
// all true, logsumexp −inf, max/min an error.
#include "exec/tensor_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/run_kernel.h"

namespace ein {
namespace {

/// CPU kernels do not read fp8; such inputs go through the runtime's converter first. CUDA
/// kernels read and write fp8 themselves (emit_cuda.h).
Tensor kernel_readable(const Tensor& x) {
  return is_fp8(x.dtype()) && x.device() == cpu() ? x.to(DType::f32) : x;
}

void check_defined(const Tensor& x, const char* op) {
  if (!x.defined()) throw RuntimeError(fmt::format("{}: the tensor is undefined", op));
}

/// The helpers' kernels, built once per thread per signature (run_built_kernel).
enum class Helper : int64_t { fill, copy, reduce };

/// A helper kernel's signature: the helper, then `values`, then every shape and stride given.
/// The thread's one scratch vector: a signature is read before the launch that may re-enter.
template <class... Shapes>
std::span<const int64_t> signature(Helper h, std::initializer_list<int64_t> values,
                                   const Shapes&... shapes) {
  thread_local std::vector<int64_t> sig;
  sig.assign({static_cast<int64_t>(h)});
  sig.insert(sig.end(), values);
  (sig.insert(sig.end(), shapes.begin(), shapes.end()), ...);
  return sig;
}

int64_t code(DType t) {
  return static_cast<int64_t>(t);
}
int64_t code(Device d) {
  return static_cast<int64_t>(d.kind);
}

}  // namespace

DType compute_type(const std::vector<DType>& dtypes) {
  bool wide_int = false, any_float = false;
  for (DType t : dtypes) {
    if (t == DType::f64) return DType::f64;
    wide_int = wide_int || t == DType::i64 || t == DType::i32;
    any_float = any_float || is_float(t) || is_fp8(t);
  }
  // Integer arithmetic (no float involved): f64 holds every integer below 2^53 exactly, where
  // f32 would round above 2^24 (an i64 x * 10^12 must not come back rounded).
  return wide_int && !any_float ? DType::f64 : DType::f32;
}

void fill_into(const Tensor& dst, double value) {
  check_defined(dst, "fill");
  if (dst.numel() == 0) return;
  const auto build = [&] {
    Kernel k;
    k.name = "fill";
    k.origin = fmt::format("fill of {} with a run-time value", shape_str(dst.shape()));
    k.domain = dst.shape();
    // The value converts to the dtype through the compute type: f32 for the 16- and 8-bit
    // floats.
    k.compute = is_float(dst.dtype()) && dst.dtype() != DType::f64 ? DType::f32 : DType::f64;
    k.add_output(dst.dtype(), dst.strides());
    k.store(0, k.param(value));
    return k;
  };
  const Tensor buffers[] = {dst};
  const double params[] = {value};
  run_built_kernel(signature(Helper::fill, {code(dst.dtype()), code(dst.device()), dst.dim()},
                             dst.shape(), dst.strides()),
                   {}, build, params, buffers);
}

void copy_into(const Tensor& dst, const Tensor& src_in, const std::string& origin) {
  check_defined(dst, "copy");
  check_defined(src_in, "copy");
  if (dst.device() != src_in.device())
    throw RuntimeError(fmt::format("copy: the tensors are on {} and {}; Tensor::copy_ moves "
                                   "between devices",
                                   dst.device().str(), src_in.device().str()));
  if (dst.shape() != src_in.shape())
    throw RuntimeError(fmt::format("copy: shapes differ: {} vs {}", shape_str(dst.shape()),
                                   shape_str(src_in.shape())));
  if (is_fp8(dst.dtype()) && dst.device() == cpu()) {  // the runtime's converter rounds fp8
    Tensor target = dst;
    target.copy_(src_in);
    return;
  }
  const Tensor src = kernel_readable(src_in);
  const auto build = [&] {
    Kernel k;
    k.name = "copy";
    k.origin = origin;
    k.domain = dst.shape();
    // A same-type copy moves bits; a converting one computes in a float type.
    k.compute = src.dtype() == dst.dtype() ? src.dtype() : compute_type({src.dtype(), dst.dtype()});
    if (!is_float(k.compute) && src.dtype() != dst.dtype()) k.compute = DType::f64;
    // Loop order: when the innermost dim is contiguous on both sides, the outer dims follow
    // the input's strides, so reads stream and writes land in whole inner runs (for
    // `b s (h d) -> b h (s d)` this is ~1.4× faster than walking the output in order).
    Shape in_strides = src.strides(), out_strides = dst.strides();
    const size_t rank = k.domain.size();
    if (rank >= 3 && in_strides.back() == 1 && out_strides.back() == 1) {
      std::vector<size_t> order(rank - 1);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return in_strides[a] > in_strides[b]; });
      order.push_back(rank - 1);
      Shape domain(rank), is(rank), os(rank);
      for (size_t i = 0; i < rank; ++i) {
        domain[i] = k.domain[order[i]];
        is[i] = in_strides[order[i]];
        os[i] = out_strides[order[i]];
      }
      k.domain = std::move(domain);
      in_strides = std::move(is);
      out_strides = std::move(os);
    }
    const int in = k.add_buffer(src.dtype(), in_strides);
    k.add_buffer(dst.dtype(), out_strides, true);
    k.body = k.result = k.load(in);
    return k;
  };
  const Tensor buffers[] = {src, dst};
  run_built_kernel(
      signature(Helper::copy, {code(src.dtype()), code(dst.dtype()), code(dst.device()), dst.dim()},
                dst.shape(), src.strides(), dst.strides()),
      origin, build, {}, buffers);
}

Tensor run_map(Kernel k, std::vector<Tensor> inputs, DType out_dtype, Device device) {
  Tensor out = empty(k.domain, out_dtype, inputs.empty() ? device : inputs.front().device());
  k.add_buffer(out_dtype, out.strides(), true);
  if (k.result < 0) k.result = k.body;
  inputs.push_back(out);  // the kernel's buffers: its inputs, then its output
  run_kernel(k, inputs);
  return out;
}

namespace {

struct ReduceShape {
  Shape domain;                     // kept dims, then reduced dims
  Shape in_strides;                 // x's strides in that order
  Shape kept_sizes;                 // the output's sizes (kept dims in input order)
  Shape out_strides;                // the output's strides along the domain (0 on reduced)
  int reduced = 0;
  int64_t count = 1;                // elements reduced per output
};

ReduceShape plan_reduce(const Tensor& x, const std::vector<bool>& reduced, const Shape& out_layout_strides) {
  ReduceShape s;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) {
      s.domain.push_back(x.size(d));
      s.in_strides.push_back(x.stride(d));
      s.kept_sizes.push_back(x.size(d));
    }
  s.out_strides = out_layout_strides;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) {
      s.domain.push_back(x.size(d));
      s.in_strides.push_back(x.stride(d));
      s.out_strides.push_back(0);
      s.count *= x.size(d);
      ++s.reduced;
    }
  return s;
}

/// One reduction kernel: out = epilogue(combine over reduced dims of body(x, extra...)).
/// `extra` are kept-shaped tensors (means, maxima) read with stride 0 along reduced dims.
template <class Build>
Kernel reduce_kernel(const char* name, const ReduceShape& s, const Tensor& x,
                     const std::vector<Tensor>& extra, const Tensor& out, Combine combine,
                     DType compute, const std::string& origin, Build build) {
  Kernel k;
  k.name = name;
  k.origin = origin;
  k.domain = s.domain;
  k.reduced = s.reduced;
  k.combine = combine;
  k.compute = compute;
  const int xb = k.add_buffer(x.dtype(), s.in_strides);
  std::vector<int> eb;
  for (const Tensor& e : extra) {
    Shape strides = e.strides();
    strides.resize(s.domain.size(), 0);
    eb.push_back(k.add_buffer(e.dtype(), strides));
  }
  k.add_buffer(out.dtype(), s.out_strides, true);
  build(k, xb, eb);
  return k;
}

/// reduce_kernel() run on x, then `extra`, then out.
template <class Build>
void run_reduce_kernel(const char* name, const ReduceShape& s, const Tensor& x,
                       const std::vector<Tensor>& extra, const Tensor& out, Combine combine,
                       DType compute, const std::string& origin, Build build) {
  std::vector<Tensor> buffers{x};
  buffers.insert(buffers.end(), extra.begin(), extra.end());
  buffers.push_back(out);
  run_kernel(reduce_kernel(name, s, x, extra, out, combine, compute, origin, build), buffers);
}

/// sum, prod, max and min of an integer tensor, exactly: on the host in int64 (sum and prod
/// wrap around on overflow, as torch's do). The result is i64 for sum and prod (torch's rule
/// for every integer dtype) and the input's dtype for max and min, on the input's device.
Tensor integer_reduce(const Tensor& x, const std::vector<bool>& reduced, Reduction r) {
  const Tensor h = x.to(cpu()).to(DType::i64).contiguous();
  const int64_t* p = h.data<int64_t>();
  const int64_t rank = h.dim();
  Shape kept;
  std::vector<int64_t> out_stride(static_cast<size_t>(rank), 0);
  int64_t out_n = 1;
  for (int64_t d = rank - 1; d >= 0; --d)
    if (!reduced[static_cast<size_t>(d)]) {
      out_stride[static_cast<size_t>(d)] = out_n;
      out_n *= h.size(d);
    }
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[static_cast<size_t>(d)]) kept.push_back(h.size(d));
  const bool extremum = r == Reduction::max || r == Reduction::min;
  if (extremum && h.numel() == 0 && out_n > 0)
    throw RuntimeError(fmt::format("reduce: cannot take the {} over zero elements (input {})",
                                   reduction_name(r), shape_str(x.shape())));
  const int64_t init = r == Reduction::sum    ? 0
                       : r == Reduction::prod ? 1
                       : r == Reduction::max  ? std::numeric_limits<int64_t>::min()
                                              : std::numeric_limits<int64_t>::max();
  std::vector<int64_t> acc(static_cast<size_t>(out_n), init);
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t at = 0;  // the output element of `index`
  for (int64_t i = 0; i < h.numel(); ++i) {
    int64_t& a = acc[static_cast<size_t>(at)];
    const int64_t v = p[i];
    switch (r) {  // unsigned arithmetic: wrap-around without undefined behaviour
      case Reduction::sum: a = static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(v)); break;
      case Reduction::prod: a = static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(v)); break;
      case Reduction::max: a = std::max(a, v); break;
      default: a = std::min(a, v); break;
    }
    for (int64_t d = rank - 1; d >= 0; --d) {  // the next index, row-major
      const auto u = static_cast<size_t>(d);
      at += out_stride[u];
      if (++index[u] < h.size(d)) break;
      at -= out_stride[u] * index[u];
      index[u] = 0;
    }
  }
  Tensor out = empty(kept, DType::i64, cpu());
  std::copy(acc.begin(), acc.end(), out.data<int64_t>());
  return out.to(extremum ? x.dtype() : DType::i64).to(x.device());
}

}  // namespace

Tensor reduce_dims(const Tensor& x_in, const std::vector<bool>& reduced, Reduction r,
                   std::optional<int64_t> ddof, const std::vector<int>& out_order,
                   const std::string& origin) {
  check_defined(x_in, "reduce");
  const Tensor x = kernel_readable(x_in);
  const bool integer = !is_float(x.dtype()) && x.dtype() != DType::boolean;
  if (integer && (r == Reduction::sum || r == Reduction::prod || r == Reduction::max ||
                  r == Reduction::min))
    return integer_reduce(x, reduced, r);
  if (integer && r != Reduction::any && r != Reduction::all)
    throw RuntimeError(fmt::format("reduce: the {} of an {} tensor needs a float dtype (as in "
                                   "torch): convert it first (f32(x) in .ein, cast(x, "
                                   "DType::f32) in C++)",
                                   reduction_name(r), dtype_name(x.dtype())));
  const bool boolean_result = r == Reduction::any || r == Reduction::all;
  // Results keep a float input's dtype (fp8 included, rounded once at the end); integer and
  // bool inputs (any/all aside) give f32.
  const DType out_dtype = boolean_result                                  ? DType::boolean
                          : is_float(x_in.dtype()) || is_fp8(x_in.dtype()) ? x_in.dtype()
                                                                          : DType::f32;
  const DType out_kernel_dtype = is_fp8(out_dtype) && x.device() == cpu() ? DType::f32 : out_dtype;
  const DType compute = compute_type({x.dtype()});

  // The output is laid out in out_order (so a following permute is free), then viewed back.
  Shape kept;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) kept.push_back(x.size(d));
  std::vector<int> order = out_order;
  if (order.empty()) {
    order.resize(kept.size());
    std::iota(order.begin(), order.end(), 0);
  }
  Shape laid_out;
  for (int i : order) laid_out.push_back(kept[i]);
  Tensor out_storage = empty(laid_out, out_kernel_dtype, x.device());
  Shape kept_strides(kept.size());
  for (size_t i = 0; i < order.size(); ++i) kept_strides[order[i]] = out_storage.stride(static_cast<int64_t>(i));
  const Tensor out = out_storage.as_strided(kept, kept_strides, out_storage.offset());
  const ReduceShape s = plan_reduce(x, reduced, kept_strides);
  if (out.numel() == 0) return out;

  if (s.count == 0) {  // empty reductions, as torch
    double v = 0;
    switch (r) {
      case Reduction::max:
      case Reduction::min:
        throw RuntimeError(fmt::format("reduce: cannot take the {} over zero elements (input {})",
                                       reduction_name(r), shape_str(x.shape())));
      case Reduction::prod:
      case Reduction::all: v = 1; break;
      case Reduction::mean:
      case Reduction::var:
      case Reduction::std: v = std::numeric_limits<double>::quiet_NaN(); break;
      case Reduction::logsumexp: v = -std::numeric_limits<double>::infinity(); break;
      default: break;
    }
    out_storage.fill_(v);
    return is_fp8(out_dtype) ? out.to(out_dtype) : out;
  }
  const double n = static_cast<double>(s.count);
  // A plain reduction's kernel follows from r, the dtypes and the layout (n from its domain).
  auto plain = [&](Combine c, auto&& epilogue) {
    const auto build = [&] {
      return reduce_kernel(reduction_name(r).data(), s, x, {}, out, c, compute, origin,
                           [&](Kernel& k, int xb, const std::vector<int>&) {
                             k.body = k.load(xb);
                             if (boolean_result)
                               k.body = k.apply(ScalarOp::ne, k.body, k.constant(0));
                             k.result = epilogue(k, k.accumulator());
                           });
    };
    const Tensor buffers[] = {x, out};
    run_built_kernel(
        signature(Helper::reduce,
                  {static_cast<int64_t>(r), code(x.dtype()), code(out.dtype()), code(compute),
                   code(x.device()), s.reduced, static_cast<int64_t>(s.domain.size())},
                  s.domain, s.in_strides, s.out_strides),
        origin, build, {}, buffers);
  };
  auto identity = [](Kernel&, int acc) { return acc; };
  switch (r) {
    case Reduction::sum: plain(Combine::sum, identity); break;
    case Reduction::prod: plain(Combine::prod, identity); break;
    case Reduction::max:
    case Reduction::any: plain(Combine::max, identity); break;
    case Reduction::min:
    case Reduction::all: plain(Combine::min, identity); break;
    case Reduction::mean:
      plain(Combine::sum, [&](Kernel& k, int acc) {
        return k.apply(ScalarOp::mul, acc, k.constant(1.0 / n));
      });
      break;
    case Reduction::logsumexp: {
      const Tensor m = reduce_dims(x, reduced, Reduction::max, {}, {}, origin);
      run_reduce_kernel(
          "logsumexp", s, x, {m}, out, Combine::sum, compute, origin,
          [&](Kernel& k, int xb, const std::vector<int>& e) {
            const int mv = k.load(e[0]);
            const int inf = k.apply(ScalarOp::eq, k.apply(ScalarOp::abs, mv),
                                    k.constant(std::numeric_limits<double>::infinity()));
            const int safe = k.apply(ScalarOp::where, inf, k.constant(0), mv);
            k.body = k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, k.load(xb), safe));
            k.result = k.apply(ScalarOp::add, safe, k.apply(ScalarOp::log, k.accumulator()));
          });
      break;
    }
    case Reduction::var:
    case Reduction::std: {
      if (!ddof) throw RuntimeError("reduce: var and std need an explicit ddof");
      const Tensor mu = reduce_dims(x, reduced, Reduction::mean, {}, {}, origin);
      const double denom = n - static_cast<double>(*ddof);
      run_reduce_kernel(reduction_name(r).data(), s, x, {mu}, out, Combine::sum, compute, origin,
                        [&](Kernel& k, int xb, const std::vector<int>& e) {
                          k.body = k.apply(ScalarOp::square,
                                           k.apply(ScalarOp::sub, k.load(xb), k.load(e[0])));
                          k.result = k.apply(ScalarOp::div, k.accumulator(), k.constant(denom));
                          if (r == Reduction::std) k.result = k.apply(ScalarOp::sqrt, k.result);
                        });
      break;
    }
    case Reduction::none: throw std::logic_error("internal error: reduce with no reduction");
  }
  return is_fp8(out_dtype) ? out.to(out_dtype) : out;
}

}  // namespace ein
