// Kernel IR → CUDA C++: the text writer (storage types, conversions, literals, index
// arithmetic, the scalar DAG), the prelude every kernel includes, the comment header and the
// dispatch to a strategy. The strategies live in emit_cuda_map.cpp (pointwise) and
// emit_cuda_reduce.cpp (rows and columns). Steps of emit_cuda():
//   1. prepare the kernel (compiler/kernel/prepare.h: the general form, total stores as
//      per-row scratch stores, which is the ABI in emit_cuda.h, coalesced) and verify it;
//   2. let the strategy write the entry's body and choose the launch;
//   3. assemble: header comment (user text through comment_text.h), the 16-bit types when a
//      buffer needs them (light ones, or cuda_fp16.h, cuda_bf16.h, cuda_fp8.h), prelude, entry
//      signature, parameter conversions, body.
// The scalar formulas are those of kernel_eval.cpp (the float64 oracle) and emit_mlir.cpp.
#include "compiler/emit/emit_cuda.h"
#include "compiler/kernel/prepare.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/comment_text.h"
#include "compiler/emit/emit_cuda_writer.h"

namespace ein {
namespace detail {

std::string_view cuda_storage_type(DType t) {
  switch (t) {
    case DType::f64:
      return "double";
    case DType::f32:
      return "float";
    case DType::f16:
      return "__half";
    case DType::bf16:
      return "__nv_bfloat16";
    case DType::f8e4m3:
      return "__nv_fp8_e4m3";
    case DType::f8e5m2:
      return "__nv_fp8_e5m2";
    case DType::i64:
      return "long long";
    case DType::i32:
      return "int";
    case DType::i8:
      return "signed char";
    case DType::u8:
      return "unsigned char";
    case DType::boolean:
      return "bool";
  }
  throw std::logic_error("internal error: unknown dtype");
}

int64_t grid_for(int64_t items, int64_t per_block) {
  if (items <= 0) return 0;
  return std::min<int64_t>((items + per_block - 1) / per_block, 65536);
}

CudaWriter::CudaWriter(const Kernel& kernel) : k(kernel), loaded_(kernel.buffers.size(), false) {
  ct = k.compute == DType::f32   ? "float"
       : k.compute == DType::f64 ? "double"
                                 : std::string(cuda_storage_type(k.compute));
  for (const ScalarNode& n : k.nodes)
    if (n.op == ScalarOp::load) loaded_[n.buffer] = true;
  // 32-bit index arithmetic while every offset and the loop counters (which may overshoot by
  // one grid of at most 2^16 × 1024 threads) stay below 2^31.
  int64_t reach = 1;
  for (int64_t n : k.domain)
    reach *= std::max<int64_t>(n, 1);
  for (const KernelBuffer& b : k.buffers) {
    int64_t last = 0;
    for (size_t d = 0; d < k.domain.size(); ++d)
      last += std::max<int64_t>(k.domain[d] - 1, 0) * std::abs(b.strides[d]);
    reach = std::max(reach, last + 1);
  }
  idx = reach < (int64_t{1} << 30) ? "int" : "long long";
}

void CudaWriter::line(std::string_view text) {
  body += std::string(2 * indent_, ' ');
  body += text;
  body += '\n';
}

void CudaWriter::open(std::string_view head) {
  line(std::string(head) + " {");
  ++indent_;
}

void CudaWriter::close() {
  --indent_;
  line("}");
}

std::string CudaWriter::literal(double v) const {
  const bool f = ct == "float";
  if (!f && ct != "double")
    throw std::logic_error("internal error: a literal in a kernel computing in " + ct);
  if (std::isnan(v)) return f ? "__int_as_float(0x7fc00000)" : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(v)) {
    const std::string inf = f ? "__int_as_float(0x7f800000)" : "__longlong_as_double(0x7ff0000000000000LL)";
    return v > 0 ? inf : "(-" + inf + ")";
  }
  // Shortest digits that round-trip in the compute type, so the literal is exact.
  std::string digits = f ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
  if (digits.find_first_of(".e") == std::string::npos) digits += ".0";
  if (f) digits += "f";
  return std::signbit(v) ? "(" + digits + ")" : digits;
}

std::string CudaWriter::combine(Combine c, const std::string& a, const std::string& b) const {
  switch (c) {
    case Combine::sum:
      return fmt::format("({} + {})", a, b);
    case Combine::prod:
      return fmt::format("({} * {})", a, b);
    case Combine::max:
      return fmt::format("ein_max({}, {})", a, b);
    case Combine::min:
      return fmt::format("ein_min({}, {})", a, b);
    case Combine::none:
      break;
  }
  throw std::logic_error("internal error: combine without a reduction");
}

std::string_view CudaWriter::combine_functor(Combine c) {
  switch (c) {
    case Combine::sum:
      return "EinSum";
    case Combine::prod:
      return "EinProd";
    case Combine::max:
      return "EinMax";
    case Combine::min:
      return "EinMin";
    case Combine::none:
      break;
  }
  throw std::logic_error("internal error: combine without a reduction");
}

std::string CudaWriter::to_compute(int b, const std::string& e) const {
  const DType from = k.buffers[b].dtype, to = k.compute;
  if (from == to) return e;
  if (to != DType::f32 && to != DType::f64)
    throw std::logic_error("internal error: a converting load in a kernel computing in " + ct);
  const bool f = to == DType::f32;
  switch (from) {
    case DType::f16:
      return f ? fmt::format("__half2float({})", e)
               : fmt::format("static_cast<double>(__half2float({}))", e);
    case DType::bf16:
      return f ? fmt::format("__bfloat162float({})", e)
               : fmt::format("static_cast<double>(__bfloat162float({}))", e);
    case DType::f8e4m3:
    case DType::f8e5m2:
      return f ? fmt::format("static_cast<float>({})", e)
               : fmt::format("static_cast<double>(static_cast<float>({}))", e);
    case DType::boolean:
      return fmt::format("({} ? {} : {})", e, literal(1), literal(0));
    default:
      return fmt::format("static_cast<{}>({})", ct, e);
  }
}

std::string CudaWriter::to_storage(int b, const std::string& e) const {
  const DType from = k.compute, to = k.buffers[b].dtype;
  if (from == to) return e;
  const bool f = from == DType::f32;
  switch (to) {
    case DType::f16:
      return (f ? "__float2half_rn(" : "__double2half(") + e + ")";
    case DType::bf16:
      return (f ? "__float2bfloat16_rn(" : "__double2bfloat16(") + e + ")";
    case DType::f8e4m3:  // the constructors round to nearest and saturate (__NV_SATFINITE)
      return fmt::format("__nv_fp8_e4m3({})", e);
    case DType::f8e5m2:
      return fmt::format("__nv_fp8_e5m2({})", e);
    case DType::boolean:
      return fmt::format("({} != {})", e, literal(0));
    default:
      return fmt::format("static_cast<{}>({})", cuda_storage_type(to), e);
  }
}

int64_t CudaWriter::extent(const std::vector<int>& dims) const {
  int64_t n = 1;
  for (int d : dims)
    n *= k.domain[d];
  return n;
}

void CudaWriter::decompose(const std::string& flat, const std::vector<int>& dims,
                           const std::string& rest) {
  if (dims.empty()) return;
  if (dims.size() == 1) {
    line(fmt::format("const {} i{} = {};", idx, dims[0], flat));
    return;
  }
  line(fmt::format("{} {} = {};", idx, rest, flat));
  for (size_t j = dims.size() - 1; j > 0; --j) {
    // max(n, 1): an empty domain never runs this code, but must not divide by zero.
    const int64_t n = std::max<int64_t>(k.domain[dims[j]], 1);
    line(fmt::format("const {} i{} = {} % {};", idx, dims[j], rest, n));
    line(fmt::format("{} /= {};", rest, n));
  }
  line(fmt::format("const {} i{} = {};", idx, dims[0], rest));
}

std::string CudaWriter::offset(int b, const std::vector<std::string>& index) const {
  std::vector<std::string> terms;
  for (size_t d = 0; d < k.domain.size(); ++d) {
    const int64_t s = k.buffers[b].strides[d];
    if (s == 0) continue;
    terms.push_back(s == 1 ? index[d] : fmt::format("{} * {}", index[d], s));
  }
  if (terms.empty()) return "0";
  if (terms.size() == 1) return terms[0];
  std::string out = "(" + terms[0];
  for (size_t i = 1; i < terms.size(); ++i)
    out += " + " + terms[i];
  return out + ")";
}

std::vector<std::string> CudaWriter::index_names() const {
  std::vector<std::string> names;
  for (size_t d = 0; d < k.domain.size(); ++d)
    names.push_back(fmt::format("i{}", d));
  return names;
}

CudaWriter::Point CudaWriter::direct_point(const std::vector<std::string>& index) const {
  Point at{std::vector<std::string>(k.buffers.size()), index};
  for (size_t b = 0; b < k.buffers.size(); ++b)
    if (loaded_[b]) at.load[b] = fmt::format("b{}[{}]", b, offset(static_cast<int>(b), index));
  return at;
}

std::string CudaWriter::math(std::string_view name) const {
  return ct == "float" ? std::string(name) + "f" : std::string(name);
}

std::string CudaWriter::value(int i, const Point& at, Memo& memo) {
  if (auto it = memo.find(i); it != memo.end()) return it->second;
  const ScalarNode& n = k.nodes[i];
  auto arg = [&](int o) { return value(o, at, memo); };
  auto call = [&](std::string_view fn, int o) { return fmt::format("{}({})", math(fn), arg(o)); };
  auto one = [&] { return literal(1); };  // only float kernels compute, copies just load
  std::string e;
  switch (n.op) {
    case ScalarOp::load:
      if (at.load[n.buffer].empty())
        throw std::logic_error(fmt::format("internal error: buffer {} is not readable here", n.buffer));
      e = to_compute(n.buffer, at.load[n.buffer]);
      break;
    case ScalarOp::constant:
      return memo[i] = literal(n.value);
    case ScalarOp::acc:
      return memo[i] = fmt::format("a{}", n.stage);
    case ScalarOp::index:
      e = fmt::format("static_cast<{}>({})", ct, at.index[n.dim]);
      break;
    case ScalarOp::param:
      return memo[i] = fmt::format("q{}", n.param);
    case ScalarOp::neg:
      e = "-" + arg(n.a);
      break;
    case ScalarOp::abs:
      e = call("fabs", n.a);
      break;
    case ScalarOp::exp:
      e = call("exp", n.a);
      break;
    case ScalarOp::log:
      e = call("log", n.a);
      break;
    case ScalarOp::sqrt:
      e = call("sqrt", n.a);
      break;
    case ScalarOp::rsqrt:
      e = call("rsqrt", n.a);
      break;
    case ScalarOp::tanh:
      e = call("tanh", n.a);
      break;
    case ScalarOp::erf:
      e = call("erf", n.a);
      break;
    case ScalarOp::sin:
      e = call("sin", n.a);
      break;
    case ScalarOp::cos:
      e = call("cos", n.a);
      break;
    case ScalarOp::sigmoid:
      e = fmt::format("{} / ({} + {}(-{}))", one(), one(), math("exp"), arg(n.a));
      break;
    case ScalarOp::relu:
      e = fmt::format("ein_relu({})", arg(n.a));
      break;
    case ScalarOp::gelu: {  // x/2 · (1 + erf(x/√2)), PyTorch's exact GELU
      const std::string x = arg(n.a);
      e = fmt::format("{} * {} * ({} + {}({} * {}))", literal(0.5), x, one(), math("erf"), x,
                      literal(0.7071067811865476));
      break;
    }
    case ScalarOp::gelu_tanh: {  // x/2 · (1 + tanh(√(2/π)(x + 0.044715 x³))), Hendrycks & Gimpel
      const std::string x = arg(n.a);
      e = fmt::format("{} * {} * ({} + {}({} * ({} + {} * {} * {} * {})))", literal(0.5), x, one(),
                      math("tanh"), literal(0.7978845608028654), x, literal(0.044715), x, x, x);
      break;
    }
    case ScalarOp::silu: {
      const std::string x = arg(n.a);
      e = fmt::format("{} / ({} + {}(-{}))", x, one(), math("exp"), x);
      break;
    }
    case ScalarOp::square: {
      const std::string x = arg(n.a);
      e = x + " * " + x;
      break;
    }
    case ScalarOp::reciprocal:
      e = fmt::format("{} / {}", one(), arg(n.a));
      break;
    case ScalarOp::sign:
      e = fmt::format("ein_sign({})", arg(n.a));
      break;
    case ScalarOp::floor:
      e = call("floor", n.a);
      break;
    case ScalarOp::ceil:
      e = call("ceil", n.a);
      break;
    case ScalarOp::round:  // rint: half to even in the default rounding mode (torch.round)
      e = call("rint", n.a);
      break;
    case ScalarOp::trunc:
      e = call("trunc", n.a);
      break;
    case ScalarOp::add:
      e = arg(n.a) + " + " + arg(n.b);
      break;
    case ScalarOp::sub:
      e = arg(n.a) + " - " + arg(n.b);
      break;
    case ScalarOp::mul:
      e = arg(n.a) + " * " + arg(n.b);
      break;
    case ScalarOp::div:
      e = arg(n.a) + " / " + arg(n.b);
      break;
    case ScalarOp::pow:
      e = fmt::format("{}({}, {})", math("pow"), arg(n.a), arg(n.b));
      break;
    case ScalarOp::maximum:
      e = fmt::format("ein_max({}, {})", arg(n.a), arg(n.b));
      break;
    case ScalarOp::minimum:
      e = fmt::format("ein_min({}, {})", arg(n.a), arg(n.b));
      break;
    case ScalarOp::eq:
    case ScalarOp::ne:
    case ScalarOp::lt:
    case ScalarOp::le:
    case ScalarOp::gt:
    case ScalarOp::ge: {
      const char* cmp = n.op == ScalarOp::eq   ? "=="
                        : n.op == ScalarOp::ne ? "!="
                        : n.op == ScalarOp::lt ? "<"
                        : n.op == ScalarOp::le ? "<="
                        : n.op == ScalarOp::gt ? ">"
                                               : ">=";
      e = fmt::format("{} {} {} ? {} : {}", arg(n.a), cmp, arg(n.b), one(), literal(0));
      break;
    }
    case ScalarOp::where:
      e = fmt::format("{} != {} ? {} : {}", arg(n.a), literal(0), arg(n.b), arg(n.c));
      break;
  }
  const std::string v = fmt::format("v{}", i);
  line(fmt::format("const {} {} = {};", ct, v, e));
  return memo[i] = v;
}

}  // namespace detail

