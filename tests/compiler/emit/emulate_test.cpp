// The values of the emitted CUDA kernels without a GPU: every corpus kernel's CUDA C++ is
// compiled with the host C++ compiler against host_emulation.h (a fiber with a stack of its own
// for each of a block's threads, true barriers, warp shuffles through per-warp barriers; the
// same under the race check, with ThreadSanitizer told of the barriers), launched on random inputs
// with a small grid (so the grid-stride loops wrap), and compared with Kernel IR's float64
// semantics (compiler/reference/kernel_eval.h's evaluate()). Elementwise kernels with a vector path
// run twice: with aligned pointers (the 16-byte path) and with pointers one element off (the scalar
// path). What this does not check: device libm and the GPU's own conversions (host_emulation.h).
// Skipped when the CUDA headers (cuda_fp16.h, ...) are not installed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/emit_cuda.h"
#include "compiler/emit/cuda_corpus.h"
#include "api/ops/fused_test_support.h"
#include <ein/tensor.h>
#include "runtime/cuda/nvrtc.h"
#include "support/host_cuda.h"

namespace ein {
namespace {

/// Blocks the emulation launches at most: more than one, fewer than most kernels need, so
/// every grid-stride loop takes several turns.
constexpr int64_t kEmulatedBlocks = 3;

using testing::EmulatedLaunch;

class Emulate : public ::testing::TestWithParam<int> {};

TEST_P(Emulate, MatchesTheFloat64Semantics) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  const testing::CorpusKernel& c = testing::cuda_corpus().at(GetParam());
  const CudaKernel cuda = emit_cuda(c.kernel);
  if (cuda.launch.grid == 0) return;  // an empty domain: nothing is launched
  const EmulatedLaunch launch = testing::build_emulated(cuda.source, cuda.entry);

  const testing::CorpusOracle o = testing::corpus_oracle(GetParam());
  const size_t nb = o.general.buffers.size();

  const bool both_paths = cuda.vector_width > 1;
  for (int misaligned = 0; misaligned <= (both_paths ? 1 : 0); ++misaligned) {
    SCOPED_TRACE(fmt::format("{}, {} pointers", c.label, misaligned ? "misaligned" : "aligned"));
    // Each buffer gets one spare element in front, so it can start off its alignment.
    std::vector<Tensor> storage(nb);
    std::vector<void*> args;
    for (size_t b = 0; b < nb; ++b) {
      const Tensor slot = o.initial_slot(b);
      const int64_t n = slot.numel();
      storage[b] = empty({n + 1}, slot.dtype());
      storage[b].slice(0, misaligned, misaligned + n).copy_(slot);
      args.push_back(static_cast<char*>(storage[b].data_ptr()) +
                     (misaligned ? element_size(storage[b].dtype()) : 0));
    }
    std::vector<double> params(o.general.params);
    for (double& p : params)
      args.push_back(&p);
    launch(args.data(), static_cast<unsigned>(std::min(cuda.launch.grid, kEmulatedBlocks)),
           static_cast<unsigned>(cuda.launch.block), 0);

    for (size_t b = 0; b < nb; ++b) {
      if (!o.general.buffers[b].output) continue;
      const std::vector<double> got = storage[b].to_vector<double>();
      o.expect_output(b, std::vector<double>(got.begin() + misaligned, got.end() - (1 - misaligned)),
                      fmt::format("output b{} of {}\n{}", b, c.label, cuda.source));
    }
  }
}

// Long f32 sums of 0.1 (every rounding leaning one way), one row per 512-thread block (5,860
// terms a thread) and one row per thread (10^5 terms): summed in f32 they came out 7e-6 and
// 1.4e-4 off; in a double, within 1e-6.
TEST(EmulatedSums, LongF32SumsAccumulateInADouble) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  struct Case {
    Kernel k;
    CudaStrategy strategy;
  };
  const int64_t big = 3'000'001;
  const Case cases[] = {
      {testing::long_sum_kernel({2, big}, {big, 1}, {1, 0}), CudaStrategy::row_block},
      {testing::long_sum_kernel({40, 100'000}, {1, 40}, {1, 0}), CudaStrategy::column},
  };
  for (const Case& c : cases) {
    const CudaKernel cuda = emit_cuda(c.k);
    EXPECT_EQ(cuda.strategy, c.strategy) << cuda.source;
    const EmulatedLaunch launch = testing::build_emulated(cuda.source, cuda.entry);
    Tensor x = full({c.k.domain[0] * c.k.domain[1]}, 0.1, DType::f32);
    Tensor out = zeros({c.k.domain[0]}, DType::f32);
    void* args[] = {x.data_ptr(), out.data_ptr()};
    launch(args, static_cast<unsigned>(std::min(cuda.launch.grid, kEmulatedBlocks)),
           static_cast<unsigned>(cuda.launch.block), 0);
    const double exact = static_cast<double>(0.1f) * static_cast<double>(c.k.domain[1]);
    for (double got : out.to_vector<double>())
      EXPECT_NEAR(got, exact, 1e-6 * exact) << cuda_strategy_name(c.strategy);
    if (nvrtc_info().available) {  // and the GPU's compiler takes the double accumulator
      const auto binary = CudaCompiler::instance().compile(cuda.source, cuda.entry + ".cu",
                                                           {90, true, {}});
      const auto usage = parse_ptxas_usage(binary->log, cuda.entry);
      ASSERT_TRUE(usage) << binary->log;
      EXPECT_EQ(usage->spill_stores, 0) << binary->log;
    }
  }
}

// Test processes share the folder of emulated kernels: several building one new kernel at once
// (as `ctest -j` does with a fresh build tree) each load a library that runs it. The source is
// long (it is written in several pieces) and new to the folder, so every process compiles it.
TEST(EmulatedBuilds, ProcessesBuildingOneKernelAtOnceEachGetIt) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  const auto nonce = std::chrono::steady_clock::now().time_since_epoch().count();
  const float value = static_cast<float>(nonce % 1000) + 0.5f;
  const std::string source = "// " + std::to_string(nonce) + "\n" + std::string(1 << 20, '/') +
                             fmt::format(
                                 "\nextern \"C\" __global__ void ein_shared_build(float* out) {{\n"
                                 "  out[threadIdx.x] = {}f;\n}}\n",
                                 value);
  constexpr int kProcesses = 6;
  int start[2];
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // wait for the start, build, run: exit 0 when the value is there
      ::close(start[1]);
      char go;
      if (::read(start[0], &go, 1) != 1) ::_exit(3);
      try {
        const EmulatedLaunch launch = testing::build_emulated(source, "ein_shared_build");
        float out[4] = {};
        void* args[] = {out};
        launch(args, 1, 4, 0);
        ::_exit(out[3] == value ? 0 : 1);
      } catch (...) {
        ::_exit(2);
      }
    }
    children.push_back(pid);
  }
  ::close(start[0]);
  const std::string go(kProcesses, 'g');
  ASSERT_EQ(::write(start[1], go.data(), go.size()), static_cast<ssize_t>(go.size()));
  ::close(start[1]);
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "a process " << (WIFSIGNALED(status) ? "was killed by signal " : "exited with ")
        << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
}

