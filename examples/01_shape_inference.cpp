// Example 1: static shape inference for einops patterns and jaxtyping-style specs.
//
// Run: scripts/build.sh && build/bin/example_01_shape_inference
//
// Shows the C++ API that `ein shape` uses: resolve a pattern against shapes (cached), read
// the recipe, catch a mistake as ein::UserError, and bind dims across tensors with specs.
#include <ein/ein.h>

#include <iostream>

int main() {
  // Split heads out of the hidden dimension, as in multi-head attention.
  ein::ResolveRequest split;
  split.op = ein::PatternOp::rearrange;
  split.shapes = {{8, 1024, 768}};
  split.sizes = {{"h", 12}};
  const auto recipe = ein::resolve_cached("b s (h d) -> b h s d", split);
  std::cout << "split heads: " << ein::format_shape(recipe->output_shape()) << "\n"
            << ein::explain(*recipe);

  // The attention scores: an einsum over the head dimension.
  ein::ResolveRequest scores;
  scores.op = ein::PatternOp::einsum;
  scores.shapes = {recipe->output_shape(), recipe->output_shape()};
  std::cout << "scores: "
            << ein::format_shape(
                   ein::resolve_cached("b h i d, b h j d -> b h i j", scores)->output_shape())
            << "\n";

  // A mistake: 768 is not divisible by 10. The error says so and points at (h d).
  split.sizes = {{"h", 10}};
  try {
    ein::resolve_cached("b s (h d) -> b h s d", split);
    return 1;  // unreachable: the pattern cannot resolve
  } catch (const ein::UserError& e) {
    std::cout << "\n" << e.what() << "\n\n";
  }

  // Shape specs bind dims across tensors, like a jaxtyped function's arguments.
  ein::DimMemo memo;
  const ein::Shape x = {8, 1024, 768}, w = {768, 3072};
  ein::check_shape(ein::parse_shape_spec("f32[batch seq hidden]"), ein::DType::f32, x, memo);
  ein::check_shape(ein::parse_shape_spec("f32[hidden ffn]"), ein::DType::f32, w, memo);
  std::cout << "bound: " << memo.to_string() << "\n";
  return 0;
}
