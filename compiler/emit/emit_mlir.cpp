// Kernel IR → MLIR text: the text helpers, the buffer prologue, the scalar DAG and the CPU
// schedule. The loop structure lives in emit_mlir_loops.cpp. The function walks its share of
// the outer parallel range, then the innermost parallel dim in chunks (SIMD vectors plus a
// scalar tail when every buffer moves by 0 or 1 along it); per point it runs the stages (one
// reduction loop nest each, carrying the accumulator), then the full stores (one loop nest over
// the row), then the row stores.
//
// Schedules (see schedule_cpu):
//   pointwise   out[p] = f(loads)             vectorized along the last parallel dim
//   mode A      rows along a unit-stride dim: each stage keeps four vector accumulators and
//               reduces the lanes at its end; full stores are vectorized along the same dim
//   mode B      rows along an outer dim: one vector of accumulators per SIMD group of points,
//               four vectors of points walked together (then one, then a scalar tail), so
//               each step along the row reads 256 contiguous bytes of a buffer, not 64;
//               in one pass (below) over one parallel and one reduced dim, row blocks
//               instead: blocks of whole rows walked in order, each block's sums in stack
//               arrays and then in a scratch area that one last iteration combines; other
//               one-pass kernels with rows 8 KB or more apart walk panels: a thread's share
//               of the points row by row, the accumulators in stack arrays
//               (emit_mlir_columns.cpp)
// When no stored value reads a stage's result (a map that also sums what it stores over the
// batch), modes B and scalar compute stages and full stores in one loop over the row.
//
// Accumulators: a kernel computing in f32 (f32, bf16 and f16 data) adds its sums in f32 for
// at most kSumTerms values a lane (mode A: blocks of kSumTerms quads, then the block's lanes
// as a tree) or kRowTerms rows a point (the other schedules), and adds those partial sums
// into f64 accumulators, rounding each result to f32 once. Summed in f32 all along, 10^7
// values of 0.1 came to 998,501 (1.5e-3 off) and a 10^6-term scalar chain was 1e-2 off; now
// such sums are within 1e-6 (PyTorch's sum of 10^7 values of 0.1: 4.5e-7 off, from its own
// cascade). The hot loops stay f32; the f64 adds are one per block. max, min and prod
// accumulate in the compute type.
#include "compiler/emit/emit_mlir.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/comment_text.h"
#include "compiler/emit/emit_mlir_function.h"

namespace ein {
namespace detail {
namespace {

int bit_width(DType t) {
  return static_cast<int>(element_size(t)) * 8;
}

/// How `@symbol` is spelled: the bare name when it is an MLIR bare-id ([A-Za-z_][A-Za-z0-9_$.]*),
/// else a string literal with every byte outside printable ASCII, '"' and '\\' as MLIR's `\XX`
/// hex escape, so the symbol keeps exactly the bytes the JIT looks up.
std::string symbol_name(std::string_view symbol) {
  auto bare_char = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && ((c >= '0' && c <= '9') || c == '$' || c == '.'));
  };
  bool bare = !symbol.empty();
  for (size_t i = 0; i < symbol.size() && bare; ++i)
    bare = bare_char(symbol[i], i == 0);
  if (bare) return std::string(symbol);
  std::string out = "\"";
  for (char ch : symbol) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\')
      out += fmt::format("\\{:02X}", c);
    else
      out += ch;
  }
  return out + '"';
}

}  // namespace

std::string_view mlir_type(DType t) {
  switch (t) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      return "i8";
    default:
      break;
  }
  throw std::logic_error(fmt::format("internal error: no CPU kernel type for {}", dtype_name(t)));
}

FunctionEmitter::FunctionEmitter(const Kernel& k, const CpuSchedule& s) : k_(k), s_(s) {
  compute_ = mlir_type(k.compute);
  scratch_type_ = mlir_type(scratch_dtype(k));
}

std::string FunctionEmitter::run(std::string_view symbol) {
  std::string head = fmt::format(
      "func.func @{}(%buffers: !llvm.ptr, %begin: index, %end: index) {{\n", symbol_name(symbol));
  emit_prologue();
  emit_outer_loop();
  line("return");
  return head + consts_ + body_ + "}\n";
}

