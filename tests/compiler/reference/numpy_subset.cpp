// numpy's semantics for the functions in numpy_subset.h, as plain loops over indices.
#include "compiler/reference/numpy_subset.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace ein::testing::np {
namespace {

using reference::next_index;

int64_t normalize_axis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) throw std::runtime_error("numpy subset: axis out of range");
  return axis < 0 ? axis + r : axis;
}

// Calls f(index) for every index of `shape` in row-major order.
template <typename F>
void for_each(const Shape& shape, F&& f) {
  if (reference::numel(shape) == 0) return;
  std::vector<int64_t> index(shape.size(), 0);
  do {
    f(index);
  } while (next_index(index, shape));
}

}  // namespace

Array reduce(const Array& x, const std::string& op, std::vector<int64_t> axes, bool keepdims) {
  if (axes.empty())
    for (size_t d = 0; d < x.shape.size(); ++d)
      axes.push_back(static_cast<int64_t>(d));
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t a : axes)
    reduced[normalize_axis(a, x.shape.size())] = true;
  Shape kept;  // the result with reduced axes as 1, then squeezed unless keepdims
  for (size_t d = 0; d < x.shape.size(); ++d)
    kept.push_back(reduced[d] ? 1 : x.shape[d]);
  std::vector<std::vector<double>> buckets(static_cast<size_t>(reference::numel(kept)));
  const Array kept_array = Array::filled(kept, 0);
  for_each(x.shape, [&](std::vector<int64_t> index) {
    const double v = x.at(index);
    for (size_t d = 0; d < index.size(); ++d)
      if (reduced[d]) index[d] = 0;
    buckets[kept_array.offset(index)].push_back(v);
  });
  Array out = kept_array;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto& b = buckets[i];
    double r = 0;
    if (op == "sum" || op == "mean") {
      for (double v : b)
        r += v;
      if (op == "mean") r /= static_cast<double>(b.size());
    } else if (op == "prod") {
      r = 1;
      for (double v : b)
        r *= v;
    } else if (op == "min") {
      r = *std::min_element(b.begin(), b.end());
    } else if (op == "max") {
      r = *std::max_element(b.begin(), b.end());
    } else if (op == "any") {
      r = std::any_of(b.begin(), b.end(), [](double v) { return v != 0; });
    } else if (op == "all") {
      r = std::all_of(b.begin(), b.end(), [](double v) { return v != 0; });
    } else {
      throw std::runtime_error("numpy subset: no reduction " + op);
    }
    out.data[i] = r;
  }
  if (keepdims) return out;
  Shape squeezed;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (!reduced[d]) squeezed.push_back(x.shape[d]);
  return Array(squeezed, out.data);
}

Array transpose(const Array& x, std::vector<int64_t> perm) {
  if (perm.size() != x.shape.size()) throw std::runtime_error("numpy subset: bad permutation");
  Shape shape;
  for (int64_t& p : perm) {
    p = normalize_axis(p, x.shape.size());
    shape.push_back(x.shape[p]);
  }
  Array out = Array::filled(shape, 0);
  for_each(shape, [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> in(index.size());
    for (size_t d = 0; d < index.size(); ++d)
      in[perm[d]] = index[d];  // output dim d is input dim perm[d]
    out.at(index) = x.at(in);
  });
  return out;
}

Array reshape(const Array& x, std::vector<int64_t> shape) {
  int64_t known = 1;
  int64_t* unknown = nullptr;
  for (int64_t& s : shape) {
    if (s == -1)
      unknown = &s;
    else
      known *= s;
  }
  if (unknown) *unknown = known == 0 ? 0 : x.numel() / known;
  return Array(shape, x.data);  // throws when the sizes do not match
}

Array repeat(const Array& x, int64_t n, int64_t axis) {
  const int64_t a = normalize_axis(axis, x.shape.size());
  Shape shape = x.shape;
  shape[a] *= n;
  Array out = Array::filled(shape, 0);
  for_each(shape, [&](std::vector<int64_t> index) {
    std::vector<int64_t> in = index;
    in[a] = index[a] / n;
    out.at(index) = x.at(in);
  });
  return out;
}

Array tile(const Array& x, const std::vector<int64_t>& reps) {
  if (reps.size() != x.shape.size()) throw std::runtime_error("numpy subset: tile rank");
  Shape shape = x.shape;
  for (size_t d = 0; d < shape.size(); ++d)
    shape[d] *= reps[d];
  Array out = Array::filled(shape, 0);
  for_each(shape, [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> in(index.size());
    for (size_t d = 0; d < index.size(); ++d)
      in[d] = index[d] % x.shape[d];
    out.at(index) = x.at(in);
  });
  return out;
}

