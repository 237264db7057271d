// Kernel IR construction, the shorthand → general form rewrite, canonicalisation (dim
// coalescing), verification and dumps. The float64 semantics live in kernel_eval.cpp.
#include "compiler/kernel/kernel_ir.h"

#include "compiler/kernel/scalar_math.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace ein {
namespace {

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}


struct OpInfo {
  int arity;
  std::string_view spelling;
};

constexpr std::array<OpInfo, kScalarOpCount> kOpInfo = {{
#define EIN_SCALAR_OP(name, arity, spelling) {arity, spelling},
#include "compiler/kernel/scalar_ops.def"
#undef EIN_SCALAR_OP
}};

std::string_view combine_name(Combine c) {
  switch (c) {
    case Combine::none:
      return "none";
    case Combine::sum:
      return "sum";
    case Combine::prod:
      return "prod";
    case Combine::max:
      return "max";
    case Combine::min:
      return "min";
  }
  return "?";
}

int push(Kernel& k, const ScalarNode& n) {
  k.nodes.push_back(n);
  return static_cast<int>(k.nodes.size()) - 1;
}

}  // namespace

bool keeps_integers(ScalarOp op) {
  switch (op) {
    case ScalarOp::neg: case ScalarOp::abs: case ScalarOp::square: case ScalarOp::sign:
    case ScalarOp::floor: case ScalarOp::ceil: case ScalarOp::round: case ScalarOp::trunc:
    case ScalarOp::add: case ScalarOp::sub: case ScalarOp::mul: case ScalarOp::maximum:
    case ScalarOp::minimum: case ScalarOp::eq: case ScalarOp::ne: case ScalarOp::lt:
    case ScalarOp::le: case ScalarOp::gt: case ScalarOp::ge: case ScalarOp::where:
      return true;
    default:
      return false;
  }
}

int scalar_op_arity(ScalarOp op) {
  return kOpInfo[static_cast<int>(op)].arity;
}
std::string_view scalar_op_spelling(ScalarOp op) {
  return kOpInfo[static_cast<int>(op)].spelling;
}

double combine_identity(Combine c) {
  switch (c) {
    case Combine::prod:
      return 1;
    case Combine::max:
      return -std::numeric_limits<double>::infinity();
    case Combine::min:
      return std::numeric_limits<double>::infinity();
    default:
      return 0;
  }
}

double combine_values(Combine c, double a, double b) {
  switch (c) {
    case Combine::sum:
      return a + b;
    case Combine::prod:
      return a * b;
    case Combine::max:  // IEEE 754-2019 maximum and minimum: NaN propagates, -0 < +0
      return apply_scalar_op(ScalarOp::maximum, a, b);
    case Combine::min:
      return apply_scalar_op(ScalarOp::minimum, a, b);
    case Combine::none:
      break;
  }
  throw std::logic_error("internal error: combine_values: combine none");
}

int Kernel::add_buffer(DType dtype, Shape strides, bool is_output) {
  buffers.push_back({dtype, std::move(strides), is_output});
  return static_cast<int>(buffers.size()) - 1;
}

int Kernel::load(int buffer) {
  ScalarNode n;
  n.op = ScalarOp::load;
  n.buffer = buffer;
  return push(*this, n);
}

int Kernel::constant(double v) {
  ScalarNode n;
  n.op = ScalarOp::constant;
  n.value = v;
  return push(*this, n);
}

int Kernel::accumulator(int stage) {
  ScalarNode n;
  n.op = ScalarOp::acc;
  n.stage = stage;
  return push(*this, n);
}

int Kernel::index(int dim) {
  ScalarNode n;
  n.op = ScalarOp::index;
  n.dim = dim;
  return push(*this, n);
}

int Kernel::param(double v) {
  ScalarNode n;
  n.op = ScalarOp::param;
  n.param = static_cast<int>(params.size());
  params.push_back(v);
  return push(*this, n);
}

int Kernel::apply(ScalarOp op, int a, int b, int c) {
  ScalarNode n;
  n.op = op;
  n.a = a;
  n.b = b;
  n.c = c;
  return push(*this, n);
}

int Kernel::reduce(Combine c, int value) {
  stages.push_back({c, value});
  return accumulator(static_cast<int>(stages.size()) - 1);
}

bool Kernel::row_buffer(int buffer) const {
  const Shape& s = buffers[buffer].strides;
  for (int d = parallel_dims(); d < static_cast<int>(s.size()); ++d)
    if (s[d] != 0 && domain[d] != 1) return false;
  return true;
}

