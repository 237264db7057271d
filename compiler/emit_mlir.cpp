// Kernel IR → MLIR text. The function walks its share of the outer parallel range, then the
// innermost parallel dim in chunks (SIMD vectors plus a scalar tail when every buffer moves
// by 0 or 1 along it), and, for reductions, nests scf.for loops carrying the accumulator.
//
// Schedules (see schedule_cpu):
//   pointwise   out[p] = f(loads)             vectorized along the last parallel dim
//   mode A      reduce along a unit-stride dim: vector accumulator + horizontal reduction
//   mode B      reduce along an outer dim: one vector accumulator per SIMD group of outputs
#include "compiler/emit_mlir.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace ein {
namespace {

bool is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

std::string_view mlir_type(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i8:
    case DType::u8:
    case DType::boolean: return "i8";
    default: break;
  }
  throw std::logic_error(fmt::format("internal error: no CPU kernel type for {}", dtype_name(t)));
}

int bit_width(DType t) { return static_cast<int>(element_size(t)) * 8; }

/// Emits one function; SSA names are %vN, constants are hoisted to the entry block.
class FunctionEmitter {
 public:
  FunctionEmitter(const Kernel& k, const CpuSchedule& s) : k_(k), s_(s) {
    compute_ = mlir_type(k.compute);
  }

  std::string run(std::string_view symbol) {
    std::string head = fmt::format("func.func @{}(%buffers: !llvm.ptr, %begin: index, %end: index) {{\n",
                                   symbol);
    emit_prologue();
    emit_outer_loop();
    line("return");
    return head + consts_ + body_ + "}\n";
  }

 private:
  using Offsets = std::vector<std::string>;  // per buffer, an index value

  // ---- text helpers ------------------------------------------------------------------
  std::string fresh() { return fmt::format("%v{}", next_++); }
  void line(const std::string& text) { body_ += std::string(indent_, ' ') + text + "\n"; }

  std::string index(int64_t v) {
    auto it = index_consts_.find(v);
    if (it != index_consts_.end()) return it->second;
    std::string name = fmt::format("%c{}", v < 0 ? "m" + std::to_string(-v) : std::to_string(v));
    consts_ += fmt::format("  {} = arith.constant {} : index\n", name, v);
    return index_consts_[v] = name;
  }

  std::string vec_type(int w, std::string_view scalar) const {
    return w == 1 ? std::string(scalar) : fmt::format("vector<{}x{}>", w, scalar);
  }

  /// A compute-type literal, splatted to `w` lanes; hex bit patterns keep it exact.
  std::string literal(double v, int w) {
    const auto key = std::make_pair(std::bit_cast<uint64_t>(v), w);
    auto it = float_consts_.find(key);
    if (it != float_consts_.end()) return it->second;
    std::string bits;
    if (k_.compute == DType::f64)
      bits = fmt::format("0x{:016X}", std::bit_cast<uint64_t>(v));
    else if (k_.compute == DType::f32)
      bits = fmt::format("0x{:08X}", std::bit_cast<uint32_t>(static_cast<float>(v)));
    else
      throw std::logic_error("internal error: literal in a kernel computing in " +
                             std::string(dtype_name(k_.compute)));
    std::string name = fmt::format("%f{}", float_consts_.size());
    if (w == 1)
      consts_ += fmt::format("  {} = arith.constant {} : {}\n", name, bits, compute_);
    else
      consts_ += fmt::format("  {} = arith.constant dense<{}> : {}\n", name, bits,
                             vec_type(w, compute_));
    return float_consts_[key] = name;
  }

  std::string op(const std::string& text) {
    std::string v = fresh();
    line(v + " = " + text);
    return v;
  }

  std::string add_index(const std::string& a, const std::string& b) {
    return op(fmt::format("arith.addi {}, {} : index", a, b));
  }
  std::string mul_index(const std::string& a, const std::string& b) {
    return op(fmt::format("arith.muli {}, {} : index", a, b));
  }