Array broadcast_to(const Array& x, const Shape& shape) {
  const size_t lead = shape.size() - x.shape.size();
  Array out = Array::filled(shape, 0);
  for_each(shape, [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> in(x.shape.size());
    for (size_t d = 0; d < in.size(); ++d) {
      if (x.shape[d] != 1 && x.shape[d] != shape[lead + d])
        throw std::runtime_error("numpy subset: cannot broadcast");
      in[d] = x.shape[d] == 1 ? 0 : index[lead + d];
    }
    out.at(index) = x.at(in);
  });
  return out;
}

Array stack(const std::vector<Array>& xs, int64_t axis) {
  const int64_t a = normalize_axis(axis, xs.at(0).shape.size() + 1);
  Shape shape = xs[0].shape;
  shape.insert(shape.begin() + a, static_cast<int64_t>(xs.size()));
  Array out = Array::filled(shape, 0);
  for_each(shape, [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> in = index;
    in.erase(in.begin() + a);
    out.at(index) = xs[index[a]].at(in);
  });
  return out;
}

Array concatenate(const std::vector<Array>& xs, int64_t axis) {
  const int64_t a = normalize_axis(axis, xs.at(0).shape.size());
  Shape shape = xs[0].shape;
  shape[a] = 0;
  for (const Array& x : xs)
    shape[a] += x.shape[a];
  Array out = Array::filled(shape, 0);
  for_each(shape, [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> in = index;
    size_t k = 0;  // which input holds position index[a]
    while (in[a] >= xs[k].shape[a])
      in[a] -= xs[k++].shape[a];
    out.at(index) = xs[k].at(in);
  });
  return out;
}

Array einsum(const std::string& spec, const std::vector<Array>& operands) {
  // 1. Labels per operand dim; '...' becomes labels '0', '1', ... counted from the right
  //    end of the ellipsis (right-aligned, numpy's broadcasting).
  const size_t arrow = spec.find("->");
  if (arrow == std::string::npos) throw std::runtime_error("numpy subset: einsum needs '->'");
  std::vector<std::string> inputs{""};
  for (char c : spec.substr(0, arrow)) {
    if (c == ',')
      inputs.emplace_back();
    else if (c != ' ')
      inputs.back() += c;
  }
  if (inputs.size() != operands.size()) throw std::runtime_error("numpy subset: operand count");
  size_t ellipsis_rank = 0;
  std::vector<std::string> labels;  // one char per dim of each operand
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string in = inputs[i];
    const size_t dots = in.find("...");
    std::string expanded = in;
    if (dots != std::string::npos) {
      const size_t k = operands[i].shape.size() - (in.size() - 3);
      ellipsis_rank = std::max(ellipsis_rank, k);
      std::string ell;
      for (size_t j = k; j-- > 0;)
        ell += static_cast<char>('0' + j);
      expanded = in.substr(0, dots) + ell + in.substr(dots + 3);
    }
    labels.push_back(expanded);
  }
  std::string out_labels = spec.substr(arrow + 2);
  std::erase(out_labels, ' ');
  if (const size_t dots = out_labels.find("..."); dots != std::string::npos) {
    std::string ell;
    for (size_t j = ellipsis_rank; j-- > 0;)
      ell += static_cast<char>('0' + j);
    out_labels = out_labels.substr(0, dots) + ell + out_labels.substr(dots + 3);
  }
  // 2. Each label's size: the largest over its dims (size-1 dims broadcast).
  std::map<char, int64_t> size;
  for (size_t i = 0; i < labels.size(); ++i)
    for (size_t d = 0; d < labels[i].size(); ++d)
      size[labels[i][d]] = std::max(size[labels[i][d]], operands[i].shape[d]);
  std::string summed;
  for (const auto& [label, n] : size)
    if (out_labels.find(label) == std::string::npos) summed += label;
  // 3. out[o] = sum over summed labels of the product of the operands' elements.
  const std::string all = out_labels + summed;
  Shape all_shape;
  for (char c : all)
    all_shape.push_back(size[c]);
  Shape out_shape(all_shape.begin(), all_shape.begin() + static_cast<int64_t>(out_labels.size()));
  Array out = Array::filled(out_shape, 0);
  for_each(all_shape, [&](const std::vector<int64_t>& index) {
    double product = 1;
    for (size_t i = 0; i < operands.size(); ++i) {
      std::vector<int64_t> at;
      for (size_t d = 0; d < labels[i].size(); ++d)
        at.push_back(operands[i].shape[d] == 1 ? 0 : index[all.find(labels[i][d])]);
      product *= operands[i].at(at);
    }
    out.at(std::vector<int64_t>(
        index.begin(), index.begin() + static_cast<int64_t>(out_labels.size()))) += product;
  });
  return out;
}

}  // namespace ein::testing::np
