// The builtins that make records rather than tensors (docs/language.md, "Builtins"): the
// initialisers a param declaration turns into a tensor (script/call.cpp) and the train
// block's settings (data, schedules).
#include "script/builtin_args.h"

namespace ein::script {

void add_record_builtins(std::map<std::string, BuiltinFn>& tab) {
  // Initialisers.
  auto init = [](const char* type, std::vector<std::string> names) {
    const std::string ty = type;
    return [ty, names](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
      Args a(in, args, site, ty, names);
      Value r = record(ty);
      for (size_t i = 0; i < names.size(); ++i)
        if (a.has(i)) r.record->numbers[names[i]] = a.number(i);
      if (ty == "normal" || ty == "trunc_normal")
        if (r.record->numbers.count("std") && r.record->numbers["std"] <= 0) a.fail(0, "std must be > 0");
      return r;
    };
  };
  tab["normal"] = init("normal", {"std", "mean"});
  tab["trunc_normal"] = init("trunc_normal", {"std", "mean", "a", "b"});
  tab["uniform"] = init("uniform", {"a", "b"});
  tab["constant"] = init("constant", {"value"});
  // Train-block settings.
  auto data = [](const char* type) {
    const std::string ty = type;
    return [ty](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
      Args a(in, args, site, ty, {"path", "batch", "context", "order", "dtype", "part"});
      Value r = record(ty);
      r.record->strings["path"] = a.string(0);
      r.record->numbers["batch"] = static_cast<double>(a.integer(1));
      r.record->numbers["context"] = static_cast<double>(a.integer(2));
      if (r.record->numbers["batch"] < 1) a.fail(1, "batch must be >= 1");
      if (r.record->numbers["context"] < 1) a.fail(2, "context must be >= 1");
      // Unset: random for the training data, sequential for eval_data (script/load.cpp).
      const std::string order = a.string(3, std::string());
      if (a.has(3) && order != "random" && order != "sequential")
        a.fail(3, "order is \"random\" or \"sequential\"");
      r.record->strings["order"] = order;
      r.record->strings["dtype"] = a.string(4, std::string());
      // part = (begin, end): the fractions of the file's tokens used, e.g. (0, 0.9) to train
      // on and (0.9, 1) held out.
      r.record->numbers["part_begin"] = 0;
      r.record->numbers["part_end"] = 1;
      if (a.has(5)) {
        const Value& v = a.value(5);
        const bool pair = (v.kind == Value::Kind::tuple || v.kind == Value::Kind::list) &&
                          v.items->size() == 2 && (*v.items)[0].kind == Value::Kind::number &&
                          (*v.items)[1].kind == Value::Kind::number;
        const double b = pair ? (*v.items)[0].num : 0, e = pair ? (*v.items)[1].num : 0;
        if (!pair || !(b >= 0 && b < e && e <= 1))
          a.fail(5, "part is (begin, end), fractions of the file's tokens with 0 <= begin < end "
                    "<= 1: (0, 0.9) trains on the first 90%, (0.9, 1) holds out the rest");
        r.record->numbers["part_begin"] = b;
        r.record->numbers["part_end"] = e;
      }
      return r;
    };
  };
  tab["bytes"] = data("bytes");
  tab["tokens"] = data("tokens");
  tab["warmup_cosine"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "warmup_cosine", {"warmup", "min_ratio"});
    Value r = record("cosine");
    r.record->numbers["warmup"] = static_cast<double>(a.integer(0, 0));
    r.record->numbers["min_ratio"] = a.number(1, 0.1);
    return r;
  };
  tab["constant_lr"] = [](Interpreter& in, std::vector<CallArg>& args, const CallSite& site) {
    Args a(in, args, site, "constant_lr", {});
    return record("constant");
  };
}

}  // namespace ein::script
