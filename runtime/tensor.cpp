// Tensor's accessors, layout checks and the data-moving members (contiguous, clone, to,
// copy_, fill_, item, at). View construction lives in view_ops.cpp, factories in
// factories.cpp, text in tensor_format.cpp.
#include <ein/tensor.h>

#include <atomic>
#include <cstring>
#include <limits>

#include "runtime/copy.h"
#include "runtime/device_checks.h"

namespace ein {

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

std::string shape_str(const Shape& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

int64_t checked_numel(const Shape& sizes) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : sizes) {
    if (s < 0) throw RuntimeError("sizes must be non-negative, got " + shape_str(sizes));
    if (__builtin_mul_overflow(n, s, &n)) overflow = true;
  }
  // A zero size makes the product 0 even if a partial product overflowed.
  for (int64_t s : sizes)
    if (s == 0) return 0;
  if (overflow)
    throw OutOfMemoryError("cpu", std::numeric_limits<int64_t>::max(), memory_allocated(cpu()));
  return n;
}

namespace detail {
void check_data_count(int64_t count, const Shape& sizes) {
  const int64_t n = checked_numel(sizes);
  if (n != count)
    throw RuntimeError("from_data: " + std::to_string(count) + " values cannot fill shape " +
                       shape_str(sizes) + ", which has " + std::to_string(n) + " elements");
}
}  // namespace detail

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides,
               int64_t offset)
    : storage_(std::move(storage)),
      dtype_(dtype),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset) {
  if (!storage_) throw RuntimeError("Tensor: storage is null");
  if (sizes_.size() != strides_.size())
    throw RuntimeError("Tensor: sizes " + shape_str(sizes_) + " and strides " +
                       shape_str(strides_) + " must have the same length");
  if (offset_ < 0)
    throw RuntimeError("Tensor: offset must be >= 0, got " + std::to_string(offset_));
  const int64_t n = checked_numel(sizes_);
  int64_t last = offset_;
  for (size_t d = 0; d < sizes_.size(); ++d) {
    if (strides_[d] < 0)
      throw RuntimeError("Tensor: strides must be >= 0 (ein has no negative strides), got " +
                         shape_str(strides_));
    int64_t span = 0;
    if (n > 0 && (__builtin_mul_overflow(sizes_[d] - 1, strides_[d], &span) ||
                  __builtin_add_overflow(last, span, &last)))
      last = std::numeric_limits<int64_t>::max();
  }
  const int64_t capacity = storage_->nbytes() / static_cast<int64_t>(ein::element_size(dtype_));
  if (n > 0 && last >= capacity)
    throw RuntimeError("view out of bounds: sizes " + shape_str(sizes_) + ", strides " +
                       shape_str(strides_) + " and offset " + std::to_string(offset_) +
                       " reach element " + std::to_string(last) + ", but the storage holds " +
                       std::to_string(capacity) + " elements of " +
                       std::string(dtype_name(dtype_)));
}

int64_t Tensor::wrap_dim(int64_t d, const char* op) const {
  const int64_t n = dim();
  if (d < -n || d >= n)
    throw RuntimeError(std::string(op) + ": dimension " + std::to_string(d) +
                       " is out of range for a tensor with " + std::to_string(n) +
                       " dims (expected in [" + std::to_string(-n) + ", " + std::to_string(n - 1) +
                       "]); shape " + shape_str(sizes_));
  return d < 0 ? d + n : d;
}

int64_t Tensor::size(int64_t d) const {
  return sizes_[static_cast<size_t>(wrap_dim(d, "size"))];
}

int64_t Tensor::stride(int64_t d) const {
  return strides_[static_cast<size_t>(wrap_dim(d, "stride"))];
}

Device Tensor::device() const {
  return storage_ ? storage_->device() : cpu();
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes_)
    n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (size_t d = sizes_.size(); d-- > 0;) {
    if (sizes_[d] == 1) continue;
    if (strides_[d] != expected) return false;
    expected *= sizes_[d];
  }
  return true;
}

void Tensor::check_defined(const char* op) const {
  if (!defined()) throw RuntimeError(std::string(op) + ": the tensor is undefined (no storage)");
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  if (device().kind != DeviceKind::cpu)
    throw RuntimeError("data_ptr: the tensor is on " + device().str() +
                       "; host pointers exist for cpu tensors only (use .to(ein::cpu()))");
  return device_ptr();
}

void* Tensor::device_ptr() const {
  check_defined("device_ptr");
  if (storage_->released())
    throw RuntimeError("this tensor is a parameter held by another rank (ZeRO 3 shards the "
                       "parameters): only graph execution, which fetches it, can read it");
  auto* base = static_cast<char*>(storage_->data());
  if (base == nullptr) return nullptr;
  return base + offset_ * element_size();
}