// A misaligned access, which x86 forgives and a GPU faults on, stops an emulated kernel with a
// message: a 16-byte typed load one float off (UBSan's alignment check, where the host compiler
// has it), and cp.async and ldmatrix addresses off 16 bytes (the emulation's own checks).
TEST(EmulatedBuilds, MisalignedAccessesStopTheKernel) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  struct Case {
    const char* entry;
    const char* body;  // {} is the offset in floats: 0 aligned, else not
    int offset;
    const char* message;
  };
  std::vector<Case> cases = {
      {"ein_probe_copy", "ein_cp_async_16(out + 4 + {}, out + 8, true); ein_cp_async_wait_all();",
       1, "a cp.async destination at .*, not on 16 bytes"},
      {"ein_probe_source", "ein_cp_async_16(out, out + 8 + {}, true); ein_cp_async_wait_all();", 1,
       "a cp.async source at .*, not on 16 bytes"},
      {"ein_probe_rows",
       "unsigned r[4]; ein_ldmatrix_x4(r, out + {} + 8 * (threadIdx.x % 8)); out[32] = r[0];", 2,
       "an ldmatrix row at .*, not on 16 bytes"},
  };
  if (testing::host_cuda_checks_alignment())
    cases.push_back({"ein_probe_vector",
                     "out[0] = reinterpret_cast<const ein_probe_vec*>(out + 4 + {})->v[0];", 1,
                     "misaligned address .* requires 16 byte alignment"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.entry);
    auto build = [&](int offset) {
      const std::string source = fmt::format(
          "struct alignas(16) ein_probe_vec {{ float v[4]; }};\n"
          "extern \"C\" __global__ void {}(float* out) {{\n  {}\n}}\n",
          c.entry, fmt::format(fmt::runtime(c.body), offset));
      return testing::build_emulated(source, c.entry);
    };
    alignas(64) float buffer[64] = {};
    void* args[] = {buffer};
    build(0)(args, 1, 32, 0);  // on aligned addresses it runs
    const EmulatedLaunch misaligned = build(c.offset);
    EXPECT_DEATH(misaligned(args, 1, 32, 0), c.message);
  }
}

