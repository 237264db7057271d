// Every view op against expected sizes, strides, offsets and values, reshape's view-or-copy
// choice, and the error messages for the mistakes we know of.
#include <functional>

#include <gtest/gtest.h>

#include <ein/tensor.h>

namespace ein {
namespace {

// x: (a b c) = (2 3 4), values 0..23, i64.
Tensor x234() {
  return arange(24).view({2, 3, 4});
}

// Values at every index, row-major, computed from sizes/strides/offset by hand.
std::vector<int64_t> gather(const Tensor& base, const Shape& sizes, const Shape& strides,
                            int64_t offset) {
  std::vector<int64_t> out;
  const int64_t* p = base.data<int64_t>() - base.offset();
  std::vector<int64_t> index(sizes.size(), 0);
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  for (int64_t k = 0; k < n; ++k) {
    int64_t e = offset;
    for (size_t d = 0; d < sizes.size(); ++d)
      e += index[d] * strides[d];
    out.push_back(p[e]);
    for (size_t d = sizes.size(); d-- > 0;)
      if (++index[d] < sizes[d])
        break;
      else
        index[d] = 0;
  }
  return out;
}

void expect_layout(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  EXPECT_EQ(t.shape(), sizes);
  EXPECT_EQ(t.strides(), strides);
  EXPECT_EQ(t.offset(), offset);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(stmt, text)                                       \
  EXPECT_NE(error_of([&] { (void)(stmt); }).find(text), std::string::npos) \
      << error_of([&] { (void)(stmt); })

TEST(Views, SizeAndStrideWithNegativeDims) {
  const Tensor x = x234();
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.stride(-3), 12);
  EXPECT_ERROR_HAS(x.size(3), "dimension 3 is out of range for a tensor with 3 dims");
  EXPECT_ERROR_HAS(x.stride(-4), "expected in [-3, 2]");
}

TEST(Views, SliceWithStepsAndNegativeIndices) {
  const Tensor x = x234();
  const Tensor s = x.slice(2, 1, 4, 2);  // c = 1, 3
  expect_layout(s, {2, 3, 2}, {12, 4, 2}, 1);
  EXPECT_TRUE(s.same_storage(x));
  EXPECT_EQ(s.to_vector<int64_t>(), gather(x, {2, 3, 2}, {12, 4, 2}, 1));
  const Tensor n = x.slice(1, -2, 100);  // b = 1, 2 (stop clamps)
  expect_layout(n, {2, 2, 4}, {12, 4, 1}, 4);
  const Tensor e = x.slice(1, 2, 1);  // empty
  EXPECT_EQ(e.shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_TRUE(e.to_vector<int64_t>().empty());
  EXPECT_ERROR_HAS(x.slice(0, 0, 1, 0), "step must be positive, got 0");
}

TEST(Views, Select) {
  const Tensor x = x234();
  const Tensor s = x.select(1, -1);
  expect_layout(s, {2, 4}, {12, 1}, 8);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_ERROR_HAS(x.select(1, 3), "index 3 is out of range for dim 1 of size 3");
  EXPECT_ERROR_HAS(x.select(5, 0), "select: dimension 5 is out of range");
}

TEST(Views, TransposeAndPermute) {
  const Tensor x = x234();
  const Tensor t = x.transpose(0, 2);
  expect_layout(t, {4, 3, 2}, {1, 4, 12}, 0);
  EXPECT_EQ(t.to_vector<int64_t>(), gather(x, {4, 3, 2}, {1, 4, 12}, 0));
  const Tensor p = x.permute({1, 2, 0});  // (b c a)
  expect_layout(p, {3, 4, 2}, {4, 1, 12}, 0);
  EXPECT_EQ(p.to_vector<int64_t>(), gather(x, {3, 4, 2}, {4, 1, 12}, 0));
  EXPECT_ERROR_HAS(x.permute({0, 0, 1}), "dim 0 appears twice");
  EXPECT_ERROR_HAS(x.permute({0, 1}), "must list each of the 3 dims once");
}

TEST(Views, ViewSplitsAndMergesCompatibleDims) {
  const Tensor x = x234();
  const Tensor v = x.view({6, -1});
  expect_layout(v, {6, 4}, {4, 1}, 0);
  // (a b c) -> a (b c) on a slice whose last dim is whole: mergeable.
  const Tensor s = x.slice(0, 1, 2);
  expect_layout(s.view({12}), {12}, {1}, 12);
  // Splitting a strided dim keeps its stride.
  const Tensor strided = x.slice(2, 0, 4, 2);  // (2 3 2), strides (12 4 2)
  // PyTorch gives a trailing size-1 dim the chunk's base stride (2), as here.
  expect_layout(strided.view({2, 3, 2, 1}), {2, 3, 2, 1}, {12, 4, 2, 2}, 0);
  expect_layout(x.permute({1, 0, 2}).view({3, 2, 2, 2}), {3, 2, 2, 2}, {4, 12, 2, 1}, 0);
  EXPECT_ERROR_HAS(x.view({5, -1}), "shape [5, -1] is invalid for input of size 24");
  EXPECT_ERROR_HAS(x.view({-1, -1}), "only one dimension can be -1");
  EXPECT_ERROR_HAS(x.view({7, 3}), "invalid for input of size 24");
  EXPECT_ERROR_HAS(x.transpose(1, 2).view({24}), "use .reshape(...) instead");
}

TEST(Views, ReshapeIsAViewWhenPossibleElseACopy) {
  const Tensor x = x234();
  const Tensor r = x.reshape({4, 6});
  EXPECT_TRUE(r.same_storage(x));
  const Tensor t = x.transpose(1, 2);
  const Tensor c = t.reshape({2, 12});
  EXPECT_FALSE(c.same_storage(x));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<int64_t>(), t.to_vector<int64_t>());
  // Merging only the leading dims of the transpose is still a view.
  const Tensor m = x.permute({0, 2, 1}).reshape({8, 3});
  EXPECT_FALSE(m.same_storage(x));                         // (a c) are not adjacent in memory order
  const Tensor ok = x.permute({2, 0, 1}).reshape({4, 6});  // (a b) stay adjacent
  EXPECT_TRUE(ok.same_storage(x));
  expect_layout(ok, {4, 6}, {1, 4}, 0);
}

TEST(Views, ViewStridesIsTheRuleBehindView) {
  EXPECT_EQ(view_strides({2, 3, 4}, {12, 4, 1}, {6, 4}), (Shape{4, 1}));
  EXPECT_EQ(view_strides({4, 2, 3}, {1, 12, 4}, {4, 6}), (Shape{1, 4}));
  EXPECT_EQ(view_strides({2, 3}, {1, 2}, {6}), std::nullopt);
}

TEST(Views, ExpandGivesStrideZero) {
  const Tensor col = arange(3).view({3, 1});
  const Tensor e = col.expand({2, 3, 4});
  expect_layout(e, {2, 3, 4}, {0, 1, 0}, 0);
  EXPECT_TRUE(e.same_storage(col));
  EXPECT_EQ(e.to_vector<int64_t>(), gather(col, {2, 3, 4}, {0, 1, 0}, 0));
  expect_layout(col.expand({-1, 5}), {3, 5}, {1, 0}, 0);
  EXPECT_ERROR_HAS(col.expand({4, 4}),
                   "expanded size (4) must match the existing size (3) at non-singleton "
                   "dimension 0. Target sizes [4, 4], tensor sizes [3, 1]");
  EXPECT_ERROR_HAS(col.expand({3}), "must be at least the tensor's number of dims");
}

TEST(Views, UnsqueezeAndSqueeze) {
  const Tensor x = x234();
  expect_layout(x.unsqueeze(0), {1, 2, 3, 4}, {24, 12, 4, 1}, 0);
  expect_layout(x.unsqueeze(-1), {2, 3, 4, 1}, {12, 4, 1, 1}, 0);
  expect_layout(x.unsqueeze(2), {2, 3, 1, 4}, {12, 4, 4, 1}, 0);
  expect_layout(x.unsqueeze(2).squeeze(2), {2, 3, 4}, {12, 4, 1}, 0);
  expect_layout(x.squeeze(0), {2, 3, 4}, {12, 4, 1}, 0);
  expect_layout(x.unsqueeze(0).unsqueeze(3).squeeze(), {2, 3, 4}, {12, 4, 1}, 0);
  EXPECT_ERROR_HAS(x.unsqueeze(4), "unsqueeze: dimension 4 is out of range");
}

TEST(Views, AsStridedStaysInsideTheStorage) {
  const Tensor x = arange(10);
  const Tensor w = x.as_strided({4, 3}, {2, 1}, 1);  // sliding windows
  EXPECT_EQ(w.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 9}));
  EXPECT_ERROR_HAS(x.as_strided({4, 3}, {2, 1}, 2),
                   "reach element 10, but the storage holds 10 elements");
  EXPECT_ERROR_HAS(x.as_strided({2}, {-1}, 5), "strides must be >= 0");
  EXPECT_ERROR_HAS(x.as_strided({2}, {1, 1}, 0), "must have the same length");
}