  // ---- buffers -------------------------------------------------------------------------
  void emit_prologue() {
    // Each buffer pointer becomes a 1-D memref through a hand-built descriptor; the casts
    // fold away in reconcile-unrealized-casts (runtime/jit/cpu_jit.h documents the ABI). The
    // buffer after the kernel's own holds the run-time parameters (see kernel_parameters()).
    const size_t count = k_.buffers.size() + 1;
    for (size_t b = 0; b < count; ++b) {
      const std::string st = b < k_.buffers.size() ? std::string(mlir_type(k_.buffers[b].dtype)) : "i64";
      const std::string desc = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>";
      line(fmt::format("%pa{} = llvm.getelementptr %buffers[{}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr", b, b));
      line(fmt::format("%p{} = llvm.load %pa{} : !llvm.ptr -> !llvm.ptr", b, b));
      line(fmt::format("%d{}_0 = llvm.mlir.undef : {}", b, desc));
      line(fmt::format("%d{}_1 = llvm.insertvalue %p{}, %d{}_0[0] : {}", b, b, b, desc));
      line(fmt::format("%d{}_2 = llvm.insertvalue %p{}, %d{}_1[1] : {}", b, b, b, desc));
      line(fmt::format("%z{} = llvm.mlir.constant(0 : i64) : i64", b));
      line(fmt::format("%n{} = llvm.mlir.constant(1152921504606846976 : i64) : i64", b));
      line(fmt::format("%o{} = llvm.mlir.constant(1 : i64) : i64", b));
      line(fmt::format("%d{}_3 = llvm.insertvalue %z{}, %d{}_2[2] : {}", b, b, b, desc));
      line(fmt::format("%d{}_4 = llvm.insertvalue %n{}, %d{}_3[3, 0] : {}", b, b, b, desc));
      line(fmt::format("%d{}_5 = llvm.insertvalue %o{}, %d{}_4[4, 0] : {}", b, b, b, desc));
      line(fmt::format("%m{} = builtin.unrealized_conversion_cast %d{}_5 : {} to memref<?x{}>", b,
                       b, desc, st));
    }
    const int rank = static_cast<int>(k_.domain.size());
    int slot = 0;
    auto param = [&](int at) {
      std::string raw = op(fmt::format("memref.load %m{}[{}] : memref<?xi64>", count - 1, index(at)));
      return op(fmt::format("arith.index_cast {} : i64 to index", raw));
    };
    for (int d = 0; d < rank; ++d) sizes_.push_back(param(slot++));
    strides_.assign(k_.buffers.size(), std::vector<std::string>(rank));
    for (size_t b = 0; b < k_.buffers.size(); ++b)
      for (int d = 0; d < rank; ++d, ++slot)
        if (k_.buffers[b].strides[d] != 0 && k_.buffers[b].strides[d] != 1)
          strides_[b][d] = param(slot);
    chunk_ = param(slot++);
    chunks_ = param(slot++);
  }

  /// Converts `v` (w lanes of `from`) to `to`.
  std::string convert(const std::string& v, DType from, DType to, int w) {
    if (from == to || mlir_type(from) == mlir_type(to)) {
      if (!(from == DType::boolean && to != DType::boolean)) return v;
    }
    const std::string a = vec_type(w, mlir_type(from)), b = vec_type(w, mlir_type(to));
    const bool ff = is_float(from), ft = is_float(to);
    if (ff && ft) {
      const char* how = bit_width(from) < bit_width(to) ? "arith.extf" : "arith.truncf";
      if (bit_width(from) == bit_width(to)) {  // f16 <-> bf16 through f32
        std::string mid = convert(v, from, DType::f32, w);
        return convert(mid, DType::f32, to, w);
      }
      return op(fmt::format("{} {} : {} to {}", how, v, a, b));
    }
    const bool unsigned_from = from == DType::u8 || from == DType::boolean;
    if (!ff && ft)
      return op(fmt::format("{} {} : {} to {}", unsigned_from ? "arith.uitofp" : "arith.sitofp", v,
                            a, b));
    if (ff && !ft) {
      if (to == DType::boolean) {
        std::string c = op(fmt::format("arith.cmpf une, {}, {} : {}", v, zero_of(from, w), a));
        return op(fmt::format("arith.extui {} : {} to {}", c, vec_type(w, "i1"), b));
      }
      return op(fmt::format("{} {} : {} to {}", to == DType::u8 ? "arith.fptoui" : "arith.fptosi",
                            v, a, b));
    }
    // integer to integer
    if (bit_width(from) < bit_width(to))
      return op(fmt::format("{} {} : {} to {}", unsigned_from ? "arith.extui" : "arith.extsi", v,
                            a, b));
    if (bit_width(from) > bit_width(to)) return op(fmt::format("arith.trunci {} : {} to {}", v, a, b));
    return v;
  }

