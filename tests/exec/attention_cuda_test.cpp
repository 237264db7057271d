// The fused attention's CUDA kernels (exec/attention_cuda.h, attention_cuda_mma.h) against the
// float64 definition (tests/exec/attention_cases.h) on the fake CUDA device and, where there is
// one, on a GPU; and the tensor-core kernels compiled by NVRTC without local memory.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "exec/attention.h"
#include "exec/attention_cuda.h"
#include "exec/attention_cuda_mma.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/execution.h"
#include "runtime/cuda/nvrtc.h"
#include "support/cuda_device_test.h"
#include "support/fake_cuda.h"
#include "support/scoped_env.h"
#include "tests/exec/attention_cases.h"

namespace ein {
namespace {

using namespace attention_testing;

// The CUDA kernels (exec/attention_cuda.h) on the fake CUDA device and, where there is one, on
// a GPU: the same cases against the float64 definition (odd sizes, partial tiles, every mask,
// fully masked rows, bf16 in), zero sizes, grouped-query heads with a broadcast mask; on the
// fake device each kernel is also compiled by NVRTC (sm_80 and sm_90, or sm_90a for the wgmma
// set) where NVRTC loads.
class AttentionOnCuda : public testing::CudaDeviceTest {};

TEST_P(AttentionOnCuda, MatchesTheDefinitionInFloat64) {
  for (Mask m : {Mask::none, Mask::causal, Mask::random_rows, Mask::additive, Mask::padding}) {
    run_case({2, 37, 53, 7, 5, m, DType::f64, 1e-10}, cuda());
    run_case({2, 70, 75, 16, 9, m, DType::f32, 2e-4}, cuda());
    // a mask shared by the batch: per-row key limits where a row is "zeros, then -inf"
    run_case({2, 37, 53, 7, 5, m, DType::f64, 1e-10, true}, cuda());
    run_case({2, 70, 75, 16, 9, m, DType::f32, 2e-4, true}, cuda());
  }
  run_case({2, 40, 40, 8, 8, Mask::causal, DType::bf16, 2e-4}, cuda());
  if (fake_) {
    EXPECT_GT(fake_->launches(), 0);
  }
}

// The tensor-core kernel sets (attention_cuda_mma.h): PTX's mma.sync under
// EIN_CUDA_ATTENTION=ptx on sm_80+, wgmma's under EIN_CUDA_ATTENTION=wgmma on sm_90 for head
// dims 64 and 128, WMMA by default. Every mask per batch row (read per element) and shared
// (per-row key limits, or per element where a row is not "zeros, then -inf"), partial row
// blocks and key tiles, both key tile sizes of the backward, bf16 and f16.
const char* const kTensorCoreSets[] = {"wgmma", "ptx", ""};

std::string set_name(const std::string& kernels) {
  return "kernels: " + (kernels.empty() ? std::string("default (wmma)") : kernels);
}

TEST_P(AttentionOnCuda, TensorCoresMatchTheDefinition) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  using detail::AttentionCores;
  for (const std::string kernels : kTensorCoreSets) {
    SCOPED_TRACE(set_name(kernels));
    const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", kernels);
    const AttentionCores wide = kernels == "wgmma" ? AttentionCores::wgmma
                                : kernels == "ptx" ? AttentionCores::ptx
                                                   : AttentionCores::wmma;
    EXPECT_EQ(detail::attention_cores(90, 64, 128), wide);
    EXPECT_EQ(detail::attention_cores(90, 16, 16),  // wgmma's tiles are rows of 64 elements
              kernels.empty() ? AttentionCores::wmma : AttentionCores::ptx);
    for (Mask m : {Mask::none, Mask::causal, Mask::random_rows, Mask::additive, Mask::padding})
      for (bool shared : {false, true}) {
        run_case({2, 70, 75, 16, 16, m, DType::bf16, 2e-4, shared}, cuda());
        if (kernels == "wgmma")  // the widths wgmma takes: 128-key tiles, the last partial
          run_case({2, 70, 200, 64, 64, m, DType::bf16, 2e-4, shared}, cuda());
      }
    run_case({2, 37, 130, 32, 48, Mask::causal, DType::f16, 2e-4, true}, cuda());
    run_case({1, 65, 40, 128, 128, Mask::padding, DType::bf16, 2e-4, true}, cuda());  // 32-key tiles
    run_case({1, 130, 150, 64, 128, Mask::random_rows, DType::bf16, 2e-4}, cuda());
    if (kernels == "wgmma") {
      run_case({1, 130, 200, 128, 64, Mask::causal, DType::f16, 2e-4, true}, cuda());
      run_case({2, 64, 128, 128, 128, Mask::none, DType::bf16, 2e-4}, cuda());  // whole tiles
    }
  }
  const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", "wgmma");
  EXPECT_EQ(detail::attention_cores(80, 64, 64), detail::AttentionCores::ptx);  // Ampere
  EXPECT_EQ(detail::attention_cores(100, 64, 64), detail::AttentionCores::ptx);  // sm_90a only
  EXPECT_EQ(detail::attention_cores(75, 64, 64),
            detail::AttentionCores::wmma);  // f16 on Turing: the WMMA kernels
  const Tensor q = zeros({1, 4, 16}, DType::bf16, cuda());
  const Tensor v = zeros({1, 4, 16}, DType::bf16, cuda());
  EXPECT_TRUE(cuda_attention_uses_tensor_cores(q, q, v, DType::f32));
  EXPECT_FALSE(cuda_attention_uses_tensor_cores(q, q, v, DType::f64));
  EXPECT_FALSE(cuda_attention_uses_tensor_cores(q, q, zeros({1, 4, 8}, DType::bf16, cuda()),
                                                DType::f32));  // f not a multiple of 16
  EXPECT_FALSE(cuda_attention_uses_tensor_cores(q.to(DType::f32), q, v, DType::f32));
  // The set a benchmark reports: what attention_cores picks, or the scalar kernels
  const Tensor q64 = zeros({1, 4, 64}, DType::bf16, cuda());
  EXPECT_STREQ(cuda_attention_kernel_set(q64, q64, q64, DType::f32), "wgmma");
  EXPECT_STREQ(cuda_attention_kernel_set(q, q, v, DType::f32), "ptx");  // rows of 16: not wgmma
  EXPECT_STREQ(cuda_attention_kernel_set(q.to(DType::f32), q, v, DType::f32), "simt");
  {
    const testing::ScopedEnv scalar("EIN_CUDA_ATTENTION", "simt");
    EXPECT_STREQ(cuda_attention_kernel_set(q64, q64, q64, DType::f32), "simt");
  }
  const testing::ScopedEnv by_default("EIN_CUDA_ATTENTION", "");
  EXPECT_STREQ(cuda_attention_kernel_set(q64, q64, q64, DType::f32), "wmma");
}

TEST_P(AttentionOnCuda, TensorCoresPropagateSpecialValues) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  // bf16 q [1, 3, e]: row 1 NaN, row 2 subnormal; k's last key has +inf, masked for every row:
  // a mask of zeros then -inf (per-row key limits), then with an additive term in row 2 (that
  // row's mask read per element). e 16, and 64 for the wgmma forward.
  for (const int64_t e : {16, 64}) {
    std::mt19937 rng(3);
    Mat q = random_mat(1, 3, e, rng), k = random_mat(1, 4, e, rng), v = random_mat(1, 4, e, rng);
    q.at(0, 1, 5) = NAN;
    for (int64_t c = 0; c < e; ++c) q.at(0, 2, c) = 1e-39 * (c % 16 + 1);
    k.at(0, 3, 0) = kInf;
    q.at(0, 0, 0) = 1;
    const Mat d = random_mat(1, 3, e, rng);
    for (const std::string kernels : kTensorCoreSets)
      for (bool additive : {false, true}) {
        SCOPED_TRACE(fmt::format("{}, e {}{}", set_name(kernels), e, additive ? ", additive" : ""));
        const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", kernels);
        Mat mask{1, 3, 4, std::vector<double>(12, 0.0)};
        for (int64_t i = 0; i < 3; ++i) mask.at(0, i, 3) = -kInf;  // key 3: masked for every row
        if (additive) mask.at(0, 2, 1) = 0.25;
        const Reference want = reference(q, k, v, &mask, 0.25, d);
        const auto on_gpu = [](const Mat& m) { return tensor_of(m, DType::bf16).to(cuda()); };
        const Tensor tq = on_gpu(q), tk = on_gpu(k), tv = on_gpu(v);
        ASSERT_TRUE(cuda_attention_uses_tensor_cores(tq, tk, tv, DType::f32));
        const std::vector<double> got =
            attention_forward(tq, tk, tv, tensor_of(mask, DType::f32).to(cuda()), 0.25, DType::f32)
                .to(cpu())
                .to(DType::f64)
                .to_vector<double>();
        for (int64_t c = 0; c <= e; ++c) {
          EXPECT_TRUE(std::isnan(got[(e + 1) + c])) << "row 1 has a NaN query, column " << c;
          for (int64_t row : {0, 2}) {
            const double w = c < e ? want.o.v[row * e + c] : want.lse[row];
            EXPECT_NEAR(got[row * (e + 1) + c], w, 1e-2 * (1 + std::abs(w))) << row << " " << c;
          }
        }
      }
  }
}

