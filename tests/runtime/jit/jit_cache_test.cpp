// The CPU JIT's caches: memory hits, disk hits, corrupted and foreign disk entries (rejected,
// recompiled, rewritten; never a crash or a wrong kernel), unwritable folders, concurrency,
// and one symbol name used by two sources.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

#include "runtime/jit/disk_cache.h"
#include "runtime/jit/jit_test_kernels.h"

namespace ein::testing {
namespace {

/// Runs an exp_kernel on random data and checks it against the float64 reference (see
/// cpu_jit_test.cpp for the 2e-6 tolerance).
void expect_exp_kernel_works(CpuKernelFn fn) {
  ASSERT_NE(fn, nullptr);
  const int64_t n = 77;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  std::vector<float> x(n), y(n);
  for (auto& v : x)
    v = dist(rng);
  void* buffers[] = {x.data(), y.data()};
  fn(buffers, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    const double want = std::exp(double{x[i]}) * 2 + 1;
    ASSERT_NEAR(y[i], want, 2e-6 * want) << "at " << i;
  }
}

std::vector<std::filesystem::path> cache_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::exists(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      files.push_back(entry.path());
  return files;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(JitTest, MemoryHitReturnsTheSamePointerWithoutCompiling) {
  const std::string source = exp_kernel("ein_kernel_memhit");
  const auto before = jit().stats();
  auto first = jit().get(source, "ein_kernel_memhit");
  auto second = jit().get(source, "ein_kernel_memhit");
  const auto after = jit().stats();
  EXPECT_EQ(first, second);
  EXPECT_EQ(after.compiled, before.compiled + 1);
  EXPECT_EQ(after.memory_hits, before.memory_hits + 1);
  EXPECT_GT(after.last_compile_ms, 0);
  expect_exp_kernel_works(second);
}

TEST_F(JitTest, DiskHitAfterClearingTheMemoryCache) {
  const std::string source = exp_kernel("ein_kernel_diskhit");
  const auto before = jit().stats();
  jit().get(source, "ein_kernel_diskhit");
  ASSERT_EQ(cache_files(dir_).size(), 1u);  // no temporary files left behind
  EXPECT_EQ(cache_files(dir_)[0].extension(), ".o");
  jit().clear_memory_cache();
  auto fn = jit().get(source, "ein_kernel_diskhit");
  const auto after = jit().stats();
  EXPECT_EQ(after.compiled, before.compiled + 1);
  EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
  EXPECT_EQ(after.disk_rejected, before.disk_rejected);
  EXPECT_GT(after.last_disk_load_ms, 0);
  expect_exp_kernel_works(fn);
}

/// Compiles a kernel, damages its disk entry with `damage` (given the entry's path), and checks
/// the next get() rejects it, recompiles a working kernel and rewrites the entry (the get()
/// after that is a disk hit).
void check_damaged_entry_is_rejected(
    const std::filesystem::path& dir, const std::string& nonce,
    const std::function<void(const std::filesystem::path&)>& damage) {
  auto& jit = CpuJit::instance();
  const std::string source = exp_kernel("ein_kernel_damaged", nonce);
  jit.get(source, "ein_kernel_damaged");
  const auto files = cache_files(dir);
  ASSERT_EQ(files.size(), 1u);
  damage(files[0]);
  jit.clear_memory_cache();

  const auto before = jit.stats();
  auto fn = jit.get(source, "ein_kernel_damaged");
  const auto after = jit.stats();
  EXPECT_EQ(after.disk_rejected, before.disk_rejected + 1);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_EQ(after.compiled, before.compiled + 1);
  expect_exp_kernel_works(fn);

  jit.clear_memory_cache();
  expect_exp_kernel_works(jit.get(source, "ein_kernel_damaged"));
  EXPECT_EQ(jit.stats().disk_hits, after.disk_hits + 1);  // the entry was rewritten
  std::filesystem::remove(files[0]);
}

/// Rewrites the file at `path` as f(its bytes).
std::function<void(const std::filesystem::path&)> rewrite(
    std::function<std::string(std::string)> f) {
  return [f](const std::filesystem::path& path) { write_file(path, f(read_file(path))); };
}

TEST_F(JitTest, FlippedPayloadBytesAreRejected) {
  check_damaged_entry_is_rejected(dir_, "flip", [](const std::filesystem::path& path) {
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(path));
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    for (std::streamoff at = 100; at < size; at += 97) {
      file.seekg(at);
      const char byte = static_cast<char>(file.get());
      file.seekp(at);
      file.put(static_cast<char>(~byte));
    }
  });
}

TEST_F(JitTest, TruncatedFilesAreRejected) {
  check_damaged_entry_is_rejected(dir_, "truncate",
                                  rewrite([](std::string b) { return b.substr(0, b.size() / 2); }));
  check_damaged_entry_is_rejected(dir_, "truncate header",
                                  rewrite([](std::string b) { return b.substr(0, 20); }));
  check_damaged_entry_is_rejected(dir_, "empty",
                                  rewrite([](std::string) { return std::string(); }));
}

TEST_F(JitTest, GarbageHeaderIsRejected) {
  check_damaged_entry_is_rejected(dir_, "garbage", rewrite([](std::string bytes) {
                                    for (size_t i = 0; i < 48 && i < bytes.size(); ++i)
                                      bytes[i] = static_cast<char>(i * 37 + 1);
                                    return bytes;
                                  }));
}

TEST_F(JitTest, AnEntryOfAnotherKeyIsRejected) {
  // A well-formed entry under the wrong name (say, copied by hand) must not be trusted.
  jit().get(exp_kernel("ein_kernel_damaged", "the other kernel"), "ein_kernel_damaged");
  const auto files = cache_files(dir_);
  ASSERT_EQ(files.size(), 1u);
  const std::string foreign = read_file(files[0]);
  std::filesystem::remove(files[0]);
  check_damaged_entry_is_rejected(dir_, "victim", rewrite([&](std::string) { return foreign; }));
}

TEST_F(JitTest, PayloadTheLinkerRefusesIsRejected) {
  // Header, key and hash are all valid but the payload is not an object file.
  check_damaged_entry_is_rejected(dir_, "not an object", [&](const std::filesystem::path& path) {
    const std::string hex = path.stem().string();
    const detail::JitCacheKey key{std::stoull(hex.substr(0, 16), nullptr, 16),
                                  std::stoull(hex.substr(16), nullptr, 16)};
    ASSERT_EQ(key.hex(), hex);
    ASSERT_FALSE(
        detail::write_jit_cache(path.parent_path(), key, std::string(4000, 'x')).has_value());
    ASSERT_EQ(detail::read_jit_cache(path.parent_path(), key).status,
              detail::JitCacheRead::Status::kLoaded);
  });
}

TEST_F(JitTest, UnwritableCacheDirOnlyDisablesTheDiskCache) {
  const auto file_not_dir = dir_ / "a_file";
  std::filesystem::create_directories(dir_);
  write_file(file_not_dir, "not a folder");
  jit().set_disk_cache_dir(file_not_dir / "cpu");  // cannot be created: its parent is a file
  const auto before = jit().stats();
  expect_exp_kernel_works(jit().get(exp_kernel("ein_kernel_unwritable"), "ein_kernel_unwritable"));
  jit().clear_memory_cache();
  expect_exp_kernel_works(jit().get(exp_kernel("ein_kernel_unwritable"), "ein_kernel_unwritable"));
  EXPECT_EQ(jit().stats().compiled, before.compiled + 2);
  EXPECT_EQ(jit().stats().disk_rejected, before.disk_rejected);
}

TEST_F(JitTest, EmptyDirDisablesTheDiskCache) {
  jit().set_disk_cache_dir({});
  EXPECT_TRUE(jit().disk_cache_dir().empty());
  const auto before = jit().stats();
  jit().get(exp_kernel("ein_kernel_nodisk"), "ein_kernel_nodisk");
  jit().clear_memory_cache();
  expect_exp_kernel_works(jit().get(exp_kernel("ein_kernel_nodisk"), "ein_kernel_nodisk"));
  EXPECT_EQ(jit().stats().compiled, before.compiled + 2);
  EXPECT_EQ(jit().stats().disk_hits, before.disk_hits);
  EXPECT_TRUE(cache_files(dir_).empty());
}

TEST_F(JitTest, ConcurrentGetsOfOneKernelCompileOnce) {
  const std::string source = exp_kernel("ein_kernel_concurrent");
  const auto before = jit().stats();
  std::vector<CpuKernelFn> got(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { got[t] = jit().get(source, "ein_kernel_concurrent"); });
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(jit().stats().compiled, before.compiled + 1);
  EXPECT_EQ(jit().stats().memory_hits, before.memory_hits + 7);
  for (auto fn : got)
    EXPECT_EQ(fn, got[0]);
  expect_exp_kernel_works(got[0]);
}

TEST_F(JitTest, OneSymbolNameInTwoSourcesGivesTwoKernels) {
  // Each key has its own JITDylib, so the same symbol from different sources does not clash.
  auto exp_fn = jit().get(exp_kernel("ein_kernel_same_name"), "ein_kernel_same_name");
  auto sum_fn =
      jit().get(row_sum_of_squares_kernel("ein_kernel_same_name"), "ein_kernel_same_name");
  EXPECT_NE(exp_fn, sum_fn);
  expect_exp_kernel_works(exp_fn);
  std::vector<float> x(kRowLength, 0.5f), out(1, 0.f);
  void* buffers[] = {x.data(), out.data()};
  sum_fn(buffers, 0, 1);
  EXPECT_FLOAT_EQ(out[0], 0.25f * kRowLength);  // exact: 0.25 sums exactly in f32
}

TEST_F(JitTest, CacheKeysSeparateEveryInput) {
  using detail::jit_cache_key;
  const auto key = jit_cache_key("src", "sym", "target", "19");
  EXPECT_EQ(key, jit_cache_key("src", "sym", "target", "19"));
  EXPECT_FALSE(key == jit_cache_key("src ", "sym", "target", "19"));
  EXPECT_FALSE(key == jit_cache_key("src", "sym2", "target", "19"));
  EXPECT_FALSE(key == jit_cache_key("src", "sym", "target2", "19"));
  EXPECT_FALSE(key == jit_cache_key("src", "sym", "target", "20"));
  EXPECT_FALSE(key == jit_cache_key("srcs", "ym", "target", "19"));  // fields are length-prefixed
  EXPECT_EQ(key.hex().size(), 32u);
}

}  // namespace
}  // namespace ein::testing
