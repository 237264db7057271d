// `ein report --format json` (tools/report_summary.h): the Report and its Summary as one JSON
// object, keys documented in docs/report.md. Numbers are written unrounded; formatting them is
// the reader's business.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tools/report_summary.h"

namespace ein::report {
namespace {

using nlohmann::json;

/// What a save/recompute plan's JSON says in every list it is in (memory.recompute_plans,
/// memory.activation_budgets).
json plan_json(const RecomputePlan& p) {
  return {{"activation_budget", p.activation_budget},
          {"saved_activations", p.saved_activations},
          {"recompute_flops", p.recompute_flops},
          {"recompute_matmul_flops", p.recompute_matmul_flops},
          {"kernel_recompute_flops", p.kernel_recompute_flops},
          {"kernel_recompute_matmul_flops", p.kernel_recompute_matmul_flops},
          {"peak", p.peak},
          {"peak_with_gradients", p.peak_with_gradients}};
}

}  // namespace

std::string render_json(const Report& r, const Summary& s) {
  json j;
  j["file"] = r.file;
  j["fn"] = r.fn;
  j["conventions"] = s.conventions;
  j["hardware"] = {{"name", r.hw_name}, {"math", r.math}, {"peak_flops", r.peak},
                   {"memory_bandwidth", r.bandwidth}, {"memory_bytes", r.device_memory}, {"gpus", r.gpus}};
  j["params"] = {{"total", r.params_total},
                 {"trainable", r.params_trainable},
                 {"embedding", r.params_embedding},
                 {"non_embedding", r.params_total - r.params_embedding},
                 {"embedding_names", r.embedding_names},
                 {"tied", r.tied},
                 {"bytes", r.param_bytes}};
  j["step"] = {{"batch", r.batch}, {"tokens", r.tokens_per_step}, {"unit", r.unit}};
  json conventions = json::array();
  for (const Convention& c : s.flops)
    conventions.push_back({{"name", c.name}, {"per_token", c.per_token}, {"per_step", c.per_step}, {"note", c.note}});
  const double tokens = static_cast<double>(r.tokens_per_step);
  j["flops"] = {{"forward", r.fwd_flops},
                {"forward_matmul", r.fwd_matmul_flops},
                {"backward", r.bwd_flops()},
                {"backward_input", r.bwd_input_flops},
                {"backward_weight", r.bwd_weight_flops},
                {"recompute", r.recompute_flops},
                {"recompute_in_kernels", r.kernel_recompute_flops},
                {"per_step", r.step_flops()},
                {"per_token", static_cast<double>(r.step_flops()) / tokens},
                {"attention_full", r.causal_flops},
                {"causal_useful_per_step", s.useful_step},
                {"six_n_per_token", 6.0 * static_cast<double>(r.params_total)},
                {"six_n_non_embedding_per_token", 6.0 * static_cast<double>(r.params_total - r.params_embedding)},
                {"conventions", conventions}};
  if (r.layers > 0)
    j["flops"]["palm_per_token"] = napkin::palm_flops_per_token(
        static_cast<double>(r.params_total), static_cast<double>(r.layers), static_cast<double>(r.heads),
        static_cast<double>(r.head_dim), static_cast<double>(r.seq));
  j["attention"] = {{"layers", r.layers}, {"heads", r.heads}, {"head_dim", r.head_dim}, {"seq", r.seq}};
  j["memory"] = {{"params", r.bytes_of(napkin::StatePart::params)},
                 {"grads", r.bytes_of(napkin::StatePart::grads)},
                 {"optimizer", r.bytes_of(napkin::StatePart::optimizer)},
                 {"activations", r.activation_bytes},
                 {"temporaries", r.temporaries},
                 {"activation_peak", r.activation_peak},
                 {"step_peak", r.step_peak},
                 {"peak_at", r.peak_at},
                 {"saved_total", r.saved_total},
                 {"total", r.total_bytes},
                 {"bytes_per_param", r.bytes_per_param},
                 {"optimizer_name", r.optimizer},
                 {"optimizer_states", r.optimizer_states},
                 {"optimizer_from", r.optimizer_from},
                 {"precision", r.precision},
                 {"compute", r.compute},
                 {"per_device", s.per_device},
                 {"per_device_zero3", s.per_device_zero3},
                 {"fits", s.fits},
                 {"fits_zero3", s.fits_zero3},
                 {"max_batch_per_device", s.max_batch},
                 {"max_batch_per_device_zero3", s.max_batch_zero3}};
  json zero = json::array(), micro = json::array();
  for (const Summary::Zero& z : s.zero)
    zero.push_back({{"stage", z.stage}, {"params", z.params}, {"grads", z.grads}, {"optimizer", z.optimizer},
                    {"activations", z.activations}, {"total", z.total}, {"fits", z.fits}});
  for (const Summary::MicroBatch& m : s.micro)
    micro.push_back({{"micro_batch", m.micro}, {"accumulation", m.accumulation}, {"activations", m.activations},
                     {"total", m.total}, {"fits", m.fits}});
  j["memory"]["zero"] = zero;
  j["communication"] = {{"bytes_per_step_per_rank", r.comm_bytes},
                        {"zero3_bytes_per_step_per_rank", r.zero3_comm_bytes},
                        {"zero_peak_per_rank", r.zero_rank_peak},
                        {"zero2_peak_per_rank", r.zero2_rank_peak},
                        {"zero3_peak_per_rank", r.zero3_rank_peak}};
  j["memory"]["micro_batches"] = micro;
  if (s.korthikanti)
    j["memory"]["korthikanti"] = {{"none", s.korthikanti->none}, {"selective", s.korthikanti->selective},
                                  {"full", s.korthikanti->full}};
  json plans = json::array();
  for (size_t k = 0; k < r.plans.size(); ++k) {
    json p = plan_json(r.plans[k]);
    p["policy"] = recompute_name(r.plans[k].policy);
    p["chosen"] = static_cast<int>(k) == r.chosen;
    plans.push_back(std::move(p));
  }
  j["memory"]["recompute_plans"] = plans;
  if (r.checkpoint_modules > 0)
    j["memory"]["checkpointing"] = {{"scope", r.checkpoint_scope},
                                    {"modules", r.checkpoint_modules},
                                    {"activations", s.checkpoint_activations},
                                    {"total", s.checkpoint_total},
                                    {"fits", s.checkpoint_fits},
                                    {"recompute_flops", r.checkpoint_recompute_flops},
                                    {"flops_ratio", s.checkpoint_flops_ratio}};
  json budgets = json::array();
  for (size_t k = 0; k < r.budget_plans.size(); ++k) {
    const Summary::Budget& b = s.budgets[k];
    json p = plan_json(r.budget_plans[k]);
    p.update({{"activations", b.activations},
              {"total", b.total},
              {"fits", b.fits},
              {"flops_ratio", b.flops_ratio}});
    budgets.push_back(std::move(p));
  }
  j["memory"]["activation_budgets"] = budgets;
  nlohmann::ordered_json inference = nlohmann::ordered_json::array();
  for (const InferenceWeights& w : r.inference) {
    nlohmann::ordered_json e = {
        {"format", w.format}, {"bits_per_weight", w.bits_per_weight},
        {"bytes", w.bytes},   {"smaller_by", w.smaller_by},
        {"fits", w.fits},     {"decode_tokens_per_s_bound", w.decode_bound}};
    if (w.quantized_tensors + w.kept_tensors > 0) {
      e["quantized_tensors"] = w.quantized_tensors;
      e["quantized_params"] = w.quantized_params;
      e["kept_tensors"] = w.kept_tensors;
      e["kept_bytes"] = w.kept_bytes;
    }
    inference.push_back(e);
  }
  j["memory"]["inference_weights"] = inference;
  if (r.decode.has_logits) {
    nlohmann::ordered_json d = {{"context", r.decode.context},
                                {"window_flops_per_token", r.decode.window_flops},
                                {"past_window_flops_per_token", r.decode.past_window_flops},
                                {"past_window_refills", r.decode.refills}};
    if (r.decode.why.empty()) {
      d["flops_per_token"] = r.decode.flops;
      d["matmul_flops_per_token"] = r.decode.matmul_flops;
      d["bytes_per_token"] = r.decode.bytes;
      d["cache_bytes"] = r.decode.cache_bytes;
      d["caches"] = r.decode.caches;
      d["bf16_cache_bytes"] = r.decode.bf16_cache_bytes;
      d["bf16_cache_bytes_per_token"] = r.decode.bf16_cache_step_bytes;
      d["quantized_matrices"] = r.decode.matrices;
      d["matrix_bytes"] = r.decode.matrix_bytes;
      d["q8_0_matrix_bytes"] = r.decode.q8_0_bytes;
      d["q4_0_matrix_bytes"] = r.decode.q4_0_bytes;
      d["f32_held_bytes"] = r.decode.f32_held_bytes;
      d["q8_0_held_bytes"] = r.decode.q8_0_held_bytes;
      d["q4_0_held_bytes"] = r.decode.q4_0_held_bytes;
    } else {
      d["no_cache"] = r.decode.why;
    }
    j["decode"] = d;
  }
  if (r.held_out.present) {
    const HeldOutCost& e = r.held_out;
    nlohmann::ordered_json h = {{"every", e.every}, {"steps", e.steps}};
    if (e.why.empty()) {
      h["batches"] = e.batches;
      h["tokens"] = e.tokens;
      h["flops_per_evaluation"] = e.flops;
      h["evaluations"] = e.evaluations;
      h["fraction_of_training_flops"] = e.run_fraction;
    } else {
      h["not_priced"] = e.why;
    }
    j["eval"] = h;
  }
  json dims = json::object();
  for (const script::DimInfo& d : r.dims) dims[d.name] = d.value;
  j["dims"] = dims;
  j["structural_dims"] = r.structural_dims;
  if (r.tokens)
    j["time"] = {{"tokens", *r.tokens},        {"total_flops", s.total_flops}, {"seconds", s.seconds},
                 {"days", s.days},             {"days_6nd", s.days_6n},        {"gpu_hours", s.gpu_hours},
                 {"mfu", r.mfu},               {"tokens_per_param", s.tokens_per_param},
                 {"chinchilla_tokens", s.chinchilla_tokens}};
  json rows = json::array();
  for (const Row& row : r.rows)
    rows.push_back({{"scope", row.scope},
                    {"location", row.location},
                    {"text", row.text},
                    {"shape", row.shape},
                    {"symbolic_shape", row.symbolic_shape},
                    {"formula", row.formula},
                    {"formula_numeric", row.formula_numeric},
                    {"nodes", row.nodes},
                    {"forward_flops", row.fwd_flops},
                    {"forward_matmul_flops", row.fwd_matmul_flops},
                    {"backward_input_flops", row.bwd_input_flops},
                    {"backward_weight_flops", row.bwd_weight_flops},
                    {"bytes", row.bytes()},
                    {"intensity", row.bytes() ? static_cast<double>(row.flops()) / static_cast<double>(row.bytes()) : 0.0},
                    {"seconds", row.seconds},
                    {"bound", row.memory_bound ? "memory" : "compute"},
                    {"saved_bytes", row.saved_bytes},
                    {"attention_full_flops", row.causal_flops},
                    {"share", r.step_flops() ? static_cast<double>(row.flops()) / static_cast<double>(r.step_flops()) : 0.0}});
  j["rows"] = rows;
  j["uncounted"] = r.uncounted;
  return j.dump(2) + "\n";
}

}  // namespace ein::report