namespace {

// The 16-bit float types as a kernel computing in f32 uses them (storage, and conversions to
// and from f32) without <cuda_fp16.h> or <cuda_bf16.h>: parsing one is about half of NVRTC's
// front end for a small kernel (7 of 15 ms; docs/cuda.md, "NVRTC"). On sm_80 and newer
// these are the headers' own instructions, so the cubin is the same (corpus_compile_test.cpp
// compares them); older targets and the host emulation take the headers.
constexpr const char* kLightHalf = R"(#if defined(EIN_EMULATED_CUDA) || __CUDA_ARCH__ < 800
#include <cuda_fp16.h>
#else
struct __align__(2) __half { unsigned short x; };
__device__ __forceinline__ float __half2float(__half h) {
  float f;
  asm("{  cvt.f32.f16 %0, %1;}\n" : "=f"(f) : "h"(h.x));
  return f;
}
__device__ __forceinline__ __half __float2half_rn(float f) {
  __half h;
  asm("{  cvt.rn.f16.f32 %0, %1;}\n" : "=h"(h.x) : "f"(f));
  return h;
}
#endif
)";
constexpr const char* kLightBf16 = R"(#if defined(EIN_EMULATED_CUDA) || __CUDA_ARCH__ < 800
#include <cuda_bf16.h>
#else
struct __align__(2) __nv_bfloat16 { unsigned short x; };
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) {
  float f;
#if __CUDA_ARCH__ >= 900
  asm("{ cvt.f32.bf16 %0, %1;}\n" : "=f"(f) : "h"(h.x));
#else
  asm("{ mov.b32 %0, {0,%1};}\n" : "=f"(f) : "h"(h.x));
#endif
  return f;
}
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 h;
  asm("{  cvt.rn.bf16.f32 %0, %1;}\n" : "=h"(h.x) : "f"(f));
  return h;
}
#endif
)";

