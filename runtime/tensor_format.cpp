// Text form of a tensor, close to PyTorch's repr: nested brackets, small tensors in full,
// dimensions longer than 6 elided to their first and last 3 entries when the tensor has more
// than 1000 elements. It reads values through at(); it is for humans, not for speed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include <ein/tensor.h>

namespace ein {
namespace {

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype, int precision) {
  if (dtype == DType::boolean) return v != 0 ? "True" : "False";
  char buf[32];
  if (!kFloatDTypes.contains(dtype)) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else if (v == std::trunc(v) && std::fabs(v) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.0f.", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  }
  return buf;
}

void format_dim(const Tensor& t, std::vector<int64_t>& index, size_t d, bool summarise,
                int precision, std::string& out) {
  if (d == index.size()) {
    out += format_value(t.at(index), t.dtype(), precision);
    return;
  }
  const int64_t n = t.shape()[d];
  const std::string indent(d + 8, ' ');  // aligns under the bracket after "tensor(["
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += d + 1 == index.size() ? "..., " : "...,\n" + indent;
      i = n - kEdgeItems;
    }
    index[d] = i;
    format_dim(t, index, d + 1, summarise, precision, out);
    if (i + 1 < n) out += d + 1 == index.size() ? ", " : ",\n" + indent;
  }
  out += ']';
}

}  // namespace

std::string to_string(const Tensor& tensor, int precision) {
  if (!tensor.defined()) return "tensor(undefined)";
  std::string out = "tensor(";
  std::vector<int64_t> index(static_cast<size_t>(tensor.dim()), 0);
  format_dim(tensor, index, 0, tensor.numel() > kSummariseAbove, std::clamp(precision, 1, 17), out);
  out +=
      ", shape=" + shape_str(tensor.shape()) + ", dtype=" + std::string(dtype_name(tensor.dtype()));
  if (tensor.device() != cpu()) out += ", device=" + tensor.device().str();
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  return os << to_string(tensor);
}

}  // namespace ein
