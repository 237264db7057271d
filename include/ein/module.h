// ein::nn::Module: the bookkeeping half of torch.nn.Module — named parameters, buffers and
// child modules, parameters(), named_parameters(), state_dict() and load_state_dict() (also to
// and from a safetensors file). A module's computation is whatever member functions the class
// declares; there is no virtual forward.
//
//   struct Linear : ein::nn::Module {
//     ein::Tensor weight;
//     Linear(int64_t in, int64_t out, uint64_t seed)
//         : weight(register_parameter("weight", ein::init::fan_in_normal({in, out}, {.seed = seed}))) {}
//     ein::Tensor operator()(const ein::Tensor& x) const { return ein::einsum("b i, i o -> b o", x, weight); }
//   };
//   struct Cruncher : ein::nn::Module {
//     Linear a{64, 64, 1}, b{64, 1, 2};
//     Cruncher() { register_module("layers.0", a); register_module("final", b); }
//   };
//   Cruncher m;  m.named_parameters();  // layers.0.weight, final.weight
//   m.save("model.safetensors");  m.load("model.safetensors");
//
// Children are held by address: a module is neither copyable nor movable once built.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ein/checkpoint.h>
#include <ein/tensor.h>

namespace ein::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// Every parameter with its qualified name: this module's in registration order, then each
  /// child's as "child.name", recursively (torch's named_parameters()).
  StateDict named_parameters() const;
  /// The same tensors without names (what an optimizer takes).
  std::vector<Tensor> parameters() const;
  /// Every buffer (state that is saved but not trained: running statistics, masks).
  StateDict named_buffers() const;
  /// Parameters then buffers, by qualified name: the tensors themselves, not copies.
  StateDict state_dict() const;
  /// Copies `state` into the parameters and buffers in place, by name. Strict, as torch's
  /// default: a missing or unexpected key, or a dtype or shape that differs, throws
  /// RuntimeError listing every problem, and nothing is copied.
  void load_state_dict(const StateDict& state);
  /// state_dict() to a safetensors file (atomically), and back.
  void save(const std::string& path) const;
  void load(const std::string& path);
  /// Drops every parameter's gradient.
  void zero_grad();

 protected:
  /// Registers `tensor` as a parameter (a leaf that requires grad) and returns it.
  Tensor register_parameter(std::string name, Tensor tensor);
  /// Registers a buffer and returns it.
  Tensor register_buffer(std::string name, Tensor tensor);
  /// Registers a child (a member of this module, which must outlive nothing but it).
  Module& register_module(std::string name, Module& child);

 private:
  void collect(const std::string& prefix, bool buffers, StateDict& out) const;

  StateDict parameters_, buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
};

}  // namespace ein::nn
