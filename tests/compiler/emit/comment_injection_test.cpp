// User text in generated code: every ASCII control character (0x00–0x1F, 0x7F), a C1
// control, `*/` and a backslash ending the text (a line splice that would continue a `//`
// comment in C++) put into a kernel's name and origin, then emitted as CUDA C++ and MLIR. The
// text must hold no raw control character but its '\n' line ends, each comment line must
// stay one line, and the code must still compile: CUDA through NVRTC (skipped without it),
// MLIR through the CPU JIT, whose kernel is run and checked against exp(). (MLIR's lexer ends a
// `//` comment at a CR: a raw CR in an origin turned the rest of it into code the JIT refused.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/comment_text.h"
#include "compiler/emit/cuda_corpus.h"
#include "compiler/emit/emit_cuda.h"
#include "compiler/emit/emit_mlir.h"
#include "compiler/graph/expression_graphs.h"
#include "compiler/kernel/prepare.h"
#include "compiler/pipeline.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/jit/cpu_jit.h"

namespace ein {
namespace {

/// Every character that must not reach a comment raw, one string each.
std::vector<std::string> hostile_texts() {
  std::vector<std::string> out;
  for (int c = 0; c < 0x20; ++c)
    out.emplace_back(1, static_cast<char>(c));
  out.emplace_back(1, '\x7f');
  out.emplace_back("\xc2\x85");  // U+0085 NEXT LINE, a C1 control
  out.emplace_back("*/");
  out.emplace_back("\\");   // a backslash ending the line splices the next line in
  out.emplace_back("\\ ");  // GCC and Clang splice with spaces before the newline too
  return out;
}

/// A printable label for a hostile text in failure messages.
std::string label(const std::string& text) {
  std::string out;
  for (unsigned char c : text)
    out += fmt::format("\\x{:02x}", c);
  return out;
}

/// The f32 kernel of `x[n] -> exp(x)` over 64 points, with `text` in its name and twice in its
/// origin: before code-like text (which a line break would turn into code) and at the end
/// (where a trailing backslash would splice the next line).
Kernel hostile_kernel(const std::string& text) {
  const std::vector<Kernel> ks =
      testing::fused_kernels(map_expression_graph("x[n] -> exp(x)", {{64}}, DType::f32));
  EXPECT_EQ(ks.size(), 1u);
  Kernel k = ks.at(0);
  k.name = "fused_" + text + "_map";
  k.origin = "x[n] -> " + text + " exp(x) " + text;
  return k;
}

/// Checks `source` holds no raw control character but '\n', and that its line `prefix...`
/// is followed by a line starting `next` (the comment did not spill over or get split).
void expect_clean(const std::string& source, const std::string& prefix, const std::string& next) {
  for (size_t i = 0; i < source.size(); ++i) {
    const auto c = static_cast<unsigned char>(source[i]);
    ASSERT_FALSE((c < 0x20 && c != '\n') || c == 0x7F)
        << fmt::format("raw control character 0x{:02x} at byte {}", c, i) << "\n"
        << source;
    ASSERT_FALSE(c == 0xC2 && i + 1 < source.size() &&
                 static_cast<unsigned char>(source[i + 1]) < 0xA0 &&
                 static_cast<unsigned char>(source[i + 1]) >= 0x80)
        << "raw C1 control at byte " << i << "\n"
        << source;
  }
  const size_t at = source.find(prefix);
  ASSERT_NE(at, std::string::npos) << source;
  const size_t end = source.find('\n', at);
  ASSERT_NE(end, std::string::npos) << source;
  const std::string line = source.substr(at, end - at);
  EXPECT_EQ(line.find("*/"), std::string::npos) << line;
  const size_t last = line.find_last_not_of(' ');
  EXPECT_NE(line[last], '\\') << "the comment line ends in a line splice: " << line;
  EXPECT_EQ(source.compare(end + 1, next.size(), next), 0)
      << "the comment line is not followed by '" << next << "'\n"
      << source;
}

TEST(CommentText, EscapesControlsCommentEndsAndTrailingBackslashesOnly) {
  EXPECT_EQ(detail::comment_text("x[b n] -> x + 1 · ∑"), "x[b n] -> x + 1 · ∑");
  EXPECT_EQ(detail::comment_text("a\r\nb\tc\x1b[0m"), "a\\x0d\\x0ab\\x09c\\x1b[0m");
  EXPECT_EQ(detail::comment_text(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(detail::comment_text("a */ b*/"), "a *\\x2f b*\\x2f");
  EXPECT_EQ(detail::comment_text("a \\ b \\"), "a \\ b \\x5c");
  EXPECT_EQ(detail::comment_text("a\\  "), "a\\x5c  ");
  EXPECT_EQ(detail::comment_text("\xc2\x85\xff"), "\\xc2\\x85\\xff");
}

TEST(CommentInjection, CudaSourceKeepsCommentsOnOneLineAndCompiles) {
  const bool nvrtc = nvrtc_info().available;
  if (nvrtc) CudaCompiler::instance().set_disk_cache_dir({});
  const size_t clean_lines = [] {
    const std::string s = emit_cuda(hostile_kernel("plain")).source;
    return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
  }();
  for (const std::string& text : hostile_texts()) {
    SCOPED_TRACE(label(text));
    const CudaKernel k = emit_cuda(hostile_kernel(text));
    expect_clean(k.source, "// origin:   ", "// domain:   ");
    EXPECT_EQ(static_cast<size_t>(std::count(k.source.begin(), k.source.end(), '\n')), clean_lines);
    for (char c : k.entry)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << k.entry;
    if (nvrtc) {
      // No CUDA header is included by an f32 kernel, so one compile is quick.
      EXPECT_NO_THROW(CudaCompiler::instance().compile(k.source, k.entry + ".cu", {80, false, {}}))
          << k.source;
    }
  }
  if (!nvrtc) GTEST_SKIP() << "text checked; not compiled: " << nvrtc_info().reason;
}

TEST(CommentInjection, MlirHeaderStaysOneLineAndTheSymbolIsQuoted) {
  for (const std::string& text : hostile_texts()) {
    SCOPED_TRACE(label(text));
    const Kernel k = hostile_kernel(text);
    const std::string source = emit_kernel(k, Target::mlir, "ein_" + k.name);
    expect_clean(source, "// ein kernel ", "module {");
  }
  // A symbol that is not a bare MLIR identifier becomes a string literal with hex escapes.
  const std::string quoted = emit_kernel(hostile_kernel("plain"), Target::mlir, "ein_a \"b\"\\\r");
  EXPECT_NE(quoted.find("func.func @\"ein_a \\22b\\22\\5C\\0D\"("), std::string::npos) << quoted;
}

TEST(CommentInjection, MlirWithHostileTextCompilesAndRuns) {
  CpuJit& jit = CpuJit::instance();
  jit.set_disk_cache_dir({});
  std::string all;  // every hostile text at once; NUL left out of the symbol (ELF names end at NUL)
  for (const std::string& text : hostile_texts())
    all += text;
  const Kernel k = hostile_kernel(all);
  const std::string symbol = "ein_" + k.name.substr(k.name.find('\x01'));
  const std::string source = emit_kernel(k, Target::mlir, symbol);
  CpuKernelFn fn = nullptr;
  ASSERT_NO_THROW(fn = jit.get(source, symbol)) << source;
  ASSERT_NE(fn, nullptr);

  const Kernel prepared = prepare_kernel(k);
  const CpuSchedule schedule = schedule_cpu(prepared);
  std::vector<int64_t> params = kernel_parameters(prepared, schedule);
  std::vector<float> x(64), y(64, 0.0f);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.05f * static_cast<float>(i) - 1.3f;  // not zeros or ones: every lane differs
  void* buffers[] = {x.data(), y.data(), params.data()};
  fn(buffers, 0, schedule.outer_iterations);
  // 2e-6 relative (~16 f32 ulps): SLEEF's expf is within 1 ulp, the rest is slack.
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], std::exp(x[i]), 2e-6f * std::exp(x[i])) << i;
}

}  // namespace
}  // namespace ein
