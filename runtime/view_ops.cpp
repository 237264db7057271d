// The view operations of Tensor: new sizes/strides/offset over the same Storage, never a
// copy (except reshape() when no view exists). The rules follow PyTorch's, including
// view()'s stride-compatibility algorithm (ATen's computeStride, TensorUtils.cpp).
#include <algorithm>
#include <optional>

#include <ein/tensor.h>

namespace ein {
namespace {

// PyTorch's computeStride: strides that give `new_sizes` the same elements as (old_sizes,
// old_strides) in row-major order, or nullopt when none exist. Steps:
//  1. Walk the old dims from the innermost, grouping them into "chunks" of dims that are
//     contiguous with each other (stride[d-1] == size[d] * stride[d]).
//  2. At each chunk boundary, take new dims from the innermost until their element count
//     reaches the chunk's; each gets stride (elements so far) * (chunk's base stride).
//  3. The counts must match exactly at every boundary, and every new dim must be used.
std::optional<Shape> compute_view_strides(const Shape& old_sizes, const Shape& old_strides,
                                          const Shape& new_sizes, int64_t numel) {
  Shape new_strides(new_sizes.size());
  if (old_sizes.empty() || numel == 0) {
    if (numel == 0 && old_sizes == new_sizes) return old_strides;
    return contiguous_strides(new_sizes);
  }
  auto view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (auto tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[static_cast<size_t>(tensor_d)];
    const bool boundary = tensor_d == 0 || (old_sizes[static_cast<size_t>(tensor_d - 1)] != 1 &&
                                            old_strides[static_cast<size_t>(tensor_d - 1)] !=
                                                tensor_numel * chunk_base_stride);
    if (!boundary) continue;
    while (view_d >= 0 &&
           (view_numel < tensor_numel || new_sizes[static_cast<size_t>(view_d)] == 1)) {
      new_strides[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[static_cast<size_t>(tensor_d - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// Replaces one -1 in `sizes` so the product equals numel; checks the product otherwise.
Shape infer_sizes(Shape sizes, int64_t numel, const char* op, const Shape& input) {
  std::optional<size_t> infer;
  int64_t known = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == -1) {
      if (infer)
        throw RuntimeError(std::string(op) + ": only one dimension can be -1, got " +
                           shape_str(sizes));
      infer = d;
    } else if (sizes[d] < 0) {
      throw RuntimeError(std::string(op) + ": invalid size " + std::to_string(sizes[d]) + " in " +
                         shape_str(sizes));
    } else {
      known *= sizes[d];
    }
  }
  if (infer) {
    if (known == 0 || numel % known != 0)
      throw RuntimeError(std::string(op) + ": shape " + shape_str(sizes) +
                         " is invalid for input of size " + std::to_string(numel) + " (shape " +
                         shape_str(input) + ")");
    sizes[*infer] = numel / known;
  } else if (known != numel) {
    throw RuntimeError(std::string(op) + ": shape " + shape_str(sizes) +
                       " is invalid for input of size " + std::to_string(numel) + " (shape " +
                       shape_str(input) + ")");
  }
  return sizes;
}

}  // namespace

std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides,
                                  const Shape& new_sizes) {
  const int64_t n = checked_numel(sizes);
  if (checked_numel(new_sizes) != n) return std::nullopt;
  return compute_view_strides(sizes, strides, new_sizes, n);
}

Tensor Tensor::as_strided(Shape sizes, Shape strides, int64_t offset) const {
  check_defined("as_strided");
  check_no_grad("a view method (slice, select, transpose, permute, view, reshape, expand, ...)");
  return Tensor(storage_, dtype_, std::move(sizes), std::move(strides), offset);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t stop, int64_t step) const {
  const auto dd = static_cast<size_t>(wrap_dim(d, "slice"));
  if (step <= 0) throw RuntimeError("slice: step must be positive, got " + std::to_string(step));
  const int64_t n = sizes_[dd];
  auto clamp_index = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t{0}, n); };
  start = clamp_index(start);
  stop = std::max(clamp_index(stop), start);
  Shape sizes = sizes_, strides = strides_;
  sizes[dd] = (stop - start + step - 1) / step;
  strides[dd] = strides_[dd] * step;
  return as_strided(std::move(sizes), std::move(strides), offset_ + start * strides_[dd]);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  const auto dd = static_cast<size_t>(wrap_dim(d, "select"));
  const int64_t n = sizes_[dd];
  if (index < -n || index >= n)
    throw RuntimeError("select: index " + std::to_string(index) + " is out of range for dim " +
                       std::to_string(dd) + " of size " + std::to_string(n) + " (shape " +
                       shape_str(sizes_) + ")");
  if (index < 0) index += n;
  Shape sizes = sizes_, strides = strides_;
  sizes.erase(sizes.begin() + static_cast<ptrdiff_t>(dd));
  strides.erase(strides.begin() + static_cast<ptrdiff_t>(dd));
  return as_strided(std::move(sizes), std::move(strides), offset_ + index * strides_[dd]);
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  const auto da = static_cast<size_t>(wrap_dim(a, "transpose"));
  const auto db = static_cast<size_t>(wrap_dim(b, "transpose"));
  Shape sizes = sizes_, strides = strides_;
  std::swap(sizes[da], sizes[db]);
  std::swap(strides[da], strides[db]);
  return as_strided(std::move(sizes), std::move(strides), offset_);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  check_defined("permute");
  if (static_cast<int64_t>(order.size()) != dim())
    throw RuntimeError("permute: the order " + shape_str(order) + " must list each of the " +
                       std::to_string(dim()) + " dims once (shape " + shape_str(sizes_) + ")");
  std::vector<bool> seen(order.size(), false);
  Shape sizes(order.size()), strides(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto d = static_cast<size_t>(wrap_dim(order[i], "permute"));
    if (seen[d])
      throw RuntimeError("permute: dim " + std::to_string(d) + " appears twice in the order " +
                         shape_str(order));
    seen[d] = true;
    sizes[i] = sizes_[d];
    strides[i] = strides_[d];
  }
  return as_strided(std::move(sizes), std::move(strides), offset_);
}

Tensor Tensor::view(Shape sizes) const {
  check_defined("view");
  const int64_t n = numel();
  sizes = infer_sizes(std::move(sizes), n, "view", sizes_);
  std::optional<Shape> strides = compute_view_strides(sizes_, strides_, sizes, n);
  if (!strides)
    throw RuntimeError(
        "view size is not compatible with input tensor's size and stride (at least one "
        "dimension spans across two contiguous subspaces); use .reshape(...) instead, or "
        "call .contiguous() first. Input sizes " +
        shape_str(sizes_) + ", strides " + shape_str(strides_) + "; requested view " +
        shape_str(sizes));
  return as_strided(std::move(sizes), std::move(*strides), offset_);
}

Tensor Tensor::reshape(Shape sizes) const {
  check_defined("reshape");
  const int64_t n = numel();
  sizes = infer_sizes(std::move(sizes), n, "reshape", sizes_);
  if (std::optional<Shape> strides = compute_view_strides(sizes_, strides_, sizes, n))
    return as_strided(std::move(sizes), std::move(*strides), offset_);
  return clone().view(std::move(sizes));
}

Tensor Tensor::expand(Shape sizes) const {
  check_defined("expand");
  const int64_t n = dim();
  const auto m = static_cast<int64_t>(sizes.size());
  auto fail = [&](const std::string& why) {
    return RuntimeError("expand: " + why + ". Target sizes " + shape_str(sizes) +
                        ", tensor sizes " + shape_str(sizes_));
  };
  if (m < n)
    throw fail("the number of sizes (" + std::to_string(m) +
               ") must be at least the tensor's number of dims (" + std::to_string(n) + ")");
  Shape new_sizes(sizes.size()), new_strides(sizes.size());
  for (int64_t i = m - 1; i >= 0; --i) {
    const int64_t src = i - (m - n);  // the input dim aligned with output dim i, if any
    const int64_t want = sizes[static_cast<size_t>(i)];
    const auto oi = static_cast<size_t>(i);
    if (src < 0) {
      if (want < 0) throw fail("a new leading dim cannot have size " + std::to_string(want));
      new_sizes[oi] = want;
      new_strides[oi] = 0;
      continue;
    }
    const int64_t have = sizes_[static_cast<size_t>(src)];
    if (want == -1 || want == have) {
      new_sizes[oi] = have;
      new_strides[oi] = strides_[static_cast<size_t>(src)];
    } else if (have == 1 && want >= 0) {
      new_sizes[oi] = want;
      new_strides[oi] = 0;
    } else {
      throw fail("the expanded size (" + std::to_string(want) + ") must match the existing size (" +
                 std::to_string(have) + ") at non-singleton dimension " + std::to_string(i));
    }
  }
  return as_strided(std::move(new_sizes), std::move(new_strides), offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  check_defined("unsqueeze");
  const int64_t n = dim();
  if (d < -n - 1 || d > n)
    throw RuntimeError("unsqueeze: dimension " + std::to_string(d) +
                       " is out of range (expected in [" + std::to_string(-n - 1) + ", " +
                       std::to_string(n) + "] for shape " + shape_str(sizes_) + ")");
  if (d < 0) d += n + 1;
  const auto dd = static_cast<size_t>(d);
  // PyTorch's choice: the new dim's stride makes it look contiguous with its neighbour.
  const int64_t stride = d >= n ? 1 : sizes_[dd] * strides_[dd];
  Shape sizes = sizes_, strides = strides_;
  sizes.insert(sizes.begin() + static_cast<ptrdiff_t>(dd), 1);
  strides.insert(strides.begin() + static_cast<ptrdiff_t>(dd), stride);
  return as_strided(std::move(sizes), std::move(strides), offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  const auto dd = static_cast<size_t>(wrap_dim(d, "squeeze"));
  if (sizes_[dd] != 1) return *this;
  Shape sizes = sizes_, strides = strides_;
  sizes.erase(sizes.begin() + static_cast<ptrdiff_t>(dd));
  strides.erase(strides.begin() + static_cast<ptrdiff_t>(dd));
  return as_strided(std::move(sizes), std::move(strides), offset_);
}

Tensor Tensor::squeeze() const {
  check_defined("squeeze");
  Shape sizes, strides;
  for (size_t d = 0; d < sizes_.size(); ++d) {
    if (sizes_[d] == 1) continue;
    sizes.push_back(sizes_[d]);
    strides.push_back(strides_[d]);
  }
  return as_strided(std::move(sizes), std::move(strides), offset_);
}

}  // namespace ein
