// What the builtins' files share (script/builtins.cpp, script/builtin_records.cpp): reading a
// call's arguments as a Python signature would, and making a record value.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "script/interp.h"

namespace ein::script {

/// Reads a builtin's arguments by position or keyword, like a Python signature.
class Args {
 public:
  Args(Interpreter& in, std::vector<CallArg>& args, const CallSite& site, std::string fn,
       std::vector<std::string> names)
      : in_(in), args_(args), site_(site), fn_(std::move(fn)), names_(std::move(names)) {
    size_t pos = 0;
    for (CallArg& a : args_) {
      size_t k = names_.size();
      if (a.name.empty()) {
        k = pos++;
        if (k >= names_.size())
          in_.fail(site_, a.range, fmt::format("{}() takes at most {} argument{}", fn_, names_.size(),
                                               names_.size() == 1 ? "" : "s"));
      } else {
        for (size_t i = 0; i < names_.size(); ++i)
          if (names_[i] == a.name) k = i;
        if (k == names_.size())
          in_.fail(site_, a.range, fmt::format("{}() has no parameter '{}' (it has: {})", fn_, a.name,
                                               fmt::join(names_, ", ")));
      }
      if (slots_.count(k)) in_.fail(site_, a.range, fmt::format("{}(): '{}' given twice", fn_, names_[k]));
      slots_[k] = &a;
    }
  }
  bool has(size_t i) const { return slots_.count(i) > 0; }
  const CallArg& arg(size_t i) {
    if (!has(i)) in_.fail(site_, site_.range, fmt::format("{}() needs '{}'", fn_, names_[i]));
    return *slots_[i];
  }
  const Value& value(size_t i) { return arg(i).value; }
  SourceRange range(size_t i) { return has(i) ? slots_[i]->range : site_.range; }
  TensorVal tensor(size_t i) { return in_.as_tensor(value(i), site_, range(i)); }
  double number(size_t i, std::optional<double> fallback = std::nullopt) {
    if (!has(i) && fallback) return *fallback;
    return in_.as_number(value(i), site_, range(i), fmt::format("{}'s '{}'", fn_, names_[i]));
  }
  int64_t integer(size_t i, std::optional<int64_t> fallback = std::nullopt) {
    if (!has(i) && fallback) return *fallback;
    return in_.as_int(value(i), site_, range(i), fmt::format("{}'s '{}'", fn_, names_[i]));
  }
  std::string string(size_t i, std::optional<std::string> fallback = std::nullopt) {
    if (!has(i) && fallback) return *fallback;
    const Value& v = value(i);
    if (v.kind != Value::Kind::string)
      in_.fail(site_, range(i), fmt::format("{}'s '{}' must be a string", fn_, names_[i]));
    return v.str;
  }
  Trace& trace() { return in_.trace_or_fail(site_, fn_ + "()"); }
  [[noreturn]] void fail(size_t i, const std::string& m) { in_.fail(site_, range(i), m); }

 private:
  Interpreter& in_;
  std::vector<CallArg>& args_;
  const CallSite& site_;
  std::string fn_;
  std::vector<std::string> names_;
  std::map<size_t, CallArg*> slots_;
};

/// A record value of a type ("normal", "bytes", "cosine", ...) with no fields yet.
inline Value record(std::string type) {
  Value v;
  v.kind = Value::Kind::record;
  v.record = std::make_shared<Record>();
  v.record->type = std::move(type);
  return v;
}

/// Adds the builtins that make records (initialisers, data, schedules) to the table.
void add_record_builtins(std::map<std::string, BuiltinFn>& tab);

}  // namespace ein::script
