// Kernel IR construction, canonicalisation (dim coalescing), verification and dumps.
#include "compiler/kernel_ir.h"

#include <array>
#include <stdexcept>

#include <fmt/format.h>

namespace ein {
namespace {

struct OpInfo {
  int arity;
  std::string_view spelling;
};

constexpr std::array<OpInfo, kScalarOpCount> kOpInfo = {{
#define EIN_SCALAR_OP(name, arity, spelling) {arity, spelling},
#include "compiler/scalar_ops.def"
#undef EIN_SCALAR_OP
}};

std::string_view combine_name(Combine c) {
  switch (c) {
    case Combine::none: return "none";
    case Combine::sum: return "sum";
    case Combine::prod: return "prod";
    case Combine::max: return "max";
    case Combine::min: return "min";
  }
  return "?";
}

}  // namespace

int scalar_op_arity(ScalarOp op) { return kOpInfo[static_cast<int>(op)].arity; }
std::string_view scalar_op_spelling(ScalarOp op) { return kOpInfo[static_cast<int>(op)].spelling; }

int Kernel::add_buffer(DType dtype, Shape strides, bool is_output) {
  buffers.push_back({dtype, std::move(strides), is_output});
  return static_cast<int>(buffers.size()) - 1;
}

int Kernel::load(int buffer) {
  ScalarNode n;
  n.op = ScalarOp::load;
  n.buffer = buffer;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}

int Kernel::constant(double v) {
  ScalarNode n;
  n.op = ScalarOp::constant;
  n.value = v;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}

int Kernel::accumulator() {
  ScalarNode n;
  n.op = ScalarOp::acc;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}

int Kernel::apply(ScalarOp op, int a, int b, int c) {
  ScalarNode n;
  n.op = op;
  n.a = a;
  n.b = b;
  n.c = c;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}

Kernel coalesce(Kernel k) {
  // 1. Drop size-1 dims (they contribute nothing to any offset).
  // 2. Walk from the innermost dim outwards, merging dim d into d+1 when both are of the same
  //    kind (parallel or reduced) and every buffer has stride_d == stride_{d+1} * size_{d+1}.
  const int rank = static_cast<int>(k.domain.size());
  bool any_zero = false;
  for (int64_t s : k.domain) any_zero = any_zero || s == 0;
  if (any_zero) return k;  // nothing runs; keep the shape for the record

  struct Dim {
    int64_t size;
    bool reduced;
    std::vector<int64_t> strides;
  };
  std::vector<Dim> dims;
  for (int d = 0; d < rank; ++d) {
    if (k.domain[d] == 1) continue;
    Dim dim{k.domain[d], d >= rank - k.reduced, {}};
    for (const KernelBuffer& b : k.buffers) dim.strides.push_back(b.strides[d]);
    dims.push_back(std::move(dim));
  }
  std::vector<Dim> merged;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (!merged.empty()) {
      Dim& inner = merged.back();
      bool ok = inner.reduced == it->reduced;
      for (size_t b = 0; ok && b < inner.strides.size(); ++b)
        ok = it->strides[b] == inner.strides[b] * inner.size;
      if (ok) {
        inner.size *= it->size;
        continue;
      }
    }
    merged.push_back(*it);
  }
  k.domain.clear();
  k.reduced = 0;
  for (KernelBuffer& b : k.buffers) b.strides.clear();
  for (auto it = merged.rbegin(); it != merged.rend(); ++it) {
    k.domain.push_back(it->size);
    k.reduced += it->reduced ? 1 : 0;
    for (size_t b = 0; b < k.buffers.size(); ++b) k.buffers[b].strides.push_back(it->strides[b]);
  }
  if (k.reduced == 0 && k.combine != Combine::none) {  // every reduced dim had size 1: keep one
    k.domain.push_back(1);
    k.reduced = 1;
    for (KernelBuffer& b : k.buffers) b.strides.push_back(0);
  }
  return k;
}

void verify(const Kernel& k) {
  auto fail = [&](const std::string& what) {
    throw std::logic_error("internal error: invalid kernel '" + k.name + "': " + what + "\n" +
                           dump(k));
  };
  if (k.buffers.empty() || !k.buffers.back().output) fail("the last buffer must be the output");
  if (k.reduced < 0 || k.reduced > static_cast<int>(k.domain.size())) fail("bad reduced count");
  if ((k.reduced > 0) != (k.combine != Combine::none)) fail("reduced dims need a combine");
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    if (buf.strides.size() != k.domain.size()) fail(fmt::format("buffer {} has wrong rank", b));
    if (buf.output != (b + 1 == k.buffers.size())) fail("only the last buffer is an output");
    for (int d = k.parallel_dims(); buf.output && d < static_cast<int>(k.domain.size()); ++d)
      if (buf.strides[d] != 0) fail("the output moves along a reduced dim");
  }
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ScalarNode& n = k.nodes[i];
    const int arity = scalar_op_arity(n.op);
    const int operands[3] = {n.a, n.b, n.c};
    for (int j = 0; j < 3; ++j) {
      const bool used = j < arity;
      if (used && (operands[j] < 0 || operands[j] >= static_cast<int>(i)))
        fail(fmt::format("node {} reads a node that is not before it", i));
      if (!used && operands[j] != -1) fail(fmt::format("node {} has too many operands", i));
    }
    if (n.op == ScalarOp::load &&
        (n.buffer < 0 || n.buffer + 1 >= static_cast<int>(k.buffers.size())))
      fail(fmt::format("node {} loads a buffer that is not an input", i));
    if (n.op == ScalarOp::acc && k.combine == Combine::none)
      fail("acc in a kernel without a reduction");
  }
  const int count = static_cast<int>(k.nodes.size());
  if (k.body < 0 || k.body >= count || k.result < 0 || k.result >= count) fail("bad body/result");
}

std::string dump(const Kernel& k) {
  std::string out = fmt::format("kernel {} domain=[{}] reduced={} combine={} compute={}\n", k.name,
                                fmt::join(k.domain, ","), k.reduced, combine_name(k.combine),
                                dtype_name(k.compute));
  for (size_t b = 0; b < k.buffers.size(); ++b)
    out += fmt::format("  buf{} {} {} strides=[{}]\n", b, k.buffers[b].output ? "out" : "in",
                       dtype_name(k.buffers[b].dtype), fmt::join(k.buffers[b].strides, ","));
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ScalarNode& n = k.nodes[i];
    out += fmt::format("  %{} = {}", i, scalar_op_spelling(n.op));
    if (n.op == ScalarOp::load) out += fmt::format(" buf{}", n.buffer);
    if (n.op == ScalarOp::constant) out += fmt::format(" {:a}", n.value);
    for (int operand : {n.a, n.b, n.c})
      if (operand >= 0) out += fmt::format(" %{}", operand);
    out += '\n';
  }
  out += fmt::format("  body %{} result %{}\n", k.body, k.result);
  return out;
}

}  // namespace ein
