// An environment variable set (or unset) for a scope and restored after it, for tests that
// switch a behaviour read from the environment (e.g. EIN_CUDA_ATTENTION).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace ein::testing {

class ScopedEnv {
 public:
  /// `name` set to `value`, or unset when `value` is empty.
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    if (const char* was = std::getenv(name_.c_str())) was_ = was;
    if (value.empty()) ::unsetenv(name_.c_str());
    else ::setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (was_) ::setenv(name_.c_str(), was_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> was_;
};

}  // namespace ein::testing
