// split_rows() and gpu_row_chunks() (split_rows.h).
#include "compiler/kernel/split_rows.h"

#include <algorithm>
#include <functional>
#include <map>

#include "compiler/kernel/prepare.h"

namespace ein {
namespace {

/// Whether node `i` reads a stage's result (an acc leaf) or an index leaf, directly or not.
std::vector<char> reads(const Kernel& k, ScalarOp leaf) {
  std::vector<char> out(k.nodes.size(), 0);
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ScalarNode& n = k.nodes[i];
    out[i] = n.op == leaf;
    for (int o : {n.a, n.b, n.c})
      if (o >= 0) out[i] = out[i] || out[o];
  }
  return out;
}

/// Row-major element strides of the parallel dims `p_shape` (an empty dim keeps step 1).
Shape row_major(const Shape& p_shape) {
  Shape s(p_shape.size(), 0);
  int64_t step = 1;
  for (size_t d = p_shape.size(); d-- > 0;) {
    s[d] = step;
    step *= std::max<int64_t>(p_shape[d], 1);
  }
  return s;
}

}  // namespace

std::optional<RowSplit> split_rows(const Kernel& k, int64_t chunks) {
  if (!k.general() || k.reduced != 1 || k.stages.empty() || k.domain.size() < 2 || chunks < 2)
    return std::nullopt;
  const int p = k.parallel_dims();
  const int64_t rows = k.domain[p];
  if (rows % chunks != 0) return std::nullopt;
  for (const ScalarNode& n : k.nodes)
    if (n.op == ScalarOp::index) return std::nullopt;
  const std::vector<char> reads_acc = reads(k, ScalarOp::acc);
  for (const KernelStage& st : k.stages)
    if (reads_acc[st.value]) return std::nullopt;
  for (const KernelStore& st : k.stores)
    if (st.total != Combine::none || (!k.row_buffer(st.buffer) && reads_acc[st.value]))
      return std::nullopt;

  const int64_t per_chunk = rows / chunks;
  const Shape p_shape(k.domain.begin(), k.domain.begin() + p);
  const Shape p_strides = row_major(p_shape);
  int64_t points = 1;
  for (int64_t d : p_shape) points *= std::max<int64_t>(d, 1);
  RowSplit out;
  out.chunks = chunks;
  out.scratch_shape = {chunks};
  out.scratch_shape.insert(out.scratch_shape.end(), p_shape.begin(), p_shape.end());

  // partial: [chunks, P..., per_chunk]; a buffer moves by rows-per-chunk rows along the chunk.
  Kernel& a = out.partial;
  a.name = k.name + "_row_chunks";
  a.origin = k.origin;
  a.compute = k.compute;
  a.params = k.params;
  a.domain = {chunks};
  a.domain.insert(a.domain.end(), p_shape.begin(), p_shape.end());
  a.domain.push_back(per_chunk);
  a.reduced = 1;
  auto partial_strides = [&](const Shape& s) {
    Shape t = {s[p] * per_chunk};
    t.insert(t.end(), s.begin(), s.begin() + p);
    t.push_back(s[p]);
    return t;
  };
  std::vector<int> to_a(k.buffers.size(), -1);
  for (int pass = 0; pass < 2; ++pass)  // inputs, then the full outputs
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      const KernelBuffer& buf = k.buffers[b];
      if (pass == 0 ? buf.output : (!buf.output || k.row_buffer(static_cast<int>(b)))) continue;
      to_a[b] = a.add_buffer(buf.dtype, partial_strides(buf.strides), buf.output);
      out.partial_buffers.push_back(static_cast<int>(b));
    }
  a.nodes = k.nodes;
  for (ScalarNode& n : a.nodes)
    if (n.op == ScalarOp::load) n.buffer = to_a[n.buffer];
  a.stages = k.stages;
  for (const KernelStore& st : k.stores)
    if (!k.row_buffer(st.buffer)) a.store(to_a[st.buffer], st.value);
  Shape scratch_strides = {points};
  scratch_strides.insert(scratch_strides.end(), p_strides.begin(), p_strides.end());
  scratch_strides.push_back(0);
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const int buffer = a.add_output(k.compute, scratch_strides);
    out.partial_buffers.push_back(-1 - static_cast<int>(s));
    a.store(buffer, a.accumulator(static_cast<int>(s)));
  }

  // combine: [P..., chunks]; the stages reduce the scratches, the row stores as before.
  Kernel& c = out.combine;
  c.name = k.name + "_combine_chunks";
  c.origin = k.origin;
  c.compute = k.compute;
  c.params = k.params;
  c.domain = p_shape;
  c.domain.push_back(chunks);
  c.reduced = 1;
  std::vector<int> scratch(k.stages.size());
  Shape over_chunks = p_strides;
  over_chunks.push_back(points);
  for (size_t s = 0; s < k.stages.size(); ++s) {
    scratch[s] = c.add_buffer(k.compute, over_chunks);
    out.combine_buffers.push_back(-1 - static_cast<int>(s));
  }
  auto combine_strides = [&](const Shape& s) {
    Shape t(s.begin(), s.begin() + p);
    t.push_back(0);
    return t;
  };
  std::vector<int> to_c(k.buffers.size(), -1);
  for (int pass = 0; pass < 2; ++pass)  // the row inputs, then the row outputs
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      const KernelBuffer& buf = k.buffers[b];
      if (buf.output != (pass == 1) || !k.row_buffer(static_cast<int>(b))) continue;
      to_c[b] = c.add_buffer(buf.dtype, combine_strides(buf.strides), buf.output);
      out.combine_buffers.push_back(static_cast<int>(b));
    }
  for (size_t s = 0; s < k.stages.size(); ++s)
    c.stages.push_back({k.stages[s].combine, c.load(scratch[s])});
  std::map<int, int> copied;
  const std::function<int(int)> copy = [&](int i) -> int {
    if (i < 0) return -1;
    if (auto it = copied.find(i); it != copied.end()) return it->second;
    ScalarNode n = k.nodes[i];
    n.a = copy(n.a);
    n.b = copy(n.b);
    n.c = copy(n.c);
    if (n.op == ScalarOp::load) n.buffer = to_c[n.buffer];
    c.nodes.push_back(n);
    return copied[i] = static_cast<int>(c.nodes.size()) - 1;
  };
  for (const KernelStore& st : k.stores)
    if (k.row_buffer(st.buffer)) c.store(to_c[st.buffer], copy(st.value));
  return out;
}