Kernel to_general_form(Kernel k) {
  if (k.general()) return k;
  if (k.combine != Combine::none && k.reduced == 0) {  // a reduction over no dims: one of size 1
    k.domain.push_back(1);
    k.reduced = 1;
    for (KernelBuffer& b : k.buffers)
      b.strides.push_back(0);
  }
  if (k.combine != Combine::none) k.stages.push_back({k.combine, k.body});
  for (ScalarNode& n : k.nodes)
    if (n.op == ScalarOp::acc && n.stage < 0) n.stage = 0;
  k.stores.push_back({static_cast<int>(k.buffers.size()) - 1, k.result});
  k.combine = Combine::none;
  k.body = k.result = -1;
  return k;
}

Kernel coalesce(Kernel k) {
  // 1. Rewrite into the general form.
  // 2. Drop size-1 dims (they contribute nothing to any offset; an index leaf on one is 0).
  // 3. Walk from the innermost dim outwards, merging dim d into d+1 when both are of the same
  //    kind (parallel or reduced), neither is read by an index leaf, and every buffer has
  //    stride_d == stride_{d+1} * size_{d+1}.
  // 4. Renumber the dims of index leaves; keep one size-1 reduced dim if a kernel with stages
  //    lost all of its reduced dims.
  k = to_general_form(std::move(k));
  const int rank = static_cast<int>(k.domain.size());
  for (int64_t s : k.domain)
    if (s == 0) return k;  // nothing runs (or only row stores over an empty row); keep the shape
  std::vector<bool> indexed(rank, false);
  for (const ScalarNode& n : k.nodes)
    if (n.op == ScalarOp::index && n.dim >= 0 && n.dim < rank) indexed[n.dim] = true;

  struct Dim {
    int64_t size;
    bool reduced;
    int origin;  // the old dim, when this one is indexed (indexed dims never merge)
    std::vector<int64_t> strides;
  };
  std::vector<Dim> dims;
  for (int d = 0; d < rank; ++d) {
    if (k.domain[d] == 1) continue;
    Dim dim{k.domain[d], d >= rank - k.reduced, indexed[d] ? d : -1, {}};
    for (const KernelBuffer& b : k.buffers)
      dim.strides.push_back(b.strides[d]);
    dims.push_back(std::move(dim));
  }
  std::vector<Dim> merged;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (!merged.empty()) {
      Dim& inner = merged.back();
      bool ok = inner.reduced == it->reduced && inner.origin < 0 && it->origin < 0;
      for (size_t b = 0; ok && b < inner.strides.size(); ++b)
        ok = it->strides[b] == inner.strides[b] * inner.size;
      if (ok) {
        inner.size *= it->size;
        continue;
      }
    }
    merged.push_back(*it);
  }
  const bool had_stages = !k.stages.empty();
  std::vector<int> new_dim(rank, -1);
  k.domain.clear();
  k.reduced = 0;
  for (KernelBuffer& b : k.buffers)
    b.strides.clear();
  for (auto it = merged.rbegin(); it != merged.rend(); ++it) {
    if (it->origin >= 0) new_dim[it->origin] = static_cast<int>(k.domain.size());
    k.domain.push_back(it->size);
    k.reduced += it->reduced ? 1 : 0;
    for (size_t b = 0; b < k.buffers.size(); ++b)
      k.buffers[b].strides.push_back(it->strides[b]);
  }
  if (k.reduced == 0 && had_stages) {  // every reduced dim had size 1: keep one
    k.domain.push_back(1);
    k.reduced = 1;
    for (KernelBuffer& b : k.buffers)
      b.strides.push_back(0);
  }
  for (ScalarNode& n : k.nodes) {
    if (n.op != ScalarOp::index) continue;
    if (n.dim >= 0 && n.dim < rank && new_dim[n.dim] < 0) {  // a dropped size-1 dim
      n = ScalarNode{};
      n.op = ScalarOp::constant;
      n.value = 0;
    } else if (n.dim >= 0 && n.dim < rank) {
      n.dim = new_dim[n.dim];
    }
  }
  return k;
}