  std::string zero_of(DType t, int w) {
    std::string z = op(fmt::format("arith.constant 0.0 : {}", mlir_type(t)));
    if (w == 1) return z;
    return op(fmt::format("vector.broadcast {} : {} to {}", z, mlir_type(t), vec_type(w, mlir_type(t))));
  }

  std::string load(int b, const std::string& offset, int w, int vdim) {
    const DType st = k_.buffers[b].dtype;
    const std::string memref = fmt::format("memref<?x{}>", mlir_type(st));
    const bool lanes = w > 1 && k_.buffers[b].strides[vdim] != 0;
    std::string v;
    if (lanes) {
      v = op(fmt::format("vector.load %m{}[{}] : {}, {}", b, offset, memref, vec_type(w, mlir_type(st))));
      return convert(v, st, k_.compute, w);
    }
    v = op(fmt::format("memref.load %m{}[{}] : {}", b, offset, memref));
    v = convert(v, st, k_.compute, 1);
    if (w == 1) return v;
    return op(fmt::format("vector.broadcast {} : {} to {}", v, compute_, vec_type(w, compute_)));
  }

  void store(const std::string& value, const std::string& offset, int w) {
    const int b = static_cast<int>(k_.buffers.size()) - 1;
    const DType st = k_.buffers[b].dtype;
    const std::string v = convert(value, k_.compute, st, w);
    const std::string memref = fmt::format("memref<?x{}>", mlir_type(st));
    if (w == 1)
      line(fmt::format("memref.store {}, %m{}[{}] : {}", v, b, offset, memref));
    else
      line(fmt::format("vector.store {}, %m{}[{}] : {}, {}", v, b, offset, memref,
                       vec_type(w, mlir_type(st))));
  }

  // ---- scalar DAG ------------------------------------------------------------------------
  std::string unary(std::string_view mnemonic, const std::string& x, int w) {
    return op(fmt::format("{} {} : {}", mnemonic, x, vec_type(w, compute_)));
  }
  std::string binary(std::string_view mnemonic, const std::string& x, const std::string& y, int w) {
    return op(fmt::format("{} {}, {} : {}", mnemonic, x, y, vec_type(w, compute_)));
  }
  std::string compare(std::string_view predicate, const std::string& x, const std::string& y, int w) {
    std::string c = op(fmt::format("arith.cmpf {}, {}, {} : {}", predicate, x, y, vec_type(w, compute_)));
    return op(fmt::format("arith.uitofp {} : {} to {}", c, vec_type(w, "i1"), vec_type(w, compute_)));
  }
  std::string select(const std::string& cond, const std::string& x, const std::string& y, int w) {
    std::string c = op(fmt::format("arith.cmpf une, {}, {} : {}", cond, literal(0, w), vec_type(w, compute_)));
    return op(fmt::format("arith.select {}, {}, {} : {}, {}", c, x, y, vec_type(w, "i1"), vec_type(w, compute_)));
  }
  std::string sigmoid(const std::string& x, int w) {
    std::string e = unary("math.exp", unary("arith.negf", x, w), w);
    return binary("arith.divf", literal(1, w), binary("arith.addf", literal(1, w), e, w), w);
  }