// ---- text helpers --------------------------------------------------------------------------
std::string FunctionEmitter::index(int64_t v) {
  auto it = index_consts_.find(v);
  if (it != index_consts_.end()) return it->second;
  std::string name = fmt::format("%c{}", v < 0 ? "m" + std::to_string(-v) : std::to_string(v));
  consts_ += fmt::format("  {} = arith.constant {} : index\n", name, v);
  return index_consts_[v] = name;
}

std::string FunctionEmitter::vec_type(int w, std::string_view scalar) const {
  return w == 1 ? std::string(scalar) : fmt::format("vector<{}x{}>", w, scalar);
}

/// A compute-type literal, splatted to `w` lanes; hex bit patterns keep it exact.
std::string FunctionEmitter::literal(double v, int w) {
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
    consts_ +=
        fmt::format("  {} = arith.constant dense<{}> : {}\n", name, bits, vec_type(w, compute_));
  return float_consts_[key] = name;
}

std::string FunctionEmitter::op(const std::string& text) {
  std::string v = fresh();
  line(v + " = " + text);
  return v;
}

std::string FunctionEmitter::add_index(const std::string& a, const std::string& b) {
  return op(fmt::format("arith.addi {}, {} : index", a, b));
}
std::string FunctionEmitter::mul_index(const std::string& a, const std::string& b) {
  return op(fmt::format("arith.muli {}, {} : index", a, b));
}

// ---- buffers -------------------------------------------------------------------------------
void FunctionEmitter::emit_prologue() {
  // Each buffer pointer becomes a 1-D memref through a hand-built descriptor; the casts fold
  // away in reconcile-unrealized-casts (runtime/jit/cpu_jit.h documents the ABI). The buffer
  // after the kernel's own holds the integer run-time parameters (kernel_parameters()), and
  // the one after that, if the kernel has params, their f64 values; with row blocks, the
  // next one is the blocks' scratch area (scratch_dtype()).
  const size_t nb = k_.buffers.size();
  std::vector<size_t> slots;
  for (size_t b = 0; b < nb + 1 + (k_.params.empty() ? 0 : 1); ++b) slots.push_back(b);
  if (s_.row_block > 0) slots.push_back(nb + 2);
  for (size_t b : slots) {
    const std::string st = b < nb        ? std::string(mlir_type(k_.buffers[b].dtype))
                           : b == nb     ? std::string("i64")
                           : b == nb + 1 ? std::string("f64")
                                         : scratch_type_;
    const std::string desc = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>";
    line(fmt::format(
        "%pa{} = llvm.getelementptr %buffers[{}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr", b, b));
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
    line(fmt::format("%m{} = builtin.unrealized_conversion_cast %d{}_5 : {} to memref<?x{}>", b, b,
                     desc, st));
  }
  const int rank = static_cast<int>(k_.domain.size());
  int slot = 0;
  auto param = [&](int at) {
    const std::string raw = memref_load(fmt::format("%m{}", nb), "?", "i64", index(at), 1);
    return op(fmt::format("arith.index_cast {} : i64 to index", raw));
  };
  for (int d = 0; d < rank; ++d)
    sizes_.push_back(param(slot++));
  strides_.assign(nb, std::vector<std::string>(rank));
  for (size_t b = 0; b < nb; ++b)
    for (int d = 0; d < rank; ++d, ++slot)
      if (k_.buffers[b].strides[d] != 0 && k_.buffers[b].strides[d] != 1)
        strides_[b][d] = param(slot);
  chunk_ = param(slot++);
  chunks_ = param(slot++);
  for (size_t i = 0; i < k_.params.size(); ++i) {
    const std::string raw =
        memref_load(fmt::format("%m{}", nb + 1), "?", "f64", index(static_cast<int64_t>(i)), 1);
    params_.push_back(convert(raw, DType::f64, k_.compute, 1));
  }
}

