// A fused node on tensors. Steps:
//   1. per read: stride along domain dim d = Σ_t stride_t · matrix[t][d], base offset
//      Σ_t stride_t · offset[t] (elements), so views folded by fuse() cost nothing here;
//   2. per output: a fresh contiguous tensor (or the caller's, where writing it in place is
//      safe); its dim j moves along domain dim dims[j]; a placed output (a concat folded into
//      the stores) writes its slot of a tensor by its own strides, and the outputs placed into
//      another's tensor return no tensor;
//   3. a reduction over zero elements runs over one point of the combine's identity instead
//      (sum 0, prod 1, mean 0·(1/0) = NaN, as torch), since the executor skips empty domains.
// Steps 1 and the executor's code key and prepared launch are done once per layout of the
// inputs (BoundFused, per thread): a training step's repeated launches only look them up.
#include "exec/run_fused.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/run_kernel.h"

namespace ein {
namespace {

/// `k` with its empty reduced dims replaced by one point whose stage values are identities;
/// stores into the (empty) outputs that span the row are dropped.
Kernel over_identity(Kernel k, const std::vector<Tensor>& buffers) {
  for (size_t d = k.domain.size() - k.reduced; d < k.domain.size(); ++d)
    k.domain[d] = 1;
  if (k.general()) {
    for (KernelStage& s : k.stages)
      s.value = k.constant(combine_identity(s.combine));
    std::erase_if(k.stores, [&](const KernelStore& s) { return buffers[s.buffer].numel() == 0; });
  } else {
    k.body = k.constant(combine_identity(k.combine));
  }
  return k;
}

/// The bytes [first, last) of its storage a view spans; empty for no elements. A negative
/// stride spans everything (such a view is never written into).
std::pair<int64_t, int64_t> span_of(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t extent = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) return {0, INT64_MAX};
    extent += (t.size(d) - 1) * t.stride(d);
  }
  return {t.offset() * t.element_size(), (t.offset() + extent) * t.element_size()};
}

/// Whether two views share bytes (distinct storages never do).
bool overlap(const Tensor& a, const Tensor& b) {
  if (!a.same_storage(b)) return false;
  const auto [a0, a1] = span_of(a);
  const auto [b0, b1] = span_of(b);
  return a0 < b1 && b0 < a1;
}

/// Whether output `j` of `k` (buffer `out`) may be written into `dest` (run_fused.h's rule);
/// `buffers` holds the bound reads, then the outputs chosen so far.
bool writable_into(const Tensor& dest, const FusedOutput& o, Device device, const Kernel& k,
                   size_t reads, int out, const std::vector<Tensor>& buffers) {
  if (dest.shape() != o.shape || dest.dtype() != o.dtype || dest.device() != device ||
      !dest.is_contiguous())
    return false;
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (!overlap(dest, buffers[b])) continue;
    if (b >= reads) return false;  // another output
    if (k.reduced != 0 || buffers[b].offset() != dest.offset() ||
        buffers[b].dtype() != dest.dtype() ||
        k.buffers[b].strides != k.buffers[static_cast<size_t>(out)].strides)
      return false;
  }
  return true;
}

/// bind_fused's result for one layout of a fused node's inputs on one device, with the
/// executors' memo of the bound kernel (run_kernel.h's KernelMemo): a repeated launch with
/// inputs laid out as before binds nothing and keys nothing.
struct BoundFused {
  std::shared_ptr<const Kernel> kernel;  ///< FusedAttr::kernel, held: its address stays unique
  std::vector<FusedRead> reads;          ///< the node's, compared on a hit with the kernel
  std::vector<FusedOutput> outputs;
  Device device;
  std::vector<Shape> shapes, strides;  ///< the inputs'
  Kernel bound;
  std::vector<int64_t> offsets;
  KernelMemo memo;
};

bool same_reads(const std::vector<FusedRead>& a, const std::vector<FusedRead>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.input == y.input && x.matrix == y.matrix && x.offset == y.offset;
  });
}

bool same_outputs(const std::vector<FusedOutput>& a, const std::vector<FusedOutput>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.shape == y.shape && x.dtype == y.dtype && x.dims == y.dims && x.strides == y.strides &&
           x.offset == y.offset && x.into == y.into;
  });
}