void Tensor::check_element_type(DType expected, const char* op) const {
  check_defined(op);
  if (expected != dtype_)
    throw RuntimeError(std::string(op) + "<T>: T is " + std::string(dtype_name(expected)) +
                       " but the tensor's dtype is " + std::string(dtype_name(dtype_)));
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  check_defined("clone");
  check_no_grad("clone()");
  Tensor out = empty(sizes_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous_cpu(DType dtype) const {
  const Tensor host = to(cpu());
  if (host.dtype_ == dtype && host.is_contiguous()) return host;
  Tensor out = empty(sizes_, dtype, cpu());
  out.copy_(host);
  return out;
}

Tensor Tensor::to(Device target) const {
  check_defined("to");
  if (target == device()) return *this;
  check_no_grad("to(device)");
  const Tensor src = contiguous();
  Tensor out = empty(sizes_, dtype_, target);
  const int64_t bytes = nbytes();
  const void* from = static_cast<const char*>(src.storage_->data()) + src.offset_ * element_size();
  void* into = out.storage_->data();
  if (bytes == 0) return out;
  if (device().kind == DeviceKind::cpu)
    backend_for(target).copy_from_host(target, into, from, bytes);
  else if (target.kind == DeviceKind::cpu) {
    backend_for(device()).copy_to_host(device(), into, from, bytes);
    detail::run_device_checks(device());  // the host has waited for the device: read its checks
  } else {  // between two GPUs: through the host, the simple way until peer copies exist
    return to(cpu()).to(target);
  }
  return out;
}

Tensor Tensor::to(Device target, bool non_blocking) const {
  check_defined("to");
  const bool up = device().kind == DeviceKind::cpu && target.kind == DeviceKind::cuda;
  const bool down = device().kind == DeviceKind::cuda && target.kind == DeviceKind::cpu;
  if (!non_blocking || !(up ? is_pinned() : down)) return to(target);
  check_no_grad("to(device, non_blocking)");
  const Tensor src = contiguous();  // a pinned tensor's contiguous() may not be pinned
  if (up && !src.is_pinned()) return to(target);
  const int64_t bytes = nbytes();
  Tensor out = up ? empty(sizes_, dtype_, target)
                  : Tensor(Storage::allocate_pinned(bytes, DeviceKind::cuda), dtype_, sizes_,
                           contiguous_strides(sizes_), 0);
  if (bytes == 0) return out;
  const void* from = static_cast<const char*>(src.storage_->data()) + src.offset_ * element_size();
  if (up)
    backend_for(target).copy_from_host_async(target, out.storage_->data(), from, bytes);
  else
    backend_for(device()).copy_to_host_async(device(), out.storage_->data(), from, bytes);
  return out;
}

Tensor Tensor::pin_memory() const {
  check_defined("pin_memory");
  if (device().kind != DeviceKind::cpu)
    throw RuntimeError("pin_memory: only a cpu tensor can be pinned, this one is on " +
                       device().str());
  if (is_pinned()) return *this;
  const Tensor src = contiguous();
  Tensor out(Storage::allocate_pinned(nbytes(), DeviceKind::cuda), dtype_, sizes_,
             contiguous_strides(sizes_), 0);
  if (nbytes() > 0)
    std::memcpy(out.storage_->data(),
                static_cast<const char*>(src.storage_->data()) + src.offset_ * element_size(),
                static_cast<size_t>(nbytes()));
  return out;
}

bool Tensor::is_pinned() const {
  return storage_ && storage_->pinned();
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  if (dtype == dtype_) return *this;
  check_no_grad("to(dtype)");
  Tensor out = empty(sizes_, dtype, device());
  out.copy_(*this);
  return out;
}

namespace {

std::atomic<DeviceCopyFn> g_device_copy[2] = {nullptr, nullptr};  // per DeviceKind
std::atomic<DeviceFillFn> g_device_fill[2] = {nullptr, nullptr};

DeviceCopyFn device_copy(DeviceKind kind) {
  return g_device_copy[static_cast<int>(kind)].load(std::memory_order_acquire);
}

DeviceFillFn device_fill(DeviceKind kind) {
  return g_device_fill[static_cast<int>(kind)].load(std::memory_order_acquire);
}

// Whether the element ranges [first, last] of two views of one storage intersect.
bool may_overlap(const Tensor& a, const Tensor& b) {
  if (!a.same_storage(b) || a.numel() == 0 || b.numel() == 0) return false;
  auto extent = [](const Tensor& t) {
    int64_t last = t.offset();
    for (int64_t d = 0; d < t.dim(); ++d)
      last += (t.size(d) - 1) * t.stride(d);
    return std::pair{t.offset() * t.element_size(), (last + 1) * t.element_size()};
  };
  const auto [a0, a1] = extent(a);
  const auto [b0, b1] = extent(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

void set_device_copy(DeviceKind kind, DeviceCopyFn copy) {
  g_device_copy[static_cast<int>(kind)].store(copy, std::memory_order_release);
}

void set_device_fill(DeviceKind kind, DeviceFillFn fill) {
  g_device_fill[static_cast<int>(kind)].store(fill, std::memory_order_release);
}

void Tensor::check_writable_layout(const char* op) const {
  for (size_t d = 0; d < sizes_.size(); ++d)
    if (strides_[d] == 0 && sizes_[d] > 1)
      throw RuntimeError(std::string(op) + ": the destination has stride 0 in dim " +
                         std::to_string(d) + " (sizes " + shape_str(sizes_) + ", strides " +
                         shape_str(strides_) +
                         "), so several elements share one memory location; clone() it first");
}

void Tensor::copy_(const Tensor& src) const {
  check_defined("copy_");
  if (!src.defined()) throw RuntimeError("copy_: the source tensor is undefined");
  check_writable_layout("copy_");
  check_no_grad("copy_()");
  Tensor from;
  try {
    from = src.detach().expand(sizes_);
  } catch (const RuntimeError&) {
    throw RuntimeError("copy_: the source shape " + shape_str(src.shape()) +
                       " is not broadcastable to the destination shape " + shape_str(sizes_));
  }
  if (numel() == 0) return;
  if (device().kind != DeviceKind::cpu) {
    if (DeviceCopyFn copy = device_copy(device().kind)) {
      // Moved before it is broadcast: a scalar filling a tensor crosses as one element.
      if (from.device() != device()) from = src.detach().to(cpu()).to(device()).expand(sizes_);
      if (may_overlap(*this, from)) from = from.clone();
      copy(*this, from);
      return;
    }
  }
  if (from.device().kind != DeviceKind::cpu) from = from.to(cpu());
  if (device().kind != DeviceKind::cpu) {
    Tensor host = empty(sizes_, dtype_, cpu());
    host.copy_(from);
    const Tensor moved = host.to(device());
    if (is_contiguous()) {
      void* into = static_cast<char*>(storage_->data()) + offset_ * element_size();
      backend_for(device()).copy_on_device(device(), into, moved.storage_->data(), nbytes());
      return;
    }
    throw RuntimeError("copy_: strided copies into " + device().str() +
                       " tensors need the device's copy kernel, which this build lacks");
  }
  if (may_overlap(*this, from) &&
      !(offset_ == from.offset_ && strides_ == from.strides_ && dtype_ == from.dtype_))
    from = from.clone();
  copy_strided(sizes_, StridedBuffer{data_ptr(), dtype_, strides_},
               StridedBuffer{from.data_ptr(), from.dtype_, from.strides_});
}

void Tensor::fill_(double value) const {
  check_defined("fill_");
  check_no_grad("fill_()");
  check_writable_layout("fill_");
  if (device().kind != DeviceKind::cpu) {
    // The device's fill kernel, the value its argument (zeros() on a GPU comes here): nothing
    // crosses, nothing waits. Without one, one element crosses and the copy kernel broadcasts it.
    if (numel() == 0) return;
    if (DeviceFillFn fill = device_fill(device().kind))
      fill(*this, value);
    else
      copy_(full({}, value, dtype_, cpu()));
    return;
  }
  // The value broadcast with stride 0 everywhere: no scratch tensor, so fill_ allocates nothing.
  const Shape zero_strides(sizes_.size(), 0);
  copy_strided(sizes_, StridedBuffer{data_ptr(), dtype_, strides_},
               StridedBuffer{&value, DType::f64, zero_strides});
}

double Tensor::item() const {
  check_defined("item");
  if (numel() != 1)
    throw RuntimeError("item: the tensor must have exactly one element, but shape " +
                       shape_str(sizes_) + " has " + std::to_string(numel()));
  return at(std::vector<int64_t>(sizes_.size(), 0));
}

double Tensor::at(const std::vector<int64_t>& index) const {
  check_defined("at");
  if (static_cast<int64_t>(index.size()) != dim())
    throw RuntimeError("at: got " + std::to_string(index.size()) + " indices for a tensor with " +
                       std::to_string(dim()) + " dims (shape " + shape_str(sizes_) + ")");
  int64_t element = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    const int64_t i = index[d] < 0 ? index[d] + sizes_[d] : index[d];
    if (i < 0 || i >= sizes_[d])
      throw RuntimeError("at: index " + std::to_string(index[d]) + " is out of range for dim " +
                         std::to_string(d) + " of size " + std::to_string(sizes_[d]) + " (shape " +
                         shape_str(sizes_) + ")");
    element += i * strides_[d];
  }
  const Tensor one = detach().as_strided({}, {}, offset_ + element).to(cpu());
  return load_as_double(one.data_ptr(), dtype_);
}

}  // namespace ein
