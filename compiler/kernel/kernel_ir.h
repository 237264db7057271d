// Kernel IR: one loop nest over an iteration domain, strided loads, a scalar expression DAG,
// reductions over the trailing dims of the domain, and strided stores into one or more output
// buffers. Both executors (MLIR on CPUs, CUDA C++ on GPUs) generate code from it. It knows
// nothing about patterns or tensors: the lowerings fill it in, the emitters read it.
//
// ## Semantics (the general form)
//
// The domain's leading dims are parallel (P), its trailing `reduced` dims are the row (R). For
// every index p of P, in this order:
//   1. stage k = 0, 1, ...: acc_k = stages[k].combine over r in R of node stages[k].value at
//      (p, r); the value may read loads, index leaves, params and acc_j for j < k;
//   2. every store whose buffer moves along some R dim ("full" store): for every r in R,
//      buffer[p, r] = node store.value at (p, r) (it may read every acc_k);
//   3. every store whose buffer has stride 0 along all R dims ("row" store):
//      buffer[p] = node store.value at p; it may read acc_k, params, index leaves of P dims and
//      loads of buffers that have stride 0 along all R dims (a value at p, not at (p, r)).
// A load reads buffer[Σ_d i_d · stride_d] converted to `compute`; a store converts from
// `compute` to the buffer's dtype. With reduced == 0 there are no stages and every store is a
// pointwise map over P.
//
//   softmax over the last dim of x (a b c):  domain [a, b, c], reduced = 1
//     m = reduce(max, load x);  s = reduce(sum, exp(load x − m));  store(y, exp(load x − m) / s)
//   cross-entropy per row:  t = index of the class dim == load target (stride 0 along c);
//     m = max x;  s = Σ exp(x − m);  xt = Σ where(t, x, 0);  store(loss, log(s) + m − xt)
//   AdamW (pointwise, three stores, params for the step-dependent scalars):
//     store(exp_avg, …); store(exp_avg_sq, …); store(param, …)   (outputs alias the inputs)
//
// Aliasing: an output may be the same memory as an input (pass the same tensor twice) when
// both have the same strides: at each point every load of a buffer happens before any store
// to it, and stages finish reading the row before step 2 writes it. Two outputs must not
// overlap each other.
//
// ## The single-output shorthand
//
// Kernels built before multi-output kernels existed set `combine`, `body` and `result` and
// leave `stages`/`stores` empty: that means stages = {{combine, body}} when reduced > 0 (else
// none) and stores = {{last buffer, result}}, where `acc` reads stage 0. coalesce() rewrites
// a kernel into the general form; the emitters only see the general form.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <ein/dtype.h>
#include <ein/shape.h>

namespace ein {

/// A scalar operation (see compiler/kernel/scalar_ops.def for the table).
enum class ScalarOp : uint8_t {
#define EIN_SCALAR_OP(name, arity, spelling) name,
#include "compiler/kernel/scalar_ops.def"
#undef EIN_SCALAR_OP
};

/// Number of ScalarOp enumerators.
inline constexpr int kScalarOpCount = 0
#define EIN_SCALAR_OP(name, arity, spelling) +1
#include "compiler/kernel/scalar_ops.def"
#undef EIN_SCALAR_OP
    ;

/// Number of operands the op takes.
int scalar_op_arity(ScalarOp op);
/// How dumps and map expressions spell the op ("+", "exp", ...).
std::string_view scalar_op_spelling(ScalarOp op);
/// Whether the op maps integers to integers, so that integer operands keep their dtype, as in
/// torch (i64 + i64 is i64; / and exp give floats). `**` is one only with a whole non-negative
/// exponent, which the caller checks.
bool keeps_integers(ScalarOp op);

/// How a reduction combines values into its accumulator (identity: 0, 1, −inf, +inf).
enum class Combine : uint8_t { none, sum, prod, max, min };

/// One node of a kernel's scalar DAG. Operands are indices of earlier nodes; the leaf fields
/// say which buffer, stage, dim or parameter a leaf reads (−1 when unused).
struct ScalarNode {
  ScalarOp op = ScalarOp::constant;
  int a = -1, b = -1, c = -1;  ///< operand nodes (by arity)
  int buffer = -1;             ///< load: the buffer read
  int stage = -1;              ///< acc: the stage whose result it reads (−1 in the shorthand: 0)
  int dim = -1;                ///< index: the domain dim whose current index it reads
  int param = -1;              ///< param: the slot of Kernel::params it reads
  double value = 0;            ///< constant: the literal
};

/// A buffer the kernel reads or writes: its element type and, per domain dim, its stride in
/// elements (0 broadcasts along that dim). A row output's strides along reduced dims are 0.
struct KernelBuffer {
  DType dtype = DType::f32;
  Shape strides;
  bool output = false;
};

/// One reduction over the kernel's reduced dims: acc = `combine` over R of node `value`.
struct KernelStage {
  Combine combine = Combine::sum;
  int value = -1;  ///< the node reduced (evaluated at every point of P × R)
};

/// One store: output buffer `buffer` receives node `value` at every point it spans (P × R for
/// a full store, P for a row store; see the semantics above).
struct KernelStore {
  int buffer = -1;
  int value = -1;
  /// A total store (not none): the buffer has stride 0 along every dim and receives this
  /// combine of the row value `value` over every point of P (a mean of per-row losses is a
  /// total sum of loss / rows). run_kernel() keeps one value per row and combines them on
  /// the host, in double, after the kernel: still one kernel launch.
  Combine total = Combine::none;
};

/// The value a combine starts from: 0 (sum), 1 (prod), −inf (max), +inf (min).
double combine_identity(Combine c);
/// a combined with b, in double; max and min propagate NaN (like torch.amax/amin).
double combine_values(Combine c, double a, double b);

/// A loop nest with its stages and stores (semantics at the top of this file). Buffers are
/// inputs first, then outputs; run_kernel() takes one tensor per buffer in this order.
/// The widest dim whose indices Kernel::index() gives exactly in a kernel that computes in f32
/// (24 significand bits; f64 kernels are exact to 2^53). Ops that compare indices (pick, triu,
/// tril) refuse wider dims in f32 rather than return wrong elements.
inline constexpr int64_t kExactF32Indices = int64_t{1} << 24;

struct Kernel {
  std::string name;    ///< what it computes, e.g. "copy", "map_sub_square_mul_add", "softmax"
  std::string origin;  ///< the user's pattern or expression and shapes, for generated comments
  Shape domain;        ///< iteration sizes, outermost first
  int reduced = 0;     ///< the trailing `reduced` dims of `domain` are the row R
  DType compute = DType::f32;         ///< arithmetic type; a copy computes in its element type
  std::vector<KernelBuffer> buffers;  ///< inputs first, then the outputs
  std::vector<ScalarNode> nodes;      ///< topologically ordered
  std::vector<KernelStage> stages;    ///< general form: the reductions, in order
  std::vector<KernelStore> stores;    ///< general form: the stores (empty: the shorthand)
  /// Run-time scalar parameters (read by ScalarOp::param). Their values are passed to the
  /// compiled code at each launch and are not part of its cache key, so e.g. an optimizer's
  /// step-dependent bias corrections do not compile a new kernel per step.
  std::vector<double> params;