TEST_P(AttentionOnCuda, TensorCoresReadGroupedQueryHeads) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string kernels : kTensorCoreSets) {
    SCOPED_TRACE(set_name(kernels));
    const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", kernels);
    grouped_query_heads(cuda(), 1e-5, DType::bf16, 16);
    if (kernels == "wgmma") grouped_query_heads(cuda(), 1e-5, DType::bf16, 64, 100);
    // several query tiles per head and key blocks past the first (whose causal start skips the
    // tiles above the diagonal) in every group
    grouped_query_heads(cuda(), 1e-5, DType::bf16, 16, 100);
  }
}

// The wgmma kernels' operand layouts, one product each way, on tiles whose elements say where
// they are: k[n][c] and v[j][c] hold their row (n, j) in one launch and their column c in
// another; q and p are one-hot (row r picks column r % E of q and key r % TILE of p), so
// s[r][n] = k[n][r % E] and o[r][c] = v[r % TILE][c] name the element each product read. On a
// GPU a wrong descriptor, swizzle or fragment reading shows as which element went where.
const char* const kWgmmaProbe = R"(
extern "C" __global__ void __launch_bounds__(128, 1) ein_wgmma_probe(
    const in_t* k, const in_t* v, const in_t* q, float* s_out, float* o_out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, t4 = lane % 4;
  __shared__ __align__(EIN_TILE_ALIGN) in_t ks[EIN_TILE_ELEMENTS(EIN_E)];
  __shared__ __align__(EIN_TILE_ALIGN) in_t vs[EIN_TILE_ELEMENTS(EIN_F)];
  ein_stage_rows<EIN_E>(ks, k, 0, EIN_TILE);
  ein_stage_rows<EIN_F>(vs, v, 0, EIN_TILE);
  ein_landed();
  __syncthreads();
  unsigned qa[EIN_E / 16][4];
  ein_rows_as_a<EIN_E>(qa, q, 16 * warp, 64, lane);
  float s[EIN_TILE / 8][4];
  ein_times_rows<EIN_E>(s, qa, ks, lane);
  const float one[2] = {1.0f, 1.0f};
  ein_store_rows<EIN_TILE>(s_out, EIN_TILE, s, 16 * warp, 64, lane, one);
  for (int c = 0; c < EIN_TILE / 8; ++c)
    for (int x = 0; x < 4; ++x) {
      const int row = 16 * warp + group + 8 * (x / 2), key = 8 * c + 2 * t4 + x % 2;
      s[c][x] = key == row % EIN_TILE ? 1.0f : 0.0f;
    }
  float o[EIN_F / 8][4];
  ein_zero<EIN_F>(o);
  ein_add_times<EIN_F>(o, s, vs, lane);
  ein_store_rows<EIN_F>(o_out, EIN_F, o, 16 * warp, 64, lane, one);
}
)";

