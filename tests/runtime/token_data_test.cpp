// Token files and batches: every batch against the token file's own contents, determinism per
// (seed, batch) whatever the thread count or prefetching, resuming from a position, the
// sequential pass, and each error with its message. No test depends on timing.
#include <gtest/gtest.h>

#include <tbb/global_control.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ein/errors.h>

#include "runtime/parallel.h"
#include "runtime/random.h"
#include <ein/storage.h>
#include <ein/token_data.h>
#include <ein/token_file.h>

namespace ein {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TokenData : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ein_token_data_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes raw bytes (for files write_tokens would refuse to make).
  std::string write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // A file of n tokens with distinct, non-trivial values t_i = (7 i + 3) mod vocab.
  std::string write_pattern(const std::string& name, int64_t n, int64_t vocab = 50000) const {
    std::vector<int64_t> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      tokens[static_cast<size_t>(i)] = (7 * i + 3) % vocab;
    write_tokens(path(name), tokens, *token_dtype_from_path(name));
    return path(name);
  }

  fs::path dir_;
};

// Asserts `fn` throws a RuntimeError whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no RuntimeError; expected one mentioning '" << parts.front() << "'";
  } catch (const RuntimeError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << p;
  }
}

// Every row of `b` is a window of `file` (checked token by token), y is x shifted by one,
// and the start lies in [0, n - T - 1]. Returns the row starts.
std::vector<int64_t> check_windows(const TokenFile& file, const Batch& b, int64_t T) {
  std::vector<int64_t> starts;
  const auto x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
  EXPECT_EQ(b.x.dtype(), DType::i64);
  EXPECT_TRUE(b.x.is_contiguous() && b.y.is_contiguous());
  EXPECT_EQ(b.x.shape(), b.y.shape());
  for (int64_t r = 0; r < b.x.size(0); ++r) {
    // The pattern file's tokens are distinct, so the first token identifies the start.
    int64_t s = -1;
    for (int64_t i = 0; i + T < file.size() && s < 0; ++i)
      if (file.token(i) == x[static_cast<size_t>(r * T)]) s = i;
    EXPECT_GE(s, 0) << "row " << r << " is no window of the file";
    if (s < 0) continue;
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(x[static_cast<size_t>(r * T + t)], file.token(s + t)) << "row " << r << " t " << t;
      EXPECT_EQ(y[static_cast<size_t>(r * T + t)], file.token(s + t + 1)) << "row " << r;
    }
    starts.push_back(s);
  }
  return starts;
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.index == b.index && a.x.shape() == b.x.shape() &&
         a.x.to_vector<int64_t>() == b.x.to_vector<int64_t>() &&
         a.y.to_vector<int64_t>() == b.y.to_vector<int64_t>();
}

TEST_F(TokenData, WindowStartIsUniformAndPure) {
  std::vector<int> counts(10, 0);
  for (int64_t k = 0; k < 2000; ++k)
    for (int64_t r = 0; r < 5; ++r) {
      const int64_t s = random_window_start(42, k, r, 10);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, 10);
      ++counts[static_cast<size_t>(s)];
      ASSERT_EQ(s, random_window_start(42, k, r, 10));
    }
  // 10000 draws over 10 values: each count is 1000 ± 30 (one sigma); 6 sigma bounds.
  for (int c : counts) {
    EXPECT_GT(c, 820);
    EXPECT_LT(c, 1180);
  }
  // Huge ranges use all 64 bits: starts above 2^40 occur.
  EXPECT_GT(random_window_start(1, 0, 0, int64_t{1} << 62), int64_t{1} << 40);
  // Another seed, another sequence.
  int same = 0;
  for (int64_t k = 0; k < 100; ++k)
    same += random_window_start(1, k, 0, 1 << 30) == random_window_start(2, k, 0, 1 << 30);
  EXPECT_LT(same, 2);
}

TEST_F(TokenData, BatchesAreShiftedWindowsInsideTheFile) {
  for (const char* name : {"a.u16", "a.i32"}) {
    const auto p = write_pattern(name, 1000);
    TokenLoader data(p, {.batch_size = 4, .context = 16, .seed = 7, .vocab_size = 50000});
    EXPECT_EQ(data.file().size(), 1000);
    for (int k = 0; k < 20; ++k) {
      const Batch b = data.next_batch();
      EXPECT_EQ(b.index, k);
      EXPECT_EQ(b.x.shape(), (Shape{4, 16}));
      EXPECT_EQ(check_windows(data.file(), b, 16).size(), 4u);
    }
    EXPECT_EQ(data.position(), 20);
  }
}

