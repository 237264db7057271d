// Uses the installed ein: a rearrange (view), a reduction and an einsum, checked by value.
#include <ein/ein.h>

#include <cmath>
#include <cstdio>

int main() {
  ein::Tensor x = ein::arange(0, 24, 1, ein::DType::f32).view({2, 3, 4});
  ein::Tensor y = ein::rearrange(x, "a b c -> a c b");
  ein::Tensor s = ein::reduce(x, "a b c -> a", "sum");
  ein::Tensor w = ein::ones({4, 2}, ein::DType::f32);
  ein::Tensor z = ein::einsum("a b c, c d -> a b d", x, w);
  const bool ok = y.shape() == ein::Shape{2, 4, 3} && y.same_storage(x) &&
                  s.to_vector<float>() == std::vector<float>{66, 210} &&
                  std::abs(z.at({1, 2, 1}) - (20 + 21 + 22 + 23)) < 1e-4;
  std::printf("%s\n", ok ? "ein consumer: ok" : "ein consumer: WRONG");
  return ok ? 0 : 1;
}