/// Converts `v` (w lanes of `from`) to `to`.
std::string FunctionEmitter::convert(const std::string& v, DType from, DType to, int w) {
  if (from == to || mlir_type(from) == mlir_type(to)) {
    if (!(from == DType::boolean && to != DType::boolean)) return v;
  }
  const std::string a = vec_type(w, mlir_type(from)), b = vec_type(w, mlir_type(to));
  const bool ff = is_float(from), ft = is_float(to);
  if (from == DType::f32 && to == DType::bf16) return f32_to_bf16(v, w);
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
    return op(
        fmt::format("{} {} : {} to {}", unsigned_from ? "arith.uitofp" : "arith.sitofp", v, a, b));
  if (ff && !ft) {
    if (to == DType::boolean) {
      std::string c = op(fmt::format("arith.cmpf une, {}, {} : {}", v, zero_of(from, w), a));
      return op(fmt::format("arith.extui {} : {} to {}", c, vec_type(w, "i1"), b));
    }
    return op(fmt::format("{} {} : {} to {}", to == DType::u8 ? "arith.fptoui" : "arith.fptosi", v,
                          a, b));
  }
  // integer to integer
  if (bit_width(from) < bit_width(to))
    return op(
        fmt::format("{} {} : {} to {}", unsigned_from ? "arith.extui" : "arith.extsi", v, a, b));
  if (bit_width(from) > bit_width(to))
    return op(fmt::format("arith.trunci {} : {} to {}", v, a, b));
  return v;
}

/// f32 -> bf16 in integer arithmetic, bit-identical to the runtime's encoder
/// (runtime/copy.cpp's bf16_bits): round to nearest, ties to even, overflow to ±inf, a NaN to
/// the quiet NaN 0x7fc0 with its sign. `arith.truncf` would become AVX512_BF16's
/// vcvtneps2bf16 where the CPU has it, which flushes subnormal results to zero.
std::string FunctionEmitter::f32_to_bf16(const std::string& v, int w) {
  const std::string i32 = vec_type(w, "i32");
  const auto c = [&](uint32_t x) {
    return op(w == 1 ? fmt::format("arith.constant {} : i32", static_cast<int32_t>(x))
                     : fmt::format("arith.constant dense<{}> : {}", static_cast<int32_t>(x), i32));
  };
  const auto bin = [&](std::string_view mnemonic, const std::string& a, const std::string& b) {
    return op(fmt::format("{} {}, {} : {}", mnemonic, a, b, i32));
  };
  const std::string u = op(fmt::format("arith.bitcast {} : {} to {}", v, vec_type(w, "f32"), i32));
  const std::string high = bin("arith.shrui", u, c(16));
  const std::string bias = bin("arith.addi", bin("arith.andi", high, c(1)), c(0x7fff));
  const std::string rounded = bin("arith.shrui", bin("arith.addi", u, bias), c(16));
  const std::string nan = bin("arith.ori", bin("arith.andi", high, c(0x8000)), c(0x7fc0));
  const std::string is_nan = op(fmt::format("arith.cmpi ugt, {}, {} : {}",
                                            bin("arith.andi", u, c(0x7fffffff)), c(0x7f800000), i32));
  const std::string bits =
      w == 1 ? op(fmt::format("arith.select {}, {}, {} : i32", is_nan, nan, rounded))
             : op(fmt::format("arith.select {}, {}, {} : {}, {}", is_nan, nan, rounded,
                              vec_type(w, "i1"), i32));
  const std::string half =
      op(fmt::format("arith.trunci {} : {} to {}", bits, i32, vec_type(w, "i16")));
  return op(fmt::format("arith.bitcast {} : {} to {}", half, vec_type(w, "i16"),
                        vec_type(w, "bf16")));
}

std::string FunctionEmitter::zero_of(DType t, int w) {
  std::string z = op(fmt::format("arith.constant 0.0 : {}", mlir_type(t)));
  if (w == 1) return z;
  return op(
      fmt::format("vector.broadcast {} : {} to {}", z, mlir_type(t), vec_type(w, mlir_type(t))));
}

std::string FunctionEmitter::memref_load(const std::string& memref, const std::string& length,
                                         std::string_view scalar, const std::string& at, int w) {
  const std::string type = fmt::format("memref<{}x{}>", length, scalar);
  if (w == 1) return op(fmt::format("memref.load {}[{}] : {}", memref, at, type));
  return op(fmt::format("vector.load {}[{}] : {}, {}", memref, at, type, vec_type(w, scalar)));
}