// Helpers every kernel may use, with the semantics of apply_scalar_op() (kernel/scalar_math.h):
// max and min propagate NaN like torch.amax and order -0 below +0 (IEEE 754-2019 maximum);
// for f32 and f64 through the hardware's max and min (fmaxf: the larger of two distinct
// numbers), a zero result taking its sign from the operands' (max: -0 only if both have the
// sign bit, the other being ≤ 0; min: -0 if either has it), which NVRTC compiles in 1-3 ms
// less than the generic form for a softmax row (signbit is costly to it; docs/cuda.md,
// "NVRTC"); relu keeps -0 and NaN (torch.relu); sign is 0 for ±0 and NaN (torch.sign). The
// reductions are the textbook shuffle trees (CUDA Programming Guide, "Warp Shuffle
// Functions"); ein_vec is PyTorch's aligned_vector: alignas makes the compiler issue one
// 16-byte ld/st.global.v4 per vector.
constexpr const char* kPrelude =
    R"(// ---- ein prelude ----------------------------------------------------------------------
template <class T> __device__ __forceinline__ T ein_max(T a, T b) { return (a != a || b != b) ? a + b : (a > b ? a : (b > a ? b : (signbit(a) ? b : a))); }
template <class T> __device__ __forceinline__ T ein_min(T a, T b) { return (a != a || b != b) ? a + b : (a < b ? a : (b < a ? b : (signbit(a) ? a : b))); }
__device__ __forceinline__ float ein_max(float a, float b) {
  const float m = fmaxf(a, b);
  const unsigned sign = __float_as_uint(a) & __float_as_uint(b) & 0x80000000u;
  return (a != a || b != b) ? a + b : (m == 0.0f ? __uint_as_float(sign) : m);
}
__device__ __forceinline__ float ein_min(float a, float b) {
  const float m = fminf(a, b);
  const unsigned sign = (__float_as_uint(a) | __float_as_uint(b)) & 0x80000000u;
  return (a != a || b != b) ? a + b : (m == 0.0f ? __uint_as_float(sign) : m);
}
__device__ __forceinline__ double ein_max(double a, double b) {
  const double m = fmax(a, b);
  const long long bit = -9223372036854775807ll - 1;  // the sign bit
  const long long sign = __double_as_longlong(a) & __double_as_longlong(b) & bit;
  return (a != a || b != b) ? a + b : (m == 0.0 ? __longlong_as_double(sign) : m);
}
__device__ __forceinline__ double ein_min(double a, double b) {
  const double m = fmin(a, b);
  const long long bit = -9223372036854775807ll - 1;  // the sign bit
  const long long sign = (__double_as_longlong(a) | __double_as_longlong(b)) & bit;
  return (a != a || b != b) ? a + b : (m == 0.0 ? __longlong_as_double(sign) : m);
}
template <class T> __device__ __forceinline__ T ein_relu(T x) { return x < T(0) ? T(0) : x; }
template <class T> __device__ __forceinline__ T ein_sign(T x) { return T(x > T(0) ? 1 : 0) - T(x < T(0) ? 1 : 0); }
struct EinSum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct EinProd { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; } };
struct EinMax { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return ein_max(a, b); } };
struct EinMin { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return ein_min(a, b); } };
// Every lane of the warp gets the combine of the 32 lanes' values.
template <class T, class Op> __device__ __forceinline__ T ein_warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// Every thread of a block of kWarps warps gets the combine of all threads' values; scratch
// holds kWarps values (the leading barrier lets consecutive calls reuse it).
template <int kWarps, class T, class Op> __device__ __forceinline__ T ein_block_reduce(T v, Op op, T* scratch) {
  v = ein_warp_reduce(v, op);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  return r;
}
template <class T, int N> struct alignas(sizeof(T) * N) ein_vec { T v[N]; };
template <int N, class T> __device__ __forceinline__ ein_vec<T, N> ein_load_vec(const T* p) { return *reinterpret_cast<const ein_vec<T, N>*>(p); }
template <int N, class T> __device__ __forceinline__ void ein_store_vec(T* p, const ein_vec<T, N>& v) { *reinterpret_cast<ein_vec<T, N>*>(p) = v; }
__device__ __forceinline__ bool ein_aligned(const void* p, unsigned bytes) { return (reinterpret_cast<unsigned long long>(p) & (bytes - 1)) == 0; }
// ---- end of prelude -------------------------------------------------------------------
)";