  // The single-output shorthand (see the top of this file); unused in the general form.
  Combine combine = Combine::none;  ///< shorthand: the one stage's combine
  int body = -1;                    ///< shorthand: the one stage's value (pointwise: == result)
  int result = -1;                  ///< shorthand: the value stored into the last buffer

  /// Adds a buffer; returns its index.
  int add_buffer(DType dtype, Shape strides, bool output = false);
  /// Adds an output buffer; returns its index.
  int add_output(DType dtype, Shape strides) { return add_buffer(dtype, std::move(strides), true); }
  /// Adds a load of `buffer`; returns the node.
  int load(int buffer);
  /// Adds a literal; returns the node.
  int constant(double value);
  /// Adds a leaf reading the result of stage `stage` (0 in the shorthand); returns the node.
  int accumulator(int stage = -1);
  /// Adds a leaf: the current index along domain dim `dim`, as a number in the compute type
  /// (exact up to kExactF32Indices in f32); returns the node. coalesce() never merges an
  /// indexed dim.
  int index(int dim);
  /// Adds a run-time scalar parameter with this launch's `value`; returns the node.
  int param(double value);
  /// Adds an op applied to earlier nodes; returns the node.
  int apply(ScalarOp op, int a, int b = -1, int c = -1);
  /// General form: adds a stage reducing `value` with `combine`; returns an acc node reading it.
  int reduce(Combine combine, int value);
  /// General form: stores node `value` into output buffer `buffer`.
  void store(int buffer, int value) { stores.push_back({buffer, value}); }

  /// Number of parallel (non-reduced) dims.
  int parallel_dims() const { return static_cast<int>(domain.size()) - reduced; }
  /// The last buffer (the output of a single-output kernel).
  const KernelBuffer& output() const { return buffers.back(); }
  /// Whether the kernel is in the general form (it has stores).
  bool general() const { return !stores.empty(); }
  /// Whether `buffer` has stride 0 along every reduced dim (a row store's buffer, or a load
  /// that is constant along the row).
  bool row_buffer(int buffer) const;
};

/// The same kernel in the general form (a general kernel is returned unchanged).
Kernel to_general_form(Kernel kernel);

/// Rewrites into the general form, merges adjacent domain dims that every buffer walks as one
/// (stride_d == stride_{d+1} · size_{d+1}, both parallel or both reduced, neither indexed) and
/// drops size-1 dims. Preserves semantics; gives the emitters long inner loops.
Kernel coalesce(Kernel kernel);

/// Checks the invariants (operand order, arities, leaves, strides per dim, inputs before
/// outputs, each output stored once, row stores reading only row values); throws
/// std::logic_error naming the broken one. A failure is a bug in a lowering.
void verify(const Kernel& kernel);

/// Everything that changes the generated code, as bytes (a memo key): the ops, dtypes, rank,
/// which strides are 0, 1 or other, the stages and stores, the number of params, not param
/// values (run-time arguments). Sizes and stride values are left out (the CPU reads them at
/// run time) unless `exact_layout` (CUDA kernels are specialised to them); the CPU code
/// choices made from sizes and stride values, schedule_cpu()'s row blocks and panels, the CPU
/// executor adds itself.
void kernel_code_key(const Kernel& kernel, std::string& out, bool exact_layout = false);

/// A canonical text form: the domain, buffers, DAG, stages and stores, one line each.
std::string dump(const Kernel& kernel);

}  // namespace ein
