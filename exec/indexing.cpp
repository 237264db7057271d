// gather_rows and scatter_add_rows: row copies and row sums driven by an integer index tensor.
// Both work on contiguous row-major views: the table's rows are `width` elements each.
// gather splits the indices across threads; scatter_add splits the row's columns instead, so
// repeated indices never race and the sums keep index order (deterministic).
#include "exec/indexing.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "exec/cuda_executor.h"
#include "compiler/graph/graph.h"
#include "runtime/counters.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

/// The indices as int64, wrapped into [0, n), checked; `wrapped` says whether any was negative.
std::vector<int64_t> checked_indices(const Tensor& indices, int64_t n, const char* op,
                                     bool* wrapped = nullptr) {
  if (!indices.defined() || !is_integer(indices.dtype()))
    throw RuntimeError(fmt::format("{}: indices must be an integer tensor, got {}", op,
                                   indices.defined() ? dtype_name(indices.dtype()) : "undefined"));
  std::vector<int64_t> idx = indices.to_vector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t v = idx[i] < 0 ? idx[i] + n : idx[i];
    if (v < 0 || v >= n)
      throw RuntimeError(
          fmt::format("{}: index {} at flat position {} is out of range for {} "
                      "rows (valid: {}..{})",
                      op, idx[i], i, n, -n, n - 1));
    if (wrapped && v != idx[i]) *wrapped = true;
    idx[i] = v;
  }
  return idx;
}

/// The indices as the CUDA kernels read them, when the tensor already is that on `device`:
/// int64 there, none wrapped (so no copy of the checked ones crosses; a copy from the host
/// waits for the stream). Else undefined: the kernels take the checked ones.
Tensor resident_indices(const Tensor& indices, Device device, bool wrapped) {
  if (wrapped || indices.device() != device || indices.dtype() != DType::i64) return Tensor();
  return indices.detach().contiguous();
}

Shape result_shape(const Tensor& indices, const Shape& row) {
  Shape out = indices.shape();
  out.insert(out.end(), row.begin(), row.end());
  return out;
}

template <class T>
void scatter(const T* src, T* dst, const std::vector<int64_t>& idx, int64_t width) {
  parallel_for(0, width, 256, [&](int64_t lo, int64_t hi) {
    for (size_t i = 0; i < idx.size(); ++i) {
      const T* s = src + static_cast<int64_t>(i) * width;
      T* d = dst + idx[i] * width;
      for (int64_t c = lo; c < hi; ++c)
        d[c] += s[c];
    }
  });
}

}  // namespace

Tensor gather_rows(const Tensor& table, const Tensor& indices) {
  if (!table.defined() || table.dim() == 0)
    throw RuntimeError("gather: the table needs a first dim of rows");
  const int64_t n = table.size(0);
  bool wrapped = false;
  const std::vector<int64_t> idx = checked_indices(indices, n, "gather", &wrapped);
  const Shape row(table.shape().begin() + 1, table.shape().end());
  if (table.device().kind == DeviceKind::cuda)
    return gather_rows_cuda(table, idx, result_shape(indices, row),
                            resident_indices(indices, table.device(), wrapped));
  const Tensor t = table.detach().contiguous();
  Tensor out = empty(result_shape(indices, row), table.dtype());
  const int64_t bytes = (n == 0 ? 0 : t.nbytes() / n);
  const auto* src = static_cast<const char*>(t.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  parallel_for(0, static_cast<int64_t>(idx.size()),
               std::max<int64_t>(1, 65536 / std::max<int64_t>(bytes, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t i = lo; i < hi; ++i)
                   std::memcpy(dst + i * bytes, src + idx[i] * bytes, static_cast<size_t>(bytes));
               });
  return out;
}

Tensor scatter_add_rows(const Tensor& values, const Tensor& indices, int64_t num_rows) {
  if (num_rows < 0) throw RuntimeError("scatter_add: the number of rows must be >= 0");
  bool wrapped = false;
  const std::vector<int64_t> idx = checked_indices(indices, num_rows, "scatter_add", &wrapped);
  const int64_t k = indices.dim();
  if (values.dim() < k ||
      !std::equal(indices.shape().begin(), indices.shape().end(), values.shape().begin()))
    throw RuntimeError(
        fmt::format("scatter_add: values of shape {} do not start with the indices' "
                    "shape {}",
                    shape_str(values.shape()), shape_str(indices.shape())));
  const Shape row(values.shape().begin() + k, values.shape().end());
  Shape out_shape{num_rows};
  out_shape.insert(out_shape.end(), row.begin(), row.end());
  const DType dtype = values.dtype();
  const DType acc = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor v = values.detach().to(acc).contiguous();
  // One add per value element; reads the values, indices and table, writes the table.
  const int64_t out_bytes = checked_numel(out_shape) * static_cast<int64_t>(element_size(acc));
  detail::count_launch(
      "scatter_add", {v.numel(), 0, v.nbytes() + indices.nbytes() + out_bytes, out_bytes, 0});
  if (values.device().kind == DeviceKind::cuda)
    return scatter_add_rows_cuda(v, idx, out_shape,
                                 resident_indices(indices, values.device(), wrapped))
        .to(dtype);
  Tensor out = zeros(out_shape, acc);
  const int64_t width = checked_numel(row);
  if (acc == DType::f64)
    scatter(v.data<double>(), out.data<double>(), idx, width);
  else
    scatter(v.data<float>(), out.data<float>(), idx, width);
  return out.to(dtype);
}

}  // namespace ein
