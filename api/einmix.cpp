// ein::nn::EinMix: the plan is sema's (compiler/sema/einmix_sema.cpp); this file makes the
// parameters and runs the plan's steps with the differentiable ops.
#include <ein/einmix.h>

#include <ein/tensor_math.h>

namespace ein::nn {

EinMix::EinMix(std::string pattern, std::string weight, std::optional<std::string> bias,
               Sizes sizes, const init::Options& options)
    : request_{std::move(pattern), std::move(weight), std::move(bias), std::move(sizes), {}},
      plan_(resolve_einmix(request_)) {
  init::Options o = options;
  o.requires_grad = true;
  weight_ = register_parameter(
      "weight", init::uniform(plan_.weight_shape, -plan_.weight_bound, plan_.weight_bound, o));
  if (!plan_.bias_shape) return;
  if (o.seed) o.seed = *o.seed + 1;
  bias_ = register_parameter(
      "bias", init::uniform(*plan_.bias_shape, -plan_.bias_bound, plan_.bias_bound, o));
}

// The input's shape against the user's pattern, so that a misfit points at it rather than at
// the steps below. A check parses three texts (~6 us); a training loop's few shapes pass once.
void EinMix::check_input(const Shape& shape) const {
  constexpr size_t kRemembered = 8;
  {
    const std::lock_guard lock(mutex_);
    for (const Shape& s : fitting_)
      if (s == shape) return;
  }
  EinMixRequest checked = request_;
  checked.input = shape;
  (void)resolve_einmix(checked);
  const std::lock_guard lock(mutex_);
  if (fitting_.size() == kRemembered) fitting_.erase(fitting_.begin());
  fitting_.push_back(shape);
}

Tensor EinMix::operator()(const Tensor& x) const {
  check_input(x.shape());
  Tensor y = plan_.pre ? rearrange(x, *plan_.pre, plan_.pre_sizes) : x;
  y = einsum(plan_.einsum, y, weight_);
  if (bias_.defined()) y = y + bias_;
  return plan_.post ? rearrange(y, *plan_.post) : y;
}

}  // namespace ein::nn