void FunctionEmitter::memref_store(const std::string& memref, const std::string& length,
                                   std::string_view scalar, const std::string& at,
                                   const std::string& v, int w) {
  const std::string type = fmt::format("memref<{}x{}>", length, scalar);
  if (w == 1)
    line(fmt::format("memref.store {}, {}[{}] : {}", v, memref, at, type));
  else
    line(fmt::format("vector.store {}, {}[{}] : {}, {}", v, memref, at, type,
                     vec_type(w, scalar)));
}

std::string FunctionEmitter::load(int b, const std::string& offset, int w, int vdim) {
  const DType st = k_.buffers[b].dtype;
  const std::string memref = fmt::format("%m{}", b);
  if (w > 1 && k_.buffers[b].strides[vdim] != 0)  // lanes along the vector dim
    return convert(memref_load(memref, "?", mlir_type(st), offset, w), st, k_.compute, w);
  return broadcast(convert(memref_load(memref, "?", mlir_type(st), offset, 1), st, k_.compute, 1),
                   w);
}

void FunctionEmitter::store(int b, const std::string& value, const std::string& offset, int w) {
  const DType st = k_.buffers[b].dtype;
  memref_store(fmt::format("%m{}", b), "?", mlir_type(st), offset,
               convert(value, k_.compute, st, w), w);
}

// ---- scalar DAG ----------------------------------------------------------------------------
std::string FunctionEmitter::unary(std::string_view mnemonic, const std::string& x, int w) {
  return op(fmt::format("{} {} : {}", mnemonic, x, vec_type(w, compute_)));
}
std::string FunctionEmitter::binary(std::string_view mnemonic, const std::string& x,
                                    const std::string& y, int w) {
  return op(fmt::format("{} {}, {} : {}", mnemonic, x, y, vec_type(w, compute_)));
}
std::string FunctionEmitter::compare(std::string_view predicate, const std::string& x,
                                     const std::string& y, int w) {
  std::string c =
      op(fmt::format("arith.cmpf {}, {}, {} : {}", predicate, x, y, vec_type(w, compute_)));
  return op(fmt::format("arith.uitofp {} : {} to {}", c, vec_type(w, "i1"), vec_type(w, compute_)));
}
std::string FunctionEmitter::select(const std::string& cond, const std::string& x,
                                    const std::string& y, int w) {
  std::string c =
      op(fmt::format("arith.cmpf une, {}, {} : {}", cond, literal(0, w), vec_type(w, compute_)));
  return op(fmt::format("arith.select {}, {}, {} : {}, {}", c, x, y, vec_type(w, "i1"),
                        vec_type(w, compute_)));
}
std::string FunctionEmitter::sigmoid(const std::string& x, int w) {
  std::string e = unary("math.exp", unary("arith.negf", x, w), w);
  return binary("arith.divf", literal(1, w), binary("arith.addf", literal(1, w), e, w), w);
}
std::string FunctionEmitter::broadcast(const std::string& scalar, int w) {
  if (w == 1) return scalar;
  return op(fmt::format("vector.broadcast {} : {} to {}", scalar, compute_, vec_type(w, compute_)));
}

/// The index along `dim` as a compute value; along the vectorized dim lane l adds l.
std::string FunctionEmitter::index_value(const Point& at, int dim, int w, int vdim) {
  const std::string iv = at.ivs[dim].empty() ? index(0) : at.ivs[dim];
  std::string i = op(fmt::format("arith.index_cast {} : index to i64", iv));
  std::string v = broadcast(op(fmt::format("arith.sitofp {} : i64 to {}", i, compute_)), w);
  if (w == 1 || dim != vdim) return v;
  std::string lanes;
  for (int l = 0; l < w; ++l)
    lanes += fmt::format("{}{}.0", l ? ", " : "", l);
  std::string steps =
      op(fmt::format("arith.constant dense<[{}]> : {}", lanes, vec_type(w, compute_)));
  return binary("arith.addf", v, steps, w);
}