  /// The value of node `i` at the current point (`offsets`), `w` lanes along `vdim`.
  std::string value(int i, const Offsets& offsets, int w, int vdim, std::map<int, std::string>& memo,
                    const std::string& acc) {
    if (auto it = memo.find(i); it != memo.end()) return it->second;
    const ScalarNode& n = k_.nodes[i];
    auto arg = [&](int o) { return value(o, offsets, w, vdim, memo, acc); };
    std::string r;
    switch (n.op) {
      case ScalarOp::load: r = load(n.buffer, offsets[n.buffer], w, vdim); break;
      case ScalarOp::constant: r = literal(n.value, w); break;
      case ScalarOp::acc: r = acc; break;
      case ScalarOp::neg: r = unary("arith.negf", arg(n.a), w); break;
      case ScalarOp::abs: r = unary("math.absf", arg(n.a), w); break;
      case ScalarOp::exp: r = unary("math.exp", arg(n.a), w); break;
      case ScalarOp::log: r = unary("math.log", arg(n.a), w); break;
      case ScalarOp::sqrt: r = unary("math.sqrt", arg(n.a), w); break;
      case ScalarOp::rsqrt: r = unary("math.rsqrt", arg(n.a), w); break;
      case ScalarOp::tanh: r = unary("math.tanh", arg(n.a), w); break;
      case ScalarOp::erf: r = unary("math.erf", arg(n.a), w); break;
      case ScalarOp::sin: r = unary("math.sin", arg(n.a), w); break;
      case ScalarOp::cos: r = unary("math.cos", arg(n.a), w); break;
      case ScalarOp::sigmoid: r = sigmoid(arg(n.a), w); break;
      case ScalarOp::relu: r = binary("arith.maximumf", arg(n.a), literal(0, w), w); break;
      case ScalarOp::gelu: {  // x/2 · (1 + erf(x/√2)), PyTorch's exact GELU
        std::string x = arg(n.a);
        std::string e = unary("math.erf", binary("arith.mulf", x, literal(0.7071067811865476, w), w), w);
        r = binary("arith.mulf", binary("arith.mulf", x, literal(0.5, w), w),
                   binary("arith.addf", literal(1, w), e, w), w);
        break;
      }
      case ScalarOp::gelu_tanh: {  // x/2 · (1 + tanh(√(2/π)(x + 0.044715 x³))), Hendrycks & Gimpel
        std::string x = arg(n.a);
        std::string x3 = binary("arith.mulf", binary("arith.mulf", x, x, w), x, w);
        std::string inner = binary("arith.addf", x, binary("arith.mulf", x3, literal(0.044715, w), w), w);
        std::string t = unary("math.tanh", binary("arith.mulf", inner, literal(0.7978845608028654, w), w), w);
        r = binary("arith.mulf", binary("arith.mulf", x, literal(0.5, w), w),
                   binary("arith.addf", literal(1, w), t, w), w);
        break;
      }
      case ScalarOp::silu: {
        std::string x = arg(n.a);
        r = binary("arith.mulf", x, sigmoid(x, w), w);
        break;
      }
      case ScalarOp::square: {
        std::string x = arg(n.a);
        r = binary("arith.mulf", x, x, w);
        break;
      }
      case ScalarOp::reciprocal: r = binary("arith.divf", literal(1, w), arg(n.a), w); break;
      case ScalarOp::sign: {  // 1, -1, or x itself for ±0 and NaN (torch.sign)
        std::string x = arg(n.a);
        std::string neg = select(compare("olt", x, literal(0, w), w), literal(-1, w), x, w);
        r = select(compare("ogt", x, literal(0, w), w), literal(1, w), neg, w);
        break;
      }
      case ScalarOp::add: r = binary("arith.addf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::sub: r = binary("arith.subf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::mul: r = binary("arith.mulf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::div: r = binary("arith.divf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::pow: r = binary("math.powf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::maximum: r = binary("arith.maximumf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::minimum: r = binary("arith.minimumf", arg(n.a), arg(n.b), w); break;
      case ScalarOp::eq: r = compare("oeq", arg(n.a), arg(n.b), w); break;
      case ScalarOp::ne: r = compare("une", arg(n.a), arg(n.b), w); break;
      case ScalarOp::lt: r = compare("olt", arg(n.a), arg(n.b), w); break;
      case ScalarOp::le: r = compare("ole", arg(n.a), arg(n.b), w); break;
      case ScalarOp::gt: r = compare("ogt", arg(n.a), arg(n.b), w); break;
      case ScalarOp::ge: r = compare("oge", arg(n.a), arg(n.b), w); break;
      case ScalarOp::where: r = select(arg(n.a), arg(n.b), arg(n.c), w); break;
    }
    return memo[i] = r;
  }

  // ---- reductions ------------------------------------------------------------------------
  std::string combine(const std::string& a, const std::string& b, int w) {
    switch (k_.combine) {
      case Combine::sum: return binary("arith.addf", a, b, w);
      case Combine::prod: return binary("arith.mulf", a, b, w);
      case Combine::max: return binary("arith.maximumf", a, b, w);
      case Combine::min: return binary("arith.minimumf", a, b, w);
      case Combine::none: break;
    }
    throw std::logic_error("internal error: combine without a reduction");
  }
  double identity() const {
    switch (k_.combine) {
      case Combine::prod: return 1;
      case Combine::max: return -std::numeric_limits<double>::infinity();
      case Combine::min: return std::numeric_limits<double>::infinity();
      default: return 0;
    }
  }
  std::string_view horizontal_kind() const {
    switch (k_.combine) {
      case Combine::prod: return "mul";
      case Combine::max: return "maximumf";
      case Combine::min: return "minimumf";
      default: return "add";
    }
  }

  Offsets advance(const Offsets& offsets, const std::string& iv, int dim) {
    Offsets next = offsets;
    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      const int64_t s = k_.buffers[b].strides[dim];
      if (s == 1) next[b] = add_index(offsets[b], iv);
      else if (s != 0) next[b] = add_index(offsets[b], mul_index(iv, strides_[b][dim]));
    }
    return next;
  }

  /// Body value at this point, combined into `acc` (w lanes): one loop per reduced dim from
  /// `dim` inwards; mode A vectorizes the innermost one and reduces the lanes at its end.
  std::string reduce_from(int dim, const Offsets& offsets, int w, const std::string& acc) {
    const int rank = static_cast<int>(k_.domain.size());
    if (dim == rank) {
      std::map<int, std::string> memo;
      return combine(acc, value(k_.body, offsets, w, s_.vector_dim, memo, ""), w);
    }
    const std::string ty = vec_type(w, compute_);
    const bool mode_a = dim == rank - 1 && s_.vector_dim == dim;
    if (!mode_a) {
      std::string iv = fresh(), a = fresh(), res = fresh();
      line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", res, iv,
                       index(0), sizes_[dim], index(1), a, acc, ty));
      indent_ += 2;
      std::string next = reduce_from(dim + 1, advance(offsets, iv, dim), w, a);
      line(fmt::format("scf.yield {} : {}", next, ty));
      indent_ -= 2;
      line("}");
      return res;
    }
    // Mode A: lanes over the innermost reduced dim, four vector accumulators (four
    // independent dependency chains hide the add latency), then one, then a scalar tail.
    const int vw = s_.vector_width;
    const std::string n = sizes_[dim];
    const std::string nv = mul_index(op(fmt::format("arith.divui {}, {} : index", n, index(vw))), index(vw));
    const std::string nv4 =
        mul_index(op(fmt::format("arith.divui {}, {} : index", n, index(4 * vw))), index(4 * vw));
    const std::string vty = vec_type(vw, compute_);
    std::string quad = fresh(), qiv = fresh();
    std::string qa[4] = {fresh(), fresh(), fresh(), fresh()};
    const std::string init = literal(identity(), vw);
    line(fmt::format("{}:4 = scf.for {} = {} to {} step {} iter_args({} = {}, {} = {}, {} = {}, {} = {}) -> "
                     "({}, {}, {}, {}) {{",
                     quad, qiv, index(0), nv4, index(4 * vw), qa[0], init, qa[1], init, qa[2], init,
                     qa[3], init, vty, vty, vty, vty));
    indent_ += 2;
    {
      std::string next[4];
      for (int k = 0; k < 4; ++k) {
        std::map<int, std::string> memo;
        const std::string at = k == 0 ? qiv : add_index(qiv, index(k * vw));
        next[k] = combine(qa[k], value(k_.body, advance(offsets, at, dim), vw, dim, memo, ""), vw);
      }
      line(fmt::format("scf.yield {}, {}, {}, {} : {}, {}, {}, {}", next[0], next[1], next[2],
                       next[3], vty, vty, vty, vty));
    }
    indent_ -= 2;
    line("}");
    const std::string merged = combine(combine(quad + "#0", quad + "#1", vw),
                                       combine(quad + "#2", quad + "#3", vw), vw);
    std::string iv = fresh(), a = fresh(), vres = fresh();
    line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", vres, iv,
                     nv4, nv, index(vw), a, merged, vty));
    indent_ += 2;
    {
      std::map<int, std::string> memo;
      std::string v = value(k_.body, advance(offsets, iv, dim), vw, dim, memo, "");
      line(fmt::format("scf.yield {} : {}", combine(a, v, vw), vty));
    }
    indent_ -= 2;
    line("}");
    std::string h = op(fmt::format("vector.reduction <{}>, {} : {} into {}", horizontal_kind(), vres,
                                   vty, compute_));
    std::string start = combine(acc, h, 1);
    std::string tiv = fresh(), ta = fresh(), tres = fresh();
    line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", tres, tiv,
                     nv, n, index(1), ta, start, compute_));
    indent_ += 2;
    {
      std::map<int, std::string> memo;
      std::string v = value(k_.body, advance(offsets, tiv, dim), 1, dim, memo, "");
      line(fmt::format("scf.yield {} : {}", combine(ta, v, 1), compute_));
    }
    indent_ -= 2;
    line("}");
    return tres;
  }

  /// Evaluates and stores one point (w lanes along the last parallel dim).
  void point(const Offsets& offsets, int w) {
    std::string acc;
    if (k_.reduced > 0) {
      const int lanes = s_.vector_dim == k_.parallel_dims() - 1 ? w : 1;
      acc = reduce_from(k_.parallel_dims(), offsets, lanes, literal(identity(), lanes));
    }
    std::map<int, std::string> memo;
    std::string v = value(k_.result, offsets, w, std::max(s_.vector_dim, 0), memo, acc);
    store(v, offsets.back(), w);
  }

  // ---- the parallel loops ------------------------------------------------------------------
  void emit_outer_loop() {
    const int p = k_.parallel_dims();
    Offsets zero(k_.buffers.size(), index(0));
    std::string it = fresh();
    line(fmt::format("scf.for {} = %begin to %end step {} {{", it, index(1)));
    indent_ += 2;
    if (p == 0) {
      point(zero, 1);
    } else {
      const int last = p - 1;
      const std::string n = sizes_[last];
      // it = ((i0 · n1 + i1) · … ) · chunks + chunk
      std::string rest = it;
      std::string chunk = op(fmt::format("arith.remui {}, {} : index", rest, chunks_));
      rest = op(fmt::format("arith.divui {}, {} : index", rest, chunks_));
      Offsets base = zero;
      for (int d = last - 1; d >= 0; --d) {
        std::string i = d == 0 ? rest : op(fmt::format("arith.remui {}, {} : index", rest, sizes_[d]));
        if (d > 0) rest = op(fmt::format("arith.divui {}, {} : index", rest, sizes_[d]));
        base = advance(base, i, d);
      }
      std::string lo = mul_index(chunk, chunk_);
      std::string hi = op(fmt::format("arith.minui {}, {} : index", add_index(lo, chunk_), n));
      if (s_.vector_dim == last) {
        const int w = s_.vector_width;
        std::string len = op(fmt::format("arith.subi {}, {} : index", hi, lo));
        std::string nv = add_index(lo, op(fmt::format("arith.muli {}, {} : index",
                                                       op(fmt::format("arith.divui {}, {} : index", len, index(w))),
                                                       index(w))));
        inner_loop(lo, nv, w, base, last);
        inner_loop(nv, hi, 1, base, last);
      } else {
        inner_loop(lo, hi, 1, base, last);
      }
    }
    indent_ -= 2;
    line("}");
  }

  void inner_loop(const std::string& lo, const std::string& hi, int w, const Offsets& base, int dim) {
    std::string iv = fresh();
    line(fmt::format("scf.for {} = {} to {} step {} {{", iv, lo, hi, index(w)));
    indent_ += 2;
    point(advance(base, iv, dim), w);
    indent_ -= 2;
    line("}");
  }

  const Kernel& k_;
  const CpuSchedule& s_;
  std::string compute_;
  std::vector<std::string> sizes_;                 // per domain dim, an index value
  std::vector<std::vector<std::string>> strides_;  // per buffer and dim, when neither 0 nor 1
  std::string chunk_, chunks_;
  std::string consts_, body_;
  std::map<int64_t, std::string> index_consts_;
  std::map<std::pair<uint64_t, int>, std::string> float_consts_;
  int next_ = 0;
  int indent_ = 2;
};