TEST_P(AttentionOnCuda, WgmmaOperandLayouts) {
  if (cuda_execution().arch(0) != 90) GTEST_SKIP() << "wgmma needs sm_90 (H100, H200)";
  for (const auto& [e, f] : {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {128, 64}}) {
    const int64_t tile = detail::attention_wgmma_key_tile(e, f);
    SCOPED_TRACE(fmt::format("e {} f {}, tiles of {} keys", e, f, tile));
    const auto function = cuda_execution().prepare(
        0, {detail::attention_wgmma_prelude(DType::bf16, DType::f32, e, f, static_cast<int>(tile)) +
                kWgmmaProbe,
            "ein_wgmma_probe", /*arch_specific=*/true});
    // [0]: rows, [1]: columns read
    std::vector<float> s_read[2], o_read[2];
    for (int columns : {0, 1}) {
      const auto filled = [&](int64_t rows, int64_t cols) {
        std::vector<float> x(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = static_cast<float>(columns ? c : r);
        return from_data(x, {rows, cols}).to(DType::bf16).to(cuda());
      };
      std::vector<float> one_hot(static_cast<size_t>(64 * e), 0.0f);
      for (int64_t r = 0; r < 64; ++r) one_hot[r * e + r % e] = 1.0f;
      const Tensor k = filled(tile, e), v = filled(tile, f),
                   q = from_data(one_hot, {64, e}).to(DType::bf16).to(cuda());
      const Tensor s = zeros({64, tile}, DType::f32, cuda());
      const Tensor o = zeros({64, f}, DType::f32, cuda());
      void* buffers[] = {k.device_ptr(), v.device_ptr(), q.device_ptr(), s.device_ptr(),
                         o.device_ptr()};
      cuda_execution().launch(0, *function, 1, 128, buffers, {}, 0);
      s_read[columns] = s.to(cpu()).to_vector<float>();
      o_read[columns] = o.to(cpu()).to_vector<float>();
    }
    int wrong = 0;
    for (int64_t r = 0; r < 64; ++r) {
      for (int64_t n = 0; n < tile; ++n) {
        const size_t i = static_cast<size_t>(r * tile + n);
        if ((s_read[0][i] != n || s_read[1][i] != r % e) && wrong++ < 8)
          ADD_FAILURE() << "s[" << r << "][" << n << "] read k[" << s_read[0][i] << "]["
                        << s_read[1][i] << "], want k[" << n << "][" << r % e << "]";
      }
      for (int64_t c = 0; c < f; ++c) {
        const size_t i = static_cast<size_t>(r * f + c);
        if ((o_read[0][i] != r % tile || o_read[1][i] != c) && wrong++ < 8)
          ADD_FAILURE() << "o[" << r << "][" << c << "] read v[" << o_read[0][i] << "]["
                        << o_read[1][i] << "], want v[" << r % tile << "][" << c << "]";
      }
    }
    EXPECT_EQ(wrong, 0);
  }
}

// The forward's double-buffered tiles are dynamic shared memory (attention_forward_shared_bytes,
// above 48 KB at the widest heads): within a block's limit on the architectures each set runs
// on (sm_80's 163 KB for the PTX set, sm_90's 227 KB for wgmma's), and a launch asking for more
// than a block may have is refused with the device's error, on the fake device as on a GPU.
TEST_P(AttentionOnCuda, ForwardSharedMemoryFitsABlock) {
  using detail::AttentionCores;
  for (int64_t e = 16; e <= 128; e += 16)
    for (int64_t f = 16; f <= 128; f += 16) {
      SCOPED_TRACE(fmt::format("e {} f {}", e, f));
      EXPECT_EQ(detail::attention_forward_shared_bytes(AttentionCores::wmma, e, f), 0);
      const int ptx = detail::attention_forward_shared_bytes(AttentionCores::ptx, e, f);
      EXPECT_GE(ptx, 2 * 64 * (e + f) * 2);  // two tiles each of k and v, 16-bit
      EXPECT_LE(ptx, 163 * 1024);
      if ((e == 64 || e == 128) && (f == 64 || f == 128)) {
        const int wgmma = detail::attention_forward_shared_bytes(AttentionCores::wgmma, e, f);
        EXPECT_GE(wgmma, 2 * detail::attention_wgmma_key_tile(e, f) * (e + f) * 2);
        EXPECT_LE(wgmma, 227 * 1024);
      }
    }
  const auto function = cuda_execution().prepare(
      0, {"extern \"C\" __global__ void ein_nothing(float* x) {\n"
          "  if (threadIdx.x == 0) x[0] = 1.0f;  // one writer: not a race\n}\n",
          "ein_nothing"});
  const Tensor x = zeros({1}, DType::f32, cuda());
  void* buffers[] = {x.device_ptr()};
  cuda_execution().launch(0, *function, 1, 32, buffers, {}, 64 * 1024);  // above 48 KB: allowed
  EXPECT_EQ(x.to(cpu()).item(), 1.0);
  EXPECT_THROW(cuda_execution().launch(0, *function, 1, 32, buffers, {}, 1 << 20), DeviceError);
}

TEST_P(AttentionOnCuda, ZeroSizes) {
  run_case({0, 5, 5, 4, 4, Mask::none, DType::f64, 1e-12}, cuda());
  run_case({2, 0, 5, 4, 4, Mask::causal, DType::f64, 1e-12}, cuda());
  run_case({2, 5, 0, 4, 4, Mask::none, DType::f64, 1e-12}, cuda());
}

TEST_P(AttentionOnCuda, GroupedQueryHeadsReadTheirGroup) { grouped_query_heads(cuda(), 1e-12); }

// The tensor-core kernels compiled by NVRTC for sm_80 and sm_90 where registers are tightest
// (the widest heads, where dK and dV take a kernel each and the backward tiles of 16), at
// GPT-2's width and a narrow one: no local memory (a spill would cost every GPU run). Their
// values are checked above; this covers widths the value tests do not run.
TEST(AttentionTensorCoreKernels, CompileWithoutLocalMemory) {
  if (!nvrtc_info().available) GTEST_SKIP() << nvrtc_info().reason;
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  struct Width {
    int64_t e, f;
    DType in;
  };
  for (const Width w : {Width{16, 16, DType::bf16}, Width{64, 64, DType::bf16},
                        Width{128, 64, DType::bf16}, Width{64, 128, DType::bf16},
                        Width{112, 128, DType::bf16}, Width{128, 112, DType::bf16},
                        Width{128, 128, DType::bf16}, Width{128, 128, DType::f16}}) {
    const int forward_tile = detail::attention_mma_key_tile(w.e, w.f, false);
    const int backward_tile = detail::attention_mma_key_tile(w.e, w.f, true);
    std::vector<std::pair<std::string, std::string>> kernels = {
        {detail::attention_mma_forward_source(w.in, DType::f32, w.e, w.f, forward_tile),
         "ein_attention_forward_mma"},
        {detail::attention_ptx_forward_source(w.in, DType::f32, w.e, w.f),
         "ein_attention_forward_ptx"},
        {detail::attention_ptx_dq_source(w.in, DType::f32, w.e, w.f), "ein_attention_dq_ptx"},
        {detail::attention_mma_dq_source(w.in, DType::f32, w.e, w.f, backward_tile),
         "ein_attention_dq_mma"}};
    const bool split = detail::attention_mma_split_dkv(w.e, w.f);
    for (int part : split ? std::vector<int>{1, 2} : std::vector<int>{0}) {
      kernels.emplace_back(
          detail::attention_mma_dkv_source(w.in, DType::f32, w.e, w.f, backward_tile, part),
          "ein_attention_dkv_mma");
      kernels.emplace_back(detail::attention_ptx_dkv_source(w.in, DType::f32, w.e, w.f, part),
                           "ein_attention_dkv_ptx");
    }
    if ((w.e == 64 || w.e == 128) && (w.f == 64 || w.f == 128)) {
      kernels.emplace_back(detail::attention_wgmma_forward_source(w.in, DType::f32, w.e, w.f),
                           "ein_attention_forward_wgmma");
      kernels.emplace_back(detail::attention_wgmma_dq_source(w.in, DType::f32, w.e, w.f),
                           "ein_attention_dq_wgmma");
      for (int part : split ? std::vector<int>{1, 2} : std::vector<int>{0})
        kernels.emplace_back(detail::attention_wgmma_dkv_source(w.in, DType::f32, w.e, w.f, part),
                             "ein_attention_dkv_wgmma");
    }
    for (const auto& [source, entry] : kernels) {
      const bool arch_specific = entry.ends_with("_wgmma");  // sm_90a alone
      for (int arch : arch_specific ? std::vector<int>{90} : std::vector<int>{80, 90}) {
        SCOPED_TRACE(fmt::format("{} e {} f {} {} sm_{}{}", entry, w.e, w.f, dtype_name(w.in), arch,
                                 arch_specific ? "a" : ""));
        const auto binary = CudaCompiler::instance().compile(source, entry + ".cu",
                                                             {arch, true, {}, arch_specific});
        const auto usage = parse_ptxas_usage(binary->log, entry);
        ASSERT_TRUE(usage) << binary->log;
        EXPECT_EQ(usage->stack_frame, 0) << binary->log;
        EXPECT_EQ(usage->spill_stores, 0) << binary->log;
        // ptxas serialises wgmma (and says so) where registers a product writes are read
        // before its wait lands them: the forward's scores of one tile would then no longer
        // overlap the previous tile's p v
        EXPECT_EQ(binary->log.find("serialized"), std::string::npos) << binary->log;
        EXPECT_EQ(binary->log.find("is injected"), std::string::npos) << binary->log;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FakeCuda, AttentionOnCuda, ::testing::Values("fake"));
INSTANTIATE_TEST_SUITE_P(Gpu, AttentionOnCuda, ::testing::Values("gpu"));

}  // namespace
}  // namespace ein
