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

#include "compiler/graph/graph.h"
#include "exec/cuda_executor.h"
#include "runtime/counters.h"
#include "runtime/device_checks.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

std::string out_of_range(const char* op, int64_t index, int64_t position, int64_t n) {
  return fmt::format(
      "{}: index {} at flat position {} is out of range for {} rows (valid: "
      "{}..{})",
      op, index, position, n, -n, n - 1);
}

void check_index_type(const Tensor& indices, const char* op) {
  if (!indices.defined() || !is_integer(indices.dtype()))
    throw RuntimeError(fmt::format("{}: indices must be an integer tensor, got {}", op,
                                   indices.defined() ? dtype_name(indices.dtype()) : "undefined"));
}

/// The indices as int64, wrapped into [0, n), checked.
std::vector<int64_t> checked_indices(const Tensor& indices, int64_t n, const char* op) {
  check_index_type(indices, op);
  std::vector<int64_t> idx = indices.to_vector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t v = idx[i] < 0 ? idx[i] + n : idx[i];
    if (v < 0 || v >= n) throw RuntimeError(out_of_range(op, idx[i], static_cast<int64_t>(i), n));
    idx[i] = v;
  }
  return idx;
}

/// The indices as the CUDA row kernels on `device` read them (`launches`: whether the kernel
/// runs at all). An int64 or int32 tensor already there is read where it is and checked by
/// the kernel, the error deferred to the host's next wait for the device (a copy to the host
/// would wait now: twice a training step, for the embedding's forward and backward); others
/// are checked here and copied over.
RowIndices row_indices(const Tensor& indices, Device device, int64_t n, const char* op,
                       bool launches) {
  check_index_type(indices, op);
  RowIndices r;
  const DType type = indices.dtype();
  if (!launches || indices.device() != device || (type != DType::i64 && type != DType::i32)) {
    r.checked = checked_indices(indices, n, op);
    return r;
  }
  r.on_device = indices.detach().contiguous();
  r.bad = detail::defer_device_check(device, [op, n, idx = r.on_device](int64_t position) {
    // The kernel's tensor (held until now): the value it read, unless changed in place since.
    const Tensor at = idx.reshape({idx.numel()}).slice(0, position, position + 1);
    return out_of_range(op, at.to(DType::i64).to_vector<int64_t>().front(), position, n);
  });
  return r;
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
  const Shape row(table.shape().begin() + 1, table.shape().end());
  if (table.device().kind == DeviceKind::cuda) {
    check_index_type(indices, "gather");
    const bool launches = indices.numel() > 0 && checked_numel(row) > 0;
    return gather_rows_cuda(table, row_indices(indices, table.device(), n, "gather", launches),
                            result_shape(indices, row));
  }
  const std::vector<int64_t> idx = checked_indices(indices, n, "gather");
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
  const bool on_cuda = values.defined() && values.device().kind == DeviceKind::cuda;
  std::vector<int64_t> idx;
  if (on_cuda)
    check_index_type(indices, "scatter_add");
  else
    idx = checked_indices(indices, num_rows, "scatter_add");
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
  const int64_t width = checked_numel(row);
  if (on_cuda) {
    const bool launches = indices.numel() > 0 && width > 0;
    return scatter_add_rows_cuda(
               v, row_indices(indices, values.device(), num_rows, "scatter_add", launches),
               out_shape)
        .to(dtype);
  }
  Tensor out = zeros(out_shape, acc);
  if (acc == DType::f64)
    scatter(v.data<double>(), out.data<double>(), idx, width);
  else
    scatter(v.data<float>(), out.data<float>(), idx, width);
  return out.to(dtype);
}

}  // namespace ein