TEST(Views, ContiguityFollowsPyTorchsRule) {
  EXPECT_TRUE(x234().is_contiguous());
  EXPECT_FALSE(x234().transpose(0, 1).is_contiguous());
  EXPECT_TRUE(arange(4).as_strided({1, 4}, {99, 1}, 0).is_contiguous());  // size-1 stride ignored
  EXPECT_TRUE(arange(4).as_strided({0, 4}, {1, 7}, 0).is_contiguous());   // zero-size
  EXPECT_FALSE(arange(3).view({3, 1}).expand({3, 2}).is_contiguous());
  const Tensor x = x234();
  EXPECT_TRUE(x.contiguous().same_storage(x));
  EXPECT_FALSE(x.clone().same_storage(x));
}

TEST(Views, DataWithTheWrongTypeThrows) {
  const Tensor x = zeros({2}, DType::f32);
  EXPECT_ERROR_HAS(x.data<double>(), "data<T>: T is f64 but the tensor's dtype is f32");
  EXPECT_ERROR_HAS(zeros({2}, DType::bf16).data<Half>(), "T is f16 but the tensor's dtype is bf16");
  EXPECT_NE(zeros({2}, DType::f16).data<Half>(), nullptr);
  EXPECT_ERROR_HAS(Tensor().data<float>(), "undefined");
}

