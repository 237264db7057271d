// ein — einops-style tensor patterns, checked statically and run as generated kernels.
//
//   #include <ein/ein.h>
//
//   ein::Tensor x = ein::randn({8, 1024, 768}, ein::DType::f32, ein::cpu(), /*seed=*/0);
//   ein::Tensor q = ein::rearrange(x, "b s (h d) -> b h s d", {{"h", 12}});  // a view: no copy
//   ein::Tensor m = ein::reduce(x, "b s d -> b d", "mean");                  // one fused kernel
//   ein::Tensor w = ein::randn({768, 3072}, ein::DType::f32, ein::cpu(), 1);
//   ein::Tensor y = ein::einsum("b s d, d f -> b s f", x, w);                // BLAS GEMM
//   ein::Tensor g = ein::map("y[b s f] -> gelu(y)", {y});                    // one kernel
//   auto split = ein::compile("b s (h d) -> b h s d", {{"h", 12}});          // checked once
//   ein::Tensor k = split(x);
//
//   // Autograd like PyTorch's, FLOPs counted per phase (2 per multiply-add):
//   ein::Tensor w1 = ein::randn({768, 768}, ein::DType::f32, ein::cpu(), 2).requires_grad_();
//   ein::FlopCounter counter;
//   ein::Tensor loss = ein::nn::mse_loss(ein::einsum("b s d, d f -> b s f", x, w1), x);
//   loss.backward();                                  // w1.grad(); counter.report()
//   ein::optim::AdamW opt({w1});  opt.step();         // one fused kernel per parameter
//
//   // Mistakes are ein::UserError; what() is a compiler-style diagnostic with a caret:
//   try {
//     ein::rearrange(x, "b s (h d) -> b h s d", {{"h", 5}});
//   } catch (const ein::UserError& e) {
//     std::cerr << e.what();  // pattern:1:5: error: cannot split an axis of length 768 ...
//   }
//
//   // Shapes alone, without tensors (what `ein shape` prints):
//   ein::ResolveRequest req;
//   req.op = ein::PatternOp::rearrange;
//   req.shapes = {{8, 1024, 768}};
//   req.sizes = {{"h", 12}};
//   auto recipe = ein::resolve_cached("b s (h d) -> b h s d", req);  // output {8, 12, 1024, 64}
//
// This header is the public API; everything it includes is usable, everything in
// ein::detail is not.
#pragma once

#include <ein/autograd.h>
#include <ein/checkpoint.h>
#include <ein/device.h>
#include <ein/diagnostic.h>
#include <ein/dtype.h>
#include <ein/einmix.h>
#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/grad_clip.h>
#include <ein/init.h>
#include <ein/module.h>
#include <ein/nn.h>
#include <ein/ops.h>
#include <ein/optim.h>
#include <ein/pattern_cache.h>
#include <ein/pattern_parser.h>
#include <ein/pattern_printer.h>
#include <ein/patterns.h>
#include <ein/quantize.h>
#include <ein/random.h>
#include <ein/schedule.h>
#include <ein/shape.h>
#include <ein/shape_check.h>
#include <ein/shape_spec_parser.h>
#include <ein/shape_spec_printer.h>
#include <ein/tensor.h>
#include <ein/tensor_math.h>
#include <ein/token_data.h>
#include <ein/trainer.h>
#include <ein/training_checkpoint.h>
