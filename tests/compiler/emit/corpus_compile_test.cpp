// Every kernel of the CUDA corpus (cuda_corpus.h), emitted and compiled by NVRTC for sm_80
// (A100) and sm_90 (H100): no compile error, and no local memory (ptxas' stack frame and
// spill bytes, from --ptxas-options=-v; nvrtc_test.cpp checks that a spilling kernel is
// reported). The disk cache is off so that NVRTC really runs. Skipped where NVRTC is missing.
// This checks that the code compiles and stays in registers, not its values: those need a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "compiler/emit/emit_cuda.h"
#include "compiler/emit/cuda_corpus.h"
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

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusCompile,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         [](const auto& p) { return testing::corpus_test_name(p.param); });

}  // namespace
}  // namespace ein