bool unit_or_zero(const Kernel& k, int dim, bool inputs_only) {
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    if (inputs_only && k.buffers[b].output) continue;
    const int64_t s = k.buffers[b].strides[dim];
    if (s != 0 && s != 1) return false;
  }
  return true;
}

}  // namespace

CpuSchedule schedule_cpu(const Kernel& k) {
  CpuSchedule s;
  const int rank = static_cast<int>(k.domain.size());
  const int p = k.parallel_dims();
  s.vector_width = std::max<int>(1, 64 / static_cast<int>(element_size(k.compute)));
  int64_t reduced_points = 1;
  for (int d = p; d < rank; ++d) reduced_points *= k.domain[d];
  const bool has_arith = k.compute == DType::f32 || k.compute == DType::f64;
  // Vectorization depends only on which strides are 0 or 1, never on sizes, so one compiled
  // kernel serves every shape with the same stride pattern.
  const bool last_parallel_vec =
      p > 0 && unit_or_zero(k, p - 1, false) && k.output().strides[p - 1] == 1;
  if (k.reduced == 0) {
    if (last_parallel_vec) s.vector_dim = p - 1;
  } else if (has_arith && unit_or_zero(k, rank - 1, true)) {
    s.vector_dim = rank - 1;  // mode A
  } else if (has_arith && last_parallel_vec) {
    s.vector_dim = p - 1;  // mode B
  }
  if (s.vector_dim < 0) s.vector_width = 1;
  if (p == 0) {
    s.chunk = 1;
    s.outer_iterations = 1;
    s.work_per_iteration = reduced_points;
    return s;
  }
  const int64_t n = k.domain[p - 1];
  // Aim for ~16K elements of work per outer iteration, in whole vectors.
  int64_t chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, reduced_points));
  if (s.vector_dim == p - 1) chunk = (chunk + s.vector_width - 1) / s.vector_width * s.vector_width;
  s.chunk = std::min(chunk, std::max<int64_t>(n, 1));
  int64_t outer = (n + s.chunk - 1) / s.chunk;
  for (int d = 0; d < p - 1; ++d) outer *= k.domain[d];
  s.outer_iterations = outer;
  s.work_per_iteration = s.chunk * reduced_points;
  return s;
}

std::vector<int64_t> kernel_parameters(const Kernel& k, const CpuSchedule& s) {
  std::vector<int64_t> out(k.domain.begin(), k.domain.end());
  for (const KernelBuffer& b : k.buffers) out.insert(out.end(), b.strides.begin(), b.strides.end());
  const int p = k.parallel_dims();
  const int64_t n = p > 0 ? k.domain[p - 1] : 1;
  out.push_back(s.chunk);
  out.push_back((n + s.chunk - 1) / s.chunk);
  return out;
}

std::string emit_mlir(const Kernel& kernel, const CpuSchedule& schedule, std::string_view symbol) {
  std::string header = fmt::format("// ein kernel {}: {}\n", kernel.name, kernel.origin);
  for (char& c : header)
    if (c == '\n') c = ' ';
  header.back() = '\n';
  FunctionEmitter emitter(kernel, schedule);
  return header + "module {\n" + emitter.run(symbol) + "}\n";
}

}  // namespace ein
