// Block quantization (include/ein/quantize.h): every code is the best one its block's scale
// allows (checked against a search over all codes in float64, ties away from zero), every
// scale is the smallest f16 that covers its block, values read back within the stated bound;
// partial blocks, zero-size, non-contiguous, f64/bf16 inputs, subnormals and signed zeros work;
// NaN, infinities and values beyond the f16 scale are errors naming the element; and the
// checkpoint form round-trips through a safetensors file, with every malformed entry an error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include <ein/checkpoint.h>
#include <ein/errors.h>
#include <ein/quantize.h>
#include <ein/scalar_convert.h>

namespace ein {
namespace {

namespace fs = std::filesystem;

/// Random values of mixed magnitudes: each row of blocks scaled by 10^[-6, 3], some exact
/// ties (k + 1/2 times a power of two) and some zeros of both signs.
std::vector<float> mixed_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> decade(-6, 3), pick(0, 9);
  std::vector<float> v(static_cast<size_t>(count));
  float scale = 1;
  for (int64_t i = 0; i < count; ++i) {
    if (i % 32 == 0) scale = std::pow(10.0f, static_cast<float>(decade(rng)));
    const int kind = pick(rng);
    v[i] = kind == 0   ? 0.0f
           : kind == 1 ? -0.0f
           : kind == 2 ? std::ldexp(2.5f, decade(rng))
                       : normal(rng) * scale;
  }
  return v;
}

/// The code in [lo, hi] whose code · d is nearest x (ties: the code farther from zero), by
/// trying them all in float64.
int best_code(double x, double d, int lo, int hi) {
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = lo; c <= hi; ++c) {
    const double err = std::fabs(x - c * d);
    if (err < best_err || (err == best_err && std::abs(c) > std::abs(best))) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

/// Checks q against the definition for values x (rows of n).
void expect_definition(const std::vector<float>& x, int64_t rows, int64_t n,
                       const QuantizedTensor& q) {
  const bool q8 = q.type == QuantType::q8_0;
  const int64_t nb = (n + 31) / 32;
  const std::vector<float> scales = q.scales.to_vector<float>();
  const std::vector<double> codes = q.codes.to_vector<double>();
  const std::vector<float> back = dequantize(q).to_vector<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      double extreme = 0;
      for (int64_t i = b * 32; i < std::min(n, b * 32 + 32); ++i)
        if (std::fabs(x[r * n + i]) > std::fabs(extreme)) extreme = x[r * n + i];
      const double want = q8 ? std::fabs(extreme) / 127 : extreme / -8;
      const double d = scales[r * nb + b];
      // the smallest-magnitude f16 covering `want`, with its sign
      EXPECT_GE(std::fabs(d), std::fabs(want)) << r << "," << b;
      Half below{static_cast<uint16_t>(round_to<Half>(static_cast<float>(std::fabs(d))).bits - 1)};
      if (d != 0) {
        EXPECT_LT(to_float(below), std::fabs(want)) << r << "," << b;
      }
      EXPECT_EQ(std::signbit(d) && d != 0, want < 0) << r << "," << b;
      for (int64_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) {
        const double xi = x[r * n + i];
        const int want_code = d == 0 ? 0 : best_code(xi, d, q8 ? -127 : -8, q8 ? 127 : 7);
        int code = 0;
        if (q8) {
          code = static_cast<int>(codes[r * n + i]);
        } else {
          const auto byte = static_cast<int>(codes[r * ((n + 1) / 2) + i / 2]);
          code = (i % 2 == 0 ? byte & 15 : byte >> 4) - 8;
        }
        ASSERT_EQ(code, want_code) << "x=" << xi << " d=" << d << " at " << r << "," << i;
        ASSERT_EQ(back[r * n + i], static_cast<float>(code * d));
        // within d/2, or (q4_0, opposite sign to the extreme) within |d|
        ASSERT_LE(std::fabs(back[r * n + i] - xi), (q8 ? 0.5 : 1.0) * std::fabs(d)) << xi;
      }
    }
}

TEST(Quantize, EveryCodeIsTheNearestTheScaleAllows) {
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0})
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{5, 96}, {7, 77}, {3, 1}, {2, 33}, {1, 31}}) {
      const std::vector<float> x = mixed_values(rows * n, static_cast<uint32_t>(rows * 1000 + n));
      const QuantizedTensor q = quantize(from_data(x, {rows, n}), type);
      EXPECT_EQ(q.shape, (Shape{rows, n}));
      EXPECT_EQ(q.scales.shape(), (Shape{rows, (n + 31) / 32}));
      EXPECT_EQ(q.codes.shape(), (Shape{rows, type == QuantType::q8_0 ? n : (n + 1) / 2}));
      expect_definition(x, rows, n, q);
    }
}