/// "ein_" + the kernel's name with every run of other characters than letters and digits
/// as one '_' (a C identifier, readable in profiler listings).
std::string identifier(std::string_view name) {
  std::string out = "ein_";
  for (char c : name) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c));
    if (keep || out.back() != '_') out += keep ? c : '_';
  }
  return out;
}

std::string dims_text(const Shape& s, int split) {
  std::string out = "[";
  for (size_t d = 0; d < s.size(); ++d) {
    if (static_cast<int>(d) == split) out += d ? " |" : "|";
    out += (d ? " " : "") + std::to_string(s[d]);
  }
  if (split == static_cast<int>(s.size()) && split > 0) out += " |";
  return out + "]";
}

std::string strategy_note(const CudaKernel& c) {
  switch (c.strategy) {
    case CudaStrategy::elementwise:
      return c.vector_width > 1
                 ? fmt::format("grid-stride over points, {} elements per 16-byte-or-less vector "
                               "access when every contiguous pointer is aligned",
                               c.vector_width)
                 : "grid-stride over points, scalar accesses";
    case CudaStrategy::tiled_permute:
      return "32x32 tiles through shared memory: reads coalesced along the input's contiguous "
             "dim, writes along the output's";
    case CudaStrategy::row_warp:
      return fmt::format("one warp per row, 8 rows per block, warp-shuffle reductions{}",
                         c.row_on_chip ? ", the row kept in registers" : "");
    case CudaStrategy::row_block:
      return fmt::format("one block per row, warp shuffles then shared memory{}",
                         c.row_on_chip ? ", the row kept in registers" : "");
    case CudaStrategy::column:
      return "one thread per row, adjacent threads on adjacent (contiguous) rows";
  }
  return "";
}

}  // namespace