bool matches(const BoundFused& b, const FusedAttr& f, const std::vector<Tensor>& inputs,
             Device device) {
  if (b.kernel != f.kernel || b.device != device || b.shapes.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (b.shapes[i] != inputs[i].shape() || b.strides[i] != inputs[i].strides()) return false;
  return same_reads(b.reads, f.reads) && same_outputs(b.outputs, f.outputs);
}

/// The bound kernel for `f` with these inputs on `device`, bound on the thread's first launch
/// of that layout (at most 1,024 kept per thread, each holding its kernel: the memo empties
/// when full, as layouts vary).
std::shared_ptr<BoundFused> bound_for(const FusedAttr& f, const std::vector<Tensor>& inputs,
                                      Device device) {
  thread_local std::unordered_map<uint64_t, std::vector<std::shared_ptr<BoundFused>>> memo;
  thread_local size_t size = 0;
  uint64_t h = reinterpret_cast<uintptr_t>(f.kernel.get());
  const auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL ^ (h >> 31); };
  mix(static_cast<uint64_t>(device.kind) << 32 | static_cast<uint32_t>(device.index));
  for (const Tensor& x : inputs) {
    mix(static_cast<uint64_t>(x.dim()));
    for (int64_t d = 0; d < x.dim(); ++d) {
      mix(static_cast<uint64_t>(x.size(d)));
      mix(static_cast<uint64_t>(x.stride(d)));
    }
  }
  if (auto it = memo.find(h); it != memo.end())
    for (const std::shared_ptr<BoundFused>& b : it->second)
      if (matches(*b, f, inputs, device)) return b;
  auto b = std::make_shared<BoundFused>();
  b->kernel = f.kernel;
  b->reads = f.reads;
  b->outputs = f.outputs;
  b->device = device;
  for (const Tensor& x : inputs) {
    b->shapes.push_back(x.shape());
    b->strides.push_back(x.strides());
  }
  b->bound = bind_fused(f, b->shapes, b->strides, &b->offsets);
  if (size >= 1024) {
    memo.clear();
    size = 0;
  }
  memo[h].push_back(b);
  ++size;
  return b;
}

}  // namespace

Kernel bind_fused(const FusedAttr& f, const std::vector<Shape>& shapes,
                  const std::vector<Shape>& strides, std::vector<int64_t>* offsets) {
  Kernel k = *f.kernel;
  const size_t rank = k.domain.size();
  size_t b = 0;
  for (const FusedRead& r : f.reads) {
    const Shape& size = shapes[r.input];
    Shape s(rank, 0);
    int64_t base = 0;
    for (size_t t = 0; t < size.size(); ++t) {
      if (size[t] == 1) continue;  // index 0 whatever the map says
      for (size_t d = 0; d < rank; ++d)
        s[d] += strides[r.input][t] * r.matrix[t][d];
      base += strides[r.input][t] * r.offset[t];
    }
    k.buffers[b++].strides = std::move(s);
    if (offsets) offsets->push_back(base);
  }
  for (const FusedOutput& o : f.outputs) {
    if (o.placed()) {
      k.buffers[b++].strides = o.strides;
      continue;
    }
    const Shape contiguous = contiguous_strides(o.shape);
    Shape s(rank, 0);
    for (size_t j = 0; j < o.dims.size(); ++j)
      if (o.dims[j] >= 0) s[o.dims[j]] += contiguous[j];
    k.buffers[b++].strides = std::move(s);
  }
  return k;
}

std::vector<Tensor> run_fused(const FusedAttr& f, const std::vector<Tensor>& given,
                              Device where, const std::vector<Tensor>* into) {
  const Device device = given.empty() ? where : given.front().device();
  // CPU kernels do not read fp8; CUDA kernels do (emit_cuda.h).
  std::vector<Tensor> converted;
  if (device == cpu())
    for (size_t i = 0; i < given.size(); ++i)
      if (is_fp8(given[i].dtype())) {
        if (converted.empty()) converted = given;
        converted[i] = given[i].to(DType::f32);
      }
  const std::vector<Tensor>& inputs = converted.empty() ? given : converted;
  const std::shared_ptr<BoundFused> b = bound_for(f, inputs, device);
  const Kernel& k = b->bound;
  std::vector<Tensor> buffers, outputs;
  buffers.reserve(k.buffers.size());
  outputs.reserve(f.outputs.size());
  for (size_t r = 0; r < f.reads.size(); ++r) {
    const Tensor& x = inputs[f.reads[r].input];
    buffers.push_back(x.as_strided(k.domain, k.buffers[r].strides, x.offset() + b->offsets[r]));
  }
  for (size_t j = 0; j < f.outputs.size(); ++j) {
    const FusedOutput& o = f.outputs[j];
    if (o.placed()) {  // a slot of a tensor shared with other stores: no in-place writes
      const Tensor whole = o.into >= 0 ? outputs[static_cast<size_t>(o.into)]
                                       : empty(o.shape, o.dtype, device);
      outputs.push_back(o.into >= 0 ? Tensor() : whole);
      buffers.push_back(whole.as_strided(k.domain, o.strides, whole.offset() + o.offset));
      continue;
    }
    const int out = static_cast<int>(f.reads.size() + j);
    const bool in_place = into && j < into->size() && (*into)[j].defined() &&
                          writable_into((*into)[j], o, device, k, f.reads.size(), out, buffers);
    outputs.push_back(in_place ? (*into)[j] : empty(o.shape, o.dtype, device));
    buffers.push_back(outputs.back());
  }
  bool empty_row = false, empty_out = false;
  const size_t rank = k.domain.size();
  for (size_t d = 0; d < rank; ++d) {
    const bool reduced = d >= rank - k.reduced;
    if (k.domain[d] == 0) (reduced ? empty_row : empty_out) = true;
  }
  bool any_output = false;
  for (const Tensor& o : outputs)
    any_output = any_output || (o.defined() && o.numel() > 0);
  if (empty_out || !any_output) return outputs;
  if (empty_row)
    run_kernel(over_identity(k, buffers), buffers);
  else
    run_kernel(k, buffers, b->memo);
  return outputs;
}

}  // namespace ein
