// ein::Tensor: a cheap handle to a strided view of refcounted Storage (dtype, sizes, strides
// and offset in ELEMENTS, device), with PyTorch's view rules and the factory functions.
// It moves and converts data but computes nothing: arithmetic comes from compiled kernels.
//
//   ein::Tensor x = ein::arange(12, ein::DType::f32).view({3, 4});  // x: (r c)
//   ein::Tensor t = x.transpose(0, 1);           // a view: strides {1, 4}, same storage
//   ein::Tensor c = t.contiguous();              // a copy: strides {3, 1}
//   std::vector<double> v = c.to_vector<double>();
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <ein/dtype.h>
#include <ein/errors.h>
#include <ein/shape.h>

#include <ein/device.h>
#include <ein/random.h>
#include <ein/scalar_convert.h>
#include <ein/storage.h>

namespace ein {

struct AutogradMeta;  // include/ein/autograd.h

/// A strided view of Storage. Element (i0, ..., ik) lives at storage element
/// offset + sum(i_d * stride_d); sizes, strides and offset are in elements, never bytes.
/// Copying a Tensor copies the handle, not the data. A default-constructed Tensor is undefined.
class Tensor {
 public:
  /// An undefined tensor (no storage).
  Tensor() = default;
  /// A view of `storage` with the given layout; checks that it stays inside the storage.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides, int64_t offset);

  /// Whether the tensor has storage.
  bool defined() const { return storage_ != nullptr; }
  /// Sizes, outermost first.
  const Shape& shape() const { return sizes_; }
  /// Strides in elements.
  const Shape& strides() const { return strides_; }
  /// Offset of element (0, ..., 0) in the storage, in elements.
  int64_t offset() const { return offset_; }
  /// Number of dimensions.
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  /// Size of dimension d (negative d counts from the end).
  int64_t size(int64_t d) const;
  /// Stride of dimension d in elements (negative d counts from the end).
  int64_t stride(int64_t d) const;
  /// Element type.
  DType dtype() const { return dtype_; }
  /// Where the storage lives (cpu for an undefined tensor).
  Device device() const;
  /// Product of the sizes (1 for a 0-d tensor).
  int64_t numel() const;
  /// Bytes per element.
  int64_t element_size() const { return static_cast<int64_t>(ein::element_size(dtype_)); }
  /// numel() * element_size(): the bytes the elements would take if contiguous.
  int64_t nbytes() const { return numel() * element_size(); }
  /// Row-major contiguous (PyTorch's rule: strides of size-1 dims ignored; zero-size is).
  bool is_contiguous() const;
  /// Whether both tensors view the same Storage.
  bool same_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  /// The storage (null when undefined).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// Host address of the element at offset(); CPU tensors only.
  void* data_ptr() const;
  /// Address of the element at offset() in its device's memory (what kernels and cuBLASLt
  /// take); for a GPU tensor not to be dereferenced on the host.
  void* device_ptr() const;
  /// data_ptr() as T*; T must match dtype() (float for f32, Half for f16, bool for bool, ...).
  template <Element T>
  T* data() const {
    check_element_type(kDTypeOf<T>, "data");
    return static_cast<T*>(data_ptr());
  }
  /// The elements in row-major order (any strides), each converted to T.
  template <Element T>
  std::vector<T> to_vector() const;

  /// Elements start, start+step, ... < stop along `dim` (Python slicing: negative indices
  /// count from the end, out-of-range ones clamp; step > 0). A view.
  Tensor slice(int64_t dim, int64_t start, int64_t stop, int64_t step = 1) const;
  /// Index `index` of `dim`, removing the dimension (negative index counts from the end).
  Tensor select(int64_t dim, int64_t index) const;
  /// Swaps two dimensions. A view.
  Tensor transpose(int64_t a, int64_t b) const;
  /// Reorders dimensions: result dim i is input dim order[i]. A view.
  Tensor permute(const std::vector<int64_t>& order) const;
  /// The same elements with new sizes (one may be -1); a view, so the strides must allow it
  /// (PyTorch's rule); otherwise a RuntimeError that points to reshape()/contiguous().
  Tensor view(Shape sizes) const;
  /// view(sizes) when the strides allow it, else a contiguous copy with those sizes.
  Tensor reshape(Shape sizes) const;
  /// Broadcasts to `sizes` (new leading dims allowed, -1 keeps a size): size-1 dims get
  /// stride 0. A view.
  Tensor expand(Shape sizes) const;
  /// Inserts a size-1 dimension at d (in [-dim()-1, dim()]). A view.
  Tensor unsqueeze(int64_t d) const;
  /// Removes dimension d if its size is 1 (else returns the same view).
  Tensor squeeze(int64_t d) const;
  /// Removes every size-1 dimension.
  Tensor squeeze() const;
  /// An arbitrary view of the same storage; strides >= 0, and every element must lie inside.
  Tensor as_strided(Shape sizes, Shape strides, int64_t offset) const;
  /// This tensor when contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy that shares nothing with this tensor.
  Tensor clone() const;