TEST(Quantize, ExactTiesRoundAwayFromZero) {
  // scale 1 (max 127 in q8_0): 2.5 -> 3, -2.5 -> -3, 0.5 -> 1
  std::vector<float> x(32, 0.0f);
  x[0] = 127;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -0.5f;
  const QuantizedTensor q = quantize(from_data(x, {32}), QuantType::q8_0);
  EXPECT_EQ(q.scales.to_vector<float>()[0], 1.0f);
  const std::vector<double> c = q.codes.to_vector<double>();
  EXPECT_EQ(c[1], 3);
  EXPECT_EQ(c[2], -3);
  EXPECT_EQ(c[3], 1);
  EXPECT_EQ(c[4], -1);
}

TEST(Quantize, Q4ReadsTheExtremeBackExactly) {
  // m = -16: d = 2, codes [-8, 7]; 16 (opposite sign) clamps to 7 · 2 = 14 (error |d|)
  std::vector<float> x = {-16, 16, 3, -3, 1, 0};
  const QuantizedTensor q = quantize(from_data(x, {6}), QuantType::q4_0);
  EXPECT_EQ(q.scales.to_vector<float>()[0], 2.0f);
  EXPECT_EQ(dequantize(q).to_vector<float>(), (std::vector<float>{-16, 14, 4, -4, 2, 0}));
  EXPECT_EQ(q.nbytes(), 3 + 2);
}

TEST(Quantize, SmallValuesAndSubnormalsKeepTheirBound) {
  const float sub = std::numeric_limits<float>::denorm_min() * 1000;  // f32 subnormal
  std::vector<float> x = {sub, -sub, 0.0f, -0.0f, 3e-7f, -1e-9f};
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0}) {
    const QuantizedTensor q = quantize(from_data(x, {6}), type);
    // the scale covers 3e-7 / 127 (or 3e-7 / 8), rounded up to an f16 (subnormal) value, not 0
    EXPECT_GT(std::fabs(q.scales.to_vector<float>()[0]), 0.0f);  // q4_0: negative (m > 0)
    expect_definition(x, 1, 6, q);
  }
  // a block of zeros: scale 0, codes 0, zeros back (a negative zero reads back as +0)
  const QuantizedTensor z = quantize(from_data<float>({0.0f, -0.0f}, {2}), QuantType::q8_0);
  EXPECT_EQ(z.scales.to_vector<float>()[0], 0.0f);
  EXPECT_EQ(dequantize(z).to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(Quantize, ZeroSizeNonContiguousAndOtherDtypes) {
  for (const Shape& s : {Shape{0, 64}, Shape{3, 0}, Shape{0}}) {
    const QuantizedTensor q = quantize(zeros(s), QuantType::q4_0);
    EXPECT_EQ(q.codes.numel(), 0);
    EXPECT_EQ(dequantize(q).shape(), s);
  }
  const std::vector<float> x = mixed_values(40 * 70, 7);
  const Tensor t = from_data(x, {40, 70}).transpose(0, 1);  // (70, 40), strides {1, 70}
  ASSERT_FALSE(t.is_contiguous());
  const QuantizedTensor a = quantize(t, QuantType::q8_0),
                        b = quantize(t.contiguous(), QuantType::q8_0);
  EXPECT_EQ(a.codes.to_vector<int8_t>(), b.codes.to_vector<int8_t>());
  EXPECT_EQ(a.scales.to_vector<float>(), b.scales.to_vector<float>());
  // bf16 comes back as bf16, f64 as f64, each the f32 values rounded once
  const Tensor h = from_data(x, {40, 70}).to(DType::bf16);
  const QuantizedTensor qh = quantize(h, QuantType::q8_0);
  EXPECT_EQ(dequantize(qh).dtype(), DType::bf16);
  const Tensor d = from_data(x, {40, 70}).to(DType::f64);
  const QuantizedTensor qd = quantize(d, QuantType::q8_0);
  EXPECT_EQ(dequantize(qd).dtype(), DType::f64);
  EXPECT_EQ(qd.codes.to_vector<int8_t>(),
            quantize(from_data(x, {40, 70}), QuantType::q8_0).codes.to_vector<int8_t>());
}

TEST(Quantize, BadValuesNameTheElement) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(2 * 40, 1.0f);
    x[1 * 40 + 5] = bad;
    try {
      quantize(from_data(x, {2, 40}), QuantType::q8_0, "w");
      FAIL() << "no error for " << bad;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("'w' has"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("at [1, 5]"), std::string::npos) << e.what();
    }
  }
  // q8_0's f16 scale reaches 65504 · 127; q4_0's 65504 · 8
  EXPECT_NO_THROW(quantize(from_data<float>({8e6f}, {1}), QuantType::q8_0));
  EXPECT_THROW(quantize(from_data<float>({9e6f}, {1}), QuantType::q8_0), RuntimeError);
  EXPECT_NO_THROW(quantize(from_data<float>({5e5f}, {1}), QuantType::q4_0));
  EXPECT_THROW(quantize(from_data<float>({6e5f}, {1}), QuantType::q4_0), RuntimeError);
  EXPECT_THROW(quantize(full({}, 1.0), QuantType::q8_0), RuntimeError);               // a scalar
  EXPECT_THROW(quantize(zeros({4, 32}, DType::i32), QuantType::q8_0), RuntimeError);  // integers
  QuantizedTensor q = quantize(zeros({4, 32}), QuantType::q8_0);
  q.codes = zeros({4, 31}, DType::i8);
  EXPECT_THROW(dequantize(q), RuntimeError);
  q = quantize(zeros({4, 32}), QuantType::q8_0);
  q.scales = zeros({4, 1});  // f32, not f16
  EXPECT_THROW(dequantize(q), RuntimeError);
}