namespace {

void verify_shorthand(const Kernel& k, const std::function<void(const std::string&)>& fail) {
  if (k.buffers.empty() || !k.buffers.back().output) fail("the last buffer must be the output");
  if (k.reduced > 0 && k.combine == Combine::none) fail("reduced dims need a combine");
  for (size_t b = 0; b + 1 < k.buffers.size(); ++b)
    if (k.buffers[b].output) fail("only the last buffer is an output");
  const KernelBuffer& out = k.buffers.back();
  for (int d = k.parallel_dims(); d < static_cast<int>(out.strides.size()); ++d)
    if (out.strides[d] != 0) fail("the output moves along a reduced dim");
  const int count = static_cast<int>(k.nodes.size());
  if (k.result < 0 || k.result >= count || (k.reduced > 0 && (k.body < 0 || k.body >= count)))
    fail("bad body/result");
  for (const ScalarNode& n : k.nodes)
    if (n.op == ScalarOp::acc && (k.combine == Combine::none || n.stage > 0))
      fail("acc in a kernel without a reduction");
}

}  // namespace

void verify(const Kernel& k_in) {
  auto fail = [&](const std::string& what) {
    throw std::logic_error("internal error: invalid kernel '" + k_in.name + "': " + what + "\n" +
                           dump(k_in));
  };
  const int rank = static_cast<int>(k_in.domain.size());
  if (k_in.reduced < 0 || k_in.reduced > rank) fail("bad reduced count");
  for (size_t b = 0; b < k_in.buffers.size(); ++b)
    if (k_in.buffers[b].strides.size() != k_in.domain.size())
      fail(fmt::format("buffer {} has wrong rank", b));
  if (!k_in.general()) verify_shorthand(k_in, fail);
  const Kernel k = to_general_form(k_in);

  // Buffers: inputs first, then outputs, each output stored exactly once.
  const int nb = static_cast<int>(k.buffers.size());
  int first_output = nb;
  for (int b = 0; b < nb; ++b)
    if (k.buffers[b].output) {
      first_output = std::min(first_output, b);
    } else if (first_output < b) {
      fail(fmt::format("input buffer {} comes after an output", b));
    }
  if (first_output == nb) fail("the kernel has no output buffer");
  if (!k.stages.empty() && k.reduced == 0) fail("stages need reduced dims");
  if (k.stages.empty() && k.reduced > 0) fail("reduced dims need a stage");

  // Nodes: operand order and arity, leaves in range; per node the latest stage it reads and
  // whether it varies along the row (reads a non-row load or an index of a reduced dim).
  const int count = static_cast<int>(k.nodes.size());
  std::vector<int> last_stage(count, -1);
  std::vector<bool> varies(count, false);
  for (int i = 0; i < count; ++i) {
    const ScalarNode& n = k.nodes[i];
    const int arity = scalar_op_arity(n.op);
    const int operands[3] = {n.a, n.b, n.c};
    for (int j = 0; j < 3; ++j) {
      const bool used = j < arity;
      if (used && (operands[j] < 0 || operands[j] >= i))
        fail(fmt::format("node {} reads a node that is not before it", i));
      if (!used && operands[j] != -1) fail(fmt::format("node {} has too many operands", i));
      if (used) {
        last_stage[i] = std::max(last_stage[i], last_stage[operands[j]]);
        varies[i] = varies[i] || varies[operands[j]];
      }
    }
    switch (n.op) {
      case ScalarOp::load:
        if (n.buffer < 0 || n.buffer >= first_output)
          fail(fmt::format("node {} loads a buffer that is not an input", i));
        varies[i] = !k.row_buffer(n.buffer);
        break;
      case ScalarOp::acc:
        if (n.stage < 0 || n.stage >= static_cast<int>(k.stages.size()))
          fail(fmt::format("node {} reads stage {}, which does not exist", i, n.stage));
        last_stage[i] = n.stage;
        break;
      case ScalarOp::index:
        if (n.dim < 0 || n.dim >= rank) fail(fmt::format("node {} indexes a bad dim", i));
        varies[i] = n.dim >= k.parallel_dims() && k.domain[n.dim] != 1;
        break;
      case ScalarOp::param:
        if (n.param < 0 || n.param >= static_cast<int>(k.params.size()))
          fail(fmt::format("node {} reads a parameter that does not exist", i));
        break;
      default:
        break;
    }
  }
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const KernelStage& st = k.stages[s];
    if (st.value < 0 || st.value >= count) fail(fmt::format("stage {} has a bad value", s));
    if (st.combine == Combine::none) fail(fmt::format("stage {} has no combine", s));
    if (last_stage[st.value] >= static_cast<int>(s))
      fail(fmt::format("stage {} reads its own or a later stage's result", s));
  }
  std::vector<int> stored(nb, 0);
  for (const KernelStore& st : k.stores) {
    if (st.buffer < first_output || st.buffer >= nb)
      fail(fmt::format("a store writes buffer {}, which is not an output", st.buffer));
    if (st.value < 0 || st.value >= count) fail("a store has a bad value");
    if (++stored[st.buffer] > 1) fail(fmt::format("buffer {} is stored twice", st.buffer));
    if (k.row_buffer(st.buffer) && varies[st.value])
      fail(fmt::format("row store to buffer {} reads values that vary along the row", st.buffer));
    if (st.total != Combine::none) {
      if (k.reduced == 0 || varies[st.value])
        fail(fmt::format("total store to buffer {} must store a row value of a row kernel",
                         st.buffer));
      for (int64_t stride : k.buffers[st.buffer].strides)
        if (stride != 0)
          fail(fmt::format("total store to buffer {} has a nonzero stride", st.buffer));
    }
  }
  for (int b = first_output; b < nb; ++b)
    if (stored[b] == 0) fail(fmt::format("output buffer {} is never stored", b));
}