TEST(Views, ItemAndAt) {
  const Tensor x = x234();
  EXPECT_EQ(x.at({1, -1, 2}), 22.0);
  EXPECT_EQ(x.select(0, 1).select(0, 2).select(0, 3).item(), 23.0);
  EXPECT_ERROR_HAS(x.item(), "exactly one element, but shape [2, 3, 4] has 24");
  EXPECT_ERROR_HAS(x.at({0, 3, 0}), "index 3 is out of range for dim 1 of size 3");
  EXPECT_ERROR_HAS(x.at({0, 0}), "got 2 indices for a tensor with 3 dims");
}

TEST(Views, FactoriesAndFill) {
  EXPECT_EQ(arange(1.0, 2.0, 0.25, DType::f64).to_vector<double>(),
            (std::vector<double>{1.0, 1.25, 1.5, 1.75}));
  EXPECT_EQ(full({2, 2}, 3.5, DType::bf16).to_vector<float>(),
            (std::vector<float>{3.5f, 3.5f, 3.5f, 3.5f}));
  EXPECT_EQ(ones({3}, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1}));
  Tensor x = zeros({3, 4}, DType::i64);
  x.slice(1, 1, 4, 2).fill_(7);
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{0, 7, 0, 7, 0, 7, 0, 7, 0, 7, 0, 7}));
  EXPECT_ERROR_HAS(zeros({1}).expand({3}).fill_(1), "fill_: the destination has stride 0 in dim 0");
  EXPECT_ERROR_HAS(empty({2, -1}), "sizes must be non-negative, got [2, -1]");
  EXPECT_ERROR_HAS(from_data<float>({1, 2, 3}, {2, 2}), "3 values cannot fill shape [2, 2]");
  const Tensor b = from_data(std::vector<bool>{true, false, true}, {3});
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

TEST(Views, CopyBroadcastsAndHandlesOverlap) {
  Tensor dst = zeros({2, 3}, DType::f64);
  dst.copy_(from_data<int32_t>({1, 2, 3}, {3}));
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_ERROR_HAS(dst.copy_(zeros({2})),
                   "source shape [2] is not broadcastable to the "
                   "destination shape [2, 3]");
  EXPECT_ERROR_HAS(zeros({1}).expand({3}).copy_(zeros({3})), "stride 0 in dim 0");
  // x = x.T in place (overlapping source and destination) behaves as if src were copied first.
  Tensor sq = arange(9).view({3, 3});
  sq.copy_(sq.transpose(0, 1));
  EXPECT_EQ(sq.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
}

}  // namespace
}  // namespace ein