// A block of more threads than a kernel's __launch_bounds__ allow, written on the definition or
// through a macro (as the attention kernels do), or than 1024 without bounds, stops the launch
// with a message, as cuLaunchKernel refuses it on a GPU.
TEST(EmulatedBuilds, BlocksBeyondTheLaunchBoundsAreRefused) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  struct Case {
    const char* entry;
    const char* preamble;
    const char* bounds;
    unsigned allowed;
  };
  const Case cases[] = {
      {"ein_probe_direct", "", "__launch_bounds__(64)", 64},
      {"ein_probe_macro", "#define EIN_W 2\n#define EIN_B __launch_bounds__(32 * (EIN_W), 1)\n",
       "EIN_B", 64},
      {"ein_probe_unbounded", "", "", 1024},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.entry);
    const std::string source = fmt::format(
        "{}extern \"C\" __global__ void {} {}(float* out) {{\n  out[threadIdx.x] = 1;\n}}\n",
        c.preamble, c.bounds, c.entry);
    const EmulatedLaunch launch = testing::build_emulated(source, c.entry);
    std::vector<float> buffer(2048);
    void* args[] = {buffer.data()};
    launch(args, 1, c.allowed, 0);
    EXPECT_EQ(buffer[c.allowed - 1], 1.0f);
    EXPECT_DEATH(launch(args, 1, c.allowed + 32, 0),
                 fmt::format("{} launched with blocks of {} threads, where its __launch_bounds__ "
                             "allow 1 to {}: a GPU refuses the launch",
                             c.entry, c.allowed + 32, c.allowed));
  }
}

// Blocks run one after another, the last first: CUDA gives no order between blocks, so a kernel
// that counts on block 0 going first fails here.
TEST(EmulatedBuilds, TheLastBlockRunsFirst) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  const std::string source =
      "extern \"C\" __global__ void ein_probe_order(float* out) {\n"
      "  if (threadIdx.x == 0) out[1 + blockIdx.x] = out[0]++;\n}\n";
  float buffer[4] = {};
  void* args[] = {buffer};
  testing::build_emulated(source, "ein_probe_order")(args, 3, 32, 0);
  EXPECT_EQ(buffer[0], 3.0f);
  EXPECT_EQ(buffer[1], 2.0f);  // block 0 ran last
  EXPECT_EQ(buffer[3], 0.0f);  // block 2 first
}

// A block's threads are fibers, thread 0 first and each until it waits: a thread reading what a
// later one writes with no barrier between reads the old value (here the zeros a __shared__ array
// starts with), and after a barrier every thread's write.
TEST(EmulatedBuilds, ThreadsRunInTurnUntilTheyWait) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  const std::string source =
      "extern \"C\" __global__ void ein_probe_turns(float* out) {\n"
      "  __shared__ float tile[64];\n  tile[threadIdx.x] = threadIdx.x + 1;\n"
      "  out[threadIdx.x] = tile[(threadIdx.x + 1) % 64];\n  __syncthreads();\n"
      "  out[64 + threadIdx.x] = tile[(threadIdx.x + 1) % 64];\n}\n";
  float out[128] = {};
  void* args[] = {out};
  testing::build_emulated(source, "ein_probe_turns")(args, 1, 64, 0);
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(out[t], t == 63 ? 1.0f : 0.0f) << t;  // only thread 0 had written before 63 read
    EXPECT_EQ(out[64 + t], static_cast<float>((t + 1) % 64 + 1)) << t;
  }
}

// A GPU hangs where a block's threads wait at barriers the others never reach (thread 0 at its
// warp's, the rest at the block's); here the process stops with a message instead. Threads that
// take either branch all alike pass.
TEST(EmulatedBuilds, BarriersNoThreadCanPassStopTheKernel) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string source =
      "extern \"C\" __global__ void ein_probe_stuck(float* out, double split) {\n"
      "  if (threadIdx.x < split) __syncwarp();\n  else __syncthreads();\n"
      "  out[threadIdx.x] = 1;\n}\n";
  const EmulatedLaunch launch = testing::build_emulated(source, "ein_probe_stuck");
  float out[32] = {};
  for (const double split : {0.0, 32.0}) {
    void* args[] = {out, const_cast<double*>(&split)};
    launch(args, 1, 32, 0);
    EXPECT_EQ(out[31], 1.0f) << split;
  }
  const double split = 1;
  void* args[] = {out, const_cast<double*>(&split)};
  EXPECT_DEATH(launch(args, 1, 32, 0),
               "every thread of the block left waits at a barrier that the others never reach");
}