  // ---- autograd (include/ein/autograd.h) ----
  /// Whether gradients flow to this tensor: a leaf marked with requires_grad_() or the result
  /// of an op on such tensors (while grad mode is on).
  bool requires_grad() const;
  /// Marks a leaf (a tensor no recorded op produced) as needing gradients; floating dtypes
  /// only. Handles copied earlier do not see the mark.
  Tensor& requires_grad_(bool on = true);
  /// Whether no recorded op produced it (tensors that need no gradient are leaves too).
  bool is_leaf() const;
  /// The gradient backward() accumulated (undefined before, or after zero_grad()).
  Tensor grad() const;
  /// Keeps the gradient of this non-leaf at the next backward() (leaves always keep theirs).
  void retain_grad() const;
  /// Computes the gradients of this tensor with respect to every leaf that requires grad and
  /// accumulates them into their grad(). `gradient` is d(out)/d(this); an undefined one means
  /// 1, allowed only for a tensor of one element (a loss).
  void backward(const Tensor& gradient) const;
  /// backward() of a one-element tensor (a loss): the seed gradient is 1.
  void backward() const;
  /// The same view without autograd history (shares storage; requires_grad() is false).
  Tensor detach() const;
  /// The autograd record (null for a tensor that never required grad).
  const std::shared_ptr<AutogradMeta>& autograd() const { return autograd_; }
  /// Attaches an autograd record (the compiler's tape does this for op results).
  void set_autograd(std::shared_ptr<AutogradMeta> meta) { autograd_ = std::move(meta); }

  /// A copy on `device` (this tensor when already there).
  Tensor to(Device device) const;
  /// The same with torch's non_blocking: host → cuda from pinned memory queues the copy on the
  /// thread's current stream and returns (the host bytes must stay unchanged until the stream
  /// has read them; later work on that stream sees the copy); cuda → host returns a pinned
  /// tensor whose bytes are there once the stream is synchronised (cuda_synchronize). Any other
  /// pair, or non_blocking = false, copies as to(device).
  Tensor to(Device device, bool non_blocking) const;
  /// A copy in page-locked host memory (this tensor when it is already pinned): torch's
  /// pin_memory(), what non-blocking copies to a GPU read. A cpu tensor only; without a CUDA
  /// driver the same RuntimeError as using cuda (everything else on ein::cpu() works).
  Tensor pin_memory() const;
  /// Whether the elements are in page-locked host memory.
  bool is_pinned() const;
  /// A copy converted to `dtype` (this tensor when already that dtype).
  Tensor to(DType dtype) const;
  /// Copies src into this tensor's elements (const: the handle is unchanged, as in ATen);
  /// src broadcasts to shape(), any dtypes and strides.
  void copy_(const Tensor& src) const;
  /// Sets every element to `value` converted to dtype() (const like copy_). On a device, the
  /// device's fill kernel with the value as its argument (set_device_fill): nothing crosses
  /// from the host (zeros() and full() on a GPU).
  void fill_(double value) const;
  /// The single element of a tensor with numel() == 1, as a double.
  double item() const;
  /// The element at `index` (one entry per dim; negative entries count from the end).
  double at(const std::vector<int64_t>& index) const;