TEST(Quantize, NamesAndBits) {
  EXPECT_EQ(parse_quant_type("Q4_0"), QuantType::q4_0);
  EXPECT_EQ(parse_quant_type("q8_0"), QuantType::q8_0);
  EXPECT_FALSE(parse_quant_type("q5_1").has_value());
  EXPECT_EQ(quant_bits_per_weight(QuantType::q8_0), 8.5);
  EXPECT_EQ(quant_bits_per_weight(QuantType::q4_0), 4.5);
  const QuantizedTensor q = quantize(zeros({64, 256}), QuantType::q8_0);
  EXPECT_EQ(q.nbytes() * 8, static_cast<int64_t>(64 * 256 * 8.5));
}

// What `ein report` prices a script's weights by: the bytes quantize() makes, and the rule
// quantize_checkpoint() applies.
TEST(Quantize, BytesAndRuleWithoutTheValues) {
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0})
    for (const Shape& s : {Shape{64, 256}, Shape{3, 5, 70}, Shape{7, 33}, Shape{1}, Shape{40},
                           Shape{0, 64}, Shape{3, 0}, Shape{2, 3, 1}})
      EXPECT_EQ(quantized_nbytes(s, type), quantize(zeros(s), type).nbytes())
          << quant_type_name(type) << " " << shape_str(s);
  EXPECT_THROW(quantized_nbytes({}, QuantType::q8_0), RuntimeError);
  const QuantizeCheckpointOptions o;  // at least 2 dims, 1024 elements, rows of 32
  EXPECT_TRUE(quantizes(DType::f32, {32, 32}, o));
  EXPECT_TRUE(quantizes(DType::bf16, {2, 16, 32}, o));
  EXPECT_FALSE(quantizes(DType::f32, {2048}, o));    // one dimension
  EXPECT_FALSE(quantizes(DType::f32, {31, 32}, o));  // 992 elements
  EXPECT_FALSE(quantizes(DType::f32, {64, 31}, o));  // rows shorter than a block
  EXPECT_FALSE(quantizes(DType::i64, {64, 64}, o));  // integers
  EXPECT_FALSE(quantizes(DType::f32, {0, 64}, o));   // nothing to quantize
}

class QuantizedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ein_quantize_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// A training checkpoint's shape: matrices, a bias, a small matrix, integers, optimizer state.
  std::string write_model() {
    save_safetensors(path("model.safetensors"),
                     {{"model.w", from_data(mixed_values(64 * 48, 1), {64, 48})},
                      {"model.b", from_data(mixed_values(48, 2), {48})},
                      {"model.small", from_data(mixed_values(4 * 40, 3), {4, 40})},
                      {"model.narrow", from_data(mixed_values(64 * 16, 4), {64, 16})},
                      {"model.e", from_data(mixed_values(100 * 64, 5), {100, 64}).to(DType::bf16)},
                      {"model.ids", arange(2048, DType::i64).view({32, 64})},
                      {"optim.m.w", zeros({64, 48})}},
                     {{"step", "7"}});
    return path("model.safetensors");
  }
  fs::path dir_;
};

