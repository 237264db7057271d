// Every kernel of the CUDA corpus (cuda_corpus.h), emitted and compiled by NVRTC for sm_80
// (A100) and sm_90 (H100): no compile error, and no local memory (ptxas' stack frame and
// spill bytes, from --ptxas-options=-v; nvrtc_test.cpp checks that a spilling kernel is
// reported). The disk cache is off so that NVRTC really runs. Skipped where NVRTC is missing.
// This checks that the code compiles and stays in registers, not its values: those need a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "compiler/emit/cuda_corpus.h"
#include "compiler/emit/emit_cuda.h"
#include "runtime/cuda/nvrtc.h"

namespace ein {
namespace {

class CorpusCompile : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() { CudaCompiler::instance().set_disk_cache_dir({}); }
};

TEST_P(CorpusCompile, CompilesWithoutLocalMemory) {
  if (!nvrtc_info().available) GTEST_SKIP() << nvrtc_info().reason;
  const testing::CorpusKernel& c = testing::cuda_corpus().at(GetParam());
  const CudaKernel k = emit_cuda(c.kernel);
  for (int arch : {80, 90}) {
    SCOPED_TRACE(fmt::format("{} for sm_{}", c.label, arch));
    const auto binary = CudaCompiler::instance().compile(k.source, k.entry + ".cu", {arch, true, {}});
    EXPECT_FALSE(binary->ptx);
    const auto usage = parse_ptxas_usage(binary->log, k.entry);
    ASSERT_TRUE(usage) << binary->log;
    EXPECT_EQ(usage->stack_frame, 0) << binary->log << k.source;
    EXPECT_EQ(usage->spill_stores, 0) << binary->log << k.source;
    EXPECT_EQ(usage->spill_loads, 0) << binary->log << k.source;
  }
}

/// `source` with each of emit_cuda.cpp's light 16-bit blocks (#if light, the header's
/// #include, #else, the light definitions with #if blocks of their own, #endif) replaced by
/// its #include: the kernel as it reads with the CUDA headers.
std::string with_headers(const std::string& source) {
  const std::string light = "#if defined(EIN_EMULATED_CUDA) || __CUDA_ARCH__ < 800\n";
  std::string out;
  size_t at = 0;
  for (size_t start; (start = source.find(light, at)) != std::string::npos;) {
    out += source.substr(at, start - at);
    size_t line = start + light.size();
    const size_t include_end = source.find('\n', line) + 1;
    out += source.substr(line, include_end - line);
    int depth = 1;
    for (line = include_end; depth > 0;) {
      const size_t end = source.find('\n', line) + 1;
      const std::string text = source.substr(line, end - line);
      depth += (text.rfind("#if", 0) == 0) - (text == "#endif\n");
      line = end;
    }
    at = line;
  }
  return out + source.substr(at);
}

// The 16-bit kernels of the corpus that take emit_cuda.cpp's light types (f32 arithmetic, no
// fp8) compile on sm_80 and sm_90 to the very cubin the CUDA headers give (the light types are
// the headers' own instructions, without the headers' parse), and on sm_75, where they take
// the headers, at all.
TEST(SixteenBitKernels, TheLightTypesGiveTheHeadersCubin) {
  if (!nvrtc_info().available) GTEST_SKIP() << nvrtc_info().reason;
  int light = 0;
  for (const testing::CorpusKernel& c : testing::cuda_corpus()) {
    const CudaKernel k = emit_cuda(c.kernel);
    if (k.source.find("__CUDA_ARCH__ < 800") == std::string::npos) continue;
    ++light;
    const std::string headers = with_headers(k.source);
    ASSERT_EQ(headers.find("__CUDA_ARCH__"), std::string::npos) << headers;
    for (int arch : {75, 80, 90}) {
      SCOPED_TRACE(fmt::format("{} for sm_{}", c.label, arch));
      const CudaCompileOptions options{arch, false, {}};
      const auto a = CudaCompiler::instance().compile(k.source, k.entry + ".cu", options);
      const auto b = CudaCompiler::instance().compile(headers, k.entry + ".cu", options);
      EXPECT_FALSE(a->ptx);
      if (arch >= 80) {
        EXPECT_TRUE(a->image == b->image) << "the cubins differ";
      }
    }
  }
  EXPECT_GE(light, 10) << "16-bit kernels in the corpus";
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusCompile,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         [](const auto& p) { return testing::corpus_test_name(p.param); });

}  // namespace
}  // namespace ein