TEST_F(TokenData, Uint16AndInt32FilesReadTheSameTokens) {
  std::vector<int64_t> tokens = {0, 1, 255, 256, 65535, 12345, 7};
  write_tokens(path("t.u16"), tokens, TokenDType::u16);
  tokens.push_back(2147483647);
  write_tokens(path("t.i32"), tokens, TokenDType::i32);
  EXPECT_EQ(fs::file_size(path("t.u16")), 14u);
  EXPECT_EQ(fs::file_size(path("t.i32")), 32u);
  const TokenFile a(path("t.u16")), b(path("t.i32"));
  EXPECT_EQ(a.dtype(), TokenDType::u16);
  EXPECT_EQ(b.dtype(), TokenDType::i32);
  ASSERT_EQ(a.size(), 7);
  ASSERT_EQ(b.size(), 8);
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(b.token(i), tokens[static_cast<size_t>(i)]);
  std::vector<int64_t> out(7);
  a.read(0, 7, out.data());
  EXPECT_EQ(out, std::vector<int64_t>(tokens.begin(), tokens.begin() + 7));
  // Little-endian on disk, as numpy's '<u2' / '<i4': 256 is bytes 00 01.
  std::ifstream f(path("t.u16"), std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(raw.substr(6, 2), std::string("\x00\x01", 2));
  // The dtype can be given for any name; it wins over the extension.
  fs::copy_file(path("t.i32"), path("t.bin"));
  EXPECT_EQ(TokenFile(path("t.bin"), TokenDType::i32).token(3), 256);
  EXPECT_EQ(TokenFile(path("t.i32"), TokenDType::u16).size(), 16);
}

TEST_F(TokenData, SameSeedSameBatchesOtherSeedOthers) {
  const auto p = write_pattern("s.u16", 5000);
  TokenLoader a(p, {.batch_size = 3, .context = 8, .seed = 11, .prefetch = 0});
  TokenLoader b(p, {.batch_size = 3, .context = 8, .seed = 11, .prefetch = 0});
  TokenLoader c(p, {.batch_size = 3, .context = 8, .seed = 12, .prefetch = 0});
  int same_as_c = 0;
  for (int k = 0; k < 10; ++k) {
    const Batch ba = a.next_batch(), bb = b.next_batch(), bc = c.next_batch();
    EXPECT_TRUE(same_batch(ba, bb)) << "batch " << k;
    same_as_c += same_batch(ba, bc);
  }
  EXPECT_EQ(same_as_c, 0);
}

TEST_F(TokenData, BatchKDirectlyEqualsTheKthFromIteration) {
  const auto p = write_pattern("d.i32", 3000);
  TokenLoader it(p, {.batch_size = 2, .context = 5, .seed = 3});
  TokenLoader direct(p, {.batch_size = 2, .context = 5, .seed = 3, .prefetch = 0});
  std::vector<Batch> seen;
  for (int k = 0; k < 12; ++k)
    seen.push_back(it.next_batch());
  for (int k = 11; k >= 0; --k)  // any order: batch k is a pure function of (seed, k)
    EXPECT_TRUE(same_batch(direct.batch_at(k), seen[static_cast<size_t>(k)])) << "batch " << k;
  EXPECT_EQ(direct.position(), 0);  // batch_at leaves the position alone
}

TEST_F(TokenData, ThreadCountIsIrrelevant) {
  const auto p = write_pattern("t.u16", 4000);
  std::vector<Batch> one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    ASSERT_EQ(num_threads(), 1);
    TokenLoader data(p, {.batch_size = 8, .context = 32, .seed = 5});
    for (int k = 0; k < 5; ++k)
      one.push_back(data.next_batch());
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    TokenLoader data(p, {.batch_size = 8, .context = 32, .seed = 5});
    for (int k = 0; k < 5; ++k)
      two.push_back(data.next_batch());
  }
  for (size_t k = 0; k < one.size(); ++k)
    EXPECT_TRUE(same_batch(one[k], two[k])) << "batch " << k;
}

TEST_F(TokenData, PrefetchOnAndOffGiveIdenticalBatches) {
  const auto p = write_pattern("p.i32", 2000);
  for (int depth : {1, 2, 5}) {
    TokenLoader off(p, {.batch_size = 4, .context = 9, .seed = 9, .prefetch = 0});
    TokenLoader on(p, {.batch_size = 4, .context = 9, .seed = 9, .prefetch = depth});
    for (int k = 0; k < 25; ++k)
      EXPECT_TRUE(same_batch(off.next_batch(), on.next_batch())) << "depth " << depth << " k " << k;
  }
}