TEST_F(QuantizedCheckpoint, RoundTripsThroughAFile) {
  const Checkpoint ck = load_safetensors(write_model());
  QuantizeCheckpointOptions o;
  o.type = QuantType::q4_0;
  o.min_elements = 1000;
  std::vector<QuantizedEntry> entries;
  auto [tensors, metadata] = quantize_checkpoint(ck, o, &entries);
  ASSERT_EQ(entries.size(), 7u);
  std::map<std::string, std::string> action;
  for (const auto& e : entries)
    action[e.name] = e.action;
  EXPECT_EQ(action["model.w"], "q4_0");
  EXPECT_EQ(action["model.e"], "q4_0");
  EXPECT_EQ(action["model.b"], "kept");       // one dimension
  EXPECT_EQ(action["model.small"], "kept");   // 160 elements
  EXPECT_EQ(action["model.narrow"], "kept");  // rows of 16: shorter than a block
  EXPECT_EQ(action["model.ids"], "kept");     // integers
  EXPECT_EQ(action["optim.m.w"], "dropped");
  EXPECT_EQ(metadata.at("step"), "7");
  EXPECT_EQ(metadata.at("quant:model.e"), R"({"dtype":"BF16","shape":[100,64],"type":"q4_0"})");
  save_safetensors(path("q.safetensors"), tensors, metadata);
  const Checkpoint raw = load_safetensors(path("q.safetensors"));
  EXPECT_TRUE(is_quantized(raw));
  EXPECT_EQ(raw.at("model.w.qcodes").dtype(), DType::u8);
  EXPECT_EQ(raw.at("model.w.qscales").shape(), (Shape{64, 2}));

  const Checkpoint back = dequantize_checkpoint(raw);
  EXPECT_FALSE(is_quantized(back));
  std::vector<std::string> names;
  for (const auto& [name, t] : back.tensors)
    names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.w", "model.b", "model.small", "model.narrow",
                                             "model.e", "model.ids"}));
  EXPECT_EQ(back.metadata.count("quant:model.w"), 0u);
  EXPECT_EQ(back.at("model.b").to_vector<float>(), ck.at("model.b").to_vector<float>());
  EXPECT_EQ(back.at("model.ids").to_vector<int64_t>(), ck.at("model.ids").to_vector<int64_t>());
  EXPECT_EQ(back.at("model.e").dtype(), DType::bf16);
  EXPECT_EQ(back.at("model.w").to_vector<float>(),
            dequantize(quantize(ck.at("model.w"), QuantType::q4_0)).to_vector<float>());
  const QuantError err = quant_error(ck.at("model.w"), back.at("model.w"));
  EXPECT_GT(err.relative_rms, 0);
  EXPECT_LT(err.relative_rms, 0.2);
  // already quantized: refused
  EXPECT_THROW(quantize_checkpoint(raw, o), RuntimeError);
}

TEST_F(QuantizedCheckpoint, MalformedEntriesAreErrorsNamingTheTensor) {
  const Checkpoint ck = load_safetensors(write_model());
  auto [tensors, metadata] = quantize_checkpoint(ck, {});
  const auto expect_error = [&](const StateDict& t, const std::map<std::string, std::string>& m,
                                const std::string& needle) {
    save_safetensors(path("bad.safetensors"), t, m);
    try {
      dequantize_checkpoint(load_safetensors(path("bad.safetensors")));
      FAIL() << "no error; wanted " << needle;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  StateDict no_scales;
  for (const auto& [n, t] : tensors)
    if (n != "model.w.qscales") no_scales.emplace_back(n, t);
  expect_error(no_scales, metadata, "'model.w.qscales' is missing");
  auto m = metadata;
  m["quant:model.w"] = "{not json";
  expect_error(tensors, m, "tensor 'model.w'");
  m["quant:model.w"] = R"({"type":"q5_1","dtype":"F32","shape":[64,48]})";
  expect_error(tensors, m, "unknown quantization type");
  m["quant:model.w"] = R"({"type":"q8_0","dtype":"F32","shape":[64,47]})";
  expect_error(tensors, m, "expected i8 [64, 47]");
  m["quant:model.w"] = R"({"type":"q8_0","dtype":"F32","shape":[-64,48]})";
  expect_error(tensors, m, "negative size");
}

}  // namespace
}  // namespace ein
