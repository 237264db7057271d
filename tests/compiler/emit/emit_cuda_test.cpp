// The CUDA emitter's choices, read from the source text and the launch it returns (no NVRTC
// needed): vector accesses for contiguous elementwise kernels, warp shuffles and block
// reductions for rows, shared-memory tiles for permutes, serial columns, fp32 arithmetic on
// 16-bit and fp8 buffers, the ABI's parameter list, the header comment, empty domains.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "compiler/emit/emit_cuda.h"
#include "compiler/graph/expression_graphs.h"
#include "compiler/graph/stdlib_graphs.h"
#include "compiler/emit/cuda_corpus.h"
#include <ein/tensor.h>

namespace ein {
namespace {

using testing::fused_kernels;

/// The single fused kernel of `g`, emitted.
CudaKernel emit_one(const Graph& g, bool transposed = false) {
  const std::vector<Kernel> ks = fused_kernels(g, transposed);
  EXPECT_EQ(ks.size(), 1u);
  return emit_cuda(ks.at(0));
}

bool has(const CudaKernel& k, const std::string& text) {
  return k.source.find(text) != std::string::npos;
}

TEST(EmitCuda, ContiguousElementwiseUsesSixteenByteVectorsAndAGridStrideLoop) {
  const CudaKernel f32 = emit_one(map_expression_graph(
      "x[b s d], m[b s], w[d] -> (x - m) * w", {{4, 8, 64}, {4, 8}, {64}}, DType::f32));
  EXPECT_EQ(f32.strategy, CudaStrategy::elementwise);
  EXPECT_EQ(f32.vector_width, 4);  // 4 × 4 bytes
  EXPECT_TRUE(has(f32, "ein_load_vec<4>(b0 + ")) << f32.source;
  EXPECT_TRUE(has(f32, "ein_store_vec<4>(b3 + ")) << f32.source;
  EXPECT_TRUE(has(f32, "ein_aligned(b0, 16)")) << f32.source;
  EXPECT_TRUE(has(f32, "g += gridDim.x * blockDim.x")) << f32.source;
  // m broadcasts along d (stride 0): read as a scalar, not as a vector.
  EXPECT_FALSE(has(f32, "ein_load_vec<4>(b1")) << f32.source;
  EXPECT_EQ(f32.launch.block, 256);
  EXPECT_EQ(f32.launch.grid, (4 * 8 * 64 / 4 + 255) / 256);

  const CudaKernel bf16 =
      emit_one(map_expression_graph("x[n] -> x * sigmoid(x)", {{4096}}, DType::bf16));
  EXPECT_EQ(bf16.vector_width, 8);  // 8 × 2 bytes
  // Without <cuda_bf16.h> on sm_80 and newer (its parse is half of NVRTC's front end for a
  // small kernel): the storage struct and the header's own conversion instructions; the header
  // for older targets and the host emulation.
  EXPECT_TRUE(has(bf16,
                  "#if defined(EIN_EMULATED_CUDA) || __CUDA_ARCH__ < 800\n"
                  "#include <cuda_bf16.h>\n#else\n"))
      << bf16.source;
  EXPECT_TRUE(has(bf16, "cvt.rn.bf16.f32 %0, %1;")) << bf16.source;
  const CudaKernel f16 = emit_one(map_expression_graph("x[n] -> exp(x)", {{64}}, DType::f16));
  EXPECT_TRUE(has(f16, "#include <cuda_fp16.h>\n#else\nstruct __align__(2) __half")) << f16.source;
  EXPECT_TRUE(has(f16, "cvt.rn.f16.f32 %0, %1;")) << f16.source;
  EXPECT_FALSE(has(f16, "cuda_bf16.h")) << f16.source;
  EXPECT_TRUE(has(bf16, "__bfloat162float(")) << bf16.source;   // widened to f32 ...
  EXPECT_TRUE(has(bf16, "__float2bfloat16_rn(")) << bf16.source;  // ... rounded on store
  EXPECT_TRUE(has(bf16, "const float v")) << bf16.source;
  EXPECT_FALSE(has(bf16, "cuda_fp8.h"));

  // A last dim of odd length cannot be split into vectors.
  const CudaKernel odd = emit_one(map_expression_graph("x[n] -> exp(x)", {{1001}}, DType::f32));
  EXPECT_EQ(odd.vector_width, 1);
  EXPECT_FALSE(has(odd, "ein_load_vec<"));
}

TEST(EmitCuda, SoftmaxRowsUseWarpShufflesAndKeepTheRowInRegisters) {
  const CudaKernel k = emit_one(softmax_graph({64, 1000}));
  EXPECT_EQ(k.strategy, CudaStrategy::row_warp);
  EXPECT_TRUE(k.row_on_chip);
  EXPECT_EQ(k.launch.block, 256);
  EXPECT_EQ(k.launch.grid, 64 / 8);
  EXPECT_TRUE(has(k, "ein_warp_reduce(a0, EinMax())")) << k.source;
  EXPECT_TRUE(has(k, "ein_warp_reduce(a1, EinSum())")) << k.source;
  EXPECT_TRUE(has(k, "__shfl_xor_sync"));
  EXPECT_TRUE(has(k, "float c0[32];")) << k.source;  // 1000 points over 32 lanes
  EXPECT_TRUE(has(k, "e[it] = ")) << k.source;       // exp(x - max) kept, not recomputed
  EXPECT_EQ(k.source.find("expf("), k.source.rfind("expf(")) << "one exp per element\n"
                                                             << k.source;
  EXPECT_TRUE(has(k, "if (r < 1000)")) << k.source;  // the lanes' last points overrun the row

  // Rows the lanes cover exactly (16 points each) check no point.
  const CudaKernel exact = emit_one(softmax_graph({64, 512}));
  EXPECT_TRUE(exact.row_on_chip);
  EXPECT_TRUE(has(exact, "float c0[16];")) << exact.source;
  EXPECT_FALSE(has(exact, "if (r <")) << exact.source;
}

TEST(EmitCuda, LongRowsUseABlockReductionThroughSharedMemory) {
  const CudaKernel on_chip = emit_one(softmax_graph({4, 5000}));
  EXPECT_EQ(on_chip.strategy, CudaStrategy::row_block);
  EXPECT_TRUE(on_chip.row_on_chip);
  EXPECT_EQ(on_chip.launch.block, 512);
  EXPECT_EQ(on_chip.launch.grid, 4);
  EXPECT_TRUE(has(on_chip, "ein_block_reduce<16>(a0, EinMax(), scratch)")) << on_chip.source;
  EXPECT_TRUE(has(on_chip, "__shared__ float scratch[16];"));
  EXPECT_EQ(on_chip.launch.shared_bytes, 64);

  const CudaKernel vocab = emit_one(softmax_graph({2, 50257}));
  EXPECT_EQ(vocab.strategy, CudaStrategy::row_block);
  EXPECT_FALSE(vocab.row_on_chip);  // 99 points per thread: re-read from memory
  EXPECT_TRUE(has(vocab, "for (int r = lane; r < 50257; r += 512)")) << vocab.source;
}

TEST(EmitCuda, TransposingRearrangeGoesThroughASharedMemoryTile) {
  const CudaKernel k = emit_one(testing::rearrange_exp("a b -> b a", {100, 300}, DType::f32));
  EXPECT_EQ(k.strategy, CudaStrategy::tiled_permute);
  EXPECT_TRUE(has(k, "__shared__ float t0[32][33];")) << k.source;
  EXPECT_TRUE(has(k, "__syncthreads();"));
  EXPECT_TRUE(has(k, "t0[j][tx] = b0[")) << k.source;  // read along the input's rows
  EXPECT_TRUE(has(k, "t0[tx][j]")) << k.source;        // written along the output's
  EXPECT_EQ(k.launch.shared_bytes, 32 * 33 * 4);
  EXPECT_EQ(k.launch.grid, 4 * 10);  // ceil(100/32) × ceil(300/32) tiles

  // A permute that keeps the contiguous dim innermost needs no tile.
  const CudaKernel heads = emit_one(
      testing::rearrange_exp("b s (h d) -> b h s d", {2, 64, 256}, DType::f32, {{"h", 4}}));
  EXPECT_EQ(heads.strategy, CudaStrategy::elementwise);
  EXPECT_EQ(heads.vector_width, 4);
}

TEST(EmitCuda, ReductionOverALeadingAxisIsColumnWise) {
  const CudaKernel k =
      emit_one(reduce_pattern_graph("b n -> n", Reduction::sum, {}, {300, 64}, DType::f32));
  EXPECT_EQ(k.strategy, CudaStrategy::column);
  // Domain [n | b]: thread i0 takes column n = i0 and walks b serially, adjacent threads on
  // adjacent addresses.
  EXPECT_TRUE(has(k, "for (int i1 = 0; i1 < 300; ++i1)")) << k.source;
  EXPECT_TRUE(has(k, "b0[(i0 + i1 * 64)]")) << k.source;
  EXPECT_EQ(k.launch.grid, 1);
}

TEST(EmitCuda, RunTimeParamsFollowTheBuffersAsDoubles) {
  // An optimizer-style update: p' = p - lr * g, with lr a run-time param (Kernel::params).
  Kernel k;
  k.name = "sgd";
  k.domain = {1000};
  const int p = k.add_buffer(DType::bf16, {1});
  const int g = k.add_buffer(DType::f32, {1});
  const int out = k.add_output(DType::bf16, {1});
  k.store(out, k.apply(ScalarOp::sub, k.load(p),
                       k.apply(ScalarOp::mul, k.param(0.01), k.load(g))));
  const CudaKernel c = emit_cuda(k);
  ASSERT_EQ(c.parameters.size(), 4u);
  EXPECT_EQ(c.parameters[0], "const __nv_bfloat16* b0");
  EXPECT_EQ(c.parameters[1], "const float* b1");
  EXPECT_EQ(c.parameters[2], "__nv_bfloat16* b2");
  EXPECT_EQ(c.parameters[3], "double p0");
  EXPECT_TRUE(has(c, "const float q0 = static_cast<float>(p0);")) << c.source;
  EXPECT_TRUE(has(c, "extern \"C\" __global__ void __launch_bounds__(256) ein_sgd(")) << c.source;
}

TEST(EmitCuda, AdamWIsOneVectorizedKernelWithThreeOutputs) {
  const std::vector<Kernel> ks = fused_kernels(adamw_graph({1000}, DType::bf16));
  ASSERT_EQ(ks.size(), 1u);
  const CudaKernel k = emit_cuda(ks[0]);
  EXPECT_EQ(k.strategy, CudaStrategy::elementwise);
  EXPECT_EQ(k.vector_width, 8);  // 8 bf16 per 16 bytes
  int stores = 0;
  for (size_t at = k.source.find("ein_store_vec<8>"); at != std::string::npos;
       at = k.source.find("ein_store_vec<8>", at + 1))
    ++stores;
  EXPECT_EQ(stores, 3) << k.source;
}

TEST(EmitCuda, HeaderNamesTheOriginShapesStrategyAndLaunch) {
  const CudaKernel k = emit_one(layer_norm_graph({8, 768}));
  EXPECT_EQ(k.entry.rfind("ein_", 0), 0u);
  EXPECT_TRUE(has(k, "// origin:   ")) << k.source;
  EXPECT_TRUE(has(k, "// domain:   [8 | 768] (parallel | reduced), compute f32")) << k.source;
  EXPECT_TRUE(has(k, "// strategy: row_warp: ")) << k.source;
  EXPECT_TRUE(has(k, "// launch:   grid 1 x block 256")) << k.source;
}

TEST(EmitCuda, TotalStoresBecomeOneScratchValuePerRow) {
  // cross_entropy: the mean of the per-row losses; the kernel writes one f32 loss per row.
  const std::vector<Kernel> ks = fused_kernels(cross_entropy_graph({8, 33}, DType::bf16));
  ASSERT_EQ(ks.size(), 1u);
  bool total = false;
  for (const KernelStore& st : to_general_form(ks[0]).stores)
    total = total || st.total != Combine::none;
  ASSERT_TRUE(total);
  const CudaKernel k = emit_cuda(ks[0]);
  EXPECT_EQ(k.parameters.back(), "float* b2") << k.source;  // f32 scratch, not bf16
  EXPECT_TRUE(has(k, "if (lane == 0)")) << k.source;
}

TEST(EmitCuda, EmptyDomainsAreNotLaunched) {
  EXPECT_EQ(emit_one(softmax_graph({0, 16})).launch.grid, 0);
  EXPECT_EQ(emit_one(map_expression_graph("x[b n] -> exp(x)", {{0, 8}}, DType::f32)).launch.grid,
            0);
  // A sum over an empty row still stores its identity, 0, per row.
  const CudaKernel sum =
      emit_one(reduce_pattern_graph("b n -> b", Reduction::sum, {}, {4, 0}, DType::f32));
  EXPECT_GT(sum.launch.grid, 0);
}

TEST(EmitCuda, Fp8BuffersConvertThroughCudaFp8) {
  Kernel k;
  k.name = "cast";
  k.domain = {64};
  k.add_buffer(DType::f8e5m2, {1});
  k.add_output(DType::f8e4m3, {1});
  k.body = k.result = k.apply(ScalarOp::neg, k.load(0));
  const CudaKernel c = emit_cuda(k);
  EXPECT_TRUE(has(c, "#include <cuda_fp8.h>"));
  EXPECT_TRUE(has(c, "static_cast<float>(x0.v[l])")) << c.source;
  EXPECT_TRUE(has(c, "__nv_fp8_e4m3(")) << c.source;
  EXPECT_EQ(c.vector_width, 16);
}

TEST(EmitCuda, EveryCorpusKernelEmits) {
  // Every strategy appears in the corpus the compile test uses.
  std::set<CudaStrategy> seen;
  for (const testing::CorpusKernel& c : testing::cuda_corpus())
    seen.insert(emit_cuda(c.kernel).strategy);
  EXPECT_EQ(seen.size(), 5u);
}

}  // namespace
}  // namespace ein
