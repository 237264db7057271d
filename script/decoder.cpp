// Program::decode_step() and decoder(): `fn logits` one token at a time. The step is derived
// from its traced window graph (compiler/decode/decode_step.h: a key-value cache per
// attention) and run by exec/decode.h; what is the script's is the tracing, the feeds and
// saying where in the script a step cannot be derived.
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include <ein/autograd.h>
#include <ein/errors.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "compiler/decode/decode_step.h"
#include "exec/decode.h"
#include "script/interp.h"
#include "script/script.h"

namespace ein::script {

DecodeStep Program::decode_step(int64_t context) {
  DecodeStep none;
  const std::string fn = "train.logits";
  const std::vector<std::string> fns = functions();
  if (std::find(fns.begin(), fns.end(), fn) == fns.end()) {
    none.why = "the train block has no fn logits(x: i64[1 T])";
    return none;
  }
  const Traced& t = traced(fn, {TensorType{{1, context}, DType::i64}}, false);
  int token_input = -1;
  for (size_t i = 0; i < t.feeds.size(); ++i) {
    const Feed& f = t.feeds[i];
    if (f.kind == Feed::Kind::arg) token_input = static_cast<int>(i);
    if (f.kind == Feed::Kind::normal || f.kind == Feed::Kind::uniform ||
        f.kind == Feed::Kind::randint) {
      none.why = "fn logits draws random numbers";
      return none;
    }
  }
  DecodeStep step = derive_decode_step(*t.graph, token_input, 1);
  if (step.derived()) return step;
  // The phrase's subject: the expression the node came from, else the node.
  const int n = step.why_node;
  if (const NodeSource src = node_source(t, n); !src.file.empty()) {
    none.why = fmt::format("{}:{}:{}: `{}` {}", src.file, src.line, src.column, src.text, step.why);
  } else if (n >= 0) {
    none.why = fmt::format("node %{} of fn logits (a {}) {}", n,
                           graph_op_name(t.graph->nodes[n].op), step.why);
  } else {
    none.why = "fn logits " + step.why;
  }
  none.why_node = n;
  return none;
}

std::unique_ptr<Decoder> Program::decoder(int64_t context, std::string& why) {
  return decoder(context, why, DecoderOptions{});
}

std::unique_ptr<Decoder> Program::decoder(int64_t context, std::string& why,
                                          const DecoderOptions& options) {
  NoGrad no_grad;
  DecodeStep step = decode_step(context);
  if (!step.derived()) {
    why = step.why;
    return nullptr;
  }
  const Traced& t = traced("train.logits", {TensorType{{1, context}, DType::i64}}, false);
  // The parameters given as codes (by name, or a training checkpoint's "model." + name), by
  // the input they feed: those need no value of their own.
  std::map<const ParamSlot*, const QuantizedTensor*> by_slot;
  std::map<const ParamSlot*, std::vector<std::string>> aliases;
  for (const auto& [name, slot] : impl_->parameter_slots(&aliases)) {
    std::vector<std::string> names = aliases[slot];
    names.insert(names.begin(), name);
    for (const std::string& n : names)
      for (const std::string& key : {n, "model." + n}) {
        const auto it = options.codes.find(key);
        if (it == options.codes.end()) continue;
        const QuantizedTensor& q = it->second;
        if (q.shape != slot->shape || q.dtype != slot->dtype)
          throw UserError(fmt::format(
              "the codes given for parameter '{}' do not fit: they stand for {} {}, and the "
              "parameter is {} {}",
              name, dtype_name(q.dtype), shape_str(q.shape), dtype_name(slot->dtype),
              shape_str(slot->shape)));
        by_slot[slot] = &q;
      }
  }
  int token_input = -1;
  std::map<int, QuantizedTensor> given;
  std::set<const ParamSlot*> unset;
  for (size_t i = 0; i < t.feeds.size(); ++i) {
    const Feed& f = t.feeds[i];
    if (f.kind == Feed::Kind::arg) token_input = static_cast<int>(i);
    if (f.kind != Feed::Kind::param) continue;
    if (auto it = by_slot.find(f.slot.get()); it != by_slot.end()) {
      given.emplace(static_cast<int>(i), *it->second);
      unset.insert(f.slot.get());
    }
  }
  return make_graph_decoder(t.graph, token_input, std::move(step),
                            impl_->feed(t, {zeros({1, context}, DType::i64)}, 0, unset), why,
                            options, std::move(given));
}

}  // namespace ein::script