// Under scripts/racecheck.sh (ThreadSanitizer on the emulated kernels), a block whose threads
// read shared memory that another thread wrote with no barrier between is reported, whichever
// thread ran first, and the same kernel with __syncthreads() is not; __syncwarp() orders the
// lanes of a warp and not two warps, and a shuffle orders nothing. Blocks are unordered: two blocks
// writing one element of global memory, or one reading what another writes, are reported, while
// blocks that each use the same shared memory (a __shared__ array or the dynamic one) are not. This
// runs itself once a kernel under TSan's runtime, with EIN_RACE_PROBE saying which kernel to
// launch.
TEST(EmulatedBuilds, RacecheckReportsAMissingBarrier) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  struct Probe {
    std::string name, barrier;
    int partner;           // thread t reads what thread t ^ partner wrote
    std::string written;   // the element of `out` thread t writes
    std::string more;      // added to what it writes
    std::string where;     // what the report names, for a probe that races
    bool dynamic = false;  // the tile in dynamic shared memory
  };
  const std::string own = "blockIdx.x * 64 + threadIdx.x", tile = "ein_probe_race::tile",
                    kernel = "#0 ein_probe_race ";
  const std::string other = " + out[(blockIdx.x + 1) % gridDim.x * 64 + threadIdx.x]";
  const std::vector<Probe> probes = {
      {"none", "", 1, own, "", tile},
      {"block", "__syncthreads();", 1, own, "", ""},
      {"block_across_warps", "__syncthreads();", 32, own, "", ""},
      {"warp", "__syncwarp();", 1, own, "", ""},
      {"warp_across_warps", "__syncwarp();", 32, own, "", tile},
      // a shuffle exchanges registers and orders no memory, as on a GPU
      {"shuffle", "(void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);", 1, own, "", tile},
      {"dynamic", "__syncthreads();", 1, own, "", "", true},
      {"blocks_one_element", "__syncthreads();", 1, "threadIdx.x", "", kernel},
      {"blocks_read_another", "__syncthreads();", 1, own, other, kernel},
  };
  if (const char* name = std::getenv("EIN_RACE_PROBE")) {
    const auto probe =
        std::find_if(probes.begin(), probes.end(), [&](const Probe& p) { return p.name == name; });
    ASSERT_NE(probe, probes.end()) << name;
    const std::string source = fmt::format(
        "extern \"C\" __global__ void ein_probe_race(float* out) {{\n  {}\n"
        "  tile[threadIdx.x] = threadIdx.x;\n  {}\n"
        "  out[{}] = tile[threadIdx.x ^ {}]{};\n}}\n",
        probe->dynamic ? "EIN_DYNAMIC_SHARED(bytes);\n  float* tile = (float*)bytes;"
                       : "__shared__ float tile[64];",
        probe->barrier, probe->written, probe->partner, probe->more);
    std::vector<float> out(3 * 64);
    void* args[] = {out.data()};
    testing::build_emulated(source, "ein_probe_race")(args, 3, 64, probe->dynamic ? 256 : 0);
    EXPECT_EQ(out[63], static_cast<float>(63 ^ probe->partner));
    return;
  }
  const std::string tsan = testing::thread_sanitizer_runtime();
  if (tsan.empty()) GTEST_SKIP() << "the host compiler has no ThreadSanitizer runtime";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (const Probe& probe : probes) {
    SCOPED_TRACE(probe.name);
    const std::string command = fmt::format(
        "EIN_RACE_PROBE={} EIN_EMULATION_RACECHECK=1 TSAN_OPTIONS='halt_on_error=1 exitcode=66 "
        "ignore_noninstrumented_modules=1' LD_PRELOAD={} {} "
        "--gtest_filter=EmulatedBuilds.RacecheckReportsAMissingBarrier 2>&1",
        probe.name, tsan, self);
    std::string output;
    FILE* pipe = ::popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe))
      output.append(buffer, n);
    const int status = ::pclose(pipe);
    ASSERT_TRUE(WIFEXITED(status)) << output;
    if (probe.where.empty()) {
      EXPECT_EQ(WEXITSTATUS(status), 0) << output;
      EXPECT_EQ(output.find("data race"), std::string::npos) << output;
    } else {
      EXPECT_EQ(WEXITSTATUS(status), 66) << output;
      EXPECT_NE(output.find("WARNING: ThreadSanitizer: data race"), std::string::npos) << output;
      EXPECT_NE(output.find(probe.where), std::string::npos) << output;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, Emulate,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         [](const auto& p) { return testing::corpus_test_name(p.param); });

}  // namespace
}  // namespace ein
