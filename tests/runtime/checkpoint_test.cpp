// safetensors files: every dtype round-trips bit-exactly (0-d, zero-size and non-contiguous
// tensors included), metadata survives, and every corruption we know of (truncation at any
// byte, flipped header bytes, bad JSON, mismatched, overlapping, gapped or out-of-range
// offsets, trailing bytes) is a RuntimeError naming the file, never a crash.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ein/checkpoint.h>
#include <ein/storage.h>

namespace ein {
namespace {

namespace fs = std::filesystem;

/// A fresh directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ein_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A path inside the test's directory.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

/// Random values of `dtype` in `shape`: normals for floats, a spread of integers, random bits.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  const Tensor r = randn(shape, DType::f64, cpu(), seed);
  if (kFloatDTypes.contains(dtype)) return r.to(dtype);
  std::vector<double> v = r.to_vector<double>();
  for (double& x : v) {
    const double k = std::floor(x * 40);
    x = dtype == DType::boolean ? (k > 0)
        : dtype == DType::u8    ? std::fmod(std::abs(k), 256)
                                : std::max(-128.0, std::min(127.0, k));
  }
  return from_data<double>(v, shape).to(dtype);
}

/// The bytes of `t` in row-major order (for bit-exact comparisons, NaN payloads included).
std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.nbytes()));
}

/// The whole file.
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Writes `bytes` to `path`.
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// A safetensors file from header text and data bytes (no padding, any header at all).
std::string raw_file(const std::string& header, const std::string& data, uint64_t size = ~0ull) {
  uint64_t n = size == ~0ull ? header.size() : size;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i, n >>= 8)
    out[i] = static_cast<char>(n & 0xff);
  return out + header + data;
}

/// The message of the RuntimeError that loading `path` throws ("" when it loads).
std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "";
}

