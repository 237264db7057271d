// cuBLASLt through dlopen and the GemmBatch mapping (runtime/cuda/cublaslt.h). The entry points and
// enum values are declared here as cublasLt.h, cublas_api.h and library_types.h (CUDA 13)
// define them, so this file builds without the toolkit. Steps of cublaslt_gemm():
//   1. plan (the pure mapping); nothing to do for an empty plan;
//   2. the device's cuBLASLt handle (created once per device, in its primary context);
//   3. descriptors from the plan; the first algorithm cublasLtMatmulAlgoGetHeuristic offers;
//   4. a workspace from the caching allocator on the call's stream; cublasLtMatmul on it.
#include "runtime/cuda/cublaslt.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "runtime/cuda/backend.h"
#include "runtime/dynamic_library.h"
#include <ein/storage.h>

namespace ein {
namespace {

// cudaDataType (library_types.h) and cublasComputeType_t (cublas_api.h).
constexpr int kR32F = 0, kR64F = 1, kR16F = 2, kR16BF = 14;
constexpr int kCompute32F = 68, kCompute32FFastTf32 = 77, kCompute64F = 70;
// cublasLtMatrixLayoutAttribute_t, cublasLtMatmulDescAttributes_t,
// cublasLtMatmulPreferenceAttributes_t.
constexpr int kLayoutType = 0, kLayoutRows = 2, kLayoutCols = 3, kLayoutLd = 4,
              kLayoutBatchCount = 5, kLayoutBatchStride = 6;
constexpr int kDescComputeType = 0, kDescScaleType = 1, kDescTransA = 3, kDescTransB = 4;
constexpr int kPrefMaxWorkspace = 1;
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES: without them the heuristic may pick an
// algorithm that needs more alignment than a view's pointer has.
constexpr int kPrefAlignment[4] = {5, 6, 7, 8};
// cuBLAS's recommendation for Hopper (cuBLAS docs, "cublasSetWorkspace"); enough for Ampere.
constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;
constexpr int kMaxDevices = 64;

using Layout = struct LayoutOpaque*;
using MatmulDesc = struct MatmulDescOpaque*;
using Preference = struct PreferenceOpaque*;
using Handle = struct HandleOpaque*;
struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {  // cublasLtMatmulHeuristicResult_t
  Algo algo;
  size_t workspace_size;
  int state;
  float waves_count;
  int reserved[4];
};

struct LtApi {
  size_t (*get_version)() = nullptr;
  const char* (*status_name)(int) = nullptr;
  const char* (*status_string)(int) = nullptr;
  int (*create)(Handle*) = nullptr;
  int (*layout_create)(Layout*, int, uint64_t, uint64_t, int64_t) = nullptr;
  int (*layout_destroy)(Layout) = nullptr;
  int (*layout_set)(Layout, int, const void*, size_t) = nullptr;
  int (*layout_get)(Layout, int, void*, size_t, size_t*) = nullptr;
  int (*desc_create)(MatmulDesc*, int, int) = nullptr;
  int (*desc_destroy)(MatmulDesc) = nullptr;
  int (*desc_set)(MatmulDesc, int, const void*, size_t) = nullptr;
  int (*desc_get)(MatmulDesc, int, void*, size_t, size_t*) = nullptr;
  int (*pref_create)(Preference*) = nullptr;
  int (*pref_destroy)(Preference) = nullptr;
  int (*pref_set)(Preference, int, const void*, size_t) = nullptr;
  int (*heuristic)(Handle, MatmulDesc, Layout, Layout, Layout, Layout, Preference, int,
                   HeuristicResult*, int*) = nullptr;
  int (*matmul)(Handle, MatmulDesc, const void*, const void*, Layout, const void*, Layout,
                const void*, const void*, Layout, void*, Layout, const Algo*, void*, size_t,
                CuStream) = nullptr;
};

LtApi g_lt;  // filled once under cublaslt_info()'s initialisation

void check_lt(int status, const char* call) {
  if (status == 0) return;
  const char* name = g_lt.status_name ? g_lt.status_name(status) : nullptr;
  const char* text = g_lt.status_string ? g_lt.status_string(status) : nullptr;
  throw DeviceError(std::string(call) + " failed: " + (name ? name : "cublasStatus_t") + " (" +
                    std::to_string(status) + ")" + (text ? std::string(": ") + text : ""));
}

const LtApi& lt() {
  const CublasLtInfo& info = cublaslt_info();
  if (!info.available) throw DeviceError(info.reason);
  return g_lt;
}

CublasLtInfo load_cublaslt(const std::vector<std::string>& candidates) {
  CublasLtInfo info;
  detail::DynamicLibrary lib = detail::DynamicLibrary::open(candidates);
  if (!lib.handle) {
    info.reason =
        "GEMMs on the GPU need cuBLASLt (libcublasLt from the CUDA toolkit), which "
        "could not be loaded; tried:" +
        lib.tried;
    return info;
  }
  info.library = lib.name;
  LtApi api;
  const auto sym = [&](auto& fn, const char* name) { lib.bind(fn, name); };
  sym(api.get_version, "cublasLtGetVersion");
  sym(api.status_name, "cublasLtGetStatusName");
  sym(api.status_string, "cublasLtGetStatusString");
  sym(api.create, "cublasLtCreate");
  sym(api.layout_create, "cublasLtMatrixLayoutCreate");
  sym(api.layout_destroy, "cublasLtMatrixLayoutDestroy");
  sym(api.layout_set, "cublasLtMatrixLayoutSetAttribute");
  sym(api.layout_get, "cublasLtMatrixLayoutGetAttribute");
  sym(api.desc_create, "cublasLtMatmulDescCreate");
  sym(api.desc_destroy, "cublasLtMatmulDescDestroy");
  sym(api.desc_set, "cublasLtMatmulDescSetAttribute");
  sym(api.desc_get, "cublasLtMatmulDescGetAttribute");
  sym(api.pref_create, "cublasLtMatmulPreferenceCreate");
  sym(api.pref_destroy, "cublasLtMatmulPreferenceDestroy");
  sym(api.pref_set, "cublasLtMatmulPreferenceSetAttribute");
  sym(api.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  sym(api.matmul, "cublasLtMatmul");
  if (!lib.missing.empty()) {
    info.reason = "the cuBLASLt library " + info.library + " lacks " + lib.missing;
    ::dlclose(lib.handle);
    return info;
  }
  info.version = static_cast<int64_t>(api.get_version());
  info.available = true;
  g_lt = api;
  return info;
}

/// The plan's descriptors, destroyed with the object.
class Descriptors {
 public:
  explicit Descriptors(const CublasLtPlan& p) {
    try {
      create(p);
    } catch (...) {
      release();
      throw;
    }
  }
  ~Descriptors() { release(); }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  std::array<Layout, 3> layouts{};  // A, B, C (= D)
  MatmulDesc desc = nullptr;

 private:
  void create(const CublasLtPlan& p) {
    const LtApi& api = lt();
    for (int i = 0; i < 3; ++i) {
      const CublasLtLayout& l = i == 0 ? p.a : i == 1 ? p.b : p.c;
      check_lt(api.layout_create(&layouts[i], l.data_type, l.rows, l.cols, l.ld),
               "cublasLtMatrixLayoutCreate");
      check_lt(api.layout_set(layouts[i], kLayoutBatchCount, &l.batch_count, sizeof l.batch_count),
               "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
      check_lt(
          api.layout_set(layouts[i], kLayoutBatchStride, &l.batch_stride, sizeof l.batch_stride),
          "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    }
    check_lt(api.desc_create(&desc, p.compute_type, p.scale_type), "cublasLtMatmulDescCreate");
    const int32_t ta = p.trans_a ? 1 : 0, tb = p.trans_b ? 1 : 0;  // CUBLAS_OP_T : CUBLAS_OP_N
    check_lt(api.desc_set(desc, kDescTransA, &ta, sizeof ta),
             "cublasLtMatmulDescSetAttribute(TRANSA)");
    check_lt(api.desc_set(desc, kDescTransB, &tb, sizeof tb),
             "cublasLtMatmulDescSetAttribute(TRANSB)");
  }
  void release() {
    for (Layout l : layouts)
      if (l) g_lt.layout_destroy(l);
    if (desc) g_lt.desc_destroy(desc);
  }
};

template <typename T>
T layout_attribute(Layout l, int attribute) {
  T value{};
  size_t written = 0;
  check_lt(g_lt.layout_get(l, attribute, &value, sizeof value, &written),
           "cublasLtMatrixLayoutGetAttribute");
  return value;
}

int32_t desc_attribute(MatmulDesc d, int attribute) {
  int32_t value = 0;
  size_t written = 0;
  check_lt(g_lt.desc_get(d, attribute, &value, sizeof value, &written),
           "cublasLtMatmulDescGetAttribute");
  return value;
}

Handle handle_for(int device) {
  static std::mutex mutex;
  static std::array<Handle, kMaxDevices> handles{};  // kept for the process, like the contexts
  std::lock_guard lock(mutex);
  if (!handles[device]) {
    make_cuda_context_current(device);
    check_lt(lt().create(&handles[device]), "cublasLtCreate");
  }
  return handles[device];
}

std::string plan_text(const CublasLtPlan& p) {
  auto layout = [](const CublasLtLayout& l) {
    return "type " + std::to_string(l.data_type) + " " + std::to_string(l.rows) + "x" +
           std::to_string(l.cols) + " ld " + std::to_string(l.ld) + " batch " +
           std::to_string(l.batch_count) + " stride " + std::to_string(l.batch_stride);
  };
  return "A(" + layout(p.a) + (p.trans_a ? ", T" : ", N") + ") B(" + layout(p.b) +
         (p.trans_b ? ", T" : ", N") + ") C(" + layout(p.c) + ") compute " +
         std::to_string(p.compute_type);
}

}  // namespace

CublasLtPlan plan_cublaslt_gemm(const GemmBatch& g, GemmMath math) {
  CublasLtPlan p;
  int type = 0;
  switch (g.dtype) {
    case DType::f32:
      type = kR32F;
      break;
    case DType::f64:
      type = kR64F;
      break;
    case DType::f16:
      type = kR16F;
      break;
    case DType::bf16:
      type = kR16BF;
      break;
    default:
      throw RuntimeError("cuBLASLt GEMM: dtype " + std::string(dtype_name(g.dtype)) +
                         " is not supported (f32, f64, f16 or bf16)");
  }
  if (math == GemmMath::tf32 && g.dtype != DType::f32)
    throw RuntimeError("cuBLASLt GEMM: TF32 math is for f32 inputs, not " +
                       std::string(dtype_name(g.dtype)));
  auto check_ld = [](const char* name, int64_t ld, int64_t row) {
    if (ld < std::max<int64_t>(1, row))
      throw RuntimeError(std::string("cuBLASLt GEMM: ") + name + " = " + std::to_string(ld) +
                         " is smaller than its row of " + std::to_string(row) + " elements");
  };
  check_ld("lda", g.lda, g.trans_a ? g.m : g.k);
  check_ld("ldb", g.ldb, g.trans_b ? g.k : g.n);
  check_ld("ldc", g.ldc, g.n);
  p.empty = g.batch == 0 || g.m == 0 || g.n == 0;
  if (!p.empty && g.k == 0)
    throw RuntimeError("cuBLASLt GEMM: k = 0 (C = beta·C) is not a cuBLASLt call");
  if (g.batch > 1 && g.stride_c == 0)
    throw RuntimeError("cuBLASLt GEMM: a batch of " + std::to_string(g.batch) +
                       " GEMMs with C's batch stride 0 would write one C from every GEMM");
  if (g.batch > INT32_MAX)
    throw RuntimeError("cuBLASLt GEMM: a batch of " + std::to_string(g.batch) +
                       " exceeds cuBLASLt's int32 batch count");
  const auto batch = static_cast<int32_t>(g.batch);
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  // cuBLASLt's A: the stored B[i] read column-major (its transpose).
  p.trans_a = g.trans_b;
  p.a = {type, u(g.trans_b ? g.k : g.n), u(g.trans_b ? g.n : g.k), g.ldb, batch, g.stride_b};
  // cuBLASLt's B: the stored A[i] read column-major.
  p.trans_b = g.trans_a;
  p.b = {type, u(g.trans_a ? g.m : g.k), u(g.trans_a ? g.k : g.m), g.lda, batch, g.stride_a};
  p.c = {type, u(g.n), u(g.m), g.ldc, batch, g.stride_c};
  p.compute_type = g.dtype == DType::f64    ? kCompute64F
                   : math == GemmMath::tf32 ? kCompute32FFastTf32
                                            : kCompute32F;
  p.scale_type = g.dtype == DType::f64 ? kR64F : kR32F;
  p.a_ptr = g.b;
  p.b_ptr = g.a;
  p.c_ptr = g.c;
  return p;
}

const CublasLtInfo& cublaslt_info() {
  static const CublasLtInfo info = [] {
    std::vector<std::string> candidates;
    if (const char* path = std::getenv("EIN_CUBLASLT"); path && *path) candidates.push_back(path);
    candidates.insert(candidates.end(),
                      {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"});
    return load_cublaslt(candidates);
  }();
  return info;
}

namespace {

/// The largest power of two up to 256 that divides the address (what cuBLASLt's alignment
/// preferences take).
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

/// What the heuristic's answer depends on: the plan without its pointers, the pointers'
/// alignments and the device.
struct HeuristicKey {
  CublasLtPlan plan;  // pointers cleared
  std::array<uint32_t, 3> alignments{};
  int device = 0;
  bool operator<(const HeuristicKey& o) const {
    auto tie = [](const HeuristicKey& k) {
      const CublasLtPlan& p = k.plan;
      auto layout = [](const CublasLtLayout& l) {
        return std::tuple(l.data_type, l.rows, l.cols, l.ld, l.batch_count, l.batch_stride);
      };
      return std::tuple(k.device, k.alignments, p.trans_a, p.trans_b, layout(p.a), layout(p.b),
                        layout(p.c), p.compute_type, p.scale_type);
    };
    return tie(*this) < tie(o);
  }
};

/// The heuristic's first algorithm for `p` (asked once per key, like PyTorch's cache of
/// cuBLASLt algorithms): the call costs tens of microseconds, a lookup does not.
HeuristicResult algorithm_for(const CublasLtPlan& p, const Descriptors& d, Handle handle,
                              int device) {
  HeuristicKey key{p, {alignment_of(p.a_ptr), alignment_of(p.b_ptr), alignment_of(p.c_ptr)},
                   device};
  key.plan.a_ptr = key.plan.b_ptr = nullptr;
  key.plan.c_ptr = nullptr;
  static std::mutex mutex;
  static auto* cache = new std::map<HeuristicKey, HeuristicResult>;  // outlives exit's GEMMs
  {
    std::lock_guard lock(mutex);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  const LtApi& api = lt();
  Preference pref = nullptr;
  check_lt(api.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace_bytes = kWorkspaceBytes;
  HeuristicResult result{};
  int found = 0;
  const int status = [&] {
    int s = api.pref_set(pref, kPrefMaxWorkspace, &workspace_bytes, sizeof workspace_bytes);
    const uint32_t align[4] = {key.alignments[0], key.alignments[1], key.alignments[2],
                               key.alignments[2]};
    for (int i = 0; i < 4 && s == 0; ++i)
      s = api.pref_set(pref, kPrefAlignment[i], &align[i], sizeof align[i]);
    return s != 0 ? s
                  : api.heuristic(handle, d.desc, d.layouts[0], d.layouts[1], d.layouts[2],
                                  d.layouts[2], pref, 1, &result, &found);
  }();
  api.pref_destroy(pref);
  check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw DeviceError("cuBLASLt has no algorithm for this GEMM: " + plan_text(p));
  std::lock_guard lock(mutex);
  cache->emplace(key, result);
  return result;
}

}  // namespace

void cublaslt_gemm(const GemmBatch& g, GemmMath math, const Stream& stream) {
  const CublasLtPlan p = plan_cublaslt_gemm(g, math);
  if (p.empty) return;
  const LtApi& api = lt();
  const int device = stream.device();
  Handle handle = handle_for(device);
  make_cuda_context_current(device);
  const Descriptors d(p);
  const HeuristicResult result = algorithm_for(p, d, handle, device);

  // The workspace is a block of the call's stream: freed right after, reused in stream order.
  std::shared_ptr<Storage> workspace;
  {
    StreamGuard guard(stream);
    workspace = Storage::allocate(static_cast<int64_t>(result.workspace_size), cuda(device));
  }
  const float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  const bool f64 = p.scale_type == kR64F;
  const void* alpha = f64 ? static_cast<const void*>(&g.alpha) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&g.beta) : &beta32;
  check_lt(api.matmul(handle, d.desc, alpha, p.a_ptr, d.layouts[0], p.b_ptr, d.layouts[1], beta,
                      p.c_ptr, d.layouts[2], p.c_ptr, d.layouts[2], &result.algo, workspace->data(),
                      result.workspace_size, stream.handle()),
           "cublasLtMatmul");
}

namespace detail {

CublasLtPlan cublaslt_descriptors_read_back(const CublasLtPlan& plan) {
  const Descriptors d(plan);
  CublasLtPlan out = plan;
  CublasLtLayout* layouts[3] = {&out.a, &out.b, &out.c};
  for (int i = 0; i < 3; ++i) {
    CublasLtLayout& l = *layouts[i];
    l.data_type = static_cast<int>(layout_attribute<uint32_t>(d.layouts[i], kLayoutType));
    l.rows = layout_attribute<uint64_t>(d.layouts[i], kLayoutRows);
    l.cols = layout_attribute<uint64_t>(d.layouts[i], kLayoutCols);
    l.ld = layout_attribute<int64_t>(d.layouts[i], kLayoutLd);
    l.batch_count = layout_attribute<int32_t>(d.layouts[i], kLayoutBatchCount);
    l.batch_stride = layout_attribute<int64_t>(d.layouts[i], kLayoutBatchStride);
  }
  out.compute_type = desc_attribute(d.desc, kDescComputeType);
  out.scale_type = desc_attribute(d.desc, kDescScaleType);
  out.trans_a = desc_attribute(d.desc, kDescTransA) != 0;
  out.trans_b = desc_attribute(d.desc, kDescTransB) != 0;
  return out;
}

}  // namespace detail

}  // namespace ein
