// ein::nn::EinMix: einops' EinMix layer (einops.layers.torch.EinMix): a weight with named axes,
// contracted with the input by an einops pattern, and an optional bias.
//
//   ein::nn::EinMix mix("b t (h c_in) -> b t (h c_out)", "h c_in c_out", "h c_out",
//                       {{"h", 4}, {"c_in", 16}, {"c_out", 32}});
//   ein::Tensor y = mix(x);            // x [2, 10, 64] -> y [2, 10, 128]
//   mix.named_parameters();            // weight [4, 16, 32], bias [1, 1, 4, 32]
//
// The pattern, the weight's and the bias' axes and the sizes follow einops' rules, checked by
// ein::resolve_einmix (ein/patterns.h) when the layer is made, with a caret under the axis at
// fault; a call checks the input's shape the same way. As in einops, the input's compositions
// are split by a rearrange, one einsum over elementary axes contracts it with the weight, the
// bias is added, and a rearrange makes the output's compositions; each step is differentiable.
// The weight is U(±sqrt(3 / fan_in)) and the bias U(±sqrt(1 / fan_in)), fan_in being the
// product of the weight axes that are not in the output: EinMix's own initialisation.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ein/init.h>
#include <ein/module.h>
#include <ein/ops.h>
#include <ein/patterns.h>

namespace ein::nn {

class EinMix : public Module {
 public:
  /// `bias`: the output axes the bias varies along, or nullopt for no bias; `sizes`: every
  /// weight and bias axis. `options` gives the parameters' dtype, device and seed (the bias
  /// takes seed + 1); they require grad whatever it says.
  EinMix(std::string pattern, std::string weight, std::optional<std::string> bias, Sizes sizes,
         const init::Options& options = {});

  /// The layer applied to `x`, whose shape must fit the pattern's input side.
  Tensor operator()(const Tensor& x) const;

  /// The layer's plan: the einsum, the rearranges around it, the parameters' shapes.
  const EinMixPlan& plan() const { return plan_; }

  const Tensor& weight() const { return weight_; }
  /// Undefined when the layer has no bias.
  const Tensor& bias() const { return bias_; }

 private:
  /// Throws UserError unless `shape` fits the pattern's input side.
  void check_input(const Shape& shape) const;

  EinMixRequest request_;
  EinMixPlan plan_;
  Tensor weight_, bias_;
  mutable std::mutex mutex_;
  mutable std::vector<Shape> fitting_;  ///< input shapes checked already (a few)
};

}  // namespace ein::nn