int64_t gpu_row_chunks(const Kernel& k) {
  // A thread walking fewer rows than kMinSplitRows is quick enough; chunks of fewer than
  // kMinRows rows would make the partial sums the larger part of the traffic.
  constexpr int64_t kEnoughPoints = 32768, kMaxThreads = 65536, kMinRows = 32,
                    kMinSplitRows = 256;
  if (!k.general() || k.reduced != 1 || k.stages.empty() || k.domain.size() < 2) return 1;
  const int p = k.parallel_dims();
  const int64_t rows = k.domain[p];
  int64_t points = 1;
  for (int d = 0; d < p; ++d) points *= k.domain[d];
  if (points <= 0 || points >= kEnoughPoints || rows < kMinSplitRows) return 1;
  // The column strategy's condition (emit_cuda_reduce.cpp): nothing full is contiguous along
  // the row, something is contiguous along the last parallel dim.
  std::vector<char> loaded(k.buffers.size(), 0);
  for (const ScalarNode& n : k.nodes)
    if (n.op == ScalarOp::load) loaded[n.buffer] = 1;
  bool along_row = false, along_p = false;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    if (!buf.output && !loaded[b]) continue;
    if (!k.row_buffer(static_cast<int>(b)) && buf.strides[p] == 1) along_row = true;
    if (buf.strides[p - 1] == 1) along_p = true;
  }
  if (along_row || !along_p) return 1;
  const int64_t want = std::min(rows / kMinRows, (kMaxThreads + points - 1) / points);
  for (int64_t chunks = want; chunks >= 2; --chunks)
    if (rows % chunks == 0) return chunks;
  return 1;
}

std::optional<RowSplit> split_for_gpu(const Kernel& kernel) {
  if (kernel.reduced == 0) return std::nullopt;
  const Kernel prepared = prepare_kernel(kernel);
  const int64_t chunks = gpu_row_chunks(prepared);
  return chunks > 1 ? split_rows(prepared, chunks) : std::nullopt;
}

}  // namespace ein