std::string FunctionEmitter::value(int i, const Point& at, int w, int vdim, Memo& memo) {
  if (auto it = memo.find(i); it != memo.end()) return it->second;
  const ScalarNode& n = k_.nodes[i];
  auto arg = [&](int o) { return value(o, at, w, vdim, memo); };
  std::string r;
  switch (n.op) {
    case ScalarOp::load:
      r = load(n.buffer, at.offsets[n.buffer], w, vdim);
      break;
    case ScalarOp::constant:
      r = literal(n.value, w);
      break;
    case ScalarOp::acc:
      r = acc_lanes_ == w ? accs_[n.stage] : broadcast(accs_[n.stage], w);
      break;
    case ScalarOp::index:
      r = index_value(at, n.dim, w, vdim);
      break;
    case ScalarOp::param:
      r = broadcast(params_[n.param], w);
      break;
    case ScalarOp::neg:
      r = unary("arith.negf", arg(n.a), w);
      break;
    case ScalarOp::abs:
      r = unary("math.absf", arg(n.a), w);
      break;
    case ScalarOp::exp:
      r = unary("math.exp", arg(n.a), w);
      break;
    case ScalarOp::log:
      r = unary("math.log", arg(n.a), w);
      break;
    case ScalarOp::sqrt:
      r = unary("math.sqrt", arg(n.a), w);
      break;
    case ScalarOp::rsqrt:
      r = unary("math.rsqrt", arg(n.a), w);
      break;
    case ScalarOp::tanh:
      r = unary("math.tanh", arg(n.a), w);
      break;
    case ScalarOp::erf: {  // odd: the sign put back keeps erf(-0) = -0 in the f32 approximation
      std::string x = arg(n.a);
      r = binary("math.copysign", unary("math.erf", x, w), x, w);
      break;
    }
    case ScalarOp::sin:
      r = unary("math.sin", arg(n.a), w);
      break;
    case ScalarOp::cos:
      r = unary("math.cos", arg(n.a), w);
      break;
    case ScalarOp::sigmoid:
      r = sigmoid(arg(n.a), w);
      break;
    case ScalarOp::relu: {  // x < 0 ? 0 : x, keeping -0 and NaN (torch.relu)
      std::string x = arg(n.a);
      r = select(compare("olt", x, literal(0, w), w), literal(0, w), x, w);
      break;
    }
    case ScalarOp::gelu: {  // x/2 · (1 + erf(x/√2)), PyTorch's exact GELU
      std::string x = arg(n.a);
      std::string e =
          unary("math.erf", binary("arith.mulf", x, literal(0.7071067811865476, w), w), w);
      r = binary("arith.mulf", binary("arith.mulf", x, literal(0.5, w), w),
                 binary("arith.addf", literal(1, w), e, w), w);
      break;
    }
    case ScalarOp::gelu_tanh: {  // x/2 · (1 + tanh(√(2/π)(x + 0.044715 x³))), Hendrycks & Gimpel
      std::string x = arg(n.a);
      std::string x3 = binary("arith.mulf", binary("arith.mulf", x, x, w), x, w);
      std::string inner =
          binary("arith.addf", x, binary("arith.mulf", x3, literal(0.044715, w), w), w);
      std::string t =
          unary("math.tanh", binary("arith.mulf", inner, literal(0.7978845608028654, w), w), w);
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
    case ScalarOp::reciprocal:
      r = binary("arith.divf", literal(1, w), arg(n.a), w);
      break;
    case ScalarOp::sign: {  // (x > 0) - (x < 0): 0 for ±0 and NaN (torch.sign)
      std::string x = arg(n.a);
      r = binary("arith.subf", compare("ogt", x, literal(0, w), w),
                 compare("olt", x, literal(0, w), w), w);
      break;
    }
    case ScalarOp::floor:
      r = unary("math.floor", arg(n.a), w);
      break;
    case ScalarOp::ceil:
      r = unary("math.ceil", arg(n.a), w);
      break;
    case ScalarOp::round:  // half to even (torch.round)
      r = unary("math.roundeven", arg(n.a), w);
      break;
    case ScalarOp::trunc:
      r = unary("math.trunc", arg(n.a), w);
      break;
    case ScalarOp::add:
      r = binary("arith.addf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::sub:
      r = binary("arith.subf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::mul:
      r = binary("arith.mulf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::div:
      r = binary("arith.divf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::pow:
      r = binary("math.powf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::maximum:
      r = binary("arith.maximumf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::minimum:
      r = binary("arith.minimumf", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::eq:
      r = compare("oeq", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::ne:
      r = compare("une", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::lt:
      r = compare("olt", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::le:
      r = compare("ole", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::gt:
      r = compare("ogt", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::ge:
      r = compare("oge", arg(n.a), arg(n.b), w);
      break;
    case ScalarOp::where:
      r = select(arg(n.a), arg(n.b), arg(n.c), w);
      break;
  }
  return memo[i] = r;
}

}  // namespace detail

namespace {

bool unit_or_zero(const Kernel& k, int dim, bool inputs_only) {
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    if (inputs_only && k.buffers[b].output) continue;
    const int64_t s = k.buffers[b].strides[dim];
    if (s != 0 && s != 1) return false;
  }
  return true;
}

/// Whether every output buffer (`full_only`: every output of a full store) has stride 1 along
/// `dim`.
bool outputs_unit(const Kernel& k, int dim, bool full_only) {
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    if (!k.buffers[b].output) continue;
    if (full_only && k.row_buffer(static_cast<int>(b))) continue;
    if (k.buffers[b].strides[dim] != 1) return false;
  }
  return true;
}

/// The largest step in bytes any buffer takes along the innermost reduced dim (a row's pitch).
int64_t row_pitch_bytes(const Kernel& k) {
  int64_t pitch = 0;
  if (k.reduced == 0) return 0;
  for (const KernelBuffer& b : k.buffers)
    pitch = std::max(pitch, std::abs(b.strides.back()) * static_cast<int64_t>(element_size(b.dtype)));
  return pitch;
}

/// From this pitch on, column sums run in panels.
constexpr int64_t kPanelPitch = 8192;

/// Row blocks: at least this many elements per block, at most this many blocks, and at most
/// this many bytes of accumulators on the stack (all stages together; an f32 kernel's sums
/// take 8 bytes a point).
constexpr int64_t kBlockWork = 65536;
constexpr int64_t kMaxBlocks = 32;
constexpr int64_t kMaxBlockSumBytes = 131072;

/// The rows per block of the row-block schedule for `k` (in mode B), 0 when it does not take
/// `k`: one parallel dim of at most kMaxBlockColumns points, one reduced dim, one pass, at
/// most kMaxBlockSumBytes of sums, and at least two blocks.
int64_t rows_per_block(const Kernel& k) {
  if (k.domain.size() != 2 || k.reduced != 1 || !detail::single_pass_possible(k)) return 0;
  const int64_t n = k.domain[0], rows = k.domain[1];
  if (n < 1 || n > kMaxBlockColumns) return 0;
  const int64_t sum_bytes = n * static_cast<int64_t>(k.stages.size()) *
                            static_cast<int64_t>(element_size(scratch_dtype(k)));
  if (sum_bytes > kMaxBlockSumBytes) return 0;
  int64_t block = std::max((kBlockWork + n - 1) / n, (rows + kMaxBlocks - 1) / kMaxBlocks);
  // An f32 kernel adds its f32 sums to f64 ones every kRowTerms rows (emit_mlir_columns.cpp):
  // blocks of whole such runs add them once a run, not once more for a short tail.
  if (k.compute == DType::f32 && block > detail::kRowTerms)
    block = (block + detail::kRowTerms - 1) / detail::kRowTerms * detail::kRowTerms;
  return rows >= 2 * block ? block : 0;
}

}  // namespace

CpuSchedule schedule_cpu(const Kernel& k, int threads) {
  CpuSchedule s;
  const int rank = static_cast<int>(k.domain.size());
  const int p = k.parallel_dims();
  s.vector_width = std::max<int>(1, 64 / static_cast<int>(element_size(k.compute)));
  int64_t reduced_points = 1;
  for (int d = p; d < rank; ++d)
    reduced_points *= k.domain[d];
  const bool has_arith = k.compute == DType::f32 || k.compute == DType::f64;
  // Vectorization depends only on which strides are 0 or 1, never on sizes, so one compiled
  // kernel serves every shape with the same stride pattern.
  const bool last_parallel_vec =
      p > 0 && unit_or_zero(k, p - 1, false) && outputs_unit(k, p - 1, false);
  if (k.reduced == 0) {
    if (last_parallel_vec) s.vector_dim = p - 1;
  } else if (has_arith && unit_or_zero(k, rank - 1, true) && outputs_unit(k, rank - 1, true)) {
    s.vector_dim = rank - 1;  // mode A
  } else if (has_arith && last_parallel_vec) {
    s.vector_dim = p - 1;  // mode B
    s.group = 4;
    // In panels when one pass serves (8 KB of each row a panel) and rows lie 8 KB or
    // more apart: walking 64 points down every row then reads 256 bytes of each buffer per
    // page. GELU's backward with its bias gradient ran 1.3-2.5 times faster in panels with
    // rows of 2048 to 4096 f32; with rows of 512 and 1024 the strips were level or faster
    // (ein_cpu_timings --only columns; BENCHMARKS.md, "Column sums in panels"). The choice
    // depends on stride values: the executor keys compiled code by it.
    // Row blocks first, where they apply: each block reads its rows whole, in order, which
    // the memory streams fastest (BENCHMARKS.md, "Column sums in row blocks").
    s.row_block = rows_per_block(k);
    if (s.row_block == 0 && detail::single_pass_possible(k) && row_pitch_bytes(k) >= kPanelPitch)
      s.panel = 8192 / static_cast<int64_t>(element_size(k.compute));
  }
  if (s.vector_dim < 0) s.vector_width = 1;
  if (p == 0) {
    s.chunk = 1;
    s.outer_iterations = 1;
    s.work_per_iteration = std::max<int64_t>(1, reduced_points);
    return s;
  }
  const int64_t n = k.domain[p - 1];
  if (s.row_block > 0) {
    s.chunk = s.row_block;
    s.outer_iterations = (k.domain[1] + s.row_block - 1) / s.row_block;
    s.work_per_iteration = s.row_block * n;
    return s;
  }
  // Aim for ~16K elements of work per outer iteration, in whole vectors; a panel schedule
  // gives each thread one panel of the row's points (at most `panel` of them).
  int64_t chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, reduced_points));
  if (s.panel > 0) {
    const int64_t share = (n + std::max(threads, 1) - 1) / std::max(threads, 1);
    chunk = std::min(s.panel, (share + s.vector_width - 1) / s.vector_width * s.vector_width);
  } else if (s.vector_dim == p - 1) {
    const int64_t whole = s.vector_width * s.group;
    chunk = (chunk + whole - 1) / whole * whole;
  }
  s.chunk = std::min(chunk, std::max<int64_t>(n, 1));
  int64_t outer = (n + s.chunk - 1) / s.chunk;
  for (int d = 0; d < p - 1; ++d)
    outer *= k.domain[d];
  s.outer_iterations = outer;
  s.work_per_iteration = s.chunk * std::max<int64_t>(1, reduced_points);
  return s;
}

std::vector<int64_t> kernel_parameters(const Kernel& k, const CpuSchedule& s) {
  std::vector<int64_t> out(k.domain.begin(), k.domain.end());
  for (const KernelBuffer& b : k.buffers)
    out.insert(out.end(), b.strides.begin(), b.strides.end());
  const int p = k.parallel_dims();
  const int64_t n = s.row_block > 0 ? k.domain[1] : p > 0 ? k.domain[p - 1] : 1;
  out.push_back(s.chunk);
  out.push_back((n + s.chunk - 1) / s.chunk);
  return out;
}

DType scratch_dtype(const Kernel& k) {
  return k.compute == DType::f32 ? DType::f64 : k.compute;
}

int64_t scratch_elements(const Kernel& k, const CpuSchedule& s) {
  if (s.row_block == 0) return 0;
  return s.outer_iterations * static_cast<int64_t>(k.stages.size()) * k.domain[0];
}

std::string emit_mlir(const Kernel& kernel, const CpuSchedule& schedule, std::string_view symbol) {
  const Kernel general = to_general_form(kernel);
  const std::string header =
      fmt::format("// ein kernel {}: {}\n", detail::comment_text(kernel.name),
                  detail::comment_text(kernel.origin));
  detail::FunctionEmitter emitter(general, schedule);
  return header + "module {\n" + emitter.run(symbol) + "}\n";
}

}  // namespace ein
