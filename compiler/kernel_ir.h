// Kernel IR: one loop nest over an iteration domain, strided loads, a scalar expression DAG,
// an optional reduction over the trailing dims of the domain, and one strided store. Both
// executors (MLIR on CPUs, CUDA C++ on GPUs) generate code from it. It knows nothing about
// patterns or tensors: the lowering fills it in, the emitters read it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <ein/dtype.h>
#include <ein/shape.h>

namespace ein {

/// A scalar operation (see compiler/scalar_ops.def for the table).
enum class ScalarOp : uint8_t {
#define EIN_SCALAR_OP(name, arity, spelling) name,
#include "compiler/scalar_ops.def"
#undef EIN_SCALAR_OP
};

/// Number of ScalarOp enumerators.
inline constexpr int kScalarOpCount = 0
#define EIN_SCALAR_OP(name, arity, spelling) +1
#include "compiler/scalar_ops.def"
#undef EIN_SCALAR_OP
    ;

/// Number of operands the op takes.
int scalar_op_arity(ScalarOp op);
/// How dumps and map expressions spell the op ("+", "exp", ...).
std::string_view scalar_op_spelling(ScalarOp op);

/// How a reduction kernel combines the body's values into its accumulator.
enum class Combine : uint8_t { none, sum, prod, max, min };

/// One node of a kernel's scalar DAG. Operands are indices of earlier nodes.
struct ScalarNode {
  ScalarOp op = ScalarOp::constant;
  int a = -1, b = -1, c = -1;  ///< operand nodes (by arity)
  int buffer = -1;             ///< load: the buffer read
  double value = 0;            ///< constant: the literal
};

/// A buffer the kernel reads or writes: its element type and, per domain dim, its stride in
/// elements (0 broadcasts along that dim). An output's strides along reduced dims are 0.
struct KernelBuffer {
  DType dtype = DType::f32;
  Shape strides;
  bool output = false;
};

/// A loop nest. Semantics: for every index i of `domain`'s parallel dims (all but the last
/// `reduced`), out[i] = result, where result may read `acc` = the `combine` of body over the
/// reduced dims (pointwise kernels: result == body). Loads read buffer[Σ i_d · stride_d].
struct Kernel {
  std::string name;    ///< what it computes, e.g. "copy", "map_sub_square_mul_add", "reduce_sum"
  std::string origin;  ///< the user's pattern or expression and shapes, for generated comments
  Shape domain;        ///< iteration sizes, outermost first
  int reduced = 0;     ///< the trailing `reduced` dims of `domain` are reduced
  Combine combine = Combine::none;
  DType compute = DType::f32;         ///< arithmetic type; a copy computes in its element type
  std::vector<KernelBuffer> buffers;  ///< inputs first, the one output last
  std::vector<ScalarNode> nodes;      ///< topologically ordered
  int body = -1;                      ///< the per-point value
  int result = -1;                    ///< the stored value (may read acc)

  /// Adds a buffer; returns its index.
  int add_buffer(DType dtype, Shape strides, bool output = false);
  /// Adds a load of `buffer`; returns the node.
  int load(int buffer);
  /// Adds a literal; returns the node.
  int constant(double value);
  /// Adds the accumulator leaf (reduction epilogues only); returns the node.
  int accumulator();
  /// Adds an op applied to earlier nodes; returns the node.
  int apply(ScalarOp op, int a, int b = -1, int c = -1);

  /// Number of parallel (non-reduced) dims.
  int parallel_dims() const { return static_cast<int>(domain.size()) - reduced; }
  /// The output buffer (the last one).
  const KernelBuffer& output() const { return buffers.back(); }
};

/// Merges adjacent domain dims that every buffer walks as one (stride_d == stride_{d+1} ·
/// size_{d+1}) and drops size-1 dims. Preserves semantics; gives the emitters long inner loops.
Kernel coalesce(Kernel kernel);

/// Checks the invariants (operand order, arities, strides per dim, one output last);
/// throws std::logic_error naming the broken one. A failure is a bug in a lowering.
void verify(const Kernel& kernel);

/// A canonical text form: the domain, buffers and DAG, one line each (for dumps and hashing).
std::string dump(const Kernel& kernel);

}  // namespace ein