std::string dump(const Kernel& k) {
  std::string out;
  if (k.general())
    out = fmt::format("kernel {} domain=[{}] reduced={} compute={}{}\n", k.name,
                      fmt::join(k.domain, ","), k.reduced, dtype_name(k.compute),
                      k.params.empty() ? "" : fmt::format(" params={}", k.params.size()));
  else
    out = fmt::format("kernel {} domain=[{}] reduced={} combine={} compute={}\n", k.name,
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
    if (n.op == ScalarOp::acc && n.stage >= 0) out += fmt::format(" stage{}", n.stage);
    if (n.op == ScalarOp::index) out += fmt::format(" dim{}", n.dim);
    if (n.op == ScalarOp::param) out += fmt::format(" p{}", n.param);
    for (int operand : {n.a, n.b, n.c})
      if (operand >= 0) out += fmt::format(" %{}", operand);
    out += '\n';
  }
  if (!k.general()) return out + fmt::format("  body %{} result %{}\n", k.body, k.result);
  for (size_t s = 0; s < k.stages.size(); ++s)
    out += fmt::format("  stage{} = {} %{}\n", s, combine_name(k.stages[s].combine),
                       k.stages[s].value);
  for (const KernelStore& st : k.stores)
    out +=
        fmt::format("  store buf{} %{}{}\n", st.buffer, st.value,
                    st.total != Combine::none ? fmt::format(" (total {})", combine_name(st.total))
                    : k.reduced > 0 && k.row_buffer(st.buffer) ? " (row)"
                                                               : "");
  return out;
}

void kernel_code_key(const Kernel& k, std::string& out, bool exact_layout) {
  out.clear();
  put(out, k.domain.size());
  put(out, k.reduced);
  put(out, k.compute);
  put(out, k.params.size());  // the values are run-time arguments
  put(out, k.buffers.size());
  for (const KernelBuffer& b : k.buffers) {
    put(out, b.dtype);
    put(out, b.output);
    for (int64_t s : b.strides)
      put(out, static_cast<int8_t>(s == 0 ? 0 : s == 1 ? 1 : 2));
  }
  put(out, k.nodes.size());
  // A node's fields in one append (a key is made per launch): no padding to leave undefined.
  struct NodeKey {
    int32_t op, a, b, c, buffer, stage, dim, param;
    double value;
  };
  static_assert(sizeof(NodeKey) == 8 * sizeof(int32_t) + sizeof(double));
  const size_t at = out.size();
  out.resize(at + k.nodes.size() * sizeof(NodeKey));
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const ScalarNode& n = k.nodes[i];
    const NodeKey key{
        static_cast<int32_t>(n.op), n.a, n.b, n.c, n.buffer, n.stage, n.dim, n.param, n.value};
    std::memcpy(out.data() + at + i * sizeof(NodeKey), &key, sizeof key);
  }
  put(out, k.stages.size());
  for (const KernelStage& s : k.stages) {
    put(out, s.combine);
    put(out, s.value);
  }
  put(out, k.stores.size());
  for (const KernelStore& s : k.stores) {
    put(out, s.buffer);
    put(out, s.value);
  }
  put(out, k.combine);  // the shorthand (empty after coalesce, kept for completeness)
  put(out, k.body);
  put(out, k.result);
  if (!exact_layout) return;
  const auto put_all = [&out](const Shape& values) {
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  };
  put_all(k.domain);
  for (const KernelBuffer& b : k.buffers)
    put_all(b.strides);
}


}  // namespace ein
