// A fused node on tensors. Steps:
//   1. per read: stride along domain dim d = Σ_t stride_t · matrix[t][d], base offset
//      Σ_t stride_t · offset[t] (elements), so views folded by fuse() cost nothing here;
//   2. per output: a fresh contiguous tensor (or the caller's, where writing it in place is
//      safe); its dim j moves along domain dim dims[j]; a placed output (a concat folded into
//      the stores) writes its slot of a tensor by its own strides, and the outputs placed into
//      another's tensor return no tensor;
//   3. a reduction over zero elements runs over one point of the combine's identity instead
//      (sum 0, prod 1, mean 0·(1/0) = NaN, as torch), since the executor skips empty domains.
#include "exec/run_fused.h"

#include <climits>
#include <cstdint>
#include <limits>
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
  std::vector<Tensor> inputs = given;
  const Device device = inputs.empty() ? where : inputs.front().device();
  std::vector<Shape> shapes, strides;
  for (Tensor& x : inputs) {
    // CPU kernels do not read fp8; CUDA kernels do (emit_cuda.h).
    if (is_fp8(x.dtype()) && device == cpu()) x = x.to(DType::f32);
    shapes.push_back(x.shape());
    strides.push_back(x.strides());
  }
  std::vector<int64_t> offsets;
  Kernel k = bind_fused(f, shapes, strides, &offsets);
  std::vector<Tensor> buffers, outputs;
  for (size_t r = 0; r < f.reads.size(); ++r) {
    const Tensor& x = inputs[f.reads[r].input];
    buffers.push_back(x.as_strided(k.domain, k.buffers[r].strides, x.offset() + offsets[r]));
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
  run_kernel(empty_row ? over_identity(std::move(k), buffers) : k, buffers);
  return outputs;
}

}  // namespace ein