 private:
  /// Throws unless the tensor is defined.
  void check_defined(const char* op) const;
  /// Throws unless the tensor is defined, on the CPU and of dtype `expected`.
  void check_element_type(DType expected, const char* op) const;
  /// Throws when two indices share an address (a stride-0 dim of size > 1): writes would race.
  void check_writable_layout(const char* op) const;
  /// A contiguous CPU tensor of `dtype` with these elements (this tensor when it is one).
  Tensor contiguous_cpu(DType dtype) const;
  /// Dimension d wrapped into [0, dim()); a RuntimeError naming `op` when out of range.
  int64_t wrap_dim(int64_t d, const char* op) const;
  /// Throws when `op` (a view, copy or in-place write outside the compiled ops) would silently
  /// drop the gradient of a tensor that requires grad while grad mode is on.
  void check_no_grad(const char* op) const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::f32;
  Shape sizes_;
  Shape strides_;
  int64_t offset_ = 0;
  std::shared_ptr<AutogradMeta> autograd_;
};

/// Row-major contiguous strides (in elements) for `sizes`.
Shape contiguous_strides(const Shape& sizes);
/// Strides that let a tensor of `sizes`/`strides` be viewed as `new_sizes` without a copy
/// (PyTorch's computeStride rule), or nullopt when the dims cannot be merged or split so.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes);
/// Product of sizes; a RuntimeError for a negative size, an OutOfMemoryError on overflow.
int64_t checked_numel(const Shape& sizes);
/// "[2, 3]".
std::string shape_str(const Shape& sizes);

/// An uninitialised contiguous tensor.
Tensor empty(Shape sizes, DType dtype = DType::f32, Device device = cpu());
/// A tensor of zeros.
Tensor zeros(Shape sizes, DType dtype = DType::f32, Device device = cpu());
/// A tensor of ones.
Tensor ones(Shape sizes, DType dtype = DType::f32, Device device = cpu());
/// A tensor filled with `value` converted to dtype.
Tensor full(Shape sizes, double value, DType dtype = DType::f32, Device device = cpu());
/// 0, 1, ..., end-1 as a 1-d tensor.
Tensor arange(int64_t end, DType dtype = DType::i64);
/// start, start+step, ... < end (ceil((end-start)/step) elements; step != 0).
Tensor arange(double start, double end, double step, DType dtype = DType::f32);
/// Uniform numbers in [0, 1); element i depends only on (seed, i). Floating dtypes only.
/// Without a seed, the seed is default_generator()'s next draw (ein/random.h), so consecutive
/// calls give fresh numbers, as torch.rand does.
Tensor rand(Shape sizes, DType dtype = DType::f32, Device device = cpu(),
            std::optional<uint64_t> seed = std::nullopt);
/// Standard normal numbers; element i depends only on (seed, i). Floating dtypes only. The
/// seed as rand()'s.
Tensor randn(Shape sizes, DType dtype = DType::f32, Device device = cpu(),
             std::optional<uint64_t> seed = std::nullopt);

/// A tensor of `sizes` holding a copy of `values` (row-major); dtype from T.
template <Element T>
Tensor from_data(std::span<const T> values, Shape sizes, Device device = cpu());
/// The same from a vector (std::vector<bool> included).
template <Element T>
Tensor from_data(const std::vector<T>& values, Shape sizes, Device device = cpu());
/// The same from a braced list: from_data<float>({1, 2, 3, 4}, {2, 2}).
template <Element T>
Tensor from_data(std::initializer_list<T> values, Shape sizes, Device device = cpu());

/// PyTorch-like text: small tensors in full, large ones (over 1000 elements) with the first and
/// last 3 entries of each long dimension; floats to `precision` significant digits (whole
/// numbers as "3.").
std::string to_string(const Tensor& tensor, int precision = 4);
/// Writes to_string(tensor).
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

// ---- template definitions ----

template <Element T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  const Tensor c = contiguous_cpu(kDTypeOf<T>);
  const auto n = static_cast<size_t>(c.numel());
  std::vector<T> out(n);
  if constexpr (std::is_same_v<T, bool>) {
    const auto* p = static_cast<const bool*>(c.data_ptr());
    for (size_t i = 0; i < n; ++i)
      out[i] = p[i];
  } else if (n > 0) {
    std::memcpy(out.data(), c.data_ptr(), n * sizeof(T));
  }
  return out;
}

/// Copies `src` into `dst`, two views of one device other than the CPU (any strides, shapes
/// equal, dtypes may differ); runs that device's copy kernel.
using DeviceCopyFn = void (*)(const Tensor& dst, const Tensor& src);
/// Installs the strided copy of a device kind. The runtime has no kernels of its own on a GPU:
/// the compiler library installs one (exec/cuda_executor.h) that emits it from Kernel IR.
/// Without it, copy_() into a strided view on that device is an error saying so.
void set_device_copy(DeviceKind kind, DeviceCopyFn copy);

/// Sets every element of `dst`, a writable view on a device other than the CPU, to `value`
/// converted to its dtype; runs that device's fill kernel with the value as its argument.
using DeviceFillFn = void (*)(const Tensor& dst, double value);
/// Installs the fill of a device kind (exec/cuda_executor.h, as the copy). Without it, fill_()
/// there copies the value over as one element and broadcasts it with the copy kernel.
void set_device_fill(DeviceKind kind, DeviceFillFn fill);

namespace detail {
/// Throws unless `count` values fill a tensor of `sizes`.
void check_data_count(int64_t count, const Shape& sizes);
}  // namespace detail

template <Element T>
Tensor from_data(std::span<const T> values, Shape sizes, Device device) {
  detail::check_data_count(static_cast<int64_t>(values.size()), sizes);
  Tensor host = empty(std::move(sizes), kDTypeOf<T>, cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return host.to(device);
}

template <Element T>
Tensor from_data(const std::vector<T>& values, Shape sizes, Device device) {
  if constexpr (std::is_same_v<T, bool>) {
    detail::check_data_count(static_cast<int64_t>(values.size()), sizes);
    Tensor host = empty(std::move(sizes), DType::boolean, cpu());
    bool* p = host.data<bool>();
    for (size_t i = 0; i < values.size(); ++i)
      p[i] = values[i];
    return host.to(device);
  } else {
    return from_data(std::span<const T>(values), std::move(sizes), device);
  }
}

template <Element T>
Tensor from_data(std::initializer_list<T> values, Shape sizes, Device device) {
  return from_data(std::span<const T>(values.begin(), values.size()), std::move(sizes), device);
}

}  // namespace ein