std::string_view cuda_strategy_name(CudaStrategy s) {
  switch (s) {
    case CudaStrategy::elementwise:
      return "elementwise";
    case CudaStrategy::tiled_permute:
      return "tiled_permute";
    case CudaStrategy::row_warp:
      return "row_warp";
    case CudaStrategy::row_block:
      return "row_block";
    case CudaStrategy::column:
      return "column";
  }
  return "?";
}

CudaKernel emit_cuda(const Kernel& kernel) {
  verify(kernel);
  const Kernel k = prepare_kernel(kernel);  // totals become scratch rows (the ABI in emit_cuda.h)
  verify(k);

  detail::CudaWriter w(k);
  CudaKernel out;
  out.entry = identifier(kernel.name.empty() ? "kernel" : kernel.name);
  if (k.reduced == 0)
    detail::emit_pointwise(w, out);
  else
    detail::emit_reduction(w, out);

  bool f16 = false, bf16 = false, f8 = false;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    f16 = f16 || buf.dtype == DType::f16;
    bf16 = bf16 || buf.dtype == DType::bf16;
    f8 = f8 || buf.dtype == DType::f8e4m3 || buf.dtype == DType::f8e5m2;
    out.parameters.push_back(fmt::format("{}{}* b{}", buf.output ? "" : "const ",
                                         detail::cuda_storage_type(buf.dtype), b));
  }
  for (size_t j = 0; j < k.params.size(); ++j)
    out.parameters.push_back(fmt::format("double p{}", j));

  std::string src = fmt::format("// ein CUDA kernel {} (compiler/emit/emit_cuda.cpp)\n", out.entry);
  src += fmt::format("// origin:   {}\n",
                     detail::comment_text(kernel.origin.empty() ? kernel.name : kernel.origin));
  src += fmt::format("// domain:   {} (parallel | reduced), compute {}\n",
                     dims_text(k.domain, k.parallel_dims()), dtype_name(k.compute));
  for (size_t b = 0; b < k.buffers.size(); ++b)
    src += fmt::format("// b{}:       {} {}, strides {} (elements)\n", b,
                       dtype_name(k.buffers[b].dtype), k.buffers[b].output ? "output" : "input",
                       dims_text(k.buffers[b].strides, -1));
  src += fmt::format("// strategy: {}: {}\n", cuda_strategy_name(out.strategy), strategy_note(out));
  src += fmt::format("// launch:   grid {} x block {}, {} bytes of static shared memory\n",
                     out.launch.grid, out.launch.block, out.launch.shared_bytes);
  src += "// ABI:      buffers in Kernel IR order (inputs, then outputs), then params as double\n";
  // The light types serve f32 kernels without fp8 (whose header brings the full ones).
  const bool light = k.compute != DType::f64 && !f8;
  if (f16) src += light ? kLightHalf : "#include <cuda_fp16.h>\n";
  if (bf16) src += light ? kLightBf16 : "#include <cuda_bf16.h>\n";
  if (f8) src += "#include <cuda_fp8.h>\n";
  src += kPrelude;
  src += fmt::format("\nextern \"C\" __global__ void __launch_bounds__({}) {}(", out.launch.block,
                     out.entry);
  for (size_t i = 0; i < out.parameters.size(); ++i)
    src += (i ? ", " : "") + out.parameters[i];
  src += ") {\n";
  for (size_t j = 0; j < k.params.size(); ++j)
    src += fmt::format("  const {} q{} = static_cast<{}>(p{});\n", w.ct, j, w.ct, j);
  out.source = src + w.body + "}\n";
  return out;
}

}  // namespace ein
