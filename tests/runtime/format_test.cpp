// The text form of tensors: values by dtype, nesting, and summaries of large tensors.
#include <gtest/gtest.h>

#include <sstream>

#include <ein/tensor.h>

namespace ein {
namespace {

TEST(Format, SmallTensorsInFull) {
  EXPECT_EQ(to_string(arange(6).view({2, 3})),
            "tensor([[0, 1, 2],\n        [3, 4, 5]], shape=[2, 3], dtype=i64)");
  EXPECT_EQ(to_string(from_data<float>({1.5f, -2.0f}, {2})),
            "tensor([1.5, -2.], shape=[2], dtype=f32)");
  EXPECT_EQ(to_string(from_data(std::vector<bool>{true, false}, {2})),
            "tensor([True, False], shape=[2], dtype=bool)");
  EXPECT_EQ(to_string(full({}, 3.0, DType::f16)), "tensor(3., shape=[], dtype=f16)");
  EXPECT_EQ(to_string(Tensor()), "tensor(undefined)");
  std::ostringstream os;
  os << zeros({0, 2});
  EXPECT_EQ(os.str(), "tensor([], shape=[0, 2], dtype=f32)");
}

TEST(Format, PrecisionIsSignificantDigits) {
  const Tensor t = from_data<double>({3.14159265, -0.000123456789, 2.0}, {3});
  EXPECT_EQ(to_string(t), "tensor([3.142, -0.0001235, 2.], shape=[3], dtype=f64)");
  EXPECT_EQ(to_string(t, 6), "tensor([3.14159, -0.000123457, 2.], shape=[3], dtype=f64)");
}

TEST(Format, LargeTensorsAreSummarised) {
  const std::string s = to_string(arange(2000));
  EXPECT_EQ(s, "tensor([0, 1, 2, ..., 1997, 1998, 1999], shape=[2000], dtype=i64)");
}

}  // namespace
}  // namespace ein