TEST_F(SafetensorsTest, EveryDtypeRoundTripsBitExactly) {
  const std::vector<Shape> shapes = {{2, 3, 5}, {}, {0}, {3, 0, 2}, {7}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint64_t seed = 1;
  for (DType d : kAllDTypes)
    for (const Shape& s : shapes)
      tensors.emplace_back(std::string(dtype_name(d)) + "." + shape_str(s),
                           random_tensor(s, d, seed++));
  save_safetensors(path("all.safetensors"), tensors);
  const Checkpoint c = load_safetensors(path("all.safetensors"));
  ASSERT_EQ(c.tensors.size(), tensors.size());
  EXPECT_TRUE(c.metadata.empty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = c.tensors[i];
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(name, tensors[i].first);  // file order = the order they were given in
    EXPECT_EQ(t.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(t.shape(), tensors[i].second.shape());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(bytes_of(t), bytes_of(tensors[i].second));
  }
}

// Only the wanted tensors are read (sampling reads a training checkpoint's model, not its
// optimizer state), in file order, with the metadata; the others cost nothing.
TEST_F(SafetensorsTest, LoadsOnlyTheTensorsAskedFor) {
  const Tensor w = random_tensor({4, 3}, DType::f32, 1), b = random_tensor({3}, DType::f32, 2);
  save_safetensors(path("model_and_optim.safetensors"),
                   {{"model.w", w}, {"optim.m.w", random_tensor({4, 3}, DType::f32, 3)},
                    {"model.b", b}},
                   {{"step", "7"}});
  const int64_t before = memory_allocated(cpu());
  const Checkpoint c = load_safetensors(path("model_and_optim.safetensors"),
                                        [](const std::string& name) { return name[0] == 'm'; });
  ASSERT_EQ(c.tensors.size(), 2u);
  EXPECT_EQ(c.tensors[0].first, "model.w");
  EXPECT_EQ(c.tensors[1].first, "model.b");
  EXPECT_EQ(bytes_of(c.at("model.w")), bytes_of(w));
  EXPECT_EQ(bytes_of(c.at("model.b")), bytes_of(b));
  EXPECT_EQ(c.find("optim.m.w"), nullptr);
  EXPECT_EQ(c.metadata.at("step"), "7");
  EXPECT_TRUE(c.checksummed);
  EXPECT_EQ(memory_allocated(cpu()) - before, (4 * 3 + 3) * 4);
  // What it holds, without reading it: every tensor's name, dtype and shape in file order.
  const std::vector<TensorLayout> layout = safetensors_layout(path("model_and_optim.safetensors"));
  ASSERT_EQ(layout.size(), 3u);
  EXPECT_EQ(layout[1].name, "optim.m.w");
  EXPECT_EQ(layout[1].dtype, DType::f32);
  EXPECT_EQ(layout[1].shape, (Shape{4, 3}));
  EXPECT_EQ(layout[2].name, "model.b");
}

TEST_F(SafetensorsTest, NonContiguousInputsAreWrittenContiguous) {
  const Tensor base = random_tensor({4, 6}, DType::f32, 7);
  const Tensor transposed = base.transpose(0, 1);  // strides {1, 6}
  const Tensor strided = base.slice(1, 1, 6, 2);   // every other column
  const Tensor expanded = random_tensor({3, 1}, DType::i32, 8).expand({3, 5});  // stride 0
  Tensor grad_leaf = random_tensor({2, 2}, DType::f64, 9);
  grad_leaf.requires_grad_();
  save_safetensors(path("v.safetensors"),
                   {{"t", transposed}, {"s", strided}, {"e", expanded}, {"g", grad_leaf}});
  const Checkpoint c = load_safetensors(path("v.safetensors"));
  EXPECT_EQ(c.at("t").shape(), (Shape{6, 4}));
  EXPECT_EQ(c.at("t").to_vector<float>(), transposed.to_vector<float>());
  EXPECT_EQ(c.at("s").to_vector<float>(), strided.to_vector<float>());
  EXPECT_EQ(c.at("e").to_vector<int32_t>(), expanded.to_vector<int32_t>());
  EXPECT_EQ(c.at("g").to_vector<double>(), grad_leaf.detach().to_vector<double>());
  EXPECT_FALSE(c.at("g").requires_grad());
  // The data is exactly the contiguous bytes: the file is 8 + header + sum of nbytes.
  const std::string file = read_file(path("v.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  EXPECT_EQ(file.size(), 8 + n + 24 * 4 + 12 * 4 + 15 * 4 + 4 * 8);
}

TEST_F(SafetensorsTest, HeaderIsPaddedJsonInGivenOrder) {
  save_safetensors(
      path("h.safetensors"),
      {{"b", random_tensor({3}, DType::f16, 1)}, {"a", random_tensor({}, DType::u8, 2)}},
      {{"k", "v"}});
  const std::string file = read_file(path("h.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = file.substr(8, n);
  // The checksums (16 hex digits each) join the caller's metadata, sorted by key.
  std::string text = header.substr(0, header.find_last_not_of(' ') + 1);
  for (const std::string name : {"a", "b"}) {
    const std::string key = "\"xxh3_64:" + name + "\":\"";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at + key.size(), 16, "H");
  }
  EXPECT_EQ(text, R"({"__metadata__":{"k":"v","xxh3_64:a":"H","xxh3_64:b":"H"},)"
                  R"("b":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
                  R"("a":{"dtype":"U8","shape":[],"data_offsets":[6,7]}})");
}

TEST_F(SafetensorsTest, MetadataRoundTrips) {
  const std::map<std::string, std::string> metadata = {{"seed", "1234"},
                                                       {"data_position", "987654321"},
                                                       {"empty", ""},
                                                       {"unicode", "\xce\xbb=0.1 \xe2\x9c\x93"},
                                                       {"quotes", "a \"b\"\n\\c"}};
  save_safetensors(path("m.safetensors"), {{"x", random_tensor({2}, DType::f32, 3)}}, metadata);
  EXPECT_EQ(load_safetensors(path("m.safetensors")).metadata, metadata);
  EXPECT_EQ(check_safetensors(path("m.safetensors")), metadata);
  // No tensors at all is a valid file too.
  save_safetensors(path("empty.safetensors"), {}, metadata);
  const Checkpoint c = load_safetensors(path("empty.safetensors"));
  EXPECT_TRUE(c.tensors.empty());
  EXPECT_EQ(c.metadata, metadata);
}

TEST_F(SafetensorsTest, SavingReplacesTheFileAndLeavesNoTempFile) {
  save_safetensors(path("r.safetensors"), {{"x", random_tensor({100}, DType::f32, 1)}});
  save_safetensors(path("r.safetensors"), {{"y", random_tensor({2}, DType::i64, 2)}});
  const Checkpoint c = load_safetensors(path("r.safetensors"));
  ASSERT_EQ(c.tensors.size(), 1u);
  EXPECT_EQ(c.tensors[0].first, "y");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, BadNamesAreRefusedBeforeAnythingIsWritten) {
  const Tensor x = random_tensor({2}, DType::f32, 1);
  const auto error = [&](const std::vector<std::pair<std::string, Tensor>>& t) {
    try {
      save_safetensors(path("bad.safetensors"), t);
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({{"x", x}, {"x", x}}).find("tensor name 'x' appears twice"), std::string::npos);
  EXPECT_NE(error({{"__metadata__", x}}).find("reserved"), std::string::npos);
  EXPECT_NE(error({{"", x}}).find("a tensor name is empty"), std::string::npos);
  EXPECT_NE(error({{"u", Tensor()}}).find("undefined"), std::string::npos);
  EXPECT_NE(error({{"\xff", x}}).find("not UTF-8"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir_));
  const std::string missing = path("no/such/dir/x.safetensors");
  try {
    save_safetensors(missing, {{"x", x}});
    ADD_FAILURE() << "saving into a missing directory succeeded";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, MissingAndTooShortFiles) {
  EXPECT_EQ(
      load_error(path("nope.safetensors")),
      "cannot open safetensors file '" + path("nope.safetensors") + "': No such file or directory");
  write_file(path("short"), "abc");
  EXPECT_EQ(load_error(path("short")),
            "invalid safetensors file '" + path("short") +
                "': the file has 3 bytes, fewer than the 8 of the header size (truncated?)");
  EXPECT_NE(load_error(dir_.string()).find("not a regular file"), std::string::npos);
}

TEST_F(SafetensorsTest, TruncationAtEveryByteIsAClearError) {
  save_safetensors(path("t.safetensors"),
                   {{"a", random_tensor({3, 4}, DType::f32, 1)},
                    {"b", random_tensor({5}, DType::boolean, 2)},
                    {"c", random_tensor({2}, DType::bf16, 3)}},
                   {{"seed", "5"}});
  const std::string whole = read_file(path("t.safetensors"));
  ASSERT_EQ(load_error(path("t.safetensors")), "");
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(whole.size()));
    write_file(path("cut"), whole.substr(0, cut));
    const std::string msg = load_error(path("cut"));
    EXPECT_TRUE(msg.starts_with("invalid safetensors file '" + path("cut") + "': ")) << msg;
    EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                msg.find("exceeds the") != std::string::npos)
        << msg;
  }
}

TEST_F(SafetensorsTest, FlippedHeaderBytesNeverCrash) {
  save_safetensors(
      path("f.safetensors"),
      {{"w", random_tensor({2, 3}, DType::f64, 1)}, {"m", random_tensor({4}, DType::boolean, 2)}},
      {{"step", "12"}});
  const std::string whole = read_file(path("f.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(whole[i]);
  int errors = 0;
  for (size_t i = 0; i < 8 + n; ++i)
    for (unsigned char mask : {0x01, 0x20}) {
      std::string bad = whole;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      write_file(path("flip"), bad);
      // Some flips still give a valid file (a changed name, a space that became a tab); the
      // rest must be RuntimeErrors that name the file.
      const std::string msg = load_error(path("flip"));
      if (!msg.empty()) {
        ++errors;
        EXPECT_NE(msg.find(path("flip")), std::string::npos) << msg;
      }
    }
  EXPECT_GT(errors, static_cast<int>(n));  // most flips are caught
}

TEST_F(SafetensorsTest, MalformedHeadersGiveSpecificErrors) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string eight(8, 'x');
  const struct {
    std::string header, data, expected;
  } cases[] = {
      {R"({"a": )", "", "the header is not valid JSON: parse error at line 1"},
      {R"([1, 2])", "", "the header does not start with '{'"},
      {R"({"a":{"dtype":"F17","shape":[],"data_offsets":[0,4]}})", "xxxx",
       "tensor 'a' has dtype \"F17\", which is not a safetensors dtype"},
      {R"({"a":{"dtype":"U16","shape":[],"data_offsets":[0,2]}})", "xx",
       "tensor 'a' has dtype \"U16\", which ein does not support"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight,
       "tensor 'a' (F32, shape [3]) needs 12 bytes, but data_offsets [0,8] span 8"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight,
       "needs 8 bytes, but data_offsets [8,0] span a negative range"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight,
       "tensor 'a': shape entries must be integers >= 0, got [-2]"},
      {R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight,
       "shape entries must be integers >= 0"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight,
       "is too large"},
      // A size of 2^63 or more after a zero: the product is 0, the size itself too large
      // (it used to wrap negative and fail later as "sizes must be non-negative").
      {R"({"a":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}})", "",
       "tensor 'a': shape [0,9223372036854775808] is too large"},
      {R"({"a":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})", "",
       "is too large"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", eight, "tensor 'a' has no \"data_offsets\""},
      {R"({"a":{)" + f32x2 + R"(,"data_offsets":[0]}})", eight,
       "data_offsets must be [begin, end] with integers >= 0, got [0]"},
      {R"({"a":[1]})", "", "tensor 'a': expected an object, got [1]"},
      {R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
           R"(,"data_offsets":[4,12]}})",
       eight + "yyyy", "tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a', which ends at 8"},
      {R"({"a":{)" + f32x2 + R"(,"data_offsets":[4,12]}})", eight + "yyyy",
       "bytes [0, 4) of the data belong to no tensor (before tensor 'a')"},
      {R"({"a":{)" + f32x2 + R"(,"data_offsets":[8,16]}})", eight,
       "tensor 'a' has data_offsets [8, 16], past the end of the data (8 bytes): the file is "
       "truncated or the header is wrong"},
      {R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight + "junk",
       "4 bytes of trailing data after the last tensor (the data is 12 bytes, tensors end at 8)"},
      {R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"a":{)" + f32x2 +
           R"(,"data_offsets":[8,16]}})",
       eight + eight, "the header names 'a' twice"},
      {R"({"__metadata__":{"seed":5}})", "",
       "__metadata__ values must be strings, but 'seed' is 5"},
      {R"({"__metadata__":[]})", "", "__metadata__ must be an object, got []"},
      {R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\1\0\2", 3),
       "BOOL tensor 'm' holds byte 2 at element 2 (must be 0 or 1)"},
      {"{\"a\":\"\xff\"}", "", "the header is not valid JSON"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    write_file(path("bad"), raw_file(c.header, c.data));
    const std::string msg = load_error(path("bad"));
    const std::string prefix = "invalid safetensors file '" + path("bad") + "': ";
    EXPECT_TRUE(msg.starts_with(prefix)) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, HeaderSizesBeyondTheFileOrTheLimit) {
  write_file(path("big"), raw_file("{}", "", 1000));
  EXPECT_NE(load_error(path("big")).find("the header size 1000 exceeds the 2 bytes after it"),
            std::string::npos);
  write_file(path("huge"), raw_file("{}", "", ~0ull - 1));
  EXPECT_NE(load_error(path("huge")).find("exceeds the 2 bytes after it"), std::string::npos);
  // A header may end in spaces (the padding); an empty object is an empty checkpoint.
  write_file(path("ok"), raw_file("{}      ", ""));
  EXPECT_EQ(load_error(path("ok")), "");
}

TEST_F(SafetensorsTest, CheckpointAtNamesWhatThereIs) {
  save_safetensors(path("n.safetensors"), {{"a", random_tensor({1}, DType::f32, 1)},
                                           {"b", random_tensor({1}, DType::f32, 2)}});
  const Checkpoint c = load_safetensors(path("n.safetensors"));
  EXPECT_EQ(c.find("z"), nullptr);
  try {
    c.at("z");
    ADD_FAILURE() << "at() of a missing name succeeded";
  } catch (const RuntimeError& e) {
    EXPECT_STREQ(e.what(), "the checkpoint has no tensor 'z'; it has: a, b");
  }
}

TEST_F(SafetensorsTest, CopyIntoRestoresParametersOrSaysWhatDiffers) {
  const Tensor w = random_tensor({3, 4}, DType::f32, 1);
  const Tensor b = random_tensor({4}, DType::f32, 2);
  save_safetensors(path("p.safetensors"), {{"w", w}, {"b", b}, {"extra", b}});
  const Checkpoint c = load_safetensors(path("p.safetensors"));
  EXPECT_EQ(c.path, path("p.safetensors"));

  Tensor w2 = zeros({4, 3}).transpose(0, 1);  // non-contiguous target
  w2.requires_grad_();
  const Tensor b2 = zeros({4});
  copy_into(c, {{"w", w2}, {"b", b2}});  // "extra" is ignored
  EXPECT_EQ(w2.detach().to_vector<float>(), w.to_vector<float>());
  EXPECT_EQ(b2.to_vector<float>(), b.to_vector<float>());

  const Tensor wrong_shape = zeros({3, 5});
  const Tensor wrong_dtype = zeros({4}, DType::f64);
  try {
    copy_into(c, {{"b", b2}, {"w", wrong_shape}, {"v", b2}, {"extra", wrong_dtype}});
    ADD_FAILURE() << "a mismatched checkpoint was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint '" + path("p.safetensors") +
                                         "' does not fit:\n"
                                         "  'w' is f32 [3, 4] in the checkpoint but f32 [3, 5] "
                                         "here\n"
                                         "  'v' is missing from the checkpoint\n"
                                         "  'extra' is f32 [4] in the checkpoint but f64 [4] here");
  }
}

TEST(SafetensorsDtypes, NamesMapBothWays) {
  for (DType d : kAllDTypes)
    EXPECT_EQ(dtype_from_safetensors_name(safetensors_dtype_name(d)), d) << dtype_name(d);
  EXPECT_EQ(safetensors_dtype_name(DType::f8e4m3), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype_name(DType::boolean), "BOOL");
  EXPECT_EQ(dtype_from_safetensors_name("I16"), std::nullopt);
}


// Checksums: a flipped data byte fails load_safetensors (not check_safetensors, which reads no
// data), naming the tensor; a file without checksums (older ein, other writers) still loads.
TEST_F(SafetensorsTest, ChecksumCatchesAFlippedDataByte) {
  const Tensor w = random_tensor({4, 5}, DType::f32, 7);
  save_safetensors(path("c.safetensors"), {{"w", w}, {"b", random_tensor({3}, DType::i32, 8)}},
                   {{"seed", "1"}});
  const Checkpoint good = load_safetensors(path("c.safetensors"));
  EXPECT_TRUE(good.checksummed);
  EXPECT_EQ(good.metadata, (std::map<std::string, std::string>{{"seed", "1"}}));
  std::string file = read_file(path("c.safetensors"));
  file[file.size() - 12 - 40] ^= 0x10;  // the data is w's 80 bytes, then b's 12: inside w
  write_file(path("c.safetensors"), file);
  EXPECT_NO_THROW(check_safetensors(path("c.safetensors")));
  try {
    load_safetensors(path("c.safetensors"));
    ADD_FAILURE() << "a flipped byte loaded";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("c.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor 'w' (F32, shape [4, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("does not match its checksum"), std::string::npos) << m;
  }
}

TEST_F(SafetensorsTest, FilesWithoutChecksumsStillLoad) {
  // As Python's safetensors writes it: no __metadata__ at all.
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  write_file(path("old.safetensors"), file + header + "\x01\x02");
  const Checkpoint c = load_safetensors(path("old.safetensors"));
  EXPECT_FALSE(c.checksummed);
  EXPECT_EQ(c.at("a").to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2}));
}

TEST_F(SafetensorsTest, ChecksumKeysAreReservedAndChecked) {
  try {
    save_safetensors(path("r.safetensors"), {{"x", random_tensor({2}, DType::f32, 1)}},
                     {{"xxh3_64:x", "0"}});
    ADD_FAILURE() << "a reserved metadata key was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("r.safetensors")));
  const auto file_with = [](const std::string& metadata) {
    const std::string header = R"({"__metadata__":{)" + metadata +
                               R"(},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
    std::string file(8, '\0');
    file[0] = static_cast<char>(header.size());
    return file + header + "\x01";
  };
  write_file(path("bad.safetensors"), file_with(R"("xxh3_64:a":"xyz")"));
  EXPECT_THROW(check_safetensors(path("bad.safetensors")), RuntimeError);
  write_file(path("other.safetensors"), file_with(R"("xxh3_64:b":"0123456789abcdef")"));
  try {
    check_safetensors(path("other.safetensors"));
    ADD_FAILURE() << "a checksum of a missing tensor was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum for tensor 'b', which the file lacks"),
              std::string::npos)
        << e.what();
  }
}

// A FIFO where a file is expected is refused at once (opening it for reading would block).
TEST_F(SafetensorsTest, AFifoIsNotAFile) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0644), 0);
  for (const auto& read : {+[](const std::string& p) { load_safetensors(p); },
                           +[](const std::string& p) { check_safetensors(p); }}) {
    try {
      read(path("pipe"));
      ADD_FAILURE() << "a FIFO was read";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file but a FIFO"), std::string::npos)
          << e.what();
    }
  }
}

TEST_F(SafetensorsTest, LayoutSignatureSeesNamesDtypesAndShapesOnly) {
  const Tensor a = random_tensor({2, 3}, DType::f32, 1);
  const std::string sig = layout_signature({{"a", a}, {"b", a}});
  EXPECT_EQ(sig.size(), 16u);
  EXPECT_EQ(sig, layout_signature({{"b", random_tensor({2, 3}, DType::f32, 2)}, {"a", a}}));
  EXPECT_NE(sig, layout_signature({{"a", a}, {"c", a}}));
  EXPECT_NE(sig, layout_signature({{"a", a}, {"b", a.to(DType::f64)}}));
  EXPECT_NE(sig, layout_signature({{"a", a}, {"b", random_tensor({3, 2}, DType::f32, 1)}}));
}

}  // namespace
}  // namespace ein
