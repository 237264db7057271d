// The lecture's tensor facts (../shared/seeds/lecture-code-notebook.txt, "tensors_memory" and
// "tensor_storage"/"tensor_slicing"), restated against ein::Tensor.
#include <gtest/gtest.h>

#include <ein/tensor.h>

namespace ein {
namespace {

// x = [[0..3], [4..7], [8..11], [12..15]] as f32.
Tensor lecture_4x4() {
  return arange(16, DType::f32).view({4, 4});
}

TEST(LectureFacts, ZerosF32UsesFourBytesPerElement) {
  const Tensor x = zeros({4, 8});
  EXPECT_EQ(x.dtype(), DType::f32);
  EXPECT_EQ(x.numel(), 4 * 8);
  EXPECT_EQ(x.element_size(), 4);
  EXPECT_EQ(x.nbytes(), 4 * 8 * 4);
}

TEST(LectureFacts, Gpt3FeedForwardMatrixIs2304MiB) {
  // 12288 x (4 * 12288) f32 without allocating 2.3 GiB: an expanded one-element tensor has
  // the sizes (nbytes is sizes x element size) but one element of storage.
  const Tensor w = zeros({1, 1}).expand({12288 * 4, 12288});
  EXPECT_EQ(w.nbytes(), int64_t{2304} * 1024 * 1024);
  EXPECT_EQ(w.storage()->nbytes(), 4);
}

TEST(LectureFacts, ElementSizesOfEveryDType) {
  const std::pair<DType, int64_t> expected[] = {
      {DType::f64, 8},    {DType::f32, 4},    {DType::f16, 2},    {DType::bf16, 2},
      {DType::f8e4m3, 1}, {DType::f8e5m2, 1}, {DType::i64, 8},    {DType::i32, 4},
      {DType::i8, 1},     {DType::u8, 1},     {DType::boolean, 1}};
  for (const auto& [dtype, bytes] : expected) {
    const Tensor x = zeros({4, 8}, dtype);
    EXPECT_EQ(x.element_size(), bytes) << dtype_name(dtype);
    EXPECT_EQ(x.nbytes(), 32 * bytes) << dtype_name(dtype);
  }
}

TEST(LectureFacts, TinyValueUnderflowsInF16ButNotInBF16) {
  EXPECT_EQ(full({1}, 1e-8, DType::f16).item(), 0.0);
  EXPECT_NE(full({1}, 1e-8, DType::bf16).item(), 0.0);
}

TEST(LectureFacts, StridesOfA4x4Tensor) {
  const Tensor x = lecture_4x4();
  EXPECT_EQ(x.stride(0), 4);
  EXPECT_EQ(x.stride(1), 1);
  EXPECT_EQ(x.strides(), (Shape{4, 1}));
}

TEST(LectureFacts, ElementIndexIsRowTimesStrideZeroPlusColTimesStrideOne) {
  const Tensor x = lecture_4x4();
  const int64_t r = 1, c = 2;
  const int64_t index = r * x.stride(0) + c * x.stride(1);
  EXPECT_EQ(index, 6);
  EXPECT_EQ(x.data<float>()[index], 6.0f);
  EXPECT_EQ(x.at({r, c}), 6.0);
}

TEST(LectureFacts, ViewsShareStorageAndSeeMutations) {
  const Tensor x = from_data<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor row = x.select(0, 0);
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_TRUE(x.same_storage(row));
  const Tensor col = x.select(1, 1);
  EXPECT_EQ(col.to_vector<float>(), (std::vector<float>{2, 5}));
  EXPECT_TRUE(x.same_storage(col));
  const Tensor v = x.view({3, 2});
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(x.same_storage(v));
  const Tensor y = x.transpose(1, 0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_TRUE(x.same_storage(y));

  x.data<float>()[0] = 100;  // x[0][0] = 100
  EXPECT_EQ(y.at({0, 0}), 100.0);
  EXPECT_EQ(row.at({0}), 100.0);
  EXPECT_EQ(v.at({0, 0}), 100.0);
}

TEST(LectureFacts, TransposeIsNotContiguousAndViewFails) {
  const Tensor x = from_data<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor y = x.transpose(1, 0);
  EXPECT_FALSE(y.is_contiguous());
  try {
    (void)y.view({2, 3});
    FAIL() << "view on a transpose must throw";
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("view size is not compatible with input tensor's size and stride"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("reshape"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sizes [3, 2], strides [1, 3]"), std::string::npos) << msg;
  }
}

TEST(LectureFacts, ContiguousCopiesThenViewWorks) {
  const Tensor x = from_data<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor y = x.transpose(1, 0).contiguous().view({2, 3});
  EXPECT_FALSE(x.same_storage(y));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_TRUE(y.is_contiguous());
}

}  // namespace
}  // namespace ein