TEST_F(TokenData, ResumeFromASavedPositionContinuesTheSequence) {
  const auto p = write_pattern("r.u16", 2000);
  const LoaderOptions opts{.batch_size = 3, .context = 7, .seed = 21};
  TokenLoader full(p, opts);
  std::vector<Batch> expected;
  for (int k = 0; k < 10; ++k)
    expected.push_back(full.next_batch());
  int64_t saved = 0;
  {
    TokenLoader first(p, opts);
    for (int k = 0; k < 4; ++k)
      first.next_batch();
    saved = first.position();
  }  // the "run" stops with batches prefetched and never taken
  EXPECT_EQ(saved, 4);
  TokenLoader resumed(p, opts);
  resumed.next_batch();  // prefetched work for the old position must be discarded
  resumed.set_position(saved);
  for (int k = 4; k < 10; ++k)
    EXPECT_TRUE(same_batch(resumed.next_batch(), expected[static_cast<size_t>(k)])) << k;
  // Going back works too.
  resumed.set_position(1);
  EXPECT_TRUE(same_batch(resumed.next_batch(), expected[1]));
  EXPECT_EQ(resumed.position(), 2);
}

TEST_F(TokenData, TinyFileWithExactlyOneWindow) {
  // n = T + 1: the only start is 0, so every row is the whole file.
  const auto p = write_pattern("tiny.i32", 9);
  TokenLoader data(p, {.batch_size = 5, .context = 8, .seed = 1});
  for (int k = 0; k < 10; ++k) {
    const Batch b = data.next_batch();
    for (int64_t s : check_windows(data.file(), b, 8))
      EXPECT_EQ(s, 0);
  }
  // n = T + 2: starts 0 and 1 only, and both occur.
  const auto q = write_pattern("tiny2.i32", 10);
  TokenLoader two(q, {.batch_size = 16, .context = 8, .seed = 1});
  std::vector<int> seen(2, 0);
  for (int k = 0; k < 4; ++k)
    for (int64_t s : check_windows(two.file(), two.next_batch(), 8))
      ++seen.at(static_cast<size_t>(s));
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

TEST_F(TokenData, SequentialPassCoversTheFileOnce) {
  const auto p = write_pattern("e.u16", 100);  // 99 x tokens: 12 windows of 8, 3 left over
  for (int prefetch : {0, 2}) {
    TokenLoader eval(
        p, {.batch_size = 5, .context = 8, .order = BatchOrder::sequential, .prefetch = prefetch});
    EXPECT_EQ(eval.num_windows(), 12);
    EXPECT_EQ(eval.num_batches(), 3);  // 5 + 5 + 2 windows
    std::vector<int64_t> starts;
    while (eval.has_next()) {
      const Batch b = eval.next_batch();
      for (int64_t s : check_windows(eval.file(), b, 8))
        starts.push_back(s);
    }
    std::vector<int64_t> expected;
    for (int64_t w = 0; w < 12; ++w)
      expected.push_back(w * 8);
    EXPECT_EQ(starts, expected);
    expect_error([&] { eval.next_batch(); }, {"sequential pass", "3 batches", "set_position(0)"});
    eval.set_position(0);
    EXPECT_EQ(eval.next_batch().x.to_vector<int64_t>()[0], eval.file().token(0));
  }
  TokenLoader dropped(
      p, {.batch_size = 5, .context = 8, .order = BatchOrder::sequential, .drop_last = true});
  EXPECT_EQ(dropped.num_batches(), 2);
  EXPECT_EQ(dropped.batch_at(1).x.shape(), (Shape{5, 8}));
}

TEST_F(TokenData, TokenRangeSplitsOneFileIntoTrainAndValidation) {
  // Tokens [0, 900) train, [900, 1000) validate; a bad token at 950 only fails validation.
  std::vector<int64_t> tokens(1000);
  for (int64_t i = 0; i < 1000; ++i)
    tokens[static_cast<size_t>(i)] = (7 * i + 3) % 50000;
  tokens[950] = 60000;
  write_tokens(path("split.u16"), tokens, TokenDType::u16);
  const auto file = std::make_shared<const TokenFile>(path("split.u16"));
  TokenLoader train(file, {.batch_size = 16,
                           .context = 10,
                           .seed = 4,
                           .vocab_size = 50000,
                           .check_all_tokens = true,
                           .token_end = 900});
  EXPECT_EQ(train.num_tokens(), 900);
  int64_t highest = 0;
  for (int k = 0; k < 50; ++k)
    for (int64_t s : check_windows(*file, train.next_batch(), 10))
      highest = std::max(highest, s);
  EXPECT_LE(highest, 900 - 10 - 1);  // y's last token is 899 at most
  EXPECT_GE(highest, 870);           // 800 draws over 890 starts reach near the top
  TokenLoader val(file, {.batch_size = 4,
                         .context = 10,
                         .vocab_size = 50000,
                         .order = BatchOrder::sequential,
                         .token_begin = 900});
  EXPECT_EQ(val.num_windows(), 9);
  EXPECT_EQ(check_windows(*file, val.next_batch(), 10), (std::vector<int64_t>{900, 910, 920, 930}));
  expect_error([&] { val.next_batch(); }, {"token 60000 at index 950"});
  expect_error(
      [&] {
        TokenLoader(
            file,
            {.context = 10, .vocab_size = 50000, .check_all_tokens = true, .token_begin = 900});
      },
      {"token 60000 at index 950"});
  expect_error([&] { TokenLoader(file, {.context = 4, .token_begin = 10, .token_end = 1001}); },
               {"token range [10, 1001)", "1000 tokens"});
  expect_error([&] { TokenLoader(file, {.context = 4, .token_begin = 20, .token_end = 10}); },
               {"token range [20, 10)"});
  expect_error([&] { TokenLoader(file, {.context = 8, .token_begin = 995}); },
               {"split.u16", "has 5 tokens in [995, 1000)", "context + 1 = 9"});
}

TEST_F(TokenData, ByteLevelTokensRoundTrip) {
  const std::string text = std::string("To be, or not to be\n\xff\x00\x80 end", 26);
  write_byte_tokens(path("text.u16"), text);
  write_byte_tokens(path("text.i32"), text);
  write_byte_tokens(path("text.bin"), text);  // no extension dtype: uint16
  EXPECT_EQ(fs::file_size(path("text.bin")), 2 * text.size());
  for (const auto& [name, dtype] :
       {std::pair{"text.u16", TokenDType::u16}, std::pair{"text.i32", TokenDType::i32},
        std::pair{"text.bin", TokenDType::u16}}) {
    const TokenFile f(path(name), dtype);
    ASSERT_EQ(f.size(), static_cast<int64_t>(text.size()));
    std::vector<int64_t> tokens(text.size());
    f.read(0, f.size(), tokens.data(), kByteVocabSize);
    EXPECT_EQ(tokens[20], 255);  // bytes are unsigned
    EXPECT_EQ(bytes_from_tokens(tokens), text);
  }
  expect_error(
      [] {
        bytes_from_tokens(std::vector<int64_t>{65, 256});
      },
      {"token 256 at index 1", "[0, 256)"});
}

TEST_F(TokenData, ErrorMissingFile) {
  expect_error([&] { TokenFile(path("nope.u16")); },
               {"cannot open token file", "nope.u16", "No such file"});
  expect_error([&] { TokenLoader(path("nope.i32"), {.context = 4}); }, {"nope.i32"});
  expect_error([&] { TokenFile(dir_.string(), TokenDType::i32); }, {"not a regular file"});
}

TEST_F(TokenData, ErrorUnknownDtype) {
  const auto p = write_raw("corpus.bin", std::string(8, 'a'));
  expect_error([&] { TokenFile{p}; }, {"cannot tell the token dtype", "corpus.bin", ".u16"});
}

TEST_F(TokenData, ErrorSizeNotAMultipleOfTheTokenSize) {
  const auto p = write_raw("odd.i32", std::string(10, 'a'));
  expect_error([&] { TokenFile{p}; }, {"odd.i32", "has 10 bytes", "multiple of 4", "int32"});
  const auto q = write_raw("odd.u16", std::string(7, 'a'));
  expect_error([&] { TokenFile{q}; }, {"odd.u16", "has 7 bytes", "multiple of 2", "uint16"});
}

TEST_F(TokenData, ErrorFewerTokensThanOneWindow) {
  const auto p = write_pattern("short.u16", 8);
  expect_error([&] { TokenLoader(p, {.batch_size = 2, .context = 8}); },
               {"short.u16", "has 8 tokens", "context + 1 = 9"});
  const auto e = write_raw("empty.i32", "");
  EXPECT_EQ(TokenFile(e).size(), 0);
  expect_error([&] { TokenLoader(e, {.context = 1}); }, {"empty.i32", "has 0 tokens"});
}

TEST_F(TokenData, ErrorBadOptions) {
  const auto p = write_pattern("o.u16", 100);
  expect_error([&] { TokenLoader(p, {.batch_size = 0, .context = 4}); }, {"batch_size", "o.u16"});
  expect_error([&] { TokenLoader(p, {.context = 0}); }, {"context must be >= 1"});
  expect_error([&] { TokenLoader(p, {.context = 4, .prefetch = -1}); }, {"prefetch"});
  TokenLoader seq(p, {.batch_size = 4, .context = 4, .order = BatchOrder::sequential});
  expect_error([&] { seq.set_position(-1); }, {"set_position"});
  // 99 x tokens: 24 windows of 4, 6 batches of 4 windows.
  expect_error([&] { seq.set_position(7); }, {"set_position", "[0, 6]", "o.u16"});
  expect_error([&] { seq.batch_at(6); }, {"batch 6", "[0, 6)"});
  expect_error(
      [&] {
        write_tokens(path("w.u16"), std::vector<int64_t>{1, 70000}, TokenDType::u16);
      },
      {"token 70000 at index 1", "uint16"});
  expect_error([&] { write_tokens(path("w.i32"), std::vector<int64_t>{-1}, TokenDType::i32); },
               {"token -1 at index 0"});
  EXPECT_FALSE(fs::exists(path("w.u16")));
  expect_error(
      [&] { write_tokens(path("no/such/dir.u16"), std::vector<int64_t>{1}, TokenDType::u16); },
      {"cannot write token file"});
}

// A file of 300 tokens < 256 except token 200 at index 150, and one negative int32 token.
TEST_F(TokenData, ErrorTokensOutsideTheVocabulary) {
  std::vector<int64_t> tokens(300, 65);
  tokens[150] = 300;
  write_tokens(path("v.u16"), tokens, TokenDType::u16);
  // Up front: the loader refuses to open.
  expect_error(
      [&] {
        TokenLoader(path("v.u16"), {.context = 4, .vocab_size = 256, .check_all_tokens = true});
      },
      {"v.u16", "token 300 at index 150", "[0, 256)"});
  // Lazily: only a batch whose window holds index 150 fails; the sequential pass reaches it
  // in batch 150 / (2 * 8) = 9, with and without prefetching, and the error stays.
  for (int prefetch : {0, 3}) {
    TokenLoader eval(path("v.u16"), {.batch_size = 2,
                                     .context = 8,
                                     .vocab_size = 256,
                                     .order = BatchOrder::sequential,
                                     .prefetch = prefetch});
    for (int k = 0; k < 9; ++k)
      eval.next_batch();
    expect_error([&] { eval.next_batch(); }, {"token 300 at index 150", "v.u16"});
    EXPECT_EQ(eval.position(), 9);
    expect_error([&] { eval.next_batch(); }, {"token 300 at index 150"});  // again, not a hang
    eval.set_position(10);
    EXPECT_EQ(eval.next_batch().index, 10);
  }
  // Without a vocabulary the file is fine (uint16 is never negative).
  TokenLoader any(path("v.u16"), {.context = 4, .check_all_tokens = true});
  // int32: a negative token is always an error.
  write_raw("neg.i32", std::string("\x01\x00\x00\x00\xfb\xff\xff\xff\x01\x00\x00\x00", 12));
  expect_error([&] { TokenLoader(path("neg.i32"), {.context = 1, .check_all_tokens = true}); },
               {"token -5 at index 1", "never negative"});
}

TEST_F(TokenData, CreateAndDestroyWithPrefetchNeverHangs) {
  const auto p = write_pattern("c.u16", 500);
  auto file = std::make_shared<const TokenFile>(p);
  const int64_t allocated = memory_allocated(cpu());
  for (int i = 0; i < 300; ++i) {
    // Destroyed at every stage: before the worker ran, with a full queue, mid-sequence.
    TokenLoader data(
        file,
        {.batch_size = 2, .context = 4, .seed = static_cast<uint64_t>(i), .prefetch = 1 + i % 4});
    for (int k = 0; k < i % 3; ++k)
      data.next_batch();
    if (i % 5 == 0) data.set_position(i);
  }
  EXPECT_EQ(memory_allocated(cpu()), allocated);  // no prefetched batch outlives its loader
  // Batches outlive their loader and the file stays mapped while a loader shares it.
  Batch kept;
  {
    TokenLoader data(file, {.batch_size = 2, .context = 4});
    kept = data.next_batch();
  }
  EXPECT_EQ(check_windows(*file, kept, 4).size(), 2u);
  // The last owner unmaps the file (Linux lists mappings in /proc/self/maps).
  file.reset();
  std::ifstream maps("/proc/self/maps");
  const std::string mapped((std::istreambuf_iterator<char>(maps)), {});
  EXPECT_EQ(mapped.find(dir_.string()), std::string::npos) << "still mapped: " << p;
}


// A token file truncated while mapped: reading its vanished pages would be SIGBUS; the guard
// turns it into an error naming the file and both sizes, on the caller's thread and on the
// prefetch thread alike, and the process carries on.
TEST_F(TokenData, FileTruncatedWhileMappedIsAnError) {
  const auto p = write_pattern("t.u16", 100000);
  TokenLoader direct(p, {.batch_size = 4, .context = 64, .seed = 1, .prefetch = 0});
  TokenLoader prefetching(p, {.batch_size = 4, .context = 64, .seed = 1, .prefetch = 2});
  const TokenFile file(p);
  EXPECT_EQ(direct.next_batch().x.shape(), (Shape{4, 64}));
  EXPECT_EQ(prefetching.next_batch().x.shape(), (Shape{4, 64}));
  ASSERT_EQ(::truncate(p.c_str(), 0), 0);
  const std::vector<std::string> parts = {"token file '" + p + "' shrank while mapped",
                                          "200000 bytes when opened, 0 bytes now"};
  expect_error([&] { direct.next_batch(); }, parts);
  expect_error([&] { file.token(99999); }, parts);
  expect_error([&] { file.check_tokens(256); }, parts);
  prefetching.set_position(50);  // drops what was prefetched before the truncation
  expect_error([&] { prefetching.next_batch(); }, parts);
  // The file grows back: reads work again (the guard left no state behind).
  write_pattern("t.u16", 100000);  // a new file renamed over the old: the old mapping is gone
  EXPECT_EQ(TokenFile(p).token(1), 10);
}

// A FIFO is refused when opened, without blocking for a writer.
TEST_F(TokenData, ErrorFifoIsNotARegularFile) {
  ASSERT_EQ(::mkfifo(path("pipe.u16").c_str(), 0644), 0);
  expect_error([&] { TokenFile(path("pipe.u16")); },
               {"token file '" + path("pipe.u16") + "' is not a regular file but a FIFO"});
}

}  // namespace
}  // namespace ein

