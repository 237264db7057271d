// ein::nn::Module's registry, state_dict and safetensors round trip (include/ein/module.h).
#include <ein/module.h>

#include <algorithm>
#include <set>

#include <ein/autograd.h>
#include <ein/errors.h>
#include <fmt/format.h>

namespace ein::nn {
namespace {

void check_name(const std::string& name, const char* what) {
  if (name.empty() || name.find('.') != std::string::npos)
    throw RuntimeError(fmt::format("register_{}: '{}' is not a name (non-empty, without '.')",
                                   what, name));
}

}  // namespace

void Module::collect(const std::string& prefix, bool buffers, StateDict& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_)
    out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_)
    child->collect(prefix + name + ".", buffers, out);
}

StateDict Module::named_parameters() const {
  StateDict out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters())
    out.push_back(t);
  return out;
}

StateDict Module::named_buffers() const {
  StateDict out;
  collect("", true, out);
  return out;
}

StateDict Module::state_dict() const {
  StateDict out = named_parameters();
  for (auto& entry : named_buffers())
    out.push_back(std::move(entry));
  return out;
}

void Module::load_state_dict(const StateDict& state) {
  const StateDict ours = state_dict();
  std::string problems;
  std::set<std::string> given;
  for (const auto& [name, t] : state)
    given.insert(name);
  std::set<std::string> known;
  for (const auto& [name, t] : ours) {
    known.insert(name);
    const auto it = std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
    if (it == state.end()) {
      problems += fmt::format("\n  missing: '{}'", name);
    } else if (!it->second.defined() || it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) {
      problems += fmt::format("\n  '{}' is {} here but {} in the state", name,
                              fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape())),
                              it->second.defined() ? fmt::format("{} {}", dtype_name(it->second.dtype()),
                                                                 shape_str(it->second.shape()))
                                                   : std::string("undefined"));
    }
  }
  for (const std::string& name : given)
    if (!known.contains(name)) problems += fmt::format("\n  unexpected: '{}'", name);
  if (!problems.empty()) throw RuntimeError("load_state_dict: the state does not fit this module:" + problems);
  NoGrad no_grad;
  for (const auto& [name, t] : ours)
    for (const auto& [key, value] : state)
      if (key == name) t.detach().copy_(value);
}

void Module::save(const std::string& path) const {
  save_safetensors(path, state_dict());
}

void Module::load(const std::string& path) {
  const Checkpoint c = load_safetensors(path);
  load_state_dict(c.tensors);
}

void Module::zero_grad() {
  ein::zero_grad(parameters());
}

Tensor Module::register_parameter(std::string name, Tensor tensor) {
  check_name(name, "parameter");
  if (!tensor.defined()) throw RuntimeError(fmt::format("register_parameter: '{}' is undefined", name));
  if (!tensor.requires_grad()) tensor.requires_grad_();
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_name(name, "buffer");
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

Module& Module::register_module(std::string name, Module& child) {
  if (name.empty()) throw RuntimeError("register_module: the name is empty");
  if (&child == this) throw RuntimeError("register_module: a module cannot be its own child");
  children_.emplace_back(std::move(name), &child);
  return child;
}

}  // namespace ein::nn
