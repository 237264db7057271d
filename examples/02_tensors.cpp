// Example 2: einops patterns on tensors, with what each costs.
//
// Run: scripts/build.sh && build/bin/example_02_tensors
//
// Multi-head attention scores the einops way: split heads (a view), score with einsum (BLAS),
// a numerically stable softmax from a reduce and a fused map, and merge heads back (one copy).
// Each step prints whether it copied, and the bytes and FLOPs it implies.
#include <ein/ein.h>

#include <cstdio>

namespace {

void show(const char* what, const ein::Tensor& t, const ein::Tensor& from) {
  std::printf("%-34s -> %-22s %s, %.1f MiB\n", what, ein::shape_str(t.shape()).c_str(),
              t.same_storage(from) ? "view (no copy)" : "new tensor    ",
              static_cast<double>(t.nbytes()) / (1 << 20));
}

}  // namespace

int main() {
  const int64_t b = 2, s = 128, h = 8, d = 64;
  ein::Tensor x = ein::randn({b, s, h * d}, ein::DType::f32, ein::cpu(), /*seed=*/0);

  ein::Tensor q = ein::rearrange(x, "b s (h d) -> b h s d", {{"h", h}});
  show("rearrange b s (h d) -> b h s d", q, x);

  // scores: (b h q k), 2·b·h·s·s·d FLOPs (2 per multiply-add)
  ein::Tensor scores = ein::einsum("b h q d, b h k d -> b h q k", q, q);
  show("einsum b h q d, b h k d -> b h q k", scores, q);
  std::printf("%-34s    %.1f MFLOP\n", "", 2.0 * b * h * s * s * d / 1e6);

  // softmax over k: subtract the row max, exponentiate and normalise (two reductions, two maps)
  ein::Tensor row_max = ein::reduce(scores, "b h q k -> b h q", "max");
  ein::Tensor e = ein::map("s[b h q k], m[b h q] -> exp(s - m)", {scores, row_max});
  ein::Tensor total = ein::reduce(e, "b h q k -> b h q", "sum");
  ein::Tensor p = ein::map("e[b h q k], t[b h q] -> e / t", {e, total});
  show("softmax (2 reductions + 2 fused maps)", p, scores);

  ein::Tensor ones = ein::reduce(p, "b h q k -> b h q", "sum");
  double worst = 0;
  for (double v : ein::rearrange(ones, "b h q -> (b h q)").to_vector<double>())
    worst = std::max(worst, std::abs(v - 1));
  std::printf("every softmax row sums to 1 within %.1e\n", worst);

  ein::Tensor out = ein::einsum("b h q k, b h k d -> b h q d", p, q);
  ein::Tensor merged = ein::rearrange(out, "b h s d -> b s (h d)");
  show("rearrange b h s d -> b s (h d)", merged, out);

  try {
    ein::rearrange(x, "b s (h d) -> b h s d", {{"h", 5}});
  } catch (const ein::UserError& err) {
    std::printf("\na mistake is caught at the call, with a caret:\n%s", err.what());
  }
  return worst < 1e-5 ? 0 : 1;
}