namespace ein {
namespace {

// Data parallel: shard s of S with batch B reads rows [s·B, (s+1)·B) of the global batch that
// one loader with batch S·B reads, in random and in sequential order (so np=S reproduces np=1).
TEST_F(TokenData, ShardsSplitTheGlobalBatchByRows) {
  const auto p = write_pattern("s.i32", 5000);
  for (const BatchOrder order : {BatchOrder::random, BatchOrder::sequential}) {
    TokenLoader whole(p, {.batch_size = 6, .context = 7, .seed = 5, .order = order, .drop_last = true, .prefetch = 0});
    for (int64_t s = 0; s < 3; ++s) {
      LoaderOptions o{.batch_size = 2, .context = 7, .seed = 5, .order = order, .drop_last = true, .prefetch = 0};
      o.shard = s;
      o.shards = 3;
      TokenLoader shard(p, o);
      if (order == BatchOrder::sequential) {
        EXPECT_EQ(shard.num_batches(), whole.num_batches());
      }
      for (int64_t k : {0, 1, 17}) {
        const Batch g = whole.batch_at(k), b = shard.batch_at(k);
        const auto rows = [&](const Tensor& t) {  // rows 2s, 2s + 1 of a (6, 7) batch
          const std::vector<int64_t> v = t.to_vector<int64_t>();
          return std::vector<int64_t>(v.begin() + 14 * s, v.begin() + 14 * (s + 1));
        };
        EXPECT_EQ(b.x.to_vector<int64_t>(), rows(g.x)) << "shard " << s << " batch " << k;
        EXPECT_EQ(b.y.to_vector<int64_t>(), rows(g.y)) << "shard " << s << " batch " << k;
      }
    }
  }
  LoaderOptions bad{.batch_size = 2, .context = 7};
  bad.shard = 3;
  bad.shards = 3;
  expect_error([&] { TokenLoader(p, bad); }, {"shard 3 of 3"});
}

}  // namespace
}  // namespace ein
