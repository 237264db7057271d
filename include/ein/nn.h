// Standard functions of training code, each ONE fused kernel forward and at most two backward
// (the row kernels of exec/fused_ops.h), differentiable through the autograd tape. They
// work over the last dim of tensors of any rank and any strides, like their PyTorch namesakes.
//
//   ein::Tensor p = ein::nn::softmax(scores);                  // torch.softmax(scores, -1)
//   ein::Tensor h = ein::nn::layer_norm(x, weight, bias);       // F.layer_norm(x, (d,), w, b)
//   ein::Tensor loss = ein::nn::cross_entropy(logits, targets); // F.cross_entropy, mean
//   loss.backward();
#pragma once

#include <cstdint>

#include <ein/tensor.h>

namespace ein::nn {

/// torch.softmax(x, -1).
Tensor softmax(const Tensor& x);
/// torch.log_softmax(x, -1).
Tensor log_softmax(const Tensor& x);
/// F.layer_norm over the last dim (biased variance); weight/bias (d) may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
/// F.rms_norm over the last dim: x · rsqrt(mean(x²) + eps) · weight; weight may be undefined.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
/// F.cross_entropy(logits, target) with mean reduction over the rows whose target is not
/// `ignore_index`: logits (… c), target (…) of integer class indices. A 0-dim loss.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);
/// F.mse_loss(pred, target), mean reduction. A 0-dim loss.
Tensor mse_loss(const Tensor& pred, const Tensor& target);

}  // namespace ein::nn
